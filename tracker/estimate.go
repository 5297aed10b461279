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
	// ValueMillis is the quantile of the view named by Source; 0 when
	// Source is SourceNone.
	ValueMillis uint64
	// FleetValueMillis is the fleet view's quantile (after the share cap)
	// when it holds any sample (HasFleetValue).
	FleetValueMillis uint64
	// LocalValueMillis is the local view's quantile when it holds any
	// sample (HasLocalValue).
	LocalValueMillis uint64
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
	Staleness time.Duration
	// Censored is the fleet view's timed-out samples (after the share cap).
	Censored uint64
	// LocalCensored is the local view's timed-out samples.
	LocalCensored uint64
	// MaxCompletedMillis is M of the view named by Source: the highest
	// equivalent value of the highest bucket holding a sample that did not
	// time out (HasMaxCompleted false when there is none, when Source is
	// SourceNone, or when the view's censoring is unknown).
	MaxCompletedMillis uint64
	// Decision is what a timeout decision takes from this estimate; read
	// it through DecisionValue.
	Decision Decision

	// Source is SourceFleet if the fleet view is trusted (MinSamples
	// samples from MinPeers peers), else SourceLocal if the local view is
	// trusted (MinSamples samples), else SourceNone.
	Source Source
	// The flags of the values above that may be absent (JSON's nulls),
	// kept together so the estimate is small to copy.
	HasFleetValue   bool
	HasLocalValue   bool
	HasStaleness    bool
	HasMaxCompleted bool
	// FleetFailing reports that the fleet view named by Source is failing
	// (see Decision): it then defers to a trusted local view that is not
	// (Decision.Guarded), or makes the decision failing. It tells that
	// deferral from the local guard, whose Guarded is the same.
	FleetFailing bool
	// Failing reports that the decision treats Dest as failing: the view it
	// reads has enough samples, some timed out, and none completed in the
	// window (see Decision). A decision then takes the exponential fallback
	// and DecisionValue reports no value. A caller with failure knowledge
	// of its own (a node's consecutive-failure detector) may set it on its
	// copy: the decision and the JSON then follow.
	Failing bool
}

// Decision is the input of a timeout decision for one destination, filled
// in with the estimate by the same rule wherever an estimate is made (the
// fleet's, and LocalEstimate's for a tracker alone).
//
// Per view (the local window, the fleet view), Q is the quantile, M the
// highest equivalent value of the highest bucket holding a sample that did
// not time out (none when every sample in the view timed out), and the
// view's value v = min(Q, M): with nothing censored M >= Q, so v = Q. A
// view is failing when it holds at least max(MinSamples, 1) samples, some
// timed out, and M is none; a view whose censoring is unknown (it holds a
// batch from a peer that does not send censored counts) uses v = Q and is
// never failing. Then, in order:
//
//   - a trusted local view that is failing makes the decision failing,
//     whatever the fleet says (this node's own path is broken);
//   - a trusted fleet view that is failing defers to a trusted local view
//     that is not: v of the local view;
//   - else v of the view named by Source (failing if that view is), with
//     the local guard: when Source is SourceFleet, the local view is
//     trusted and its v exceeds the fleet's by more than 20 %, the local v
//     (this node sees a worse path than the fleet).
//
// Where the local view replaced the fleet's, Guarded is true.
type Decision struct {
	// ValueMillis is v of the deciding view, the value a decision clamps
	// into a timeout, when Estimate.DecisionValue reports one.
	ValueMillis uint64
	// Guarded reports that the local view decided in place of the fleet's
	// (the local guard, a failing local view, or a failing fleet view).
	Guarded bool
}

// DecisionInput is what a timeout decision reads of an Estimate, and only
// that: its Source, whether it is Failing, Decision's value and Guarded,
// and Q of the deciding view (DecisionQuantileMillis). It is a sixth of an
// Estimate's size, so a decision over a few destinations copies little;
// Fleet.DecisionInput gives it from the estimate cache without assembling
// the rest. Estimate.Input derives it from a whole estimate.
type DecisionInput struct {
	// ValueMillis is Decision.ValueMillis: v of the deciding view.
	ValueMillis uint64
	// QuantileMillis is Estimate.DecisionQuantileMillis: Q of the view
	// the decision reads.
	QuantileMillis uint64
	// Source is the estimate's Source.
	Source Source
	// Guarded is Decision.Guarded.
	Guarded bool
	// Failing is the estimate's Failing; a caller with failure knowledge of
	// its own may set it, as on an Estimate.
	Failing bool
}

// Input returns the decision input of e.
func (e *Estimate) Input() DecisionInput {
	return DecisionInput{ValueMillis: e.Decision.ValueMillis, QuantileMillis: e.DecisionQuantileMillis(),
		Source: e.Source, Guarded: e.Decision.Guarded, Failing: e.Failing}
}

