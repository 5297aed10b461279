package timeout

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// Estimates is where a Decider reads each destination's decision input
// (tracker.Estimate.Decision, Failing and the quantile of the deciding
// view). *tracker.Fleet satisfies it: the fleet view with its precedence of
// failing views and its local guard. NewPolicy reads one tracker through
// tracker.LocalEstimate. Estimate is called with the Decider's quantile, so
// it never fails for a valid Config; it must be safe for concurrent use when
// the Decider is used concurrently.
type Estimates interface {
	Estimate(dest string, q float64, now time.Time) (tracker.Estimate, error)
}

// Learner takes what attempts teach a Decider: a completed attempt's
// latency (RecordMillis) and a timed-out one, censored at its timeout
// (RecordTimeoutMillis). *tracker.Tracker[string] and
// *tracker.SyncTracker[string] satisfy it.
type Learner interface {
	RecordMillis(dest string, ms uint64, now time.Time)
	RecordTimeoutMillis(dest string, ms uint64, now time.Time)
}

// FailingAfter is how many consecutive timed-out or failed attempts make a
// Decider treat a destination as failing; a completed attempt resets the
// count.
const FailingAfter = 3

// DefaultMaxTracked is the most destinations a Decider keeps state for when
// its tracker configuration sets no MaxDestinations.
const DefaultMaxTracked = 10_000

// ProbePause is how long, as a multiple of its probe timeout, a probe that
// timed out holds off the next probe of its destination after it ended: 2,
// so that probes of a destination that never answers take at most a third
// of the time.
const ProbePause = 2

// Errors of NewDecider and NewPolicy.
var (
	ErrNoTracker   = errors.New("timeout: tracker is nil")
	ErrNoEstimates = errors.New("timeout: estimates or learner is nil")
)

// Verdict is a Decider's timeout decision for the destinations of one
// request, with its reasons.
type Verdict struct {
	// Decision is the timeout, the deciding destination and whether the
	// exponential fallback decided, exactly as Explain (or ExplainQuorum
	// for a quorum) gives them for the destinations' decision values, a
	// failing destination counting as one without data.
	Decision
	// Reason says what set Timeout: ReasonFailing or ReasonFallback when
	// the fallback decided (failing when some destination is failing),
	// ReasonCapped when the deciding destination's value is its highest
	// completed latency, below its quantile, else ReasonEstimate.
	Reason Reason
	// Probe is the index of the destination a probe is due for, -1 when
	// none is: the deciding destination, or when the fallback decided, the
	// first in request order for which one is due. ProbeTimeout is that
	// probe's timeout, longer than Timeout (0 when Probe is -1).
	Probe        int
	ProbeTimeout time.Duration
}

// Decider is the failure-aware Policy: the timeout rule on each
// destination's decision value, this process's consecutive-failure
// detector, and its probe bookkeeping, over any source of estimates. It is
// the one implementation of the rule: NewPolicy runs it over one tracker,
// *node.Node over the fleet view, and the simulator over each simulated
// node's fleet view.
//
// The rule, per destination d and attempt a (1 is the first):
//
//   - d is failing when its estimate says so (the view deciding for it
//     holds enough samples, some timed out, none completed), or after
//     FailingAfter consecutive timed-out or failed attempts observed here;
//     a completed attempt resets the count (superseded and canceled
//     attempts count as neither).
//   - d's own timeout is the exponential fallback when it is failing or has
//     no trusted value, else max(fallback, clamp(SafetyFactor · v · 2^(a−1)))
//     with v = min(Q, M), the estimate's decision value; the request's
//     timeout is the largest (or for a quorum the need-th smallest) of them,
//     as in Explain and ExplainQuorum.
//   - A probe of d is due when its estimate is trusted, v < Q or d is
//     failing, no probe of d is in flight here, none was started in the
//     current sub-window, and the pause after the last timed-out probe is
//     over (below). Its timeout is today's rule on Q,
//     max(fallback, clamp(SafetyFactor · Q · 2^(a−1))), and it is due only
//     when that is longer than the attempt's timeout. A timed-out probe is
//     recorded at its probe timeout, so Q rises to it and the next probe
//     doubles, up to the ceiling.
//   - A probe that timed out after P holds off the next probe of its
//     destination until ProbePause·P after it ended. One probe per
//     sub-window bounds the share of attempts that probe, but once probes
//     outgrow a sub-window they would run back to back: a caller that waits
//     for its probes (node.Do) would spend nearly all its time on a
//     destination that never answers. With the pause, probes take at most
//     1/(1+ProbePause) of the time, so a sequential caller of a dead
//     destination waits about 1.5 times the fallback per call; a probe that
//     completes (the destination answered) is not followed by a pause.
//
// What Observe records: Completed at its elapsed time, TimedOut at its
// timeout (a probe at its probe timeout) as a censored sample, Failed
// nothing, Superseded censored at its elapsed time, Canceled nothing.
//
// Memory is bounded: a destination has state only while its failure count
// is above zero, a probe of it is in flight, one was started in the
// current sub-window, or a pause after a timed-out probe runs; an entry is
// dropped once none of that holds, when its destination is next seen or at
// the next Sweep (a node sweeps once a second), and at most the tracker's
// MaxDestinations (DefaultMaxTracked when unlimited) are kept, the least
// recently used without a probe in flight evicted first.
//
// A Decider is safe for concurrent use. Like the rest of the package it
// reads no clock and starts no goroutines: time is an argument. When no
// destination has state, Decide and Observe of a completion take no lock.
type Decider struct {
	cfg  Config
	grid tracker.Config
	src  Estimates
	// fleet is src when it is a *tracker.Fleet, called directly: its
	// DecisionInput copies the small cached input of a destination and
	// EstimateTo writes an estimate in place, and a static call keeps the
	// caller's buffers on its stack.
	fleet *tracker.Fleet
	rec   Learner
	// local is rec when it is a *tracker.SyncTracker[string], called
	// directly (the record path is the hottest).
	local *tracker.SyncTracker[string]
	// memo is the Decider's registration as fleet's Memoizer (Memo,
	// Quick), nil when there is none.
	memo *tracker.MemoReg
	max  int

	n atomic.Int64 // len(dests), read without the lock
	// gen is the generation of the state: it moves on (under mu) whenever
	// a destination's state is created. A tracker entry of local tagged
	// with the current generation (tracker.SyncTracker.SetTag, under mu
	// when dest had no state) proves dest still has none, so a completion
	// reads the tag its record returns instead of locking mu. Starts at 1:
	// a new entry's tag, 0, proves nothing.
	gen   atomic.Uint64
	mu    sync.Mutex
	dests map[string]health
	// stateful holds dests' keys (written under mu, with dests), read
	// without the lock by Quick: a destination without state decides by
	// the rule's memo alone even while others have state (a failing
	// destination elsewhere cost every decision the locked path: 16 →
	// 93 ns for one destination).
	stateful sync.Map
	touch    uint64
	stats    DeciderStats

	hedge atomic.Pointer[deciderHedge] // Hedger's budget

	// rules are the rule of attempts 1..len(rules), made once (each call
	// of verdict made its own).
	rules [8]rule
}

