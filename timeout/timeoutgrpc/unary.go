package timeoutgrpc

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// UnaryClientInterceptor returns an interceptor that gives every unary call
// the adaptive timeout p decides for its destination (cc.Target() unless
// WithDestination says otherwise) and attempt (timeout.AttemptFrom), and
// observes every call once: a reply or any status but Unavailable is
// timeout.Completed at its latency, Unavailable is timeout.Failed, our
// timeout is timeout.TimedOut, the caller's cancellation or deadline is
// timeout.Canceled, whichever ended the call first (a cancellation that
// comes once our timeout ended the call, while the invoker is returning,
// leaves it timed out).
//
// The call runs under context.WithTimeoutCause(ctx, timeout, ErrTimeout), so
// the deadline the server sees is never past the caller's. When our timeout
// ends the call, its error is a *TimeoutError: codes.DeadlineExceeded,
// matching ErrTimeout; when the caller's own deadline ends it, the error is
// gRPC's and does not match ErrTimeout.
//
// Shadow probes: when p offers a probe (Attempt.ProbeTimeout beyond Timeout),
// the request and reply are protobuf messages, no grpc.OnFinish option is
// given, and the caller's deadline (if any) leaves room for the probe
// timeout, the call runs on a clone of the request into a reply of its own,
// under a context detached from the caller's cancellation and ending at the
// probe timeout. If it answers within the timeout, the reply (and any
// grpc.Header, grpc.Trailer and grpc.Peer results) is copied to the caller's.
// If it reaches the timeout and p.Probe reserves the probe, the caller gets
// its *TimeoutError at once and the call goes on unseen until the probe
// timeout, never writing into the caller's reply or options, and is observed
// once when it ends; its goroutine ends by the probe timeout. An invoker
// that has returned by the time the interceptor handles the timeout's
// passing, or the caller's end, comes first and is never made a probe:
// its reply is the caller's, and an error it returned before the timeout
// is its own, by its status, not a timeout. Otherwise the
// call ends at its timeout as any other. A reply that comes back after the
// caller's end (from an invoker that does not watch its context) is the
// caller's too, Completed, as on the other path; an error then is the
// caller's status, Canceled. The latency is read when the invoker
// returned, by the goroutine that ran it, not when the interceptor gets
// to its return.
//
// Hedging (WithHedging, when p is a timeout.Hedger): a call of a method
// WithHedging calls idempotent, with protobuf request and reply and no
// grpc.Header, grpc.Trailer, grpc.Peer or grpc.OnFinish option, counts
// toward p's hedge budget (Hedger.HedgeDelay). When it has not answered
// after its destination's hedge delay and the budget allows
// (Hedger.SpendHedge), the same call is sent again to the same
// destination, on a copy of the request into a reply of its own. The first
// answer (a reply or any status but Unavailable) wins and is copied to the
// caller's reply; the other attempt is cancelled and observed as
// timeout.Superseded at its elapsed time (whatever it returns then, as in
// node.DoHedged: timed out if its own timeout had ended it before the win,
// canceled if the caller's context had). Each attempt has its own adaptive
// timeout; an attempt that fails or times out leaves the other running,
// and when both end without an answer the first one's error is returned.
// The first attempt's return, if the interceptor has it in hand when it
// handles the delay's passing, comes first, as in node.DoHedged: its reply
// or status is the call's, and the call is not sent again (no token
// spent); one that comes in only after the second call was sent is decided
// as any other, by when it returned. Latencies, as in node.DoHedged, are
// read when each invoker returned, by the goroutine that ran it (on
// WithClock's clock), not when the interceptor gets to its return: a
// loser whose invoker had returned before the win was handled is
// superseded at that return, if earlier than the win.
// Hedged calls run no shadow probe.
func UnaryClientInterceptor(p timeout.Policy, opts ...Option) grpc.UnaryClientInterceptor {
	o := newOptions(p, opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		if h, ok := o.hedger(method, req, reply, callOpts); ok {
			if delay, ok := h.HedgeDelay(o.dest(ctx, method, cc), o.now()); ok {
				return o.invokeHedged(ctx, method, req.(proto.Message), reply.(proto.Message), cc, invoker, callOpts, h, delay)
			}
		}
		c := o.begin(ctx, method, cc)
		if c.probeable(ctx, req, reply, callOpts) {
			return c.invokeAsync(ctx, req.(proto.Message), reply.(proto.Message), cc, invoker, callOpts)
		}
		var actx context.Context
		var cancel context.CancelFunc
		if o.real { // the deadline from the clock reading we already have
			actx, cancel = context.WithDeadlineCause(ctx, c.start.Add(c.a.Timeout), ErrTimeout)
		} else {
			actx, cancel = context.WithTimeoutCause(ctx, c.a.Timeout, ErrTimeout)
		}
		err := invoker(actx, method, req, reply, cc, callOpts...)
		// When an error came back, on the deadline's clock: read before
		// anything else (WithClock's clock included) can let the deadline
		// pass.
		first := err != nil && returnedBefore(actx, time.Now())
		elapsed := c.elapsed()
		oc := outcome(ctx, actx, err, first)
		cancel()
		c.observe(oc, elapsed)
		if oc == timeout.TimedOut {
			return c.timeoutError(err)
		}
		return err
	}
}

