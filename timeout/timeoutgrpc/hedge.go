package timeoutgrpc

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// WithHedging turns on hedging of unary calls whose method idempotent
// reports true (opt-in; gRPC cannot tell an idempotent method), when the
// Policy is a timeout.Hedger (*node.Node, timeout.NewPolicy): when a call
// has not answered after its destination's hedge delay (the estimate
// strictly above the bucket at quantile 1 − budget, as node.DoHedged) and
// the Policy's budget allows, the same call is sent again to the same
// destination, and the first answer wins. See UnaryClientInterceptor.
func WithHedging(idempotent func(method string) bool) Option {
	return func(o *options) { o.hedge = idempotent }
}

// hedger returns the Policy as a Hedger when the call may be hedged: the
// method is idempotent, request and reply are protobuf messages, and no
// call option asks for the call's header, trailer or peer or for a
// callback when it finishes (they would have two calls to describe).
func (o *options) hedger(method string, req, reply any, callOpts []grpc.CallOption) (timeout.Hedger, bool) {
	if o.hedge == nil || !o.hedge(method) {
		return nil, false
	}
	h, ok := o.p.(timeout.Hedger)
	if !ok {
		return nil, false
	}
	if _, ok := req.(proto.Message); !ok {
		return nil, false
	}
	if _, ok := reply.(proto.Message); !ok {
		return nil, false
	}
	for _, opt := range callOpts {
		switch opt.(type) {
		case grpc.HeaderCallOption, grpc.TrailerCallOption, grpc.PeerCallOption, grpc.OnFinishCallOption:
			return nil, false
		}
	}
	return h, true
}

// hedgeTry is one attempt of a hedged unary call.
type hedgeTry struct {
	c      call
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   context.CancelFunc
	reply  proto.Message
	ended  bool          // observed
	left   bool          // the caller's context had ended when another attempt won (hedgeCall.mu)
	lost   time.Duration // elapsed when another attempt won (hedgeCall.mu)
}

type hedgeResult struct {
	i   int
	err error
	end time.Time     // when the invoker returned, on the runtime's clock
	at  time.Duration // the attempt's elapsed time then (call.elapsedAt)
}

// hedgeCall is a hedged call's shared state: once won, attempts that
// return later observe themselves.
type hedgeCall struct {
	mu      sync.Mutex
	won     bool
	results chan hedgeResult
}

// invokeHedged runs a unary call and, when it has not answered after delay
// and the budget allows, the same call again: the first answer wins and
// its reply is the caller's; the other attempt is cancelled and observed
// as superseded at its elapsed time (whatever it returns then, timed out
// if its own timeout had ended it before the win, canceled if the caller's
// context had). Each attempt has its own adaptive timeout and its own
// reply; one that fails or times out leaves the other running; when both
// end without an answer, the first attempt's error is returned. The first
// attempt's return, if in hand when the coordinator handles the delay's
// passing, comes first (as in node.DoHedged): it ends the call and the
// call is not sent again.
func (o *options) invokeHedged(ctx context.Context, method string, req, reply proto.Message, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, callOpts []grpc.CallOption, h timeout.Hedger, delay time.Duration) error {
	req = proto.Clone(req) // a loser may still be sending it when we return
	hc := &hedgeCall{results: make(chan hedgeResult, 2)}
	var tries []*hedgeTry
	launch := func() {
		t := &hedgeTry{c: o.begin(ctx, method, cc), reply: reply.ProtoReflect().New().Interface()}
		var cctx context.Context
		cctx, t.cancel = context.WithCancelCause(ctx)
		t.ctx, t.stop = context.WithTimeoutCause(cctx, t.c.a.Timeout, ErrTimeout)
		i := len(tries)
		tries = append(tries, t)
		go func() {
			err := invoker(t.ctx, method, req, t.reply, cc, callOpts...)
			end := time.Now()
			// Its latency, read here too: the coordinator may handle the
			// return late, and its delay is not the destination's.
			at := t.c.elapsedAt(end)
			hc.mu.Lock()
			defer hc.mu.Unlock()
			if !hc.won {
				hc.results <- hedgeResult{i, err, end, at}
				return
			}
			t.superseded(ctx, end, at)
		}()
	}
	launch()
	timer := time.NewTimer(delay)
	defer timer.Stop()
	timerC := timer.C
	var first error
	for pending := 1; ; {
		select {
		case <-timerC:
			timerC = nil
			now := o.now()
			// The first attempt's return, if in hand by the time the
			// delay's passing is handled (the timer and the return may be
			// ready together, and Go's select takes either), comes first,
			// as in node.DoHedged: it ends the call, an answer winning
			// without a hedge, and no token is spent.
			if len(hc.results) == 0 && ctx.Err() == nil && h.SpendHedge(now) {
				launch()
				pending++
			}
		case res := <-hc.results:
			pending--
			t := tries[res.i]
			elapsed := res.at // at its return, not at its handling, as in node.DoHedged
			oc := outcome(ctx, t.ctx, res.err, returnedBefore(t.ctx, res.end))
			if oc == timeout.Completed {
				// Every other attempt lost at now, read once for all of
				// them and before the lock, which their goroutines take as
				// they return (as timeouthttp does).
				now := o.now()
				hc.mu.Lock()
				hc.won = true
				left := ctx.Err() != nil
				for _, l := range tries {
					if l != t && !l.ended {
						l.lost, l.left = now.Sub(l.c.start), left
						l.cancel(context.Canceled)
					}
				}
				for len(hc.results) > 0 { // returned, not yet handled: lost too
					late := <-hc.results
					tries[late.i].superseded(ctx, late.end, late.at)
				}
				hc.mu.Unlock()
				t.end(oc, elapsed)
				if res.err == nil {
					proto.Reset(reply)
					proto.Merge(reply, t.reply)
				}
				return res.err
			}
			t.end(oc, elapsed)
			err := res.err
			if oc == timeout.TimedOut {
				err = t.c.timeoutError(err)
			}
			if res.i == 0 {
				first = err
			}
			if pending == 0 { // the first attempt ended, and the hedge if one was sent
				return first
			}
		}
	}
}

// end observes the attempt and releases its context.
func (t *hedgeTry) end(oc timeout.Outcome, elapsed time.Duration) {
	t.ended = true
	t.c.observe(oc, elapsed)
	t.stop()
	t.cancel(nil)
}

// superseded ends a loser, whose invoker returned at end (on the
// runtime's clock) at elapsed time at, by what ended it first, whatever it
// returned (a reply included, from an invoker that did not watch its
// context), at its latency when it returned: timed out if our timeout had
// ended it before it returned and before it lost, canceled if the
// caller's context had ended before it lost, else superseded at its
// elapsed time when it lost, or when it returned if that was earlier (a
// coordinator that handles the win late does not make the loser slower
// than it was), as node.DoHedged does. hc.mu is held.
func (t *hedgeTry) superseded(parent context.Context, end time.Time, at time.Duration) {
	switch {
	case t.ended:
	case ours(parent, t.ctx) && !returnedBefore(t.ctx, end):
		t.end(timeout.TimedOut, at)
	case t.left:
		t.end(timeout.Canceled, at)
	default:
		t.end(timeout.Superseded, min(t.lost, at))
	}
}
