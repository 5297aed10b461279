package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/adaptivetimeout/adaptivetimeout/internal/netfail"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// Errors of the estimate and timeout API.
var (
	// ErrTimeout is the cause of the context Do gives fn when the adaptive
	// timeout expires, and is wrapped by Do's error then:
	// errors.Is(err, ErrTimeout) tells the node's timeout from the caller's
	// own cancellation or deadline.
	ErrTimeout = errors.New("node: adaptive timeout expired")
	// ErrQuantile reports a quantile outside (0, 1]: it is
	// tracker.ErrQuantile (one error per meaning), wrapped as "node:
	// quantile must be in (0, 1], got <q>".
	ErrQuantile = tracker.ErrQuantile
	// ErrNoDestinations reports a timeout asked for no destination.
	ErrNoDestinations = errors.New("node: no destinations")
	// ErrAttempt reports an attempt number below 1.
	ErrAttempt = errors.New("node: attempt must be >= 1")
	// ErrNeed reports a quorum need outside 1..len(dests).
	ErrNeed = errors.New("node: need must be in 1..number of destinations")
)

// Record records one request's latency to dest, now: a completed attempt
// (it also resets the failure detector's count for dest). Latencies are
// kept in whole milliseconds (truncated; negative counts as 0; above the
// maximum trackable latency clamped). A dest that could not travel to peers
// (empty, over 256 bytes or not UTF-8) is dropped and counted in
// atnode_records_rejected_total.
//
// It records into the local tracker (the decider's) itself and hands the
// decider only the tag that record returned (RecordedKnown, inlined):
// timeout.Decider.RecordKnown around the same record was a call frame and
// its spills of every record.
func (n *Node) Record(dest string, latency time.Duration) {
	ms, now := uint64(max(latency, 0)/time.Millisecond), n.clock()
	if tag, held := n.local.RecordHeldMillis(dest, ms, now); held {
		n.dec.RecordedKnown(dest, tag, now)
	} else {
		n.learnNew(dest, timeout.Completed, ms, now)
	}
}

// RecordSince records the time from start to now as dest's latency and
// returns it (0 if start is in the future), untruncated.
func (n *Node) RecordSince(dest string, start time.Time) time.Duration {
	now := n.clock()
	d := max(since(now, start), 0)
	ms := uint64(d / time.Millisecond)
	if tag, held := n.local.RecordHeldMillis(dest, ms, now); held {
		n.dec.RecordedKnown(dest, tag, now)
	} else {
		n.learnNew(dest, timeout.Completed, ms, now)
	}
	return d
}

// learn hands one attempt's outcome to the decider (which records it and
// counts it for the failure detector), or counts a dest that cannot be
// recorded. A completion of a destination the local tracker holds takes
// one lookup and no check of the name: only learn and Observe write the
// local tracker, and both check a name before it is first recorded.
// Record and RecordSince take that path themselves, a frame fewer per
// record, and call learnNew for the rest.
func (n *Node) learn(dest string, o timeout.Outcome, ms uint64, now time.Time) {
	if o != timeout.Completed || !n.dec.RecordKnown(dest, ms, now) {
		n.learnNew(dest, o, ms, now)
	}
}

// learnNew is learn for an outcome that is not a completion of a
// destination the local tracker holds: the name is checked first.
func (n *Node) learnNew(dest string, o timeout.Outcome, ms uint64, now time.Time) {
	if !validDest(dest) {
		n.met.rejected.Inc()
		return
	}
	n.dec.Record(dest, o, ms, now)
}

// validDest reports whether dest can be recorded and gossiped. Names are
// mostly ASCII: it scans them byte by byte inline and hands only the rest
// from the first non-ASCII byte to utf8.ValidString (a call that cost a
// plain Record ~10 %).
func validDest(dest string) bool {
	if dest == "" || len(dest) > maxDestLen {
		return false
	}
	for i := 0; i < len(dest); i++ {
		if dest[i] >= utf8.RuneSelf {
			return utf8.ValidString(dest[i:])
		}
	}
	return true
}

