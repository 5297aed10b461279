package tracker

import (
	"encoding/json"
	"errors"
	"math/bits"
	"slices"
	"time"
)

// ErrQuantile reports a quantile outside (0, 1].
var ErrQuantile = errors.New("tracker: quantile must be in (0, 1]")

// Source names the view an Estimate's value comes from.
type Source uint8

// The sources of an Estimate, in the order they are tried.
const (
	// SourceNone: neither view is trusted; the caller falls back to backoff.
	SourceNone Source = iota
	// SourceLocal: this node's own window.
	SourceLocal
	// SourceFleet: the fleet view.
	SourceFleet
)

// String returns "none", "local" or "fleet".
func (s Source) String() string {
	switch s {
	case SourceLocal:
		return "local"
	case SourceFleet:
		return "fleet"
	}
	return "none"
}

// MarshalText returns String's text, so JSON carries "fleet", not 2.
func (s Source) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Estimate is a peer-count-aware quantile of one destination: its value and
// what backs it, field by field as DESIGN.md section 5's table. The Has*
// flags stand for the table's nulls.
type Estimate struct {
	// Dest and Quantile are as asked.
	Dest     string
	Quantile float64
	// Source is SourceFleet if the fleet view is trusted, else SourceLocal
	// if the local view is trusted, else SourceNone.
	Source Source
	// ValueMillis is the quantile of the view named by Source; 0 when
	// Source is SourceNone.
	ValueMillis uint64
	// FleetValueMillis is the fleet view's quantile (after the share cap)
	// when it holds any sample (HasFleetValue).
	FleetValueMillis uint64
	HasFleetValue    bool
	// LocalValueMillis is the local view's quantile when it holds any
	// sample (HasLocalValue).
	LocalValueMillis uint64
	HasLocalValue    bool
	// Samples is the fleet view's sample count after the share cap.
	Samples uint64
	// LocalSamples is the local view's sample count.
	LocalSamples uint64
	// Peers is the number of distinct peers with samples in the fleet view,
	// self included (before the cap).
	Peers int
	// EffectivePeers is (Σn)²/Σn² over those peers' sample counts n after
	// the cap; 0 when there are none.
	EffectivePeers float64
	// Staleness is now minus the end of the newest epoch in the fleet view
	// holding data for Dest, when there is one (HasStaleness).
	Staleness    time.Duration
	HasStaleness bool
	// Trusted is Source != SourceNone.
	Trusted bool
}

// MarshalJSON writes the section 5 fields in snake_case, with null for the
// absent values.
func (e Estimate) MarshalJSON() ([]byte, error) {
	opt := func(v uint64, ok bool) *uint64 {
		if !ok {
			return nil
		}
		return &v
	}
	var st *int64
	if e.HasStaleness {
		ms := e.Staleness.Milliseconds()
		st = &ms
	}
	return json.Marshal(struct {
		Dest           string  `json:"dest"`
		Quantile       float64 `json:"quantile"`
		Source         Source  `json:"source"`
		Value          *uint64 `json:"value_ms"`
		FleetValue     *uint64 `json:"fleet_value_ms"`
		LocalValue     *uint64 `json:"local_value_ms"`
		Samples        uint64  `json:"samples"`
		LocalSamples   uint64  `json:"local_samples"`
		Peers          int     `json:"peers"`
		EffectivePeers float64 `json:"effective_peers"`
		Staleness      *int64  `json:"staleness_ms"`
		Trusted        bool    `json:"trusted"`
	}{
		e.Dest, e.Quantile, e.Source, opt(e.ValueMillis, e.Source != SourceNone),
		opt(e.FleetValueMillis, e.HasFleetValue), opt(e.LocalValueMillis, e.HasLocalValue),
		e.Samples, e.LocalSamples, e.Peers, e.EffectivePeers, st, e.Trusted,
	})
}

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
	ch        hist // the capped view, when capped
	newest    int64
	newestEnd time.Time // end of epoch newest
	hasNewest bool
}

// MinPeers returns the MinPeers in force: the configured value, or when it
// is 0, min(3, live members).
func (f *Fleet) MinPeers() int {
	if f.cfg.MinPeers > 0 {
		return f.cfg.MinPeers
	}
	return min(3, f.live)
}

