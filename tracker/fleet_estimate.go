package tracker

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// destSummary is what a destination's estimate needs beyond its merged
// histogram, computed lazily and cached per (epoch, generation): peer count,
// the share cap and its result, and the newest epoch with data.
type destSummary struct {
	valid     bool
	gen       uint64
	epoch     int64
	peers     int
	samples   uint64
	effPeers  float64
	capped    bool
	ch        hist      // the capped view, when capped
	cc        sparseSum // its censored counts
	m         int       // M's bucket in the (capped) view, when hasM
	mMillis   uint64    // M: the highest equivalent value of bucket m
	hasM      bool
	newest    int64
	newestEnd int64 // end of epoch newest, Unix ms
	hasNewest bool
}

// MinPeers returns the MinPeers in force: the configured value, or when it
// is 0, min(3, live members).
func (f *Fleet) MinPeers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.minPeers()
}

func (f *Fleet) minPeers() int {
	if f.cfg.MinPeers > 0 {
		return f.cfg.MinPeers
	}
	return min(3, f.live)
}

// summary returns d's summary, recomputed (summarize) when d or the epoch
// changed since it was made.
func (f *Fleet) summary(d *destState) *destSummary {
	if s := &d.sum; s.valid && s.gen == d.gen && s.epoch == f.epoch {
		return s
	}
	return f.summarize(d)
}

// summarize recomputes d's summary.
func (f *Fleet) summarize(d *destState) *destSummary {
	s := &d.sum
	s.valid, s.gen, s.epoch = true, d.gen, f.epoch
	s.hasNewest = false
	for ep := f.epoch - 1; ep >= f.epoch-f.n+1; ep-- {
		if d.epochN[f.slot(ep)] > 0 {
			s.newest, s.hasNewest = ep, true
			s.newestEnd = (ep + 1) * f.swMs
			break
		}
	}
	s.peers = len(d.contrib)
	s.capped = false
	s.samples = d.h.total
	var top uint64
	for _, n := range d.contrib {
		top = max(top, n)
	}
	share := f.cfg.MaxOriginShare
	if share <= 0 || s.peers < 4 || !(float64(top) > share*float64(d.h.total)) {
		s.effPeers = effectivePeersMap(d.contrib)
		s.m, s.hasM = maxCompleted(&d.h, &d.c)
		s.mMillis = uint64(f.geo.highestEquivalent(s.m))
		return s
	}
	pcs := f.contribs[:0]
	for p, n := range d.contrib {
		pcs = append(pcs, peerCount{p, n})
	}
	slices.SortFunc(pcs, comparePeerCounts)
	f.contribs = pcs
	if k, t, ok := shareCap(pcs, share); ok {
		s.capped = true
		if s.ch.counts == nil {
			s.ch = newHist(&f.geo)
		}
		s.ch.copyFrom(&d.h)
		s.cc.copyFrom(&d.c)
		for i := range k {
			pcs[i].n = f.capPeer(d, &s.ch, &s.cc, pcs[i].p, pcs[i].n, t)
		}
		s.samples = s.ch.total
	}
	s.effPeers = effectivePeers(pcs)
	h, c := &d.h, &d.c
	if s.capped {
		h, c = &s.ch, &s.cc
	}
	s.m, s.hasM = maxCompleted(h, c)
	s.mMillis = uint64(f.geo.highestEquivalent(s.m))
	return s
}

// Estimate returns the peer-count-aware estimate of quantile q of dest at
// now, with the input of a timeout decision (Estimate.Decision), or
// ErrQuantile when q is outside (0, 1].
//
// With a *SyncTracker[string] as the local view, what the fleet view says
// of a destination the local tracker holds is cached in its tracker entry
// until the Fleet changes (an insert, an exclusion, a change of live
// members, a slide to a later epoch): such an estimate costs the tracker's
// shard lock and lookup, and the local view's quantile walk only when the
// destination's window changed since the last estimate; it never takes the
// Fleet's lock. The answer is always EstimateUncached's. Otherwise (unless
// the local view is a *Tracker[string], which is not safe for concurrent
// use) the fleet's facts of dest at q are read without the Fleet's lock
// from where the last estimate published them, while the Fleet is
// unchanged and now is in its epoch: a hash of dest, a table lookup and a
// few atomic loads, then the local view. After a change it costs the
// lock, a map lookup, a block-indexed quantile walk and the local view,
// and publishes the facts; the first query after a change of dest's view
// also recomputes its peers and share cap.
func (f *Fleet) Estimate(dest string, q float64, now time.Time) (Estimate, error) {
	var e Estimate
	err := f.EstimateTo(&e, dest, q, now)
	return e, err
}