// Estimate returns the peer-count-aware estimate of quantile q of dest's
// latency now, field by field as GET /v1/estimate: the fleet view, the
// local view and the decision input of both (tracker.Estimate;
// docs/design.md, Fleet view and Failure-aware views). Its Failing
// is true when this node's decision treats dest as failing: its deciding
// view is failing, or the failure detector is (timeout.FailingAfter
// consecutive timed-out or failed attempts of this node). q == 0 means the
// configured quantile; otherwise q must be in (0, 1].
func (n *Node) Estimate(dest string, q float64) (tracker.Estimate, error) {
	if q == 0 {
		q = n.cfg.Timeout.Quantile
	}
	if !(q > 0 && q <= 1) {
		return tracker.Estimate{Dest: dest, Quantile: q}, fmt.Errorf("node: %w, got %v", ErrQuantile, q)
	}
	now := n.clock()
	n.poll(now)
	e, err := n.fleet.Estimate(dest, q, now)
	if err == nil && !e.Failing {
		e.Failing = n.dec.Failing(dest)
	}
	return e, err
}

// Decision is a timeout with its reason, as GET /v1/timeout answers it.
type Decision struct {
	// Timeout is the timeout to use for this attempt.
	Timeout time.Duration
	// Attempt is the attempt number it is for (1 = the first try).
	Attempt int
	// Need is how many of the destinations must answer (all for Timeout).
	Need int
	// DecidedBy is the destination whose value set the timeout, "" when the
	// exponential fallback did.
	DecidedBy string
	// Source is DecidedBy's estimate source (tracker.Estimate.Source, as
	// GET /v1/estimate reports it for that destination): SourceFleet or
	// SourceLocal; SourceNone whenever the fallback decided (Fallback),
	// whatever the requested destinations' own sources (a destination
	// whose trusted value is below the floor does not decide). It is the
	// same with and without the local guard; see Guarded.
	// atnode_timeout_chosen_seconds{source} has the same meaning.
	Source tracker.Source
	// Guarded is true when this node's local view decided for DecidedBy in
	// place of the fleet's (tracker.Decision.Guarded): Source is
	// SourceFleet, but the local guard applied (the local value exceeded
	// the fleet's by more than 20 %) or the fleet view is failing while the
	// local one is not. False when the fallback decided.
	Guarded bool
	// Fallback is true when no destination's value exceeded the
	// exponential fallback (timeout.Decision.Fallback).
	Fallback bool
	// Reason says what set Timeout: timeout.ReasonFailing when the
	// fallback decided and some requested destination is failing,
	// ReasonFallback when it decided and none is, ReasonCapped when the
	// deciding destination's value was its highest completed latency,
	// below its quantile, else ReasonEstimate.
	Reason timeout.Reason
	// Failing lists the requested destinations this node treats as failing
	// (their timeout is the fallback), in request order; nil when none.
	Failing []string
	// ProbeTimeout is the probe timeout when a probe is due for the
	// deciding destination (or, when the fallback decided, for the first
	// requested destination one is due for), else 0. It is advisory:
	// answering does not reserve the probe.
	ProbeTimeout time.Duration
}

// MarshalJSON writes {"timeout_ms","attempt","need","decided_by","source",
// "guarded","fallback","reason","failing","probe_ms"} (GET /v1/timeout);
// timeout_ms and probe_ms are whole milliseconds, failing is [] when none
// is, and probe_ms null when no probe is due.
func (d Decision) MarshalJSON() ([]byte, error) { return d.appendJSON(nil), nil }

