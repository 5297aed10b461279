package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

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

// Record records one request's latency to dest, now. Latencies are kept in
// whole milliseconds (truncated; negative counts as 0; above the maximum
// trackable latency clamped). A dest that could not travel to peers (empty,
// over 256 bytes or not UTF-8) is dropped and counted in
// atnode_records_rejected_total.
func (n *Node) Record(dest string, latency time.Duration) {
	n.recordMillis(dest, uint64(max(latency, 0)/time.Millisecond), n.clock())
}

// RecordSince records the time from start to now as dest's latency and
// returns it (0 if start is in the future), untruncated.
func (n *Node) RecordSince(dest string, start time.Time) time.Duration {
	now := n.clock()
	d := max(now.Sub(start), 0)
	n.recordMillis(dest, uint64(d/time.Millisecond), now)
	return d
}

func (n *Node) recordMillis(dest string, ms uint64, now time.Time) {
	if !validDest(dest) {
		n.met.rejected.Inc()
		return
	}
	n.local.RecordMillis(dest, ms, now)
	n.met.records.Inc()
}

// validDest reports whether dest can be recorded and gossiped.
func validDest(dest string) bool {
	return dest != "" && len(dest) <= maxDestLen && utf8.ValidString(dest)
}

// Estimate returns the peer-count-aware estimate of quantile q of dest's
// latency now (docs/design.md, Fleet view), field by field as GET
// /v1/estimate.
// q == 0 means the configured quantile; otherwise q must be in (0, 1].
func (n *Node) Estimate(dest string, q float64) (tracker.Estimate, error) {
	if q == 0 {
		q = n.cfg.Timeout.Quantile
	}
	if !(q > 0 && q <= 1) {
		return tracker.Estimate{Dest: dest, Quantile: q}, fmt.Errorf("node: %w, got %v", ErrQuantile, q)
	}
	now := n.clock()
	n.poll(now)
	return n.fleet.Estimate(dest, q, now)
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
	// Guarded is true when the local guard applied to DecidedBy (the
	// package doc): Source is SourceFleet, but this node's trusted local
	// value exceeded the fleet's by more than 20 %, so the timeout was
	// computed from the local value. False when the fallback decided.
	Guarded bool
	// Fallback is true when no destination's value exceeded the
	// exponential fallback (timeout.Decision.Fallback).
	Fallback bool
}

// MarshalJSON writes {"timeout_ms","attempt","need","decided_by","source",
// "guarded","fallback"} (GET /v1/timeout); timeout_ms is whole
// milliseconds.
func (d Decision) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		TimeoutMs int64          `json:"timeout_ms"`
		Attempt   int            `json:"attempt"`
		Need      int            `json:"need"`
		DecidedBy string         `json:"decided_by"`
		Source    tracker.Source `json:"source"`
		Guarded   bool           `json:"guarded"`
		Fallback  bool           `json:"fallback"`
	}{d.Timeout.Milliseconds(), d.Attempt, d.Need, d.DecidedBy, d.Source, d.Guarded, d.Fallback})
}

// Timeout returns the timeout of a request that needs every one of dests
// to answer, for attempt (1 = the first try): per destination the
// estimate's value after the local guard (docs/design.md, Fleet view), then
// timeout.Explain. The result names the deciding destination, its
// estimate source, and whether the guard applied to it.
func (n *Node) Timeout(dests []string, attempt int) (Decision, error) {
	return n.TimeoutQuorum(dests, len(dests), attempt)
}

// TimeoutQuorum returns the timeout of a request that needs need of dests
// to answer (a write to 2 of 3 replicas must not wait for the slowest):
// timeout.ExplainQuorum on the values Timeout uses. need must be in
// 1..len(dests).
func (n *Node) TimeoutQuorum(dests []string, need, attempt int) (Decision, error) {
	switch {
	case len(dests) == 0:
		return Decision{}, ErrNoDestinations
	case attempt < 1:
		return Decision{}, fmt.Errorf("%w, got %d", ErrAttempt, attempt)
	case need < 1 || need > len(dests):
		return Decision{}, fmt.Errorf("%w (%d), got %d", ErrNeed, len(dests), need)
	}
	d := n.decide(dests, need, attempt, n.clock())
	n.met.observe(d)
	return d, nil
}

// decisionValue is one destination's input to a timeout decision.
type decisionValue struct {
	ms      uint64
	src     tracker.Source // the estimate's source
	guarded bool           // ms is the local value in place of the fleet's
	ok      bool
}