// deciderHedge is a Decider's hedge budget and the quantile of its delay.
type deciderHedge struct {
	share  float64
	bucket *HedgeBudget
}

// health is one destination's detector and probe state.
type health struct {
	fails      uint32 // consecutive timed-out or failed attempts
	probing    bool   // a probe is in flight
	probed     bool   // probeEpoch is set
	probeEpoch int64  // the sub-window the last probe started in
	// The pause after a timed-out probe: no probe starts at Unix ms in
	// [pauseFrom, resume).
	pauseFrom, resume int64
	touched           uint64 // for eviction: the Decider's touch count when last used
}

// mayProbe reports whether h's bookkeeping lets a probe start in epoch ep
// at Unix millisecond ms: none in flight, none started in ep, no pause.
// A clock stepped back to before a probe's sub-window, or before its
// pause began, lets a probe start on the new time line at once (they are
// compared as equal, and as an interval): the rule allows one per
// sub-window, and a step back of an hour must not hold a failing
// destination's probes for that hour.
func (h *health) mayProbe(ep, ms int64) bool {
	return !h.probing && !(h.probed && h.probeEpoch == ep) && !(h.pauseFrom <= ms && ms < h.resume)
}

// droppable reports whether h holds nothing worth keeping at epoch ep and
// Unix millisecond ms.
func (h *health) droppable(ep, ms int64) bool {
	return h.fails == 0 && h.mayProbe(ep, ms)
}

// OutcomeCounts counts attempts by outcome.
type OutcomeCounts struct {
	Completed, TimedOut, Failed, Superseded, Canceled uint64
}

func (c *OutcomeCounts) add(o Outcome) {
	switch o {
	case Completed:
		c.Completed++
	case TimedOut:
		c.TimedOut++
	case Failed:
		c.Failed++
	case Superseded:
		c.Superseded++
	case Canceled:
		c.Canceled++
	}
}

// DeciderStats are a Decider's counters and the size of its state.
type DeciderStats struct {
	// Tracked is how many destinations have state; Failing how many of
	// them the detector treats as failing; ProbesInFlight how many have a
	// probe in flight.
	Tracked, Failing, ProbesInFlight int
	// ProbesStarted counts probes reserved (Probe returned true);
	// ProbesEnded counts those observed, by outcome.
	ProbesStarted uint64
	ProbesEnded   OutcomeCounts
	// Evicted counts destinations whose state was dropped to stay within
	// the cap while it still mattered (a failure count above zero, a probe
	// started in the current sub-window, a pause).
	Evicted uint64
}

// NewDecider returns a Decider that decides with cfg on the estimates of
// src and records what it learns into rec. grid is the tracker
// configuration of the estimates' views: its sub-window grid paces the
// probes (one per destination per sub-window) and its MaxDestinations caps
// the state kept. When rec is a *tracker.SyncTracker[string] the Decider
// owns its tags (see NewPolicy).
func NewDecider(cfg Config, grid tracker.Config, src Estimates, rec Learner) (*Decider, error) {
	if err := errors.Join(cfg.Validate(), grid.Validate()); err != nil {
		return nil, err
	}
	if src == nil || rec == nil {
		return nil, ErrNoEstimates
	}
	d := &Decider{cfg: cfg, grid: grid, src: src, rec: rec, max: grid.MaxDestinations, dests: map[string]health{}}
	d.gen.Store(1)
	d.fleet, _ = src.(*tracker.Fleet)
	d.local, _ = rec.(*tracker.SyncTracker[string])
	if d.max <= 0 {
		d.max = DefaultMaxTracked
	}
	for i := range d.rules {
		d.rules[i] = rule{c: cfg, attempt: i + 1}
		d.rules[i].init()
	}
	if d.fleet != nil {
		d.memo = d.fleet.SetMemoizer(d, cfg.Quantile) // the fleet keeps the rule's verdicts with its published inputs
	}
	d.SetHedgeBudget(DefaultHedgeBudget)
	return d, nil
}

