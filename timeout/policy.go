package timeout

import (
	"context"
	"time"
)

// Outcome is how an attempt ended, as a Policy learns it.
type Outcome uint8

// The outcomes of an attempt.
const (
	// Completed: the destination answered, whatever the application's
	// result. Its latency is a sample.
	Completed Outcome = iota + 1
	// TimedOut: our timeout ended the attempt. It is a censored sample at
	// the timeout: it says "latency ≥ timeout", not "latency = timeout".
	TimedOut
	// Failed: the transport failed fast (connection refused or reset, gRPC
	// Unavailable). It is not a latency sample, but it counts toward the
	// consecutive-failure detector like a timeout.
	Failed
	// Superseded: another attempt of a hedged request won and this one was
	// cancelled. It is censored at its elapsed time (it was slower than
	// that) and never counts as timed out or failed.
	Superseded
	// Canceled: the caller ended the attempt (its own context). Nothing is
	// recorded.
	Canceled
)

// String returns the outcome in snake_case, as used in metric labels.
func (o Outcome) String() string {
	switch o {
	case Completed:
		return "completed"
	case TimedOut:
		return "timed_out"
	case Failed:
		return "failed"
	case Superseded:
		return "superseded"
	case Canceled:
		return "canceled"
	}
	return "unknown"
}

// Reason says what set an attempt's timeout: the reason field of
// GET /v1/timeout.
type Reason uint8

// The reasons of a timeout decision, in the precedence GET /v1/timeout
// applies.
const (
	// ReasonEstimate: the deciding destination's estimate set the timeout.
	ReasonEstimate Reason = iota
	// ReasonCapped: the deciding destination's value was its highest
	// completed latency, below its quantile (too many of its attempts
	// timed out for the quantile to be known).
	ReasonCapped
	// ReasonFallback: the exponential fallback decided and no destination
	// is failing.
	ReasonFallback
	// ReasonFailing: the exponential fallback decided and some destination
	// is failing.
	ReasonFailing
)

// String returns "estimate", "capped", "fallback" or "failing".
func (r Reason) String() string {
	switch r {
	case ReasonCapped:
		return "capped"
	case ReasonFallback:
		return "fallback"
	case ReasonFailing:
		return "failing"
	}
	return "estimate"
}

// MarshalText returns String's text, so JSON carries "capped", not 1.
func (r Reason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Attempt is one attempt's timeout decision. A Policy returns it from
// Decide; the transport hands it back to Probe and Observe.
type Attempt struct {
	// Dest is the destination and Attempt the attempt number (1 is the
	// first), as asked.
	Dest    string
	Attempt int
	// Timeout is the attempt's timeout.
	Timeout time.Duration
	// Reason says what set Timeout.
	Reason Reason
	// Failing is true when Dest is treated as failing: its timeout is the
	// exponential fallback, whatever its latency history says.
	Failing bool
	// ProbeTimeout is how long, from its start, the attempt may go on as a
	// probe once it reaches Timeout, when a probe of Dest is due; 0 when
	// none is. It is advisory: only Policy.Probe reserves the probe.
	ProbeTimeout time.Duration
	// Probe is set by Policy.Probe when the attempt went on as a probe.
	Probe bool
}

// Policy decides each attempt's timeout and learns from how attempts end:
// the failure-aware rule with probes. Every transport adapter
// (timeouthttp, timeoutgrpc, timeoutfailsafe) takes one. *node.Node
// implements it over the fleet view; NewPolicy implements it over one
// process's tracker.
//
// A transport calls Decide before an attempt, then, if the attempt reaches
// its Timeout and could go on (the destination has not answered, the
// caller's own context has not ended), Probe; and Observe exactly once when
// the attempt ends. Implementations are safe for concurrent use. Time is an
// argument of every method; a transport reads it from its own clock.
type Policy interface {
	// Decide returns the timeout of attempt (1 is the first; below 1
	// counts as 1) to dest at now.
	Decide(dest string, attempt int, now time.Time) Attempt
	// Probe is called when a's attempt reached a.Timeout at now and could
	// go on. It reports whether a probe of a.Dest is due and, if so,
	// reserves it (at most one probe per destination in flight, and at
	// most one started per sub-window) and sets a.Probe: the attempt may
	// then go on until a.ProbeTimeout after its start, and Observe must
	// be called for it as for any attempt.
	Probe(a *Attempt, now time.Time) bool
	// Observe records how a's attempt ended at now, elapsed after it
	// started: Completed at elapsed, TimedOut at a.Timeout (a probe at
	// a.ProbeTimeout), Failed as no sample, Superseded censored at
	// elapsed, Canceled not at all. It releases a probe's reservation.
	Observe(a Attempt, o Outcome, elapsed time.Duration, now time.Time)
}

type attemptKey struct{}

// WithAttempt returns a context that tells every adapter that calls made
// with it are attempt n (1 is the first; n <= 1 counts as 1). A retry loop
// sets it per try so that each retry's timeout grows.
func WithAttempt(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, attemptKey{}, n)
}

// AttemptFrom returns the attempt number WithAttempt set, at least 1; 1
// when none was set.
func AttemptFrom(ctx context.Context) int {
	if n, ok := ctx.Value(attemptKey{}).(int); ok && n > 1 {
		return n
	}
	return 1
}