// snapshot is a timeout.Estimator over destination indices: every
// destination's value is read once, so the value that decided and its
// source come from the same read. Snapshots are pooled: handing one to
// timeout.Explain as an interface would otherwise cost two allocations.
type snapshot struct{ v []decisionValue }

func (s *snapshot) QuantileMillis(i int, _ float64, _ time.Time) (uint64, bool) {
	v := s.v[i]
	return v.ms, v.ok
}

var snapshots = sync.Pool{New: func() any { return &snapshot{v: make([]decisionValue, 0, 8)} }}

// indices holds 0..63, the destination indices of most decisions.
var indices = func() (a [64]int) {
	for i := range a {
		a[i] = i
	}
	return a
}()

func (n *Node) decide(dests []string, need, attempt int, now time.Time) Decision {
	n.poll(now)
	q := n.cfg.Timeout.Quantile
	vals := snapshots.Get().(*snapshot)
	defer snapshots.Put(vals)
	vals.v = vals.v[:0]
	for _, d := range dests {
		var v decisionValue
		if e, err := n.fleet.Estimate(d, q, now); err == nil {
			v.src, v.guarded = e.Source, e.Decision.Guarded
			v.ms, v.ok = e.DecisionValue()
		}
		vals.v = append(vals.v, v)
	}
	var idx []int
	if len(dests) <= len(indices) {
		idx = indices[:len(dests)]
	} else {
		idx = make([]int, len(dests))
		for i := range idx {
			idx[i] = i
		}
	}
	var td timeout.Decision
	if need == len(dests) {
		td = timeout.Explain(n.tocfg, vals, idx, attempt, now)
	} else {
		td = timeout.ExplainQuorum(n.tocfg, vals, idx, need, attempt, now)
	}
	out := Decision{Timeout: td.Timeout, Attempt: attempt, Need: need, Fallback: td.Fallback}
	if td.DecidedBy >= 0 {
		v := vals.v[td.DecidedBy]
		out.DecidedBy, out.Source, out.Guarded = dests[td.DecidedBy], v.src, v.guarded
	}
	return out
}

// Do runs fn under the adaptive timeout of dest for attempt and records
// its latency. fn gets a context that ends at the timeout or when ctx
// ends, whichever is first: Do never extends a deadline ctx already has.
//
// What is recorded: when fn returns nil, or returns an error of its own
// before either end, the time fn took; when the adaptive timeout expired
// first, the timeout itself (censoring: recording nothing would hide the
// tail exactly when timeouts are too tight); when ctx ended first (the
// caller's cancellation or deadline), nothing.
//
// Do returns fn's error. When the adaptive timeout expired first and fn
// failed, the error also matches ErrTimeout (errors.Is), which the
// caller's own cancellation never does; the context fn saw reports
// ErrTimeout as its context.Cause. Do returns an error without running fn
// only if attempt < 1.
func (n *Node) Do(ctx context.Context, dest string, attempt int, fn func(ctx context.Context) error) error {
	d, err := n.Timeout([]string{dest}, attempt)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeoutCause(ctx, d.Timeout, ErrTimeout)
	defer cancel()
	start := n.clock()
	ferr := fn(cctx)
	now := n.clock()
	switch {
	case ferr == nil:
		n.recordMillis(dest, uint64(max(now.Sub(start), 0)/time.Millisecond), now)
		n.met.do.WithLabelValues("ok").Inc()
		return nil
	case ctx.Err() != nil && !errors.Is(context.Cause(cctx), ErrTimeout):
		n.met.do.WithLabelValues("canceled").Inc()
		return ferr
	case cctx.Err() != nil && errors.Is(context.Cause(cctx), ErrTimeout):
		n.recordMillis(dest, uint64(d.Timeout/time.Millisecond), now)
		n.met.do.WithLabelValues("timeout").Inc()
		if errors.Is(ferr, ErrTimeout) {
			return ferr
		}
		return fmt.Errorf("%w after %v: %w", ErrTimeout, d.Timeout, ferr)
	default:
		n.recordMillis(dest, uint64(max(now.Sub(start), 0)/time.Millisecond), now)
		n.met.do.WithLabelValues("error").Inc()
		return ferr
	}
}

// latencyMillis converts a POST /v1/record latency (finite, >= 0) to whole
// milliseconds, truncated; values beyond any trackable latency saturate.
func latencyMillis(v float64) uint64 {
	const big = 1 << 62
	if v >= big {
		return big
	}
	return uint64(v)
}
