package tracker

import (
	"maps"
	"slices"
	"time"
)

// This file is the reader's side of destination-owned aggregation
// (protocol v2): instead of every origin's batch, a Fleet holds, per
// destination and epoch, the Aggregate with the largest Coverage that
// reached it (a max-by, never a sum), and a destination's fleet view at
// epoch E is its aggregate of E−1 (or of E−2 until that one arrives). A
// destination with no aggregate falls back to the batch view, so a cluster
// switching from v1 keeps its views while the first aggregates arrive.

// A reader's view reads the newest aggregate of E−1 … E−H, H =
// Config.AggregateHorizon (2 on the default grid: E−1, else E−2 until it
// arrives; older ones while aggregates come late on a grid of many
// sub-windows), and it keeps those of [E−H−1, E+1]: one more absorbs a
// reader's clock a little behind.

type aggDest struct {
	name string
	held map[int64]*Aggregate // by epoch, each a private copy
	view aggView              // cache of the view from held[view.epoch]
}

// aggView is the dense view of one held aggregate, built on first use.
type aggView struct {
	src       *Aggregate
	h         hist
	c         sparseSum
	m         int
	hasM      bool
	newestEnd int64 // end of the newest epoch with data, Unix ms
}

// AggregateDigest is one epoch of a reader's anti-entropy digest of
// aggregates: per slice (AggregateSlice), how many aggregates it holds and
// the exclusive or of their DigestHash.
type AggregateDigest struct {
	Epoch  int64
	Slices [AggregateSlices]SliceSum
}

// SliceSum is the count and hash of the aggregates of one slice.
type SliceSum struct {
	Count uint32
	Hash  uint64
}

// AggregateEntry names one held aggregate: its destination, epoch and
// coverage.
type AggregateEntry struct {
	Dest     string
	Epoch    int64
	Coverage Coverage
}

// InsertAggregate keeps a if it is the largest coverage seen for its
// destination and epoch, and says what it did: InsertNew (kept, the view
// follows), InsertDuplicate (the same aggregate is held), InsertSuperseded
// (one with a larger coverage is held), InsertConflict (one with the same
// coverage and other contents is held; the first stays), or a refusal:
// InsertTooOld / InsertTooNew outside [E−H−1, E+1] (H the
// Config.AggregateHorizon: [E−3, E+1] on the default grid),
// InsertLayoutMismatch,
// InsertMalformed (a name that is not ValidName, buckets out of range or
// not ascending, a total that is not their sum, censored counts not within
// them, no coverage), InsertTooLarge (a new destination beyond
// MaxDestinations). It copies what it keeps.
func (f *Fleet) InsertAggregate(a Aggregate, now time.Time) InsertOutcome {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slide(now)
	o := f.insertAggregate(&a)
	f.stats.AggregateInserts[o]++
	if o == InsertNew {
		f.changed() // the estimate cache reads the aggregate view
	}
	return o
}

func (f *Fleet) insertAggregate(a *Aggregate) InsertOutcome {
	switch {
	case a.Layout != f.geo.layout:
		return InsertLayoutMismatch
	case a.Epoch < f.epoch-f.aggHorizon-1:
		return InsertTooOld
	case a.Epoch > f.epoch+1:
		return InsertTooNew
	}
	if o := f.checkAggregate(a); o != InsertNew {
		return o
	}
	d := f.aggs[a.Dest]
	if d == nil {
		if len(f.aggs) >= f.cfg.MaxDestinations {
			f.stats.DestinationsRefused++
			return InsertTooLarge
		}
		d = &aggDest{name: a.Dest, held: make(map[int64]*Aggregate, 5)} // the usual few, not the horizon
		f.aggs[a.Dest] = d
	}
	if old := d.held[a.Epoch]; old != nil {
		switch c := a.Coverage.Compare(old.Coverage); {
		case c < 0:
			return InsertSuperseded
		case c == 0 && equalAggregate(a, old):
			return InsertDuplicate
		case c == 0:
			return InsertConflict
		}
	} else {
		f.aggCount++
	}
	cp := *a
	cp.Buckets = slices.Clone(a.Buckets)
	cp.TimedOut = slices.Clip(slices.Clone(a.TimedOut))
	d.held[a.Epoch] = &cp
	return InsertNew
}

// checkAggregate validates a's names and counts: InsertNew when valid.
func (f *Fleet) checkAggregate(a *Aggregate) InsertOutcome {
	if !ValidName(a.Dest) || a.Coverage.Records == 0 || a.Peers < 0 {
		return InsertMalformed
	}
	if !validCounts(a.Buckets, a.TimedOut, a.Total, a.CensoringUnknown, &f.geo) {
		return InsertMalformed
	}
	return InsertNew
}

