package tracker

import (
	"encoding/json"
	"errors"
	"math/bits"
	"time"
)

// ErrQuantile reports a quantile outside (0, 1]. It is the module's one
// error for that meaning (timeout.ErrQuantile and node.ErrQuantile are this
// value), so its text names no package: each package that returns it wraps
// it with its own name and the value given, as Fleet.Estimate does
// ("tracker: quantile must be in (0, 1], got 2").
var ErrQuantile = errors.New("quantile must be in (0, 1]")

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
// what backs it, field by field as GET /v1/estimate answers it, plus the
// input of a timeout decision (Decision). The Has* flags stand for JSON's
// nulls.
type Estimate struct {
	// Dest and Quantile are as asked.
	Dest     string
	Quantile float64
	// Source is SourceFleet if the fleet view is trusted (MinSamples
	// samples from MinPeers peers), else SourceLocal if the local view is
	// trusted (MinSamples samples), else SourceNone.
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
	// Decision is what a timeout decision takes from this estimate; read
	// it through DecisionValue.
	Decision Decision
}

// Decision is the input of a timeout decision for one destination, filled
// in with the estimate by the same rule wherever an estimate is made:
// the value of the view named by the estimate's Source, except that when
// Source is SourceFleet, the local view is trusted and its value exceeds
// the fleet's by more than 20 %, the local value (the local guard: this
// node sees a worse path than the fleet).
type Decision struct {
	// ValueMillis is the value a decision clamps into a timeout, when
	// Estimate.DecisionValue reports one.
	ValueMillis uint64
	// Guarded reports that the local view's value replaced the fleet's.
	Guarded bool
}

// Trusted reports whether a view backs the estimate: Source != SourceNone.
func (e Estimate) Trusted() bool { return e.Source != SourceNone }

// DecisionSource returns the view the decision's value comes from: the
// estimate's Source, or SourceLocal when the local view replaced the
// fleet's (Decision.Guarded).
func (e Estimate) DecisionSource() Source {
	if e.Decision.Guarded {
		return SourceLocal
	}
	return e.Source
}

// DecisionValue returns the value a timeout decision uses for the
// destination (Decision.ValueMillis), and false when no view is trusted:
// the decision then falls back to exponential backoff.
func (e Estimate) DecisionValue() (ms uint64, ok bool) {
	if !e.Trusted() {
		return 0, false
	}
	return e.Decision.ValueMillis, true
}

// decide fills e.Decision from e's views; minSamples is max(MinSamples, 1),
// the local view's trust threshold.
func decide(e *Estimate, minSamples uint64) {
	e.Decision = Decision{ValueMillis: e.ValueMillis}
	if e.Source == SourceFleet && e.HasLocalValue && e.LocalSamples >= minSamples &&
		exceeds20(e.LocalValueMillis, e.FleetValueMillis) {
		e.Decision = Decision{ValueMillis: e.LocalValueMillis, Guarded: true}
	}
}

// exceeds20 reports local > 1.2·fleet exactly: 5·local > 6·fleet in 128 bits.
func exceeds20(local, fleet uint64) bool {
	lh, ll := bits.Mul64(local, 5)
	fh, fl := bits.Mul64(fleet, 6)
	return lh > fh || lh == fh && ll > fl
}

// MarshalJSON writes the fields of GET /v1/estimate in snake_case, with
// null for the absent values. The decision input is not written.
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
		e.Samples, e.LocalSamples, e.Peers, e.EffectivePeers, st, e.Trusted(),
	})
}
