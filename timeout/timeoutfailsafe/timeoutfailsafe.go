package timeoutfailsafe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/common"
	"github.com/failsafe-go/failsafe-go/policy"
	fstimeout "github.com/failsafe-go/failsafe-go/timeout"

	"github.com/adaptivetimeout/adaptivetimeout/internal/netfail"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// ErrTimeout is what an execution the adaptive timeout ended fails with: its
// error is a *TimeoutError, which matches ErrTimeout (and failsafe-go's
// timeout.ErrExceeded) with errors.Is.
var ErrTimeout = errors.New("timeoutfailsafe: adaptive timeout exceeded")

// TimeoutError is the error of an execution attempt the adaptive timeout
// ended. It matches ErrTimeout and failsafe-go's timeout.ErrExceeded with
// errors.Is, so retry and hedge policies that handle either handle it.
type TimeoutError struct {
	Dest    string        // the destination key
	Attempt int           // the attempt number given to the Policy
	Limit   time.Duration // the timeout that was applied (a probe's: its probe timeout)
}

// Error reads "timeoutfailsafe: adaptive timeout exceeded (dest D, attempt
// N, timeout T)".
func (e *TimeoutError) Error() string {
	return fmt.Sprintf("%v (dest %s, attempt %d, timeout %v)", ErrTimeout, e.Dest, e.Attempt, e.Limit)
}

// Is reports whether target is ErrTimeout or failsafe-go's
// timeout.ErrExceeded.
func (e *TimeoutError) Is(target error) bool {
	return target == ErrTimeout || target == fstimeout.ErrExceeded
}

// Timeout returns true, so net.Error-style checks see a timeout.
func (e *TimeoutError) Timeout() bool { return true }

// ClassifyError is the default outcome of an attempt whose function
// returned err before the adaptive timeout, and was not cancelled from
// outside (by the caller's context, a failsafe-go timeout or a hedge that
// won). nil and any error that is the destination's answer, whatever the
// application's result, are timeout.Completed; a fast transport failure
// (connection refused, reset or aborted, host or network unreachable, a
// failed dial, a name that does not resolve, a failed TLS handshake, the
// connection closed before the reply) is timeout.Failed; a context's
// deadline or another timeout (a net.Error whose Timeout is true) is
// timeout.Canceled: someone else's timeout, from which nothing is learned.
func ClassifyError(err error) timeout.Outcome {
	if err == nil {
		return timeout.Completed
	}
	if netfail.Is(err) {
		return timeout.Failed
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return timeout.Canceled
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return timeout.Canceled
	}
	return timeout.Completed
}

// Timeout is a failsafe-go policy that cancels each execution attempt at the
// adaptive timeout a timeout.Policy decides, and tells the Policy how the
// attempt ended. R is the execution result type; the policy is result
// agnostic (it never changes a result), so it composes with any. It is safe
// for concurrent use.
type Timeout[R any] interface {
	failsafe.ResultAgnosticPolicy[R]
}

// Builder builds Timeout policies. It is not safe for concurrent use.
type Builder[R any] interface {
	// WithDestinationFunc sets how an execution's destination key is
	// chosen, for an executor shared by several destinations (for example
	// from a value in exec.Context()). Default: the dest given to
	// NewBuilder.
	WithDestinationFunc(dest func(exec failsafe.ExecutionInfo) string) Builder[R]
	// WithClassify sets the outcome of an attempt whose function returned
	// before the adaptive timeout without being cancelled from outside.
	// Default ClassifyError.
	WithClassify(classify func(err error) timeout.Outcome) Builder[R]
	// WithClock sets the clock of the Policy's decisions and of latency.
	// Default time.Now. (The timeout itself is a runtime timer.)
	WithClock(now func() time.Time) Builder[R]
	// OnTimeoutExceeded registers the listener called when the adaptive
	// timeout ends an attempt.
	OnTimeoutExceeded(listener func(event failsafe.ExecutionDoneEvent[R])) Builder[R]
	// Build returns a Timeout with the builder's configuration.
	Build() Timeout[R]
}

type config[R any] struct {
	p                 timeout.Policy
	dest              func(failsafe.ExecutionInfo) string
	classify          func(error) timeout.Outcome
	now               func() time.Time
	real              bool // now is time.Now: elapsed times read only the monotonic clock
	onTimeoutExceeded func(failsafe.ExecutionDoneEvent[R])
}

// New returns a Timeout for result type R whose attempts to dest get the
// timeouts p decides. It panics if p is nil.
func New[R any](p timeout.Policy, dest string) Timeout[R] {
	return NewBuilder[R](p, dest).Build()
}

// NewBuilder returns a Builder for result type R whose attempts to dest get
// the timeouts p decides. It panics if p is nil.
func NewBuilder[R any](p timeout.Policy, dest string) Builder[R] {
	if p == nil {
		panic("timeoutfailsafe: nil Policy")
	}
	return &config[R]{p: p, dest: func(failsafe.ExecutionInfo) string { return dest }, classify: ClassifyError, now: time.Now, real: true}
}