// probeable reports whether a unary call may become a shadow probe.
func (c *call) probeable(ctx context.Context, req, reply any, callOpts []grpc.CallOption) bool {
	if c.a.ProbeTimeout <= c.a.Timeout {
		return false
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < c.a.ProbeTimeout {
		return false
	}
	if _, ok := req.(proto.Message); !ok {
		return false
	}
	if _, ok := reply.(proto.Message); !ok {
		return false
	}
	for _, opt := range callOpts {
		if _, ok := opt.(grpc.OnFinishCallOption); ok {
			return false
		}
	}
	return true
}

// asyncCall is a unary call that may become a shadow probe, run in a
// goroutine of its own with its own reply and call-option results.
type asyncCall struct {
	done     chan struct{} // closed when the invoker returned
	mu       sync.Mutex
	finished bool          // the invoker returned
	inTime   bool          // it returned an error before the timeout (the caller's deadline is later)
	probing  bool          // the caller left: the call goes on as a probe
	at       time.Duration // the call's elapsed time when the invoker returned
	err      error

	reply            proto.Message
	header, trailer  metadata.MD
	peer             peer.Peer
	toHeader, toTrlr *metadata.MD // the caller's grpc.Header and grpc.Trailer targets
	toPeer           *peer.Peer   // the caller's grpc.Peer target
}

// invokeAsync runs a unary call that may become a shadow probe. It takes
// the call by value, so that only this rare path moves it to the heap.
func (c call) invokeAsync(ctx context.Context, req, reply proto.Message, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts []grpc.CallOption) error {
	detached := context.WithoutCancel(ctx)
	probeCtx, stop := context.WithTimeoutCause(detached, c.a.ProbeTimeout, ErrTimeout)
	actx, cancel := context.WithCancelCause(probeCtx)
	ac := &asyncCall{done: make(chan struct{}), reply: reply.ProtoReflect().New().Interface()}
	opts := make([]grpc.CallOption, len(callOpts))
	for i, opt := range callOpts {
		switch opt := opt.(type) {
		case grpc.HeaderCallOption:
			ac.toHeader, opts[i] = opt.HeaderAddr, grpc.Header(&ac.header)
		case grpc.TrailerCallOption:
			ac.toTrlr, opts[i] = opt.TrailerAddr, grpc.Trailer(&ac.trailer)
		case grpc.PeerCallOption:
			ac.toPeer, opts[i] = opt.PeerAddr, grpc.Peer(&ac.peer)
		default:
			opts[i] = opt
		}
	}
	req = proto.Clone(req) // the caller may reuse req once we return
	// The probe's extra time, read here: Policy.Probe may write c.a while
	// the invoker runs, and the goroutine reads c.a only once handed over.
	extra := c.a.ProbeTimeout - c.a.Timeout
	go func() {
		defer stop()
		err := invoker(actx, c.method, req, ac.reply, cc, opts...)
		ret := time.Now() // when it returned, on the probe deadline's clock
		// Its latency, read here: the coordinator below may handle the
		// return late, and its delay is not the destination's.
		at := c.elapsedAt(ret)
		var first, inTime bool
		if err != nil {
			first = returnedBefore(actx, ret) // before the probe's deadline
			// Before the timeout: the probe's deadline less the probe's
			// extra time.
			inTime = returnedBefore(actx, ret.Add(extra))
		}
		ac.mu.Lock()
		ac.finished, ac.inTime, ac.at, ac.err = true, inTime, at, err
		probing := ac.probing
		ac.mu.Unlock()
		close(ac.done)
		if probing {
			c.observe(outcome(detached, actx, err, first), at) // the caller's context no longer matters
			cancel(nil)
		}
	}()

	timer := time.NewTimer(c.a.Timeout)
	defer timer.Stop()
	// callerErr is set when the caller's context ended the call: the
	// caller's error, for an invoker that fails then (gRPC reports the
	// cancellation of actx, which carries the caller's cause but not its
	// deadline's error).
	callerErr := error(nil)
	select {
	case <-ac.done:
	case <-ctx.Done():
		// The invoker's return, in hand by the time the caller's end is
		// handled, comes first, as if taken before it: a reply is the
		// caller's, as on the other path.
		ac.mu.Lock()
		finished := ac.finished
		ac.mu.Unlock()
		if !finished {
			cancel(context.Cause(ctx))
			<-ac.done
			callerErr = status.FromContextError(ctx.Err()).Err()
		}
	case <-timer.C:
		ac.mu.Lock()
		switch {
		case ac.finished:
			// The invoker's return, in hand by the time the timeout's
			// passing is handled (the timer and the return may be ready
			// together, and Go's select takes either), comes first, as if
			// taken before the timer: no probe, and nothing ends its
			// context.
			ac.mu.Unlock()
		case ctx.Err() == nil && c.o.p.Probe(&c.a, c.o.now()):
			ac.probing = true
			ac.mu.Unlock()
			return c.timeoutError(nil)
		default:
			ac.mu.Unlock()
			if ctx.Err() != nil {
				cancel(context.Cause(ctx))
				callerErr = status.FromContextError(ctx.Err()).Err()
			} else {
				cancel(ErrTimeout)
			}
			<-ac.done
		}
	}
	elapsed := ac.at // when the invoker returned, not when the wait above ended
	err := ac.err
	// Once our timeout ended the call (the probe declined), a cancellation
	// of the caller's while the invoker returns leaves it timed out, as on
	// the other path: outcome looks at our timeout first. An error the
	// invoker returned before the timeout is its own, though the timer may
	// have ended actx by the time it is looked at.
	oc := outcome(ctx, actx, err, ac.inTime)
	cancel(nil)
	c.observe(oc, elapsed)
	switch {
	case oc == timeout.TimedOut:
		return c.timeoutError(err)
	case callerErr != nil && err != nil:
		return callerErr
	}
	// A reply is the caller's, though it came after the caller's end (an
	// invoker that does not watch its context): the destination answered,
	// as on the other path, where the invoker writes the caller's reply
	// whenever it returns, and as timeouthttp hands over such a response.
	if err == nil {
		proto.Reset(reply)
		proto.Merge(reply, ac.reply)
	}
	if ac.toHeader != nil {
		*ac.toHeader = ac.header
	}
	if ac.toTrlr != nil {
		*ac.toTrlr = ac.trailer
	}
	if ac.toPeer != nil {
		*ac.toPeer = ac.peer
	}
	return err
}