// appendJSON appends MarshalJSON's object to b by hand: the bytes
// json.Marshal wrote for it, without reflection.
func (d Decision) appendJSON(b []byte) []byte {
	b = append(b, `{"timeout_ms":`...)
	b = strconv.AppendInt(b, d.Timeout.Milliseconds(), 10)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(d.Attempt), 10)
	b = append(b, `,"need":`...)
	b = strconv.AppendInt(b, int64(d.Need), 10)
	b = append(b, `,"decided_by":`...)
	b = appendJSONString(b, d.DecidedBy)
	b = append(b, `,"source":"`...)
	b = append(b, d.Source.String()...)
	b = append(b, `","guarded":`...)
	b = strconv.AppendBool(b, d.Guarded)
	b = append(b, `,"fallback":`...)
	b = strconv.AppendBool(b, d.Fallback)
	b = append(b, `,"reason":"`...)
	b = append(b, d.Reason.String()...)
	b = append(b, `","failing":[`...)
	for i, f := range d.Failing {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, f)
	}
	b = append(b, `],"probe_ms":`...)
	if d.ProbeTimeout > 0 {
		b = strconv.AppendInt(b, d.ProbeTimeout.Milliseconds(), 10)
	} else {
		b = append(b, "null"...)
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string, as json.Marshal writes it
// (HTML characters escaped): printable ASCII but '"', '\', '<', '>' and
// '&' as is, anything else through json.Marshal.
func appendJSONString(b []byte, s string) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// Timeout returns the timeout of a request that needs every one of dests
// to answer, for attempt (1 = the first try): the failure-aware rule of
// timeout.Decider on each destination's decision value from the fleet view
// (its precedence and local guard included) and this node's failure
// detector (docs/design.md, Failure-aware views). The result names the deciding destination, its estimate
// source, whether the local view decided for it, the reason, the
// destinations treated as failing and the probe timeout when a probe is
// due.
func (n *Node) Timeout(dests []string, attempt int) (d Decision, err error) {
	if len(dests) == 0 || attempt < 1 {
		return n.TimeoutQuorum(dests, len(dests), attempt)
	}
	now := n.clock()
	n.poll(now)
	// quick, by hand: on a hit, the decider's Quick1 or Quick is the one
	// call.
	var v timeout.QuickVerdict
	var ok bool
	if len(dests) == 1 {
		v, ok = n.dec.Quick1(dests[0], attempt, now)
	} else {
		v, ok = n.dec.Quick(dests, attempt, now)
	}
	if !ok {
		n.decideIns(&d, dests, len(dests), attempt, now)
		n.met.observeOf(&d)
		return d, nil
	}
	// fromQuick and metrics.observeQuick written out, the histogram's
	// first slot inline (counted): as a function of its own, quickDecision,
	// they cost Timeout a frame and the copies of its arguments.
	d.Timeout, d.Attempt, d.Need, d.Reason, d.ProbeTimeout = v.Timeout(), attempt, len(dests), v.Reason(), v.ProbeTimeout()
	m := n.met
	if s, ms := v.Source(), v.TimeoutMillis(); !m.chosen.counted(s, ms) {
		m.chosen.observeProbing(s, ms)
	}
	if k := v.DecidedBy(); k >= 0 {
		d.DecidedBy, d.Source, d.Guarded = dests[k], v.Source(), v.Guarded()
		if d.Guarded {
			m.guarded.Inc()
		}
	} else {
		d.Fallback = true
		m.fallbacks.Inc()
	}
	return d, nil
}

// quick sets the zero *out to the decision of a request that needs every one of
// dests for attempt at now from the rule's memos kept with the
// destinations' published decision inputs (timeout.Decider.Quick), and
// reports whether it could (up to 4 destinations, attempts up to
// tracker.MemoSlots, every input published and holding, the decider
// without destination state, none failing: a Decision's Failing list is
// decideIn's). The answer is decideIns': the memos are the rule's
// verdicts on the inputs it reads, combined as the rule combines them.
func (n *Node) quick(out *Decision, dests []string, attempt int, now time.Time) bool {
	v, ok := n.dec.Quick(dests, attempt, now)
	if ok {
		out.fromQuick(v, dests, attempt)
	}
	return ok
}

// fromQuick sets the zero *d to the decision of v, the quick verdict of a
// request that needs every one of dests, for attempt. Field by field: a
// composite literal was built aside and copied, a fifth of Timeout.
func (d *Decision) fromQuick(v timeout.QuickVerdict, dests []string, attempt int) {
	d.Timeout, d.Attempt, d.Need, d.Reason, d.ProbeTimeout = v.Timeout(), attempt, len(dests), v.Reason(), v.ProbeTimeout()
	if k := v.DecidedBy(); k >= 0 {
		d.DecidedBy, d.Source, d.Guarded = dests[k], v.Source(), v.Guarded()
	} else {
		d.Fallback = true
	}
}

// TimeoutQuorum returns the timeout of a request that needs need of dests
// to answer (a write to 2 of 3 replicas must not wait for the slowest):
// the need-th smallest of the destinations' own timeouts, as
// timeout.ExplainQuorum, by the rule Timeout uses. need must be in
// 1..len(dests).
func (n *Node) TimeoutQuorum(dests []string, need, attempt int) (d Decision, err error) {
	switch {
	case len(dests) == 0:
		return Decision{}, ErrNoDestinations
	case attempt < 1:
		return Decision{}, fmt.Errorf("%w, got %d", ErrAttempt, attempt)
	case need < 1 || need > len(dests):
		return Decision{}, fmt.Errorf("%w (%d), got %d", ErrNeed, len(dests), need)
	}
	now := n.clock()
	n.poll(now)
	if need != len(dests) || !n.quick(&d, dests, attempt, now) {
		n.decideIns(&d, dests, need, attempt, now)
	}
	n.met.observeOf(&d)
	return d, nil
}

// decide is the decision of DoHedged's attempts and the history's
// samples: the full rule over each destination's decision input
// (tracker.DecisionInput, read from the estimate cache), which Timeout,
// TimeoutQuorum, Decide and Do also take (decideIns) when their memoized
// verdicts (timeout.Decider.Quick) do not answer.
func (n *Node) decide(dests []string, need, attempt int, now time.Time) Decision {
	var d Decision
	n.decideTo(&d, dests, need, attempt, now)
	return d
}

// decideTo is decide into *out (the hot paths' results go through
// pointers: a Decision is large). The inputs of up to stackDests
// destinations stay on the stack.
func (n *Node) decideTo(out *Decision, dests []string, need, attempt int, now time.Time) {
	n.poll(now)
	n.decideIns(out, dests, need, attempt, now)
}

// decideIns is decideTo once the protocol is polled: the rule over the
// destinations' decision inputs, read into a buffer on the stack for up
// to stackDests of them.
func (n *Node) decideIns(out *Decision, dests []string, need, attempt int, now time.Time) {
	switch {
	case len(dests) == 1: // Do, Decide: the smallest buffer to zero
		var in [1]tracker.DecisionInput
		n.decideIn(out, dests, need, attempt, now, in[:])
		return
	case len(dests) <= stackDests:
		var in [stackDests]tracker.DecisionInput
		n.decideIn(out, dests, need, attempt, now, in[:])
		return
	}
	buf := inputBufs.Get().(*inputBuf)
	defer inputBufs.Put(buf)
	switch {
	case len(dests) <= len(buf.in):
	case len(dests) <= maxTimeoutDests:
		buf.in = make([]tracker.DecisionInput, len(dests))
	default: // the Go API has no limit; the pool keeps small buffers only
		buf = &inputBuf{in: make([]tracker.DecisionInput, len(dests))}
	}
	n.decideIn(out, dests, need, attempt, now, buf.in)
}

// decideIn is decideTo with in (at least len(dests) long) for the inputs.
func (n *Node) decideIn(out *Decision, dests []string, need, attempt int, now time.Time, in []tracker.DecisionInput) {
	var v timeout.Verdict
	n.dec.ExplainTo(&v, dests, need, attempt, now, in)
	*out = Decision{Timeout: v.Timeout, Attempt: attempt, Need: need, Fallback: v.Fallback, Reason: v.Reason, ProbeTimeout: v.ProbeTimeout}
	if v.DecidedBy >= 0 {
		e := &in[v.DecidedBy]
		out.DecidedBy, out.Source, out.Guarded = dests[v.DecidedBy], e.Source, e.Guarded
	}
	for i := range dests {
		if in[i].Failing {
			out.Failing = append(out.Failing, dests[i])
		}
	}
}

// Decide returns the timeout of attempt to dest at now, implementing
// timeout.Policy over the fleet view: the decision of Timeout for dest
// alone, with Attempt.ProbeTimeout set when a probe is due. Counted in
// atnode_timeout_chosen_seconds like Timeout.
func (n *Node) Decide(dest string, attempt int, now time.Time) timeout.Attempt {
	var a timeout.Attempt
	n.attempt(&a, dest, max(attempt, 1), now)
	return a
}

// attempt sets the zero *a to Decide's attempt for attempt >= 1: from the
// quick verdict straight into the Attempt when there is one
// (quickAttempt), else through the Decision (attemptDecided); Do takes
// the same steps by hand. It reports whether the quick verdict
// decided, which proves dest valid: a memo is published only with a
// destination the local tracker holds, and only names validDest accepts
// are recorded there (learn, observe).
func (n *Node) attempt(a *timeout.Attempt, dest string, attempt int, now time.Time) bool {
	n.poll(now)
	if v, ok := n.dec.Quick1(dest, attempt, now); ok {
		n.quickAttempt(a, v, dest, attempt)
		return true
	}
	n.attemptDecided(a, dest, attempt, now)
	return false
}

// quickAttempt sets the zero *a to the attempt of v, dest's quick verdict for
// attempt, and counts it.
func (n *Node) quickAttempt(a *timeout.Attempt, v timeout.QuickVerdict, dest string, attempt int) {
	n.met.observeQuick(v)
	a.Dest, a.Attempt, a.Timeout, a.Reason, a.ProbeTimeout = dest, attempt, v.Timeout(), v.Reason(), v.ProbeTimeout()
}

// attemptDecided is attempt when the quick verdict did not decide: through
// the Decision.
func (n *Node) attemptDecided(a *timeout.Attempt, dest string, attempt int, now time.Time) {
	dests := [1]string{dest}
	var d Decision
	n.decideIns(&d, dests[:], 1, attempt, now)
	n.met.observeOf(&d)
	*a = attemptAt(dest, &d)
}

// attemptOf is a decision for dest alone as a timeout.Attempt.
func attemptOf(dest string, d Decision) timeout.Attempt { return attemptAt(dest, &d) }

// attemptAt is attemptOf through a pointer, for the hot paths.
func attemptAt(dest string, d *Decision) timeout.Attempt {
	return timeout.Attempt{Dest: dest, Attempt: d.Attempt, Timeout: d.Timeout, Reason: d.Reason,
		Failing: len(d.Failing) > 0, ProbeTimeout: d.ProbeTimeout}
}

// Probe reserves the probe Decide offered for a's attempt, which reached
// its timeout at now (timeout.Policy): at most one probe of a destination
// in flight on this node, and one started per sub-window. Counted in
// atnode_probes_started_total.
func (n *Node) Probe(a *timeout.Attempt, now time.Time) bool {
	if !validDest(a.Dest) {
		return false
	}
	return n.dec.Probe(a, now)
}

// Observe records how a's attempt ended at now, elapsed after its start
// (timeout.Policy): completed at elapsed, timed out at its timeout (a probe
// at its probe timeout) as censored, failed not as a sample, superseded
// censored at elapsed, canceled not at all; timed-out and failed attempts
// count for the failure detector, a completion resets it. Counted in
// atnode_outcomes_total (and atnode_probes_finished_total for a probe).
func (n *Node) Observe(a timeout.Attempt, o timeout.Outcome, elapsed time.Duration, now time.Time) {
	if n.observe(&a, o, elapsed, now) {
		n.met.outcome(o)
	}
}

// learnKnown is observe for an attempt that is no probe, of a
// destination whose name is known to be valid: what Observe records
// (Completed at elapsed, TimedOut censored at its timeout, ...) through
// the decider's record path for one outcome (timeout.Decider.RecordKnown,
// then Record), without the name's check or the Attempt's copy.
func (n *Node) learnKnown(a *timeout.Attempt, o timeout.Outcome, elapsed time.Duration, now time.Time) {
	d := elapsed
	if o == timeout.TimedOut {
		d = a.Timeout
	}
	ms := uint64(max(d, 0) / time.Millisecond)
	if o != timeout.Completed || !n.dec.RecordKnown(a.Dest, ms, now) {
		n.dec.Record(a.Dest, o, ms, now)
	}
}

// observe is Observe through a pointer, for Do's path, but for the
// outcome's count: it reports whether a.Dest was valid, the outcome
// learned (Do counts it with its result: metrics.doEnd).
func (n *Node) observe(a *timeout.Attempt, o timeout.Outcome, elapsed time.Duration, now time.Time) bool {
	if !validDest(a.Dest) {
		n.met.rejected.Inc()
		return false
	}
	n.dec.Observe(*a, o, elapsed, now)
	return true
}

// Do runs fn under the adaptive timeout of dest for attempt (the decision
// of Decide) and learns from how it ended. fn gets a context that ends at
// the timeout or when ctx ends, whichever is first: Do never extends a
// deadline ctx already has.
//
// Caller probes: when a probe of dest is due (Decision.ProbeTimeout) and
// ctx's deadline, if any, leaves room for it, fn's context carries the
// probe's deadline; if fn is still running when the timeout comes and the
// probe can be reserved (timeout.Policy.Probe), Do keeps waiting until the
// probe timeout, and the context then ends there, else at the timeout as
// usual. Either way its cause is ErrTimeout.
//
// What is learned: when fn returns nil, a completion at the time fn took;
// when the adaptive timeout expired first, a timeout, recorded at its
// timeout (a probe at its probe timeout; censoring: recording nothing
// would hide the tail exactly when timeouts are too tight); when ctx ended
// first (the caller's cancellation or deadline, an enclosing Do's or
// DoHedged's timeout included when Do runs inside its fn), nothing; when
// fn returned an error of its own before either end, what Config.Classify
// says of it (default ClassifyError: the network's errors of a failed
// connection are timeout.Failed, counted for the failure detector and no
// latency sample; any other error a completion at the time fn took).
// Which came first is decided by when fn returned: an error fn returned
// before our timeout's deadline, or the caller's, is its own, though the
// deadline may have passed by the time Do looks at the context (for a
// caller probe: by whether its timer had fired when Do, fn returned,
// stopped it), and an error fn returns once our timeout ended its context
// is a timeout, whether or not it wraps the context's error (a client may
// return one of its own for a deadline). Timed-out and failed attempts
// count for the failure detector; a completion resets it.
//
// Do returns fn's error. When the adaptive timeout expired first and fn
// failed, the error also matches ErrTimeout (errors.Is), which the
// caller's own cancellation never does; the context fn saw reports
// ErrTimeout as its context.Cause. Do returns an error without running fn
// only if attempt < 1.
func (n *Node) Do(ctx context.Context, dest string, attempt int, fn func(ctx context.Context) error) error {
	if attempt < 1 {
		return fmt.Errorf("%w, got %d", ErrAttempt, attempt)
	}
	start := n.clock()
	// attempt, by hand: a frame fewer on the quick path.
	n.poll(start)
	var a timeout.Attempt
	v, known := n.dec.Quick1(dest, attempt, start)
	if known {
		n.quickAttempt(&a, v, dest, attempt)
	} else {
		n.attemptDecided(&a, dest, attempt, start)
	}
	if a.ProbeTimeout > a.Timeout && probeRoom(ctx, a.ProbeTimeout) {
		return n.doProbing(ctx, a, start, fn)
	}
	cctx, cancel := context.WithTimeoutCause(ctx, a.Timeout, ErrTimeout)
	defer cancel()
	ferr := fn(cctx)
	if ferr == nil && known {
		n.completed(&a, start)
		return nil
	}
	return n.done(ctx, cctx, &a, start, ferr, known, true)
}

// completed is done for Do's common end, fn's success for a destination
// whose quick verdict decided (no probe then): learnKnown's completion,
// without done's classification of the end or its contexts passed on.
func (n *Node) completed(a *timeout.Attempt, start time.Time) {
	now := n.clock()
	ms := uint64(max(since(now, start), 0) / time.Millisecond)
	// RecordKnown's body, as in Record: a frame fewer.
	if tag, held := n.local.RecordHeldMillis(a.Dest, ms, now); held {
		n.dec.RecordedKnown(a.Dest, tag, now)
	} else {
		n.dec.Record(a.Dest, timeout.Completed, ms, now)
	}
	n.met.doEnd(doOK, timeout.Completed)
}

// probeRoom reports whether ctx's deadline, if any, leaves room for a probe
// of limit: a probe never outlives the caller's deadline.
func probeRoom(ctx context.Context, limit time.Duration) bool {
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl) >= limit
}