func (c *config[R]) WithDestinationFunc(dest func(failsafe.ExecutionInfo) string) Builder[R] {
	c.dest = dest
	return c
}

func (c *config[R]) WithClassify(classify func(error) timeout.Outcome) Builder[R] {
	c.classify = classify
	return c
}

func (c *config[R]) WithClock(now func() time.Time) Builder[R] {
	c.now, c.real = now, false
	return c
}

func (c *config[R]) OnTimeoutExceeded(listener func(failsafe.ExecutionDoneEvent[R])) Builder[R] {
	c.onTimeoutExceeded = listener
	return c
}

func (c *config[R]) Build() Timeout[R] {
	return &adaptiveTimeout[R]{config: *c, returned: new(common.PolicyResult[R]), probing: new(common.PolicyResult[R])}
}

type adaptiveTimeout[R any] struct {
	config[R]
	// returned and probing mark an attempt's state (attempt.state).
	returned, probing *common.PolicyResult[R]
	attempts          sync.Pool // of *attempt[R] that can serve again
}

// ResultAgnostic marks the policy as one that never changes a result.
func (*adaptiveTimeout[R]) ResultAgnostic() {}

// ToExecutor returns the policy's failsafe-go executor.
func (t *adaptiveTimeout[R]) ToExecutor(_ R) any {
	e := &executor[R]{adaptiveTimeout: t}
	e.Executor = e
	return e
}

// executor is a policy.Executor that runs each attempt under the adaptive
// timeout.
type executor[R any] struct {
	policy.BaseExecutor[R]
	*adaptiveTimeout[R]
}

var _ policy.Executor[any] = &executor[any]{}

// Apply runs innerFn under the attempt's adaptive timeout. Like failsafe-go's
// timeout, it cancels the attempt's execution (its context and Canceled
// channel) at the timeout and waits for innerFn to return, then hands on our
// *TimeoutError as the result.
//
// The attempt number is timeout.AttemptFrom(exec.Context()) plus the
// execution's retries so far, so a RetryPolicy composed outside gives every
// retry a longer timeout, and a hedge keeps the number of the attempt it
// hedges. Caller probes: when the Policy offers a probe and the attempt
// reaches its timeout, Policy.Probe may reserve it; the attempt then goes
// on, the caller still waiting, until the probe timeout (if the caller's
// deadline leaves room for it).
func (e *executor[R]) Apply(innerFn func(failsafe.Execution[R]) *common.PolicyResult[R]) func(failsafe.Execution[R]) *common.PolicyResult[R] {
	return func(exec failsafe.Execution[R]) *common.PolicyResult[R] {
		child := exec.(policy.ExecutionInternal[R]).CopyForCancellable().(policy.ExecutionInternal[R])
		r, _ := e.attempts.Get().(*attempt[R])
		if r == nil {
			r = new(attempt[R])
			r.fire = r.expire
		}
		r.e, r.exec, r.start = e, child, e.now()
		r.a = e.p.Decide(e.dest(exec), timeout.AttemptFrom(exec.Context())+exec.Retries(), r.start)
		r.timer = time.AfterFunc(r.a.Timeout, r.fire)

		result := innerFn(child)

		if !r.state.CompareAndSwap(nil, e.returned) && !r.claim() {
			// our timeout ended it, and observed it
			return e.PostExecute(child, r.state.Load())
		}
		// Stopped before it fired, the timer never ran expire: nothing
		// holds r but us, and it can serve another attempt once observed.
		unused := r.timer.Stop()
		if r.probe != nil { // set only after the timer fired
			r.probe.Stop()
		}
		r.observe(r.outcome(result))
		child.Cancel(nil)
		if unused {
			r.release()
		}
		return e.PostExecute(child, result)
	}
}

// IsFailure reports whether err is our timeout: the only failure this policy
// handles.
func (e *executor[R]) IsFailure(_ R, err error) bool {
	return err != nil && errors.Is(err, ErrTimeout)
}

// attempt is one execution attempt under the adaptive timeout. One whose
// timer never fired serves another afterwards (adaptiveTimeout.attempts),
// its expire already bound (fire): the two allocations are the cost of a
// call beyond failsafe-go's own timeout that is not the clock's. Apply
// and expire hand the attempt over with one compare-and-swap of state;
// the mutex only makes innerFn's return, or the probe's timer firing
// meanwhile, wait while expire decides on a caller probe.
type attempt[R any] struct {
	e     *executor[R]
	exec  policy.ExecutionInternal[R]
	start time.Time
	a     timeout.Attempt
	timer *time.Timer // the timeout's, Apply's alone: expire may run before it is set
	// probe is a caller probe's timer, set by expire before the attempt
	// goes on as one.
	probe *time.Timer
	fire  func() // expire
	// mu is held by expire while it decides (state is probing then).
	mu sync.Mutex
	// state is nil while the attempt runs; returned once innerFn returned
	// (Apply then observes it), probing while expire decides whether the
	// attempt goes on as a probe, and our timeout's result once it ended
	// the attempt (and observed it).
	state atomic.Pointer[common.PolicyResult[R]]
}