func (f *Fleet) summary(d *destState) *destSummary {
	s := &d.sum
	if s.valid && s.gen == d.gen && s.epoch == f.epoch {
		return s
	}
	s.valid, s.gen, s.epoch = true, d.gen, f.epoch
	s.hasNewest = false
	for ep := f.epoch - 1; ep >= f.epoch-f.n+1; ep-- {
		if d.epochN[f.slot(ep)] > 0 {
			s.newest, s.hasNewest = ep, true
			s.newestEnd = f.cfg.Tracker.EpochStart(ep + 1)
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
		for i := range k {
			pcs[i].n = f.capPeer(d, &s.ch, pcs[i].p, pcs[i].n, t)
		}
		s.samples = s.ch.total
	}
	s.effPeers = effectivePeers(pcs)
	return s
}

// Estimate returns the peer-count-aware estimate of quantile q of dest at
// now (DESIGN.md section 5), or ErrQuantile when q is outside (0, 1]. It
// costs a map lookup, a block-indexed quantile walk and the local view; the
// first query after a change of dest's view also recomputes its peers and
// share cap.
func (f *Fleet) Estimate(dest string, q float64, now time.Time) (Estimate, error) {
	e := Estimate{Dest: dest, Quantile: q}
	if !(q > 0 && q <= 1) {
		return e, ErrQuantile
	}
	f.slide(now)
	if d := f.dests[dest]; d != nil {
		s := f.summary(d)
		view := &d.h
		if s.capped {
			view = &s.ch
		}
		if v, ok := view.quantileValue(&f.geo, q); ok {
			e.FleetValueMillis, e.HasFleetValue = uint64(v), true
		}
		e.Samples, e.Peers, e.EffectivePeers = s.samples, s.peers, s.effPeers
		if s.hasNewest {
			e.Staleness, e.HasStaleness = max(now.Sub(s.newestEnd), 0), true
		}
	}
	if f.local != nil {
		ms, n, ok := f.local.localView(dest, q, now)
		e.LocalSamples = n
		e.LocalValueMillis, e.HasLocalValue = ms, ok
		if !ok {
			e.LocalValueMillis = 0
		}
	}
	minSamples := max(uint64(f.cfg.Tracker.MinSamples), 1)
	switch {
	case e.HasFleetValue && e.Samples >= minSamples && e.Peers >= f.MinPeers():
		e.Source, e.ValueMillis = SourceFleet, e.FleetValueMillis
	case e.HasLocalValue && e.LocalSamples >= minSamples:
		e.Source, e.ValueMillis = SourceLocal, e.LocalValueMillis
	}
	e.Trusted = e.Source != SourceNone
	return e, nil
}

// QuantileMillis returns the estimate's value, and false when it is not
// trusted or q is outside (0, 1]. With it a Fleet is a
// timeout.Estimator[string].
func (f *Fleet) QuantileMillis(dest string, q float64, now time.Time) (uint64, bool) {
	e, err := f.Estimate(dest, q, now)
	if err != nil || !e.Trusted {
		return 0, false
	}
	return e.ValueMillis, true
}

// DecisionValueMillis returns the value a timeout decision uses for dest
// (DESIGN.md section 5): the estimate's value, except that when its source
// is the fleet, the local view is trusted and its value exceeds the fleet's
// by more than 20 %, the local value and SourceLocal (the local guard: this
// node sees a worse path than the fleet). ok is false when neither view is
// trusted or q is outside (0, 1].
func (f *Fleet) DecisionValueMillis(dest string, q float64, now time.Time) (ms uint64, src Source, ok bool) {
	e, err := f.Estimate(dest, q, now)
	if err != nil {
		return 0, SourceNone, false
	}
	ms, guarded, ok := f.DecisionMillis(&e)
	if guarded {
		return ms, SourceLocal, ok
	}
	return ms, e.Source, ok
}

// DecisionMillis is DecisionValueMillis for an estimate e that this fleet
// returned: the value a timeout decision uses, whether the local guard
// replaced the fleet's value with the local one, and false when e is not
// trusted. It lets a caller get the estimate, its source and the decision
// value from one read.
func (f *Fleet) DecisionMillis(e *Estimate) (ms uint64, guarded, ok bool) {
	if !e.Trusted {
		return 0, false, false
	}
	if e.Source == SourceFleet && e.HasLocalValue && e.LocalSamples >= max(uint64(f.cfg.Tracker.MinSamples), 1) &&
		exceeds20(e.LocalValueMillis, e.FleetValueMillis) {
		return e.LocalValueMillis, true, true
	}
	return e.ValueMillis, false, true
}

// exceeds20 reports local > 1.2·fleet exactly: 5·local > 6·fleet in 128 bits.
func exceeds20(local, fleet uint64) bool {
	lh, ll := bits.Mul64(local, 5)
	fh, fl := bits.Mul64(fleet, 6)
	return lh > fh || lh == fh && ll > fl
}

// DecisionEstimator returns a timeout.Estimator[string] whose values are
// DecisionValueMillis's, for timeout.Explain and timeout.SelectQuorum.
func (f *Fleet) DecisionEstimator() DecisionEstimator { return DecisionEstimator{f} }

// DecisionEstimator adapts a Fleet's timeout-decision values (the estimate
// after the local guard) to the timeout.Estimator[string] shape.
type DecisionEstimator struct{ f *Fleet }

// QuantileMillis returns Fleet.DecisionValueMillis's value.
func (d DecisionEstimator) QuantileMillis(dest string, q float64, now time.Time) (uint64, bool) {
	ms, _, ok := d.f.DecisionValueMillis(dest, q, now)
	return ms, ok
}

// ViewCounts returns a copy of dest's fleet view at now after the share cap,
// as dense counts indexed like the layout's buckets (what the estimate reads;
// bucket-for-bucket equal on every node once all batches have arrived), or
// nil when the view is empty.
func (f *Fleet) ViewCounts(dest string, now time.Time) []uint64 {
	f.slide(now)
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
	f.slide(now)
	out := make([]string, 0, len(f.dests))
	for name := range f.dests {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