// doProbing runs fn under a context that ends at the probe timeout, or at
// the timeout unless the probe is reserved when the timeout comes.
func (n *Node) doProbing(ctx context.Context, a timeout.Attempt, start time.Time, fn func(ctx context.Context) error) error {
	pctx, pcancel := context.WithTimeoutCause(ctx, a.ProbeTimeout, ErrTimeout)
	defer pcancel()
	cctx, cancel := context.WithCancelCause(pctx)
	defer cancel(nil)
	reached := make(chan struct{})
	p := a
	timer := time.AfterFunc(a.Timeout, func() {
		defer close(reached)
		if ctx.Err() == nil && n.Probe(&p, n.clock()) {
			return // a caller probe: fn goes on until the probe timeout
		}
		cancel(ErrTimeout)
	})
	ferr := fn(cctx)
	if !timer.Stop() {
		<-reached // p is settled
		a = p
	}
	return n.done(ctx, cctx, &a, start, ferr, false, false)
}

// done classifies how Do's attempt ended, learns from it, and returns fn's
// error (wrapped with ErrTimeout when our timeout ended it). known says
// a.Dest is a valid name (attempt's quick verdict decided); timed says our
// timeout ends cctx at cctx's deadline (no caller probe), so that an error
// fn returned before that deadline (ours or the caller's) is fn's own even
// when the deadline has passed by the time it is looked at.
func (n *Node) done(ctx, cctx context.Context, a *timeout.Attempt, start time.Time, ferr error, known, timed bool) error {
	// When fn returned, on the clock of the contexts' deadlines, read
	// before anything looks at cctx: the node's own clock when it is that
	// clock.
	var ret time.Time
	if ferr != nil && timed && n.cfg.Clock != nil {
		ret = time.Now()
	}
	now := n.clock()
	if ret.IsZero() {
		ret = now
	}
	elapsed := max(since(now, start), 0)
	// Whether our timeout ended the context matters only when fn failed
	// (Err takes the context's lock). An error fn returned before cctx's
	// deadline came before our timeout and the caller's deadline, whatever
	// cctx says by now; not before a cancellation of the caller's, which
	// has no time to compare with.
	var ours, first bool
	if ferr != nil {
		first = timed && returnedBefore(cctx, ret)
		ours = !first && endedByUs(ctx, cctx)
	}
	var o timeout.Outcome
	var result doResult
	switch {
	case ferr == nil:
		o, result = timeout.Completed, doOK
	case ctx.Err() != nil && !ours && !(first && errors.Is(ctx.Err(), context.DeadlineExceeded)):
		o, result = timeout.Canceled, doCanceled
	case ours:
		o, result = timeout.TimedOut, doTimeout
	default:
		o, result = n.classify(ferr), doError
	}
	if known && !a.Probe {
		n.learnKnown(a, o, elapsed, now)
	} else if !n.observe(a, o, elapsed, now) {
		o = 0 // nothing learned
	}
	n.met.doEnd(result, o)
	if result != doTimeout || errors.Is(ferr, ErrTimeout) {
		return ferr
	}
	limit := a.Timeout
	if a.Probe {
		limit = a.ProbeTimeout
	}
	return fmt.Errorf("%w after %v: %w", ErrTimeout, limit, ferr)
}