// NewPolicy returns the failure-aware Policy over one process's tracker: the
// decision values of tr's window alone (tracker.LocalEstimate), with the
// same rule, detector and probes as a node's fleet view. Attempts are
// recorded into tr. What a standalone transport (timeouthttp, timeoutgrpc,
// timeoutfailsafe) takes when there is no fleet. The Decider owns tr's
// tags (tracker.SyncTracker.SetTag): they tell its detector which
// destinations have no state, so nothing else may set them.
func NewPolicy(cfg Config, tr *tracker.SyncTracker[string]) (*Decider, error) {
	if tr == nil {
		return nil, ErrNoTracker
	}
	return NewDecider(cfg, tr.Config(), localEstimates{tr}, tr)
}

// localEstimates reads a tracker's own window as Estimates.
type localEstimates struct{ t *tracker.SyncTracker[string] }

func (l localEstimates) Estimate(dest string, q float64, now time.Time) (tracker.Estimate, error) {
	return tracker.LocalEstimate(l.t, dest, q, now)
}

// Survival is the censoring-aware q-quantile of dest's local window
// (tracker.LocalSurvival); the zero Survival for any other view.
func (l localEstimates) Survival(dest string, view tracker.Source, q float64, now time.Time) tracker.Survival {
	if view != tracker.SourceLocal {
		return tracker.Survival{}
	}
	return tracker.LocalSurvival(l.t, dest, q, now)
}

// SetHedgeBudget sets the share of requests that may hedge through the
// Decider as a Hedger (clamped to [0, MaxHedgeBudget]; 0 turns hedging
// off), with a full token bucket. Default DefaultHedgeBudget.
func (d *Decider) SetHedgeBudget(share float64) {
	b := NewHedgeBudget(share)
	d.hedge.Store(&deciderHedge{share: float64(b.deposit) / hedgeUnit, bucket: b})
}

// HedgeDelay implements Hedger: it deposits the hedge budget's share of a
// token and returns HedgeDelay of dest's estimate at HedgeQuantile(budget),
// failing when the detector says so, with the censoring-aware quantile of
// HedgeView's view when the Decider's estimates are Survivals (a
// *tracker.Fleet, or the tracker NewPolicy is given), else the plain one.
func (d *Decider) HedgeDelay(dest string, now time.Time) (time.Duration, bool) {
	h := d.hedge.Load()
	if h.share == 0 {
		return 0, false
	}
	h.bucket.Deposit()
	e, err := d.src.Estimate(dest, HedgeQuantile(h.share), now)
	if err != nil {
		return 0, false
	}
	e.Failing = e.Failing || d.Failing(dest)
	return hedgeDelayOf(d.src, &e, now)
}

// SpendHedge implements Hedger: it spends one token of the hedge budget.
func (d *Decider) SpendHedge(time.Time) bool { return d.hedge.Load().bucket.Spend() }

// Config returns the timeout configuration the Decider decides with.
func (d *Decider) Config() Config { return d.cfg }

// Decide returns the timeout of attempt to dest at now (Policy.Decide): the
// rule of the type doc for one destination, with the probe timeout set when
// a probe is due.
func (d *Decider) Decide(dest string, attempt int, now time.Time) Attempt {
	dests := [1]string{dest}
	var in [1]tracker.DecisionInput
	var v Verdict
	d.ExplainTo(&v, dests[:], 1, attempt, now, in[:])
	a := Attempt{Dest: dest, Attempt: max(attempt, 1), Timeout: v.Timeout, Reason: v.Reason, Failing: in[0].Failing}
	if v.Probe == 0 {
		a.ProbeTimeout = v.ProbeTimeout
	}
	return a
}

// Explain decides the timeout of a request that needs need of dests to
// answer (need is clamped to 1..len(dests); len(dests) for all), for
// attempt, at now: the rule of the type doc. It fills es[i] with dests[i]'s
// estimate, Failing set when the detector treats it as failing, so the
// caller can tell each destination's source and failing state; es must be
// at least as long as dests, or nil (then Explain allocates). It does not
// reserve a probe: Verdict.Probe is advisory. ExplainTo is the same
// decision on the decision inputs alone.
func (d *Decider) Explain(dests []string, need, attempt int, now time.Time, es []tracker.Estimate) Verdict {
	if len(es) < len(dests) {
		es = make([]tracker.Estimate, len(dests))
	}
	es = es[:len(dests)]
	var buf [stackInputs]tracker.DecisionInput
	in := buf[:]
	if len(dests) > len(in) {
		in = make([]tracker.DecisionInput, len(dests))
	}
	in = in[:len(dests)]
	for i, dest := range dests {
		var err error
		if d.fleet != nil {
			err = d.fleet.EstimateTo(&es[i], dest, d.cfg.Quantile, now)
		} else {
			es[i], err = d.src.Estimate(dest, d.cfg.Quantile, now)
		}
		if err != nil {
			es[i] = tracker.Estimate{Dest: dest, Quantile: d.cfg.Quantile}
		}
		in[i] = es[i].Input()
	}
	var v Verdict
	d.verdict(&v, dests, need, attempt, now, in)
	for i := range in {
		es[i].Failing = in[i].Failing
	}
	return v
}