// Value is Estimate.DecisionValue of the estimate in reads: the decision
// value, false when no view is trusted or the destination is failing.
func (in *DecisionInput) Value() (ms uint64, ok bool) {
	if in.Source == SourceNone || in.Failing {
		return 0, false
	}
	return in.ValueMillis, true
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

// DecisionQuantileMillis returns Q of the view the decision reads (the
// local view's when Guarded, else the Source's): with DecisionValue it tells
// a probe whether v < Q, and what Q is. 0 when Source is SourceNone.
func (e Estimate) DecisionQuantileMillis() uint64 {
	if e.Decision.Guarded {
		return e.LocalValueMillis
	}
	return e.ValueMillis
}

// DecisionValue returns the value a timeout decision uses for the
// destination (Decision.ValueMillis), and false when no view is trusted or
// the destination is failing: the decision then takes the exponential
// fallback.
func (e Estimate) DecisionValue() (ms uint64, ok bool) {
	if !e.Trusted() || e.Failing {
		return 0, false
	}
	return e.Decision.ValueMillis, true
}

// viewFacts is what one view (the local window, a fleet view) says about a
// destination: Q by the bucket rule ignoring MinSamples (when samples > 0),
// its samples and censored samples, and M.
type viewFacts struct {
	q        uint64
	samples  uint64
	censored uint64
	m        uint64 // when hasM
	hasM     bool
	unknown  bool // censoring unknown: the view uses v = Q and is never failing
}

// failing reports whether the view is failing: at least minSamples
// samples, some censored, none completed (M none), censoring known.
func (v *viewFacts) failing(minSamples uint64) bool {
	return v.samples >= minSamples && v.censored > 0 && !v.hasM && !v.unknown
}

// value returns v = min(Q, M), or Q when M is none or censoring unknown.
func (v *viewFacts) value() uint64 {
	if v.hasM && !v.unknown {
		return min(v.q, v.m)
	}
	return v.q
}

// localView fills e's local fields from the local view v.
func (e *Estimate) localView(v *viewFacts) {
	e.LocalSamples, e.LocalCensored = v.samples, v.censored
	if v.samples > 0 {
		e.LocalValueMillis, e.HasLocalValue = v.q, true
	}
}

// decide fills e's source, values and decision input from its two views
// (hasFleet, hasLocal: whether there is a fleet view, a local view).
// fleetTrusted is whether the fleet view holds MinSamples samples from
// MinPeers peers; minSamples is max(MinSamples, 1), the local view's trust
// threshold.
func decide(e *Estimate, fleet, local *viewFacts, hasFleet, hasLocal, fleetTrusted bool, minSamples uint64) {
	localTrusted := hasLocal && local.samples >= minSamples
	var src *viewFacts
	switch {
	case hasFleet && fleetTrusted:
		e.Source, src = SourceFleet, fleet
	case localTrusted:
		e.Source, src = SourceLocal, local
	default:
		e.Source, e.ValueMillis, e.Decision, e.FleetFailing = SourceNone, 0, Decision{}, false
		return
	}
	e.ValueMillis = src.q
	if src.hasM && !src.unknown {
		e.MaxCompletedMillis, e.HasMaxCompleted = src.m, true
	}
	localFailing := localTrusted && local.failing(minSamples)
	e.Failing, e.Decision = false, Decision{}
	e.FleetFailing = e.Source == SourceFleet && fleet.failing(minSamples)
	switch {
	case e.Source == SourceLocal:
		if e.Failing = localFailing; !e.Failing {
			e.Decision.ValueMillis = local.value()
		}
	case localFailing:
		e.Failing, e.Decision.Guarded = true, true
	case e.FleetFailing && localTrusted: // (Source is SourceFleet from here)
		e.Decision = Decision{ValueMillis: local.value(), Guarded: true}
	case e.FleetFailing:
		e.Failing = true
	default:
		e.Decision.ValueMillis = fleet.value()
		if localTrusted && exceeds20(local.value(), e.Decision.ValueMillis) {
			e.Decision = Decision{ValueMillis: local.value(), Guarded: true}
		}
	}
}

// exceeds20 reports local > 1.2·fleet exactly: 5·local > 6·fleet in 128 bits.
func exceeds20(local, fleet uint64) bool {
	lh, ll := bits.Mul64(local, 5)
	fh, fl := bits.Mul64(fleet, 6)
	return lh > fh || lh == fh && ll > fl
}

// MarshalJSON writes the fields of GET /v1/estimate in snake_case, with
// null for the absent values. Of the decision input only failing is
// written.
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
		Censored       uint64  `json:"censored"`
		LocalCensored  uint64  `json:"local_censored"`
		MaxCompleted   *uint64 `json:"max_completed_ms"`
		Failing        bool    `json:"failing"`
	}{
		e.Dest, e.Quantile, e.Source, opt(e.ValueMillis, e.Source != SourceNone),
		opt(e.FleetValueMillis, e.HasFleetValue), opt(e.LocalValueMillis, e.HasLocalValue),
		e.Samples, e.LocalSamples, e.Peers, e.EffectivePeers, st, e.Trusted(),
		e.Censored, e.LocalCensored, opt(e.MaxCompletedMillis, e.HasMaxCompleted && e.Source != SourceNone), e.Failing,
	})
}