// ClassifyError is the default Config.Classify: timeout.Failed for the
// network's own errors of a connection that failed (refused, reset,
// aborted, a broken pipe, host or network unreachable, any other error of
// dialling, a name that does not resolve, a failed TLS handshake), so
// that they count for the failure detector, are no latency sample, and
// make DoHedged fail over; timeout.Completed for any other error (the
// destination answered, with an error of the application's). A bare
// io.EOF is a completion here, as fn may return it as its own result; a
// Classify of one's own can call ClassifyError for what it does not know.
func ClassifyError(err error) timeout.Outcome {
	if netfail.Conn(err) {
		return timeout.Failed
	}
	return timeout.Completed
}

// classify is Config.Classify, or ClassifyError without one.
func (n *Node) classify(err error) timeout.Outcome {
	if n.cfg.Classify != nil {
		return n.cfg.Classify(err)
	}
	return ClassifyError(err)
}

// endedByUs reports whether our timeout ended cctx, an attempt's context
// derived from the caller's ctx: cctx's cause is ErrTimeout, and not one
// passed down from ctx. A Do or DoHedged run inside another's fn has a ctx
// that the enclosing call's timeout ends with that same cause: for this
// call that is the caller's deadline, learned as Canceled (nothing
// recorded), not a timeout of its destination. When both have ended by the
// time it is asked (this call's timeout a moment before the enclosing
// one's), it says the caller's too.
func endedByUs(ctx, cctx context.Context) bool {
	if cctx.Err() == nil || !errors.Is(context.Cause(cctx), ErrTimeout) {
		return false
	}
	return ctx.Err() == nil || !errors.Is(context.Cause(ctx), ErrTimeout)
}

// returnedBefore reports whether ret, when fn returned, is before cctx's
// deadline: then cctx was still live when fn returned, whatever it says by
// now (a context ends at its deadline or later, never before).
func returnedBefore(cctx context.Context, ret time.Time) bool {
	dl, ok := cctx.Deadline()
	return ok && ret.Before(dl)
}

// stackDests is how many destinations' decision inputs a decision keeps on
// the stack: most requests name a few.
const stackDests = 4

// inputBuf holds the decision inputs of a decision over more than
// stackDests destinations; pooled, so that a large request allocates once.
type inputBuf struct{ in []tracker.DecisionInput }

var inputBufs = sync.Pool{New: func() any { return &inputBuf{in: make([]tracker.DecisionInput, maxTimeoutDests)} }}

// latencyMillis converts a POST /v1/record latency (finite, >= 0) to whole
// milliseconds, truncated; values beyond any trackable latency saturate.
func latencyMillis(v float64) uint64 {
	const big = 1 << 62
	if v >= big {
		return big
	}
	return uint64(v)
}