// EstimateTo is Estimate into *e, which it overwrites: the same answer
// without copying the estimate out (timeout.Decider reads the fleet
// through it).
func (f *Fleet) EstimateTo(e *Estimate, dest string, q float64, now time.Time) error {
	if !(q > 0 && q <= 1) {
		*e = Estimate{Dest: dest, Quantile: q}
		return fmt.Errorf("tracker: %w, got %v", ErrQuantile, q)
	}
	if t := f.localSync; t != nil && t.s.subMs == f.swMs && t.cached(e, dest, dest, q, now, f.ver.Load(), f.minSamples()) {
		return nil
	}
	f.estimate(e, dest, q, now, true)
	return nil
}

// DecisionInput sets *in to Estimate(dest, q, now).Input(): the decision
// input of dest alone, what timeout.Decider reads. From the cache (see
// Estimate) it copies the cached input and nothing else; otherwise it
// assembles the estimate as Estimate does, filling the cache. It returns
// ErrQuantile (and a zero input) when q is outside (0, 1].
func (f *Fleet) DecisionInput(in *DecisionInput, dest string, q float64, now time.Time) error {
	if !(q > 0 && q <= 1) {
		*in = DecisionInput{}
		return fmt.Errorf("tracker: %w, got %v", ErrQuantile, q)
	}
	if t := f.localSync; t != nil && t.s.subMs == f.swMs && t.cachedInput(in, dest, dest, q, now, f.ver.Load(), f.minSamples()) {
		return nil
	}
	f.decisionInput(in, dest, q, now)
	return nil
}

// decisionInput is DecisionInput's path without the cache: the whole
// estimate, assembled (and cached) as Estimate does, kept off
// DecisionInput's frame.
func (f *Fleet) decisionInput(in *DecisionInput, dest string, q float64, now time.Time) {
	var e Estimate
	f.estimate(&e, dest, q, now, true)
	*in = e.Input()
}

// minSamples is the trust threshold of the local view, max(MinSamples, 1).
func (f *Fleet) minSamples() uint64 { return max(uint64(f.cfg.Tracker.MinSamples), 1) }

// EstimateUncached is Estimate computed from the views every time, without
// reading or filling the caches (the local tracker's entries, the
// published fleet facts): the reference they are tested and measured
// against.
func (f *Fleet) EstimateUncached(dest string, q float64, now time.Time) (Estimate, error) {
	if !(q > 0 && q <= 1) {
		return Estimate{Dest: dest, Quantile: q}, fmt.Errorf("tracker: %w, got %v", ErrQuantile, q)
	}
	var e Estimate
	f.estimate(&e, dest, q, now, false)
	return e, nil
}

// fleetFacts is what the fleet view says of a destination for an estimate
// (apart from the time since its newest epoch, which is computed from
// newestEnd at each estimate): what the cache keeps.
type fleetFacts struct {
	fv            viewFacts
	hasFleet      bool // the Fleet holds a state for the destination
	trusted       bool // MinSamples samples from MinPeers peers
	hasFleetValue bool
	hasNewest     bool
	samples       uint64
	peers         int
	effPeers      float64
	newestEnd     int64 // end of the newest epoch with data, Unix ms
}

// estimate is Estimate from the views at now into *e; fill stores the
// fleet's facts in the local tracker's cache.
func (f *Fleet) estimate(e *Estimate, dest string, q float64, now time.Time, fill bool) {
	if fill && f.localPlain == nil {
		if pf, ver, ep := f.readFacts(dest, q, now); pf != nil {
			f.estimateFrom(e, dest, q, now, pf, ver, ep)
			return
		}
	}
	var ff fleetFacts // facts fills it only where the fleet has a view
	f.mu.Lock()
	f.slide(now)
	f.facts(dest, q, &ff)
	ver, ep := f.ver.Load(), f.epoch
	lv := &f.lv
	switch {
	case f.localSync != nil:
		f.localSync.localView(dest, q, now, lv)
	case f.localPlain != nil:
		f.localPlain.localView(dest, q, now, lv)
	case f.local != nil:
		*lv = f.local.viewOf(dest, q, now)
	default:
		*lv = viewFacts{}
	}
	assemble(e, dest, q, now, &ff, lv, f.local != nil, f.minSamples())
	if fill && f.localPlain == nil { // (with a *Tracker, nothing reads them)
		f.publishFacts(dest, q, &ff)
	}
	f.mu.Unlock()
	if fill && f.localSync != nil {
		f.localSync.fill(dest, q, ver, ep, &ff)
	}
}

// estimateFrom is estimate from ff, dest's fleet facts published at the
// Fleet's version ver and epoch ep (readFacts), without the Fleet's lock:
// the local view is read through the tracker's own locks (a *Tracker,
// which has none, never comes here), and the facts are cached in the
// local *SyncTracker as the locked path caches them.
func (f *Fleet) estimateFrom(e *Estimate, dest string, q float64, now time.Time, ff *fleetFacts, ver uint64, ep int64) {
	switch {
	case f.localSync != nil:
		var lv viewFacts
		f.localSync.localView(dest, q, now, &lv)
		assemble(e, dest, q, now, ff, &lv, true, f.minSamples())
		f.localSync.fill(dest, q, ver, ep, ff)
	case f.local != nil:
		lv := f.local.viewOf(dest, q, now)
		assemble(e, dest, q, now, ff, &lv, true, f.minSamples())
	default:
		var lv viewFacts
		assemble(e, dest, q, now, ff, &lv, false, f.minSamples())
	}
}