// stackInputs is how many destinations' decision inputs Explain keeps on
// the stack.
const stackInputs = 4

// ExplainTo is Explain setting *v to the verdict and filling in[i] with
// dests[i]'s decision input (tracker.Estimate.Input, Failing set when the
// detector treats it as failing) instead of its whole estimate: the same
// verdict, for a caller that needs no more of each destination than its
// source, guard and failing state. Over a *tracker.Fleet it reads
// Fleet.DecisionInput, which copies a small cached value rather than an
// estimate; results go through pointers because this is the path of every
// embedded decision (node.Timeout, node.Do). in must be at least as long
// as dests, or nil (then ExplainTo allocates).
func (d *Decider) ExplainTo(v *Verdict, dests []string, need, attempt int, now time.Time, in []tracker.DecisionInput) {
	if len(in) < len(dests) {
		in = make([]tracker.DecisionInput, len(dests))
	}
	in = in[:len(dests)]
	if d.fleet != nil {
		_ = d.fleet.DecisionInputs(in, dests, d.cfg.Quantile, now) // (a valid Config's quantile)
	} else {
		for i, dest := range dests {
			d.srcInput(&in[i], dest, now)
		}
	}
	d.verdict(v, dests, need, attempt, now, in)
}

// srcInput sets *in to dest's decision input from a source other than a
// Fleet, zero when it fails.
func (d *Decider) srcInput(in *tracker.DecisionInput, dest string, now time.Time) {
	e, err := d.src.Estimate(dest, d.cfg.Quantile, now)
	if err != nil {
		*in = tracker.DecisionInput{}
		return
	}
	*in = e.Input()
}

// verdict sets *v to the decision of Explain and ExplainTo on the
// destinations' inputs: the detector marks its failing destinations in in,
// the rule decides, and the probe bookkeeping says which probe may go.
func (d *Decider) verdict(v *Verdict, dests []string, need, attempt int, now time.Time, in []tracker.DecisionInput) {
	if d.n.Load() > 0 {
		d.mu.Lock()
		for i := range in {
			if h, ok := d.dests[dests[i]]; ok && h.fails >= FailingAfter {
				in[i].Failing = true
			}
		}
		d.mu.Unlock()
	}
	var r *rule
	if attempt >= 1 && attempt <= len(d.rules) {
		r = &d.rules[attempt-1]
	} else {
		r = &rule{c: d.cfg, attempt: attempt}
		r.init()
	}
	r.decide(v, in, need)
	if v.Probe < 0 || d.n.Load() == 0 {
		return // no probe offered, or no bookkeeping to refuse it
	}
	ep, ms := d.grid.Epoch(now), now.UnixMilli()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mayProbe(dests[v.Probe], ep, ms) {
		return
	}
	v.Probe, v.ProbeTimeout = -1, 0
	if v.DecidedBy >= 0 {
		return // only the deciding destination's probe counts
	}
	for i := range in {
		if pt, ok := r.probe(&in[i], millis(v.Timeout)); ok && d.mayProbe(dests[i], ep, ms) {
			v.Probe, v.ProbeTimeout = i, fromMillis(pt)
			return
		}
	}
}

// mayProbe reports whether the bookkeeping allows a probe of dest in epoch
// ep at Unix millisecond ms. d.mu is held.
func (d *Decider) mayProbe(dest string, ep, ms int64) bool {
	h, ok := d.dests[dest]
	return !ok || h.mayProbe(ep, ms)
}

// Probe reserves the probe Decide offered for a's attempt, which reached
// its timeout at now (Policy.Probe): it reports false when none was offered
// (a.ProbeTimeout not beyond a.Timeout), when a is already a probe, or when
// a probe of a.Dest is in flight, was started in now's sub-window, or timed
// out too recently (ProbePause). Otherwise it sets a.Probe and the attempt
// may go on until a.ProbeTimeout.
func (d *Decider) Probe(a *Attempt, now time.Time) bool {
	if a.Probe || a.ProbeTimeout <= a.Timeout {
		return false
	}
	ep, ms := d.grid.Epoch(now), now.UnixMilli()
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.entry(a.Dest, ep, ms)
	if !ok || !h.mayProbe(ep, ms) {
		return false
	}
	h.probing, h.probed, h.probeEpoch = true, true, ep
	d.dests[a.Dest] = h
	d.stats.ProbesStarted++
	a.Probe = true
	return true
}

// Observe records how a's attempt ended at now, elapsed after its start
// (Policy.Observe): Completed at elapsed, TimedOut at a.Timeout (a probe at
// a.ProbeTimeout) as censored, Failed not as a sample, Superseded censored
// at elapsed, Canceled not at all; the detector counts TimedOut and Failed,
// and a completion resets it. It releases a probe's reservation.
func (d *Decider) Observe(a Attempt, o Outcome, elapsed time.Duration, now time.Time) {
	ms := durationMillis(elapsed)
	if o == TimedOut {
		ms = durationMillis(a.Timeout)
		if a.Probe {
			ms = durationMillis(a.ProbeTimeout)
		}
	}
	var pause int64
	if a.Probe && o == TimedOut {
		pause = int64(ms) * ProbePause
	}
	d.record(a.Dest, o, ms, now, a.Probe, pause)
}