// slideAggregates drops the aggregates older than E−H−1.
func (f *Fleet) slideAggregates() {
	for name, d := range f.aggs {
		for ep := range d.held {
			if ep < f.epoch-f.aggHorizon-1 {
				delete(d.held, ep)
				f.aggCount--
			}
		}
		if len(d.held) == 0 {
			delete(f.aggs, name)
		}
	}
}

// aggregateView returns dest's view from its newest aggregate up to E−1
// (E−1, else E−2, …, back to E−H), building the dense form on first use,
// or nil when it has none.
func (f *Fleet) aggregateView(dest string) *aggView {
	d := f.aggs[dest]
	if d == nil {
		return nil
	}
	var a *Aggregate
	for ep := f.epoch - 1; a == nil && ep >= f.epoch-f.aggHorizon; ep-- {
		a = d.held[ep]
	}
	if a == nil {
		return nil
	}
	v := &d.view
	if v.src == a {
		return v
	}
	if v.h.counts == nil {
		v.h = newHist(&f.geo)
	} else {
		v.h.reset()
	}
	v.c.reset()
	v.h.addBuckets(a.Buckets)
	v.c.addBuckets(a.TimedOut)
	v.m, v.hasM = maxCompleted(&v.h, &v.c)
	v.newestEnd = (a.Newest + 1) * f.swMs
	v.src = a
	return v
}

// aggregateFacts fills ff from dest's aggregate view, when it has one;
// f.mu is held.
func (f *Fleet) aggregateFacts(dest string, q float64, ff *fleetFacts) bool {
	v := f.aggregateView(dest)
	if v == nil {
		return false
	}
	a := v.src
	ff.hasFleet = true
	ff.fv = viewFacts{samples: v.h.total, censored: v.c.total, unknown: a.CensoringUnknown}
	if qv, ok := v.h.quantileValue(&f.geo, q); ok {
		ff.fv.q = uint64(qv)
		if v.hasM {
			ff.fv.m, ff.fv.hasM = uint64(f.geo.highestEquivalent(v.m)), true
		}
		ff.hasFleetValue = true
	}
	ff.samples, ff.peers, ff.effPeers = v.h.total, a.Peers, a.EffectivePeers()
	ff.newestEnd, ff.hasNewest = v.newestEnd, v.h.total > 0
	ff.trusted = ff.hasFleetValue && ff.samples >= f.minSamples() && ff.peers >= f.minPeers()
	return true
}

// LookupAggregate returns the aggregate held for (dest, epoch), to serve a
// pull. It shares the Fleet's memory, never written once stored: it must
// not be modified.
func (f *Fleet) LookupAggregate(dest string, epoch int64) (Aggregate, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d := f.aggs[dest]; d != nil {
		if a := d.held[epoch]; a != nil {
			return *a, true
		}
	}
	return Aggregate{}, false
}

// AggregateDigests returns the digest of the aggregates held for epochs
// [E−2, E] at now, oldest first; an epoch with none is left out.
func (f *Fleet) AggregateDigests(now time.Time) []AggregateDigest {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slide(now)
	var out []AggregateDigest
	for ep := f.epoch - 2; ep <= f.epoch; ep++ {
		var g AggregateDigest
		g.Epoch = ep
		n := 0
		for _, d := range f.aggs {
			if a := d.held[ep]; a != nil {
				s := &g.Slices[AggregateSlice(a.Dest)]
				s.Count++
				s.Hash ^= a.DigestHash()
				n++
			}
		}
		if n > 0 {
			out = append(out, g)
		}
	}
	return out
}

// AggregateEntries returns the aggregates held for epoch whose slice is in
// mask (bit i for slice i), sorted by destination.
func (f *Fleet) AggregateEntries(epoch int64, mask uint32, now time.Time) []AggregateEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slide(now)
	var out []AggregateEntry
	for _, d := range f.aggs {
		if a := d.held[epoch]; a != nil && mask&(1<<AggregateSlice(a.Dest)) != 0 {
			out = append(out, AggregateEntry{Dest: a.Dest, Epoch: epoch, Coverage: a.Coverage})
		}
	}
	sortEntries(out)
	return out
}

func sortEntries(es []AggregateEntry) {
	slices.SortFunc(es, func(a, b AggregateEntry) int {
		if a.Dest != b.Dest {
			if a.Dest < b.Dest {
				return -1
			}
			return 1
		}
		return int(a.Epoch - b.Epoch)
	})
}

// AggregateCoverage returns the coverage of the aggregate held for (dest,
// epoch), and false when none is held.
func (f *Fleet) AggregateCoverage(dest string, epoch int64) (Coverage, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d := f.aggs[dest]; d != nil {
		if a := d.held[epoch]; a != nil {
			return a.Coverage, true
		}
	}
	return Coverage{}, false
}

// AggregateDestinations returns the destinations with an aggregate held at
// now, sorted.
func (f *Fleet) AggregateDestinations(now time.Time) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slide(now)
	return slices.Sorted(maps.Keys(f.aggs))
}