// facts fills ff with what the fleet view says of dest for quantile q;
// f.mu is held.
func (f *Fleet) facts(dest string, q float64, ff *fleetFacts) {
	if len(f.aggs) > 0 && f.aggregateFacts(dest, q, ff) {
		return // protocol v2: the aggregate of E−1 (else E−2)
	}
	d := f.dests[dest]
	if d == nil {
		return
	}
	ff.hasFleet = true
	s := &d.sum // summary, by hand: it is just over the inlining budget
	if !(s.valid && s.gen == d.gen && s.epoch == f.epoch) {
		s = f.summarize(d)
	}
	h, c := &d.h, &d.c
	if s.capped {
		h, c = &s.ch, &s.cc
	}
	ff.fv = viewFacts{samples: h.total, censored: c.total, unknown: d.unknown > 0}
	if h.total > 0 { // quantileValue, with the bucket rule inlined
		i, _ := h.quantileIndex(q)
		ff.fv.q = f.geo.quantileValue(i, q)
		if s.hasM {
			ff.fv.m, ff.fv.hasM = s.mMillis, true // (computed once per summary)
		}
		ff.hasFleetValue = true
	}
	ff.samples, ff.peers, ff.effPeers = s.samples, s.peers, s.effPeers
	ff.newestEnd, ff.hasNewest = s.newestEnd, s.hasNewest
	ff.trusted = ff.hasFleetValue && ff.samples >= f.minSamples() && ff.peers >= f.minPeers()
}

// assemble makes dest's estimate at now in *e from the fleet's facts and
// the local view (hasLocal: whether there is one); minSamples is
// max(MinSamples, 1).
func assemble(e *Estimate, dest string, q float64, now time.Time, ff *fleetFacts, lv *viewFacts, hasLocal bool, minSamples uint64) {
	*e = Estimate{Dest: dest, Quantile: q}
	if ff.hasFleet {
		if ff.hasFleetValue {
			e.FleetValueMillis, e.HasFleetValue = ff.fv.q, true
		}
		e.Samples, e.Censored, e.Peers, e.EffectivePeers = ff.samples, ff.fv.censored, ff.peers, ff.effPeers
		if ff.hasNewest {
			e.Staleness, e.HasStaleness = sinceMillis(now, ff.newestEnd), true
		}
	}
	e.localView(lv)
	decide(e, &ff.fv, lv, ff.hasFleet, hasLocal, ff.trusted, minSamples)
}

// QuantileMillis returns the value a timeout decision uses for dest:
// Estimate's DecisionValue, so the local guard (and the rest of the
// decision's precedence) always applies; false when no view is trusted or
// q is outside (0, 1]. With it a Fleet is a timeout.Estimator[string] that
// cannot skip the guard.
func (f *Fleet) QuantileMillis(dest string, q float64, now time.Time) (uint64, bool) {
	e, err := f.Estimate(dest, q, now)
	if err != nil {
		return 0, false
	}
	return e.DecisionValue()
}

// ViewCounts returns a copy of dest's fleet view at now after the share cap,
// as dense counts indexed like the layout's buckets (what the estimate reads;
// bucket-for-bucket equal on every node once all batches have arrived), or
// nil when the view is empty.
func (f *Fleet) ViewCounts(dest string, now time.Time) []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slide(now)
	if len(f.aggs) > 0 {
		if v := f.aggregateView(dest); v != nil {
			if v.h.total == 0 {
				return nil
			}
			return slices.Clone(v.h.counts)
		}
	}
	d := f.dests[dest]
	if d == nil {
		return nil
	}
	s := f.summary(d)
	h := &d.h
	if s.capped {
		h = &s.ch
	}
	if h.total == 0 {
		return nil
	}
	return slices.Clone(h.counts)
}

// Destinations returns the destinations with a fleet state at now, sorted.
func (f *Fleet) Destinations(now time.Time) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slide(now)
	out := make([]string, 0, len(f.dests)+len(f.aggs))
	for name := range f.aggs {
		if f.dests[name] == nil {
			out = append(out, name)
		}
	}
	for name := range f.dests {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// sinceMillis returns now minus the Unix time ms, 0 if negative, saturating:
// now.Sub without its overflow check through Add and Equal, which cost as
// much as the rest of an estimate.
func sinceMillis(now time.Time, ms int64) time.Duration {
	n := now.UnixMilli()
	if n < ms {
		return 0
	}
	d := uint64(n) - uint64(ms) // exact: n >= ms
	if d > math.MaxInt64/uint64(time.Millisecond)-1 {
		return math.MaxInt64
	}
	return time.Duration(d)*time.Millisecond + time.Duration(now.Nanosecond()%int(time.Millisecond))
}