// Record learns one attempt of dest that ended at now with outcome o after
// ms milliseconds, without a Policy's Attempt (what a caller that measures
// attempts itself reports, as POST /v1/record does): Completed is a sample
// at ms, TimedOut and Superseded a censored sample at ms, Failed and
// Canceled no sample; the detector counts TimedOut and Failed and resets on
// Completed.
func (d *Decider) Record(dest string, o Outcome, ms uint64, now time.Time) {
	d.record(dest, o, ms, now, false, 0)
}

// RecordKnown is Record(dest, Completed, ms, now) for a destination the
// Decider's tracker holds, when it records into a *tracker.SyncTracker:
// otherwise (a new destination, or another Learner) it does nothing and
// reports false, and the caller goes on to Record. A caller that checks
// names before recording them (node.Record) so checks a name only when it
// is new to the tracker, and a record takes one lookup.
func (d *Decider) RecordKnown(dest string, ms uint64, now time.Time) bool {
	if d.local == nil {
		return false
	}
	tag, held := d.local.RecordHeldMillis(dest, ms, now)
	if held {
		d.RecordedKnown(dest, tag, now)
	}
	return held
}

// RecordedKnown is what RecordKnown does after its record, for a caller
// that made the record itself: dest's completion at now was recorded by
// RecordHeldMillis, which returned tag, into the *tracker.SyncTracker the
// Decider records into. It resets dest's failure detector when dest may
// have state, and is small enough to inline, so such a caller's record
// (node.Record's) takes one call below its own.
func (d *Decider) RecordedKnown(dest string, tag uint64, now time.Time) {
	if d.n.Load() != 0 {
		d.recordedKnown(dest, tag, now)
	}
}

// recordedKnown is RecordedKnown once some destination has state: out of
// line, so that RecordedKnown inlines and a record of a node without
// failing destinations, the common case, takes one load here.
//
//go:noinline
func (d *Decider) recordedKnown(dest string, tag uint64, now time.Time) {
	if tag != d.gen.Load() {
		d.update(dest, Completed, now, false, 0)
	}
}

// record learns an outcome; a probe's reservation ends, and pause (ms) is
// the time no probe of dest may start from now.
func (d *Decider) record(dest string, o Outcome, ms uint64, now time.Time, probe bool, pause int64) {
	switch {
	case o == Completed && d.local != nil:
		// The common case, with one lookup (the tracker's): the tag the
		// sample's entry carries tells whether dest may have state here.
		tag := d.local.RecordMillisTag(dest, ms, now)
		if !probe && (d.n.Load() == 0 || tag == d.gen.Load()) {
			return
		}
		d.update(dest, o, now, probe, pause)
		return
	case o == Completed:
		d.rec.RecordMillis(dest, ms, now)
	case o == TimedOut || o == Superseded:
		d.rec.RecordTimeoutMillis(dest, ms, now)
	}
	failure := o == TimedOut || o == Failed
	if !probe && !failure && d.n.Load() == 0 {
		return // nothing to reset: the common case takes no lock
	}
	d.update(dest, o, now, probe, pause)
}

// update is record's change of dest's detector and probe state, its sample
// recorded. When dest has no state and a completion leaves it so, it tags
// dest's tracker entry with the current generation (Decider.gen), so that
// its next completions skip the lock while no state is created.
func (d *Decider) update(dest string, o Outcome, now time.Time, probe bool, pause int64) {
	failure := o == TimedOut || o == Failed
	ep, nowMs := d.grid.Epoch(now), now.UnixMilli()
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.dests[dest]
	if failure && !ok {
		if h, ok = d.entry(dest, ep, nowMs); !ok {
			return // the cap is full of probes in flight
		}
	}
	if !ok {
		d.checked(dest, o)
		return
	}
	switch {
	case failure && h.fails < 1<<31:
		h.fails++
	case o == Completed:
		h.fails = 0
	}
	if probe && h.probing {
		h.probing = false
		if end := nowMs + pause; end > h.resume || nowMs < h.pauseFrom {
			h.pauseFrom, h.resume = nowMs, end
		}
		d.stats.ProbesEnded.add(o)
	}
	d.touch++
	h.touched = d.touch
	if h.droppable(ep, nowMs) {
		d.forget(dest)
		d.n.Store(int64(len(d.dests)))
		d.checked(dest, o)
		return
	}
	d.dests[dest] = h
}

// checked tags dest's entry in the local tracker with the current
// generation after a completion found dest without state (d.mu is held,
// so no state is created meanwhile): until a destination's state is
// created, which moves the generation on, dest's completions need not
// look. Any other outcome looks anyway.
func (d *Decider) checked(dest string, o Outcome) {
	if o == Completed && d.local != nil {
		d.local.SetTag(dest, d.gen.Load())
	}
}

