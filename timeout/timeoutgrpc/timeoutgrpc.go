package timeoutgrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// ErrTimeout is the cause (context.Cause) of a call's context when the
// adaptive timeout ends it. The call's error then matches it with errors.Is
// (and also context.DeadlineExceeded) and carries codes.DeadlineExceeded; a
// deadline or cancellation of the caller's own context never matches it.
var ErrTimeout = errors.New("timeoutgrpc: adaptive timeout exceeded")

// TimeoutError is the error of a call the adaptive timeout ended. Its gRPC
// status (status.Code, status.FromError) is codes.DeadlineExceeded with
// Error as the message; it matches ErrTimeout and context.DeadlineExceeded
// with errors.Is, and unwraps to the error gRPC returned (nil when a unary
// call went on as a shadow probe).
type TimeoutError struct {
	Dest    string        // the destination key
	Method  string        // the full method name, /package.Service/Method
	Attempt int           // the attempt number, from timeout.AttemptFrom
	Limit   time.Duration // the timeout that was applied
	Err     error         // the error gRPC returned
}

// Error reads "timeoutgrpc: adaptive timeout exceeded (dest D, method M,
// attempt N, timeout T)".
func (e *TimeoutError) Error() string {
	return fmt.Sprintf("%v (dest %s, method %s, attempt %d, timeout %v)", ErrTimeout, e.Dest, e.Method, e.Attempt, e.Limit)
}

// GRPCStatus returns the error's status: codes.DeadlineExceeded, with Error
// as the message.
func (e *TimeoutError) GRPCStatus() *status.Status {
	return status.New(codes.DeadlineExceeded, e.Error())
}

// Is reports whether target is ErrTimeout or context.DeadlineExceeded.
func (e *TimeoutError) Is(target error) bool {
	return target == ErrTimeout || target == context.DeadlineExceeded
}

// Unwrap returns the error gRPC returned.
func (e *TimeoutError) Unwrap() error { return e.Err }

// Timeout returns true, so net.Error-style checks see a timeout.
func (e *TimeoutError) Timeout() bool { return true }

// Option configures an interceptor.
type Option func(*options)

// WithDestination sets how a call's destination key is chosen, for example
// per method or from a value in the context. Default: cc.Target().
func WithDestination(f func(ctx context.Context, method string, cc *grpc.ClientConn) string) Option {
	return func(o *options) { o.dest = f }
}

// WithClock sets the clock of the Policy's decisions and of latency.
// Default time.Now. (Deadlines themselves are context and runtime timers.)
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.now, o.real = now, false }
}

func target(_ context.Context, _ string, cc *grpc.ClientConn) string { return cc.Target() }

type options struct {
	p    timeout.Policy
	dest func(context.Context, string, *grpc.ClientConn) string
	now  func() time.Time
	real bool // now is time.Now: elapsed times read only the monotonic clock
	// hedge says which unary methods may be hedged (WithHedging); nil: none.
	hedge func(method string) bool
}

func newOptions(p timeout.Policy, opts []Option) *options {
	if p == nil {
		panic("timeoutgrpc: nil Policy")
	}
	o := &options{p: p, dest: target, now: time.Now, real: true}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// call is one attempt's decision and clock.
type call struct {
	o      *options
	a      timeout.Attempt
	method string
	start  time.Time
}

func (o *options) begin(ctx context.Context, method string, cc *grpc.ClientConn) call {
	start := o.now()
	return call{o: o, method: method, start: start,
		a: o.p.Decide(o.dest(ctx, method, cc), timeout.AttemptFrom(ctx), start)}
}

func (c *call) elapsed() time.Duration {
	if c.o.real {
		return time.Since(c.start)
	}
	return c.o.now().Sub(c.start)
}

// elapsedAt is the call's elapsed time at ret, a reading of the runtime's
// clock just taken: ret itself on the default clock, else a reading of
// WithClock's. The goroutine that ran the invoker takes it as the invoker
// returns, so that a coordinator that handles the return late
// (descheduled, or holding a lock) adds none of its own delay to the
// latency, as node.DoHedged reads when fn returned.
func (c *call) elapsedAt(ret time.Time) time.Duration {
	if c.o.real {
		return ret.Sub(c.start)
	}
	return c.o.now().Sub(c.start)
}

// observe tells the Policy how the attempt ended, elapsed after its start.
func (c *call) observe(o timeout.Outcome, elapsed time.Duration) {
	c.o.p.Observe(c.a, o, elapsed, c.start.Add(elapsed))
}

// timeoutError returns the caller's error for an attempt our timeout ended.
func (c *call) timeoutError(err error) error {
	return &TimeoutError{Dest: c.a.Dest, Method: c.method, Attempt: c.a.Attempt, Limit: c.a.Timeout, Err: err}
}

// ours reports whether our timeout ended actx, an attempt's context
// derived from the caller's parent: its cause is ErrTimeout, and not one
// passed down from parent. ErrTimeout in the caller's own context is an
// outer interceptor's timeout (one of ours further out): the caller's, as
// any deadline of its context, not this attempt's. Once ours, an attempt
// stays timed out whatever it returns and whatever the caller does next.
func ours(parent, actx context.Context) bool {
	return context.Cause(actx) == ErrTimeout && context.Cause(parent) != ErrTimeout
}

// returnedBefore reports whether ret, when the invoker returned (on the
// runtime's clock), is before actx's deadline: then actx was still live
// when it returned, whatever it says by now (a context ends at its
// deadline or later, never before).
func returnedBefore(actx context.Context, ret time.Time) bool {
	d, ok := actx.Deadline()
	return ok && ret.Before(d)
}

// outcome classifies how an attempt ended: err is what gRPC returned, parent
// the caller's context and actx the attempt's. first says err came back
// before actx's deadline (ours, or the caller's if that is earlier): it is
// then the call's own, as node.Do decides by when fn returned, though the
// deadline may have ended actx by the time it is looked at. (A
// cancellation of the caller's has no time to compare with.)
func outcome(parent, actx context.Context, err error, first bool) timeout.Outcome {
	if err == nil || err == io.EOF {
		return timeout.Completed
	}
	if !first && ours(parent, actx) {
		return timeout.TimedOut
	}
	if pe := parent.Err(); pe != nil && !(first && pe == context.DeadlineExceeded) {
		return timeout.Canceled
	}
	switch status.Code(err) {
	case codes.Unavailable:
		return timeout.Failed
	case codes.DeadlineExceeded:
		// The server, which knows the deadline, may end the call an instant
		// before the client's own timer fires: once the deadline has passed,
		// it is ours, or the caller's if the caller's came first.
		if d, ok := actx.Deadline(); ok && !first && !time.Now().Before(d) {
			if pd, ok := parent.Deadline(); ok && !pd.After(d) {
				return timeout.Canceled
			}
			return timeout.TimedOut
		}
	}
	return timeout.Completed
}