// claim claims the attempt for innerFn's return, once expire has decided:
// false if our timeout ended it.
func (r *attempt[R]) claim() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state.CompareAndSwap(nil, r.e.returned)
}

// release hands r, which nothing else holds, on to another attempt.
func (r *attempt[R]) release() {
	e := r.e
	r.e, r.exec, r.a, r.timer, r.probe = nil, nil, timeout.Attempt{}, nil, nil
	r.state.Store(nil)
	e.attempts.Put(r)
}

func (r *attempt[R]) elapsed() time.Duration {
	if r.e.real {
		return time.Since(r.start)
	}
	return r.e.now().Sub(r.start)
}

func (r *attempt[R]) observe(o timeout.Outcome) {
	elapsed := r.elapsed()
	r.e.p.Observe(r.a, o, elapsed, r.start.Add(elapsed))
}

// expire runs at the timeout (and, for a probe, at the probe timeout).
func (r *attempt[R]) expire() {
	// innerFn returned, or our timeout ended the attempt. A probe's timer
	// may fire while the timeout's run still decides (probing): it waits
	// for the decision below, or the probe would outlive its timeout.
	if s := r.state.Load(); s != nil && s != r.e.probing {
		return
	}
	r.mu.Lock()
	if !r.state.CompareAndSwap(nil, r.e.probing) {
		r.mu.Unlock()
		return
	}
	if r.exec.IsCanceled() { // innerFn's return will observe it
		r.state.Store(nil)
		r.mu.Unlock()
		return
	}
	if !r.a.Probe && r.probeRoom() && r.e.p.Probe(&r.a, r.e.now()) {
		// a caller probe: wait on
		r.probe = time.AfterFunc(r.a.ProbeTimeout-r.a.Timeout, r.fire)
		r.state.Store(nil)
		r.mu.Unlock()
		return
	}
	limit := r.a.Timeout
	if r.a.Probe {
		limit = r.a.ProbeTimeout
	}
	err := &TimeoutError{Dest: r.a.Dest, Attempt: r.a.Attempt, Limit: limit}
	result := &common.PolicyResult[R]{Error: err, Done: true}
	r.state.Store(result)
	r.mu.Unlock()

	r.observe(timeout.TimedOut)
	if r.e.onTimeoutExceeded != nil {
		r.e.onTimeoutExceeded(failsafe.ExecutionDoneEvent[R]{ExecutionInfo: r.exec, Error: err})
	}
	r.exec.Cancel(result)
}

// probeRoom reports whether a probe was offered and the execution's deadline
// (if any) leaves room for it.
func (r *attempt[R]) probeRoom() bool {
	if r.a.ProbeTimeout <= r.a.Timeout {
		return false
	}
	d, ok := r.exec.Context().Deadline()
	return !ok || time.Until(d) >= r.a.ProbeTimeout-r.a.Timeout
}

// canceled is exec.IsCanceledWithResult, without taking the execution's
// lock when nothing cancelled it (a cancellation is final).
func (r *attempt[R]) canceled() (bool, *common.PolicyResult[R]) {
	if !r.exec.IsCanceled() {
		return false, nil
	}
	return r.exec.IsCanceledWithResult()
}

// outcome classifies an attempt whose innerFn returned before our timeout.
func (r *attempt[R]) outcome(result *common.PolicyResult[R]) timeout.Outcome {
	if canceled, by := r.canceled(); canceled {
		// Cancelled from outside. A hedged attempt is decided by what
		// ended it, whatever it returns then, as node.DoHedged's losers:
		// a hedge that won cancels the others with its own result (they
		// were slower than their elapsed time); a timeout further out
		// (failsafe-go's, or one of ours, whose *TimeoutError matches
		// ErrExceeded), or another attempt's, cancels them with its own,
		// and the caller's context with its error: no attempt won.
		if r.exec.Hedges() > 0 {
			if by != nil && !errors.Is(by.Error, fstimeout.ErrExceeded) &&
				!errors.Is(by.Error, context.Canceled) && !errors.Is(by.Error, context.DeadlineExceeded) {
				return timeout.Superseded
			}
			return timeout.Canceled
		}
		// Otherwise an answer that came after the cancellation is the
		// destination's, as node.Do learns a fn that returns nil then;
		// an error may be the cancellation's own.
		if result == nil || result.Error == nil {
			return timeout.Completed
		}
		return timeout.Canceled
	}
	if result == nil {
		return timeout.Completed
	}
	return r.e.classify(result.Error)
}