// entry returns dest's state, creating it (and making room under the cap)
// when it has none; false when the cap is full of probes in flight. d.mu
// is held.
func (d *Decider) entry(dest string, ep, ms int64) (health, bool) {
	d.touch++
	if h, ok := d.dests[dest]; ok {
		h.touched = d.touch
		return h, true
	}
	if len(d.dests) >= d.max {
		d.shrink(ep, ms)
		if len(d.dests) >= d.max {
			return health{}, false
		}
	}
	h := health{touched: d.touch}
	d.gen.Add(1) // tags of an older generation no longer prove dest has no state
	d.dests[dest] = h
	d.stateful.Store(dest, struct{}{})
	d.n.Store(int64(len(d.dests)))
	return h, true
}

// forget drops dest's state (d.mu is held; the caller updates d.n).
func (d *Decider) forget(dest string) {
	delete(d.dests, dest)
	d.stateful.Delete(dest)
}

// dropIdle drops every entry that holds nothing at epoch ep and Unix
// millisecond ms (d.mu is held; the caller updates d.n).
func (d *Decider) dropIdle(ep, ms int64) {
	for dest, h := range d.dests {
		if h.droppable(ep, ms) {
			d.forget(dest)
		}
	}
}

// shrink makes room: it drops the entries that hold nothing, and if that is
// not an eighth of the cap, evicts the least recently used entries without
// a probe in flight down to seven eighths of it, so a flood of new
// destinations costs O(log n) per insert. d.mu is held.
func (d *Decider) shrink(ep, ms int64) {
	d.dropIdle(ep, ms)
	keep := d.max - max(d.max/8, 1)
	if len(d.dests) > keep {
		type aged struct {
			dest    string
			touched uint64
		}
		var old []aged
		for dest, h := range d.dests {
			if !h.probing {
				old = append(old, aged{dest, h.touched})
			}
		}
		slices.SortFunc(old, func(a, b aged) int { return cmp.Compare(a.touched, b.touched) })
		for _, o := range old[:min(len(old), len(d.dests)-keep)] {
			d.forget(o.dest)
			d.stats.Evicted++
		}
	}
	d.n.Store(int64(len(d.dests)))
}

// Sweep drops the state of every destination that holds nothing any more
// at now: no failure count, no probe in flight or started in now's
// sub-window, no pause. An entry is otherwise dropped only when its
// destination is seen again (or room is made at the cap), and one left
// behind, say by a probe that completed and a destination never called
// again, would stay counted in Stats.Tracked and keep Quiet false for
// good. A node calls it once a second.
func (d *Decider) Sweep(now time.Time) {
	if d.n.Load() == 0 {
		return
	}
	ep, ms := d.grid.Epoch(now), now.UnixMilli()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dropIdle(ep, ms)
	d.n.Store(int64(len(d.dests)))
}

// Failing reports whether the detector treats dest as failing: at least
// FailingAfter consecutive timed-out or failed attempts and no completion
// since. (An estimate's own Failing is the view's verdict; Decide and
// Explain combine both.)
func (d *Decider) Failing(dest string) bool {
	if d.n.Load() == 0 || !d.hasState(dest) {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.dests[dest]
	return ok && h.fails >= FailingAfter
}

// Detected returns the destinations the detector treats as failing, sorted.
func (d *Decider) Detected() []string {
	if d.n.Load() == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for dest, h := range d.dests {
		if h.fails >= FailingAfter {
			out = append(out, dest)
		}
	}
	slices.Sort(out)
	return out
}

// Stats returns the Decider's counters and the size of its state.
func (d *Decider) Stats() DeciderStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.stats
	s.Tracked = len(d.dests)
	for _, h := range d.dests {
		if h.fails >= FailingAfter {
			s.Failing++
		}
		if h.probing {
			s.ProbesInFlight++
		}
	}
	return s
}

// String describes the Decider's configuration, for logs.
func (d *Decider) String() string {
	return fmt.Sprintf("timeout.Decider{backoff %v, quantile %v, safety %v, sub-window %v}",
		d.cfg.Backoff, d.cfg.Quantile, d.cfg.SafetyFactor, d.grid.SubWindow())
}

// durationMillis converts a duration to whole milliseconds, truncated;
// negative gives 0.
func durationMillis(t time.Duration) uint64 {
	if t <= 0 {
		return 0
	}
	return uint64(t / time.Millisecond)
}

// rule is the stateless part of the failure-aware decision for one
// attempt: the per-destination timeouts, the verdict over a request's
// destinations, and each destination's probe.
type rule struct {
	c                        Config
	attempt                  int
	floor, ceiling, fallback uint64
	k                        uint
}

func (r *rule) init() {
	r.floor, r.ceiling, r.k = millis(r.c.Backoff.Min), millis(r.c.Backoff.Max), exponent(r.attempt)
	r.fallback = fallbackMillis(r.floor, r.ceiling, r.k)
}

// own returns a destination's own timeout: the fallback when it is failing
// or has no trusted value, else max(fallback, clamp(v)).
func (r *rule) own(in *tracker.DecisionInput) uint64 {
	v, ok := in.Value()
	if !ok {
		return r.fallback
	}
	return max(r.fallback, clampedMillis(v, r.k, r.c.SafetyFactor, r.floor, r.ceiling))
}

// capped reports whether in's decision value is below its quantile (v = M <
// Q: too many attempts timed out for the quantile to be known).
func capped(in *tracker.DecisionInput) bool {
	v, ok := in.Value()
	return ok && v < in.QuantileMillis
}

// probeDue reports whether the rule offers a probe of in at all: it is
// trusted, and failing or capped (probe's first condition, cheap enough
// to inline before the call).
func probeDue(in *tracker.DecisionInput) bool {
	return in.Failing && in.Source != tracker.SourceNone || capped(in)
}

// probe returns in's probe timeout when the rule makes a probe of it due
// for an attempt whose timeout is timeoutMs: it is trusted, v < Q or it is
// failing (probeDue), and today's rule on Q gives more than timeoutMs.
func (r *rule) probe(in *tracker.DecisionInput, timeoutMs uint64) (uint64, bool) {
	if !probeDue(in) {
		return 0, false
	}
	pt := max(r.fallback, clampedMillis(in.QuantileMillis, r.k, r.c.SafetyFactor, r.floor, r.ceiling))
	return pt, pt > timeoutMs
}

// verdict decides over es, the destinations' inputs (need of them must answer) without the probe
// bookkeeping: the timeout as Explain or ExplainQuorum on the own
// timeouts, the reason, and the probe the rule offers.
func (r *rule) verdict(es []tracker.DecisionInput, need int) Verdict {
	var v Verdict
	r.decide(&v, es, need)
	return v
}

// decide is verdict into *v. Each destination's own timeout is computed
// once, and *v is written once, at the end: this is the path of every
// embedded decision.
func (r *rule) decide(v *Verdict, es []tracker.DecisionInput, need int) {
	ms, by := r.fallback, -1
	switch {
	case len(es) == 0:
	case need >= len(es):
		for i := range es {
			if t := r.own(&es[i]); t > ms {
				ms, by = t, i
			}
		}
	default:
		ms, by = r.quorum(es, need)
	}
	reason, probe, pt := ReasonEstimate, -1, uint64(0)
	if by >= 0 {
		if capped(&es[by]) {
			reason = ReasonCapped
		}
		if probeDue(&es[by]) {
			if p, ok := r.probe(&es[by], ms); ok {
				probe, pt = by, p
			}
		}
	} else {
		reason = ReasonFallback
		for i := range es {
			if es[i].Failing {
				reason = ReasonFailing
				break
			}
		}
		for i := range es {
			if !probeDue(&es[i]) {
				continue
			}
			if p, ok := r.probe(&es[i], ms); ok {
				probe, pt = i, p
				break
			}
		}
	}
	*v = Verdict{Decision: Decision{Timeout: fromMillis(ms), DecidedBy: by, Fallback: by < 0},
		Reason: reason, Probe: probe, ProbeTimeout: fromMillis(pt)}
}

// quorum returns the need-th smallest own timeout of es (need <
// len(es)) and the first destination whose own timeout it is, -1 when it
// is the fallback; apart from decide, whose frame stays small for the
// common case.
func (r *rule) quorum(es []tracker.DecisionInput, need int) (uint64, int) {
	var a, b [quorumStack]uint64
	own, sorted := buffers(len(es), &a, &b)
	for i := range es {
		own[i] = r.own(&es[i])
	}
	copy(sorted, own)
	slices.Sort(sorted)
	ms := sorted[max(need, 1)-1]
	if ms == r.fallback {
		return ms, -1
	}
	return ms, slices.Index(own, ms)
}

// The bits of a memo's first word (Decider.Memo): the verdict's timeout
// in milliseconds below memoFlags, then its reason, whether the
// destination decided (not the fallback), the input's source and guard
// when it did, its failing state, and memoOK on every memo made.
const (
	memoFlags   = 56
	memoMs      = 1<<memoFlags - 1
	memoDecides = 1 << (memoFlags + 2)
	memoSource  = memoFlags + 3
	memoGuarded = 1 << (memoFlags + 5)
	memoFailing = 1 << (memoFlags + 6)
	memoOK      = 1 << 63
)

// Memo implements tracker.Memoizer: for slot k, attempt k+1's verdict on
// in's destination alone by the rule (what verdict decides for it while
// the Decider holds no destination's state), packed in two words: the
// timeout, reason and whether the destination decided, with in's source
// and guard when it decided (else SourceNone and no guard, what a verdict
// the fallback decided reports: QuickVerdict reads them without a branch)
// and its failing state, and the probe timeout (0: none). NewDecider
// registers it with a *tracker.Fleet source, so that the Fleet keeps each
// destination's memos with its published decision input, and Quick
// combines them into ExplainTo's verdict. A verdict that does not fit is
// no memo (Memo{}).
func (d *Decider) Memo(in *tracker.DecisionInput, slot int) tracker.Memo {
	if slot < 0 || slot >= len(d.rules) {
		return tracker.Memo{}
	}
	es := [1]tracker.DecisionInput{*in}
	var v Verdict
	d.rules[slot].decide(&v, es[:], 1)
	ms := millis(v.Timeout)
	if ms > memoMs || uint64(in.Source) > 3 {
		return tracker.Memo{}
	}
	a := ms | uint64(v.Reason&3)<<memoFlags | memoOK
	if v.DecidedBy == 0 {
		a |= memoDecides | uint64(in.Source)<<memoSource
		if in.Guarded {
			a |= memoGuarded
		}
	}
	if in.Failing {
		a |= memoFailing
	}
	return tracker.Memo{A: a, B: millis(v.ProbeTimeout)}
}

// Quiet reports whether the Decider holds no destination's state (no
// failure count, probe or pause): its detector and probe bookkeeping then
// change no verdict, and Quick gives ExplainTo's.
func (d *Decider) Quiet() bool { return d.n.Load() == 0 }

// hasState reports whether dest has state (its detector and probe
// bookkeeping could change its verdict), without the lock: for Quick
// while some destination has state, out of line so that the quiet path
// stays one atomic load.
//
//go:noinline
func (d *Decider) hasState(dest string) bool {
	_, has := d.stateful.Load(dest)
	return has
}

// Quick returns the verdict ExplainTo gives for a request that needs
// every one of dests (1 to 4 of them) for attempt (1 to
// tracker.MemoSlots) at now, from the rule's memos the Decider's fleet
// keeps with its published decision inputs (Memo, tracker.Fleet.Memos),
// and true; or false, and the caller decides through ExplainTo: when some
// destination's memo is not published or no longer holds, the Decider
// holds state for one of dests (its detector or probe bookkeeping could
// change the verdict; state of other destinations does not matter), or
// some destination is failing. The memos combine
// as the rule does: the first destination with the largest own timeout
// above the fallback decides, with its own verdict's reason and probe;
// when none is above, the fallback decides, for ReasonFallback (none is
// failing), with the first probe any destination's verdict offers (each
// was made at the fallback too).
func (d *Decider) Quick(dests []string, attempt int, now time.Time) (QuickVerdict, bool) {
	if len(dests) == 1 {
		return d.Quick1(dests[0], attempt, now)
	}
	var m [stackInputs]tracker.Memo
	if d.memo == nil || len(dests) == 0 || len(dests) > len(m) ||
		!d.fleet.Memos(m[:len(dests)], dests, attempt-1, now, d.memo) {
		return QuickVerdict{}, false
	}
	if d.n.Load() != 0 {
		for _, dest := range dests {
			if d.hasState(dest) {
				return QuickVerdict{}, false
			}
		}
	}
	return combine(m[:len(dests)])
}

// Quick1 is Quick for the one destination dest: its memo alone is the
// verdict (combine of one memo), read with tracker.Fleet.Memo.
func (d *Decider) Quick1(dest string, attempt int, now time.Time) (QuickVerdict, bool) {
	// Fleet.Memo refuses a nil registration (the Decider's fleet is then
	// possibly nil).
	m, ok := d.fleet.Memo(dest, attempt-1, now, d.memo)
	if !ok || m.A&(memoOK|memoFailing) != memoOK || d.n.Load() != 0 && d.hasState(dest) {
		return QuickVerdict{}, false
	}
	return QuickVerdict{a: m.A, probe: m.B, by: int(m.A/memoDecides&1) - 1}, true
}

// combine is Quick's verdict from the memos m of its destinations (at
// least one), false when one is no memo or failing.
func combine(m []tracker.Memo) (QuickVerdict, bool) {
	k := -1
	var best uint64
	for i := range m {
		a := m[i].A
		if a&(memoOK|memoFailing) != memoOK {
			return QuickVerdict{}, false
		}
		if a&memoDecides != 0 && (k < 0 || a&memoMs > best) {
			k, best = i, a&memoMs
		}
	}
	if k >= 0 {
		return QuickVerdict{a: m[k].A, probe: m[k].B, by: k}, true
	}
	for i := range m {
		if m[i].B != 0 {
			return QuickVerdict{a: m[0].A, probe: m[i].B, by: -1}, true
		}
	}
	return QuickVerdict{a: m[0].A, by: -1}, true
}

// A QuickVerdict is Quick's verdict, packed: the memo of the deciding
// destination (or of the first one, holding the fallback, when the
// fallback decided, whose reason, source and guard are then the
// fallback's: Decider.Memo), the probe timeout, and the deciding
// destination's index.
type QuickVerdict struct {
	a, probe uint64
	by       int
}

// Timeout is the verdict's Timeout.
func (q QuickVerdict) Timeout() time.Duration { return fromMillis(q.a & memoMs) }

// TimeoutMillis is the verdict's Timeout in whole milliseconds.
func (q QuickVerdict) TimeoutMillis() uint64 { return q.a & memoMs }

// DecidedBy is the verdict's DecidedBy: the deciding destination's index,
// -1 when the fallback decided (Fallback).
func (q QuickVerdict) DecidedBy() int { return q.by }

// Reason is the verdict's Reason: ReasonFallback when the fallback
// decided, else the deciding destination's ReasonEstimate or
// ReasonCapped.
func (q QuickVerdict) Reason() Reason { return Reason(q.a >> memoFlags & 3) }

// Source is the deciding destination's decision input's Source,
// tracker.SourceNone when the fallback decided.
func (q QuickVerdict) Source() tracker.Source { return tracker.Source(q.a >> memoSource & 3) }

// Guarded is the deciding destination's decision input's Guarded, false
// when the fallback decided.
func (q QuickVerdict) Guarded() bool { return q.a&memoGuarded != 0 }

// ProbeTimeout is the verdict's ProbeTimeout: 0 when no probe is due.
func (q QuickVerdict) ProbeTimeout() time.Duration { return fromMillis(q.probe) }
