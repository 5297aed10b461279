package timeoutgrpc

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/adaptivetimeout/adaptivetimeout/internal/policytest"
	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// toH makes "h" every call's destination.
var toH = WithDestination(func(context.Context, string, *grpc.ClientConn) string { return "h" })

// invokeFunc adapts a function of the call's context and request to a
// grpc.UnaryInvoker that replies "ok" when it returns nil.
func invokeFunc(f func(ctx context.Context, req *wrapperspb.StringValue) error) grpc.UnaryInvoker {
	return func(ctx context.Context, _ string, req, reply any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		if err := f(ctx, req.(*wrapperspb.StringValue)); err != nil {
			return err
		}
		reply.(*wrapperspb.StringValue).Value = "ok"
		return nil
	}
}

// hangUntilDone is a call that ends only with its context.
func hangUntilDone(ctx context.Context, _ *wrapperspb.StringValue) error {
	<-ctx.Done()
	return status.FromContextError(ctx.Err()).Err()
}

// call1 sends one unary call of "x" to "h" through an interceptor on p.
func call1(ctx context.Context, p timeout.Policy, invoker grpc.UnaryInvoker, opts ...Option) (*wrapperspb.StringValue, error) {
	reply := new(wrapperspb.StringValue)
	err := UnaryClientInterceptor(p, append([]Option{toH}, opts...)...)(ctx, "/test.Echo/Unary", wrapperspb.String("x"), reply, nil, invoker)
	return reply, err
}

// TestObservedAtTheCallsEnd: Observe's now is the moment the call ended,
// its start plus its latency, not its start.
func TestObservedAtTheCallsEnd(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { now = now.Add(7 * time.Millisecond); return now }
	p := policytest.New(time.Second)
	_, err := call1(context.Background(), p, invokeFunc(func(context.Context, *wrapperspb.StringValue) error { return nil }), WithClock(clock))
	require.NoError(t, err)
	require.Equal(t, []policytest.Observation{{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 7 * time.Millisecond}}, p.Observed())
	require.Equal(t, []time.Time{time.Unix(1_700_000_000, 0).Add(14 * time.Millisecond)}, p.ObservedAt())
}

// TestUnaryDeadlineWithInjectedClock: with WithClock, the call's deadline
// is its timeout on the runtime's timers, not a reading of the injected
// clock.
func TestUnaryDeadlineWithInjectedClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ahead := time.Now().Add(time.Hour)
		clock := func() time.Time { return ahead }
		var deadline time.Time
		_, err := call1(context.Background(), policytest.New(100*time.Millisecond), invokeFunc(func(ctx context.Context, _ *wrapperspb.StringValue) error {
			deadline, _ = ctx.Deadline()
			return nil
		}), WithClock(clock))
		require.NoError(t, err)
		require.Equal(t, time.Now().Add(100*time.Millisecond), deadline)
	})
}

// TestUnaryCallerDeadlineReportedByTheServer: a DeadlineExceeded status
// that comes at the caller's own deadline (the server's, or gRPC's, report
// of it, ahead of the caller's context) is the caller's: Canceled, and not
// ErrTimeout. Both wake-ups are ready at once, so repeat to give either
// order its turn.
func TestUnaryCallerDeadlineReportedByTheServer(t *testing.T) {
	for range 32 {
		synctest.Test(t, func(t *testing.T) {
			p := policytest.New(time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := call1(ctx, p, invokeFunc(func(context.Context, *wrapperspb.StringValue) error {
				time.Sleep(50 * time.Millisecond) // it does not wait for its context
				return status.Error(codes.DeadlineExceeded, "deadline exceeded")
			}))
			require.Equal(t, codes.DeadlineExceeded, status.Code(err))
			require.NotErrorIs(t, err, ErrTimeout)
			require.Equal(t, []timeout.Outcome{timeout.Canceled}, p.Outcomes())
		})
	}
}

// TestProbeTimeoutNotBeyondTheTimeout: a probe timeout that is not beyond
// the timeout is no probe: the call ends at its timeout as any other.
func TestProbeTimeoutNotBeyondTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(100 * time.Millisecond)
		p.OfferProbe(100 * time.Millisecond)
		require.Equal(t, 100*time.Millisecond, p.Decide("h", 1, time.Now()).ProbeTimeout)
		_, err := call1(context.Background(), p, invokeFunc(hangUntilDone))
		require.ErrorIs(t, err, ErrTimeout)
		require.Zero(t, p.Probes())
		require.Equal(t, []policytest.Observation{{Dest: "h", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 100 * time.Millisecond}}, p.Observed())
	})
}

// TestShadowProbeSendsItsOwnRequest: a shadow probe sends a copy of the
// request, so a caller that reuses its request once it got the timeout's
// error changes nothing the probe sends later (a call still waiting for
// its connection, say).
func TestShadowProbeSendsItsOwnRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(100 * time.Millisecond)
		p.OfferProbe(time.Second)
		var sent atomic.Value
		req := wrapperspb.String("x")
		err := UnaryClientInterceptor(p, toH)(context.Background(), "/test.Echo/Unary", req, new(wrapperspb.StringValue), nil,
			invokeFunc(func(_ context.Context, r *wrapperspb.StringValue) error {
				time.Sleep(300 * time.Millisecond) // sent only now
				sent.Store(r.GetValue())
				return nil
			}))
		require.ErrorIs(t, err, ErrTimeout)
		req.Value = "changed"
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, "x", sent.Load())
		require.Equal(t, []policytest.Observation{{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 300 * time.Millisecond, Probe: true}}, p.Observed())
	})
}

// TestProbeableCallerCause: when the caller ends a probeable call, the
// call's context carries the caller's cause, not ErrTimeout.
func TestProbeableCallerCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(100 * time.Millisecond)
		p.OfferProbe(time.Second)
		gone := errors.New("the caller is gone")
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(20*time.Millisecond, func() { cancel(gone) })
		var cause error
		_, err := call1(ctx, p, invokeFunc(func(ctx context.Context, _ *wrapperspb.StringValue) error {
			<-ctx.Done()
			cause = context.Cause(ctx)
			return status.FromContextError(ctx.Err()).Err()
		}))
		require.Equal(t, codes.Canceled, status.Code(err))
		require.Same(t, gone, cause)
		require.Equal(t, []policytest.Observation{{Dest: "h", Attempt: 1, Outcome: timeout.Canceled, Elapsed: 20 * time.Millisecond}}, p.Observed())
	})
}

// TestProbeableCallerLeftBeforeTheReply: a probeable call the caller left
// whose invoker (one that does not watch its context) comes back
// afterwards is decided as on the other path: a reply is the caller's,
// with its header, Completed at its latency (the destination answered); an
// error is the caller's status, Canceled, and nothing of the call is
// written into the caller's. (A caller's deadline never comes first on
// this path: it leaves room for the probe timeout, beyond the timeout.)
func TestProbeableCallerLeftBeforeTheReply(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error // the invoker's, after the caller left
		outcome timeout.Outcome
	}{
		{"a reply", nil, timeout.Completed},
		{"an application's error", status.Error(codes.NotFound, "not found"), timeout.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := policytest.New(100 * time.Millisecond)
				p.OfferProbe(time.Second)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				time.AfterFunc(20*time.Millisecond, cancel)
				header := metadata.MD{"k": {"v"}}
				var got metadata.MD
				reply := new(wrapperspb.StringValue)
				err := UnaryClientInterceptor(p, toH)(ctx, "/test.Echo/Unary", wrapperspb.String("x"), reply, nil,
					func(_ context.Context, _ string, _, r any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
						time.Sleep(50 * time.Millisecond) // it does not wait for its context
						for _, o := range opts {
							if h, ok := o.(grpc.HeaderCallOption); ok {
								*h.HeaderAddr = header
							}
						}
						if tc.err != nil {
							return tc.err
						}
						r.(*wrapperspb.StringValue).Value = "ok"
						return nil
					}, grpc.Header(&got))
				require.Equal(t, []policytest.Observation{{Dest: "h", Attempt: 1, Outcome: tc.outcome, Elapsed: 50 * time.Millisecond}}, p.Observed())
				if tc.err == nil {
					require.NoError(t, err)
					require.Equal(t, "ok", reply.GetValue())
					require.Equal(t, header, got)
					return
				}
				require.Equal(t, codes.Canceled, status.Code(err), "the caller's status")
				require.Empty(t, reply.GetValue())
				require.Nil(t, got)
			})
		})
	}
}

// TestShadowProbeOnlyIfUnanswered: a reply that arrives at the very moment
// of the timeout goes either to the caller or to a probe, and the call is
// observed once either way: a call that has returned is never made a probe
// (nobody would observe it, and its reservation would stay). Both
// wake-ups are ready at once, so repeat to give either order its turn.
func TestShadowProbeOnlyIfUnanswered(t *testing.T) {
	for range 32 {
		synctest.Test(t, func(t *testing.T) {
			p := policytest.New(100 * time.Millisecond)
			p.OfferProbe(time.Second)
			_, err := call1(context.Background(), p, invokeFunc(func(context.Context, *wrapperspb.StringValue) error {
				time.Sleep(100 * time.Millisecond) // exactly the timeout
				return nil
			}))
			if err != nil {
				require.ErrorIs(t, err, ErrTimeout)
			}
			synctest.Wait()
			require.Len(t, p.Observed(), 1)
			require.Equal(t, timeout.Completed, p.Observed()[0].Outcome)
			require.False(t, p.InFlight("h"), "no reservation left")
		})
	}
}

// fakeStream is a grpc.ClientStream whose every call fails with err once
// ctx has ended, and blocks until then.
type fakeStream struct {
	grpc.ClientStream
	ctx context.Context
}

func (s fakeStream) wait() error {
	<-s.ctx.Done()
	return status.FromContextError(s.ctx.Err()).Err()
}

func (s fakeStream) SendMsg(any) error            { return s.wait() }
func (s fakeStream) RecvMsg(any) error            { return s.wait() }
func (s fakeStream) Header() (metadata.MD, error) { return nil, s.wait() }
func (s fakeStream) Context() context.Context     { return s.ctx }
func (s fakeStream) CloseSend() error             { return nil }
func (s fakeStream) Trailer() metadata.MD         { return nil }
func (fakeStream) String() string                 { return "fakeStream" }
func (s fakeStream) finishOf(opts []grpc.CallOption) func(error) {
	for _, o := range opts {
		if f, ok := o.(grpc.OnFinishCallOption); ok {
			return f.OnFinish
		}
	}
	return nil
}

// openFake opens a stream to "h" through a stream interceptor on p over a
// streamer that returns a fakeStream on the stream's context (and, in
// finish, the OnFinish callback the interceptor gave).
func openFake(t *testing.T, ctx context.Context, p timeout.Policy) (grpc.ClientStream, *func(error), *context.Context) {
	t.Helper()
	var finish func(error)
	var sctx context.Context
	streamer := func(ctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s := fakeStream{ctx: ctx}
		finish, sctx = s.finishOf(opts), ctx
		return s, nil
	}
	cs, err := StreamClientInterceptor(p, toH)(ctx, streamDesc, nil, "/test.Echo/Stream", streamer)
	require.NoError(t, err)
	return cs, &finish, &sctx
}

// TestStreamTimesOutAtItsTimeout: a stream without a first message ends at
// its timeout exactly, and its other calls then report our timeout too.
func TestStreamTimesOutAtItsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(100 * time.Millisecond)
		start := time.Now()
		cs, _, _ := openFake(t, context.Background(), p)
		err := cs.SendMsg(wrapperspb.String("x"))
		require.Equal(t, 100*time.Millisecond, time.Since(start))
		require.ErrorIs(t, err, ErrTimeout, "SendMsg")
		_, err = cs.Header()
		require.ErrorIs(t, err, ErrTimeout, "Header")
		require.ErrorIs(t, cs.RecvMsg(new(wrapperspb.StringValue)), ErrTimeout, "RecvMsg")
		require.Equal(t, []policytest.Observation{{Dest: "h", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 100 * time.Millisecond}}, p.Observed())
	})
}

// TestStreamCallerLeftBeforeTheTimeout: a stream whose caller left before
// our timeout, and that nothing ended since, is the caller's when the
// timeout comes: Canceled, and its context keeps the caller's cause.
func TestStreamCallerLeftBeforeTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(100 * time.Millisecond)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		_, _, sctx := openFake(t, ctx, p)
		time.Sleep(time.Second)
		require.Equal(t, []policytest.Observation{{Dest: "h", Attempt: 1, Outcome: timeout.Canceled, Elapsed: 100 * time.Millisecond}}, p.Observed())
		require.NotErrorIs(t, context.Cause(*sctx), ErrTimeout)
	})
}

// TestStreamFinishReleases: when gRPC reports the stream finished, the
// stream's context is released at once.
func TestStreamFinishReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(time.Second)
		_, finish, sctx := openFake(t, context.Background(), p)
		require.NotNil(t, *finish)
		(*finish)(nil)
		require.Error(t, (*sctx).Err(), "released")
		require.Equal(t, []policytest.Observation{{Dest: "h", Attempt: 1, Outcome: timeout.Completed}}, p.Observed())
	})
}

// TestStreamEstablishFails: a streamer that fails at once, without
// finishing the stream, is observed at once by its error.
func TestStreamEstablishFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(time.Second)
		streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
			return nil, status.Error(codes.Unavailable, "no connection")
		}
		cs, err := StreamClientInterceptor(p, toH)(context.Background(), streamDesc, nil, "/test.Echo/Stream", streamer)
		require.Nil(t, cs)
		require.Equal(t, codes.Unavailable, status.Code(err))
		require.Equal(t, []policytest.Observation{{Dest: "h", Attempt: 1, Outcome: timeout.Failed}}, p.Observed())
		time.Sleep(2 * time.Second)
		require.Len(t, p.Observed(), 1)
	})
}

// fixedHedger is a test Policy that is also a timeout.Hedger: every call
// may hedge after 21 ms, and the budget always allows it.
type fixedHedger struct {
	*policytest.Policy
	spent atomic.Int32
}

func (h *fixedHedger) HedgeDelay(string, time.Time) (time.Duration, bool) {
	return 21 * time.Millisecond, true
}

func (h *fixedHedger) SpendHedge(time.Time) bool {
	h.spent.Add(1)
	return true
}

var hedgeAll = WithHedging(func(string) bool { return true })

// calls is a unary invoker whose n-th call (0, 1, …) is fs[n].
type calls struct {
	fs []func(ctx context.Context, req *wrapperspb.StringValue) error
	n  atomic.Int32
}

func (c *calls) invoker() grpc.UnaryInvoker {
	return func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		i := int(c.n.Add(1)) - 1
		return invokeFunc(c.fs[i])(ctx, m, req, reply, cc, opts...)
	}
}

// after answers after d, unless the call's context ends first.
func after(d time.Duration) func(context.Context, *wrapperspb.StringValue) error {
	return func(ctx context.Context, _ *wrapperspb.StringValue) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// TestHedgeNotWithCallOptionsToFill: a call with a grpc.Header, Trailer or
// Peer option is never hedged (two attempts cannot fill one).
func TestHedgeNotWithCallOptionsToFill(t *testing.T) {
	var md metadata.MD
	var from peer.Peer
	for name, opt := range map[string]grpc.CallOption{"header": grpc.Header(&md), "trailer": grpc.Trailer(&md), "peer": grpc.Peer(&from)} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := &fixedHedger{Policy: policytest.New(time.Second)}
				c := &calls{fs: []func(context.Context, *wrapperspb.StringValue) error{after(100 * time.Millisecond), after(5 * time.Millisecond)}}
				err := UnaryClientInterceptor(p, toH, hedgeAll)(context.Background(), "/test.Echo/Unary",
					wrapperspb.String("x"), new(wrapperspb.StringValue), nil, c.invoker(), opt)
				require.NoError(t, err)
				require.EqualValues(t, 1, c.n.Load(), "no hedge")
			})
		})
	}
}

// TestNoHedgeAfterTheCallerLeft: once the caller's context has ended, the
// hedge delay sends nothing and spends no budget, even if the first
// attempt has not returned yet.
func TestNoHedgeAfterTheCallerLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fixedHedger{Policy: policytest.New(time.Second)}
		slow := func(context.Context, *wrapperspb.StringValue) error { // it does not watch its context
			time.Sleep(100 * time.Millisecond)
			return nil
		}
		c := &calls{fs: []func(context.Context, *wrapperspb.StringValue) error{slow, slow}}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(10*time.Millisecond, cancel)
		_, _ = call1(ctx, p, c.invoker(), hedgeAll)
		synctest.Wait()
		require.EqualValues(t, 1, c.n.Load(), "no hedge")
		require.Zero(t, p.spent.Load(), "no budget spent")
	})
}

// TestHedgeApplicationErrorWins: an application error is an answer: it
// wins as a reply does, and the other attempt is superseded.
func TestHedgeApplicationErrorWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fixedHedger{Policy: policytest.New(time.Second)}
		notFound := func(context.Context, *wrapperspb.StringValue) error {
			time.Sleep(5 * time.Millisecond)
			return status.Error(codes.NotFound, "no such key")
		}
		c := &calls{fs: []func(context.Context, *wrapperspb.StringValue) error{after(time.Hour), notFound}}
		start := time.Now()
		_, err := call1(context.Background(), p, c.invoker(), hedgeAll)
		require.Equal(t, codes.NotFound, status.Code(err))
		require.Equal(t, 26*time.Millisecond, time.Since(start))
		synctest.Wait()
		require.Equal(t, []policytest.Observation{
			{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 5 * time.Millisecond},
			{Dest: "h", Attempt: 1, Outcome: timeout.Superseded, Elapsed: 26 * time.Millisecond},
		}, p.Observed())
	})
}

// TestHedgeBothFailFirstError: when the first attempt and its hedge both
// fail, the first one's error is returned, whichever failed last.
func TestHedgeBothFailFirstError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fixedHedger{Policy: policytest.New(time.Second)}
		fail := func(d time.Duration, msg string) func(context.Context, *wrapperspb.StringValue) error {
			return func(context.Context, *wrapperspb.StringValue) error {
				time.Sleep(d)
				return status.Error(codes.Unavailable, msg)
			}
		}
		c := &calls{fs: []func(context.Context, *wrapperspb.StringValue) error{fail(50*time.Millisecond, "first"), fail(39*time.Millisecond, "hedge")}}
		start := time.Now()
		_, err := call1(context.Background(), p, c.invoker(), hedgeAll)
		require.Equal(t, "first", status.Convert(err).Message())
		require.Equal(t, 60*time.Millisecond, time.Since(start), "the hedge was waited for")
		require.Equal(t, []timeout.Outcome{timeout.Failed, timeout.Failed}, p.Outcomes())
	})
}

// TestHedgeLoserTimedOut: a loser whose own timeout had ended it before
// the other attempt won is observed as timed out, not superseded.
func TestHedgeLoserTimedOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fixedHedger{Policy: policytest.New(250 * time.Millisecond)}
		late := func(ctx context.Context, _ *wrapperspb.StringValue) error { // it reports its context's end late
			time.Sleep(400 * time.Millisecond)
			return status.FromContextError(ctx.Err()).Err()
		}
		c := &calls{fs: []func(context.Context, *wrapperspb.StringValue) error{late, after(235 * time.Millisecond)}}
		_, err := call1(context.Background(), p, c.invoker(), hedgeAll)
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []policytest.Observation{
			{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 235 * time.Millisecond},
			{Dest: "h", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 400 * time.Millisecond},
		}, p.Observed())
	})
}

// TestHedgeLoserSendsItsOwnRequest: a loser still sending when the winner
// returns sends a copy of the request, which the caller may then reuse.
func TestHedgeLoserSendsItsOwnRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fixedHedger{Policy: policytest.New(time.Second)}
		var sent atomic.Value
		slowSend := func(_ context.Context, r *wrapperspb.StringValue) error {
			time.Sleep(100 * time.Millisecond) // sent only now
			sent.Store(r.GetValue())
			return nil
		}
		c := &calls{fs: []func(context.Context, *wrapperspb.StringValue) error{slowSend, after(5 * time.Millisecond)}}
		req := wrapperspb.String("x")
		err := UnaryClientInterceptor(p, toH, hedgeAll)(context.Background(), "/test.Echo/Unary", req, new(wrapperspb.StringValue), nil, c.invoker())
		require.NoError(t, err)
		req.Value = "changed"
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, "x", sent.Load())
	})
}

// TestHedgeAttemptsAnswerTogether: when both attempts answer at the same
// moment, one wins and the other is observed (superseded), whichever
// order their results are taken in. Repeat to give either order its turn.
func TestHedgeAttemptsAnswerTogether(t *testing.T) {
	for range 64 {
		synctest.Test(t, func(t *testing.T) {
			p := &fixedHedger{Policy: policytest.New(time.Second)}
			c := &calls{fs: []func(context.Context, *wrapperspb.StringValue) error{after(100 * time.Millisecond), after(79 * time.Millisecond)}}
			_, err := call1(context.Background(), p, c.invoker(), hedgeAll)
			require.NoError(t, err)
			synctest.Wait()
			require.ElementsMatch(t, []timeout.Outcome{timeout.Completed, timeout.Superseded}, p.Outcomes())
		})
	}
}

// TestNestedInterceptors: an outer adaptive timeout that ends a call going
// through an inner interceptor of this package (the inner one's caller's
// context, ended with ErrTimeout) is the inner one's caller's: the inner
// Policy observes it as Canceled, as timeoutfailsafe does, not as a
// timeout of its own at its own, longer, timeout. So whether or not the
// inner call could become a probe.
func TestNestedInterceptors(t *testing.T) {
	for _, probe := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			outer, inner := policytest.New(50*time.Millisecond), policytest.New(time.Second)
			if probe {
				inner.OfferProbe(time.Minute)
			}
			innerI := UnaryClientInterceptor(inner, toH)
			through := func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
				return innerI(ctx, m, req, reply, cc, invokeFunc(hangUntilDone), opts...)
			}
			_, err := call1(context.Background(), outer, through)
			require.ErrorIs(t, err, ErrTimeout, "the outer timeout ended it")
			require.Equal(t, codes.DeadlineExceeded, status.Code(err))
			require.Equal(t, []policytest.Observation{{Dest: "h", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 50 * time.Millisecond}}, outer.Observed())
			require.Equal(t, []policytest.Observation{{Dest: "h", Attempt: 1, Outcome: timeout.Canceled, Elapsed: 50 * time.Millisecond}}, inner.Observed(),
				"probeable: %v", probe)
			require.Zero(t, inner.Probes())
		})
	}
}

// TestUnaryOurDeadlineReportedByTheServer: a DeadlineExceeded status that
// comes at our timeout (the server's, or gRPC's, report of it, ahead of
// the call's context) is our timeout: TimedOut, matching ErrTimeout. Both
// wake-ups are ready at once, so repeat to give either order its turn.
func TestUnaryOurDeadlineReportedByTheServer(t *testing.T) {
	for range 32 {
		synctest.Test(t, func(t *testing.T) {
			p := policytest.New(50 * time.Millisecond)
			_, err := call1(context.Background(), p, invokeFunc(func(context.Context, *wrapperspb.StringValue) error {
				time.Sleep(50 * time.Millisecond) // it does not wait for its context
				return status.Error(codes.DeadlineExceeded, "deadline exceeded")
			}))
			require.Equal(t, codes.DeadlineExceeded, status.Code(err))
			require.ErrorIs(t, err, ErrTimeout)
			require.Equal(t, []timeout.Outcome{timeout.TimedOut}, p.Outcomes())
		})
	}
}

// eofStream is a fakeStream whose SendMsg reports io.EOF once its context
// ended, as gRPC's does: the stream's status comes from RecvMsg.
type eofStream struct{ fakeStream }

func (s eofStream) SendMsg(any) error {
	<-s.ctx.Done()
	return io.EOF
}

// TestStreamSendEOFUnwrapped: io.EOF from SendMsg after our timeout is
// handed on as it is (callers compare it with ==, as gRPC documents); the
// timeout's error comes from RecvMsg.
func TestStreamSendEOFUnwrapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(100 * time.Millisecond)
		streamer := func(ctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
			return eofStream{fakeStream{ctx: ctx}}, nil
		}
		cs, err := StreamClientInterceptor(p, toH)(context.Background(), streamDesc, nil, "/test.Echo/Stream", streamer)
		require.NoError(t, err)
		require.Equal(t, io.EOF, cs.SendMsg(wrapperspb.String("x")))
		require.ErrorIs(t, cs.RecvMsg(new(wrapperspb.StringValue)), ErrTimeout)
		require.Equal(t, []timeout.Outcome{timeout.TimedOut}, p.Outcomes())
	})
}

// TestTimedOutThenCallerCancels: once our timeout has ended a call, a
// cancellation of the caller's that comes while the invoker is still
// returning changes nothing: TimedOut, matching ErrTimeout, whether the
// call could become a probe (and the probe was declined at the timeout)
// or not, as node.Do and timeouthttp say.
func TestTimedOutThenCallerCancels(t *testing.T) {
	for _, probe := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			p := policytest.New(100 * time.Millisecond)
			if probe {
				p.OfferProbe(time.Second)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			time.AfterFunc(150*time.Millisecond, cancel)
			_, err := call1(ctx, declining{p}, invokeFunc(func(ctx context.Context, _ *wrapperspb.StringValue) error {
				time.Sleep(200 * time.Millisecond) // it reports its context's end late
				return status.FromContextError(ctx.Err()).Err()
			}))
			require.ErrorIs(t, err, ErrTimeout, "probeable: %v", probe)
			require.Equal(t, codes.DeadlineExceeded, status.Code(err))
			require.Equal(t, []policytest.Observation{{Dest: "h", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 200 * time.Millisecond}}, p.Observed(),
				"probeable: %v", probe)
			require.Zero(t, p.Probes())
		})
	}
}

// TestHedgeLoserAnsweredAfterItsTimeout: a loser whose own timeout had
// ended it before the other attempt won is timed out even when its invoker
// then returns a reply (it did not watch its context), as node.DoHedged
// and timeouthttp say: our timeout came first.
func TestHedgeLoserAnsweredAfterItsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fixedHedger{Policy: policytest.New(250 * time.Millisecond)}
		late := func(context.Context, *wrapperspb.StringValue) error {
			time.Sleep(400 * time.Millisecond)
			return nil
		}
		c := &calls{fs: []func(context.Context, *wrapperspb.StringValue) error{late, after(235 * time.Millisecond)}}
		reply, err := call1(context.Background(), p, c.invoker(), hedgeAll)
		require.NoError(t, err)
		require.Equal(t, "ok", reply.GetValue())
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []policytest.Observation{
			{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 235 * time.Millisecond},
			{Dest: "h", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 400 * time.Millisecond},
		}, p.Observed())
	})
}

// TestHedgeLoserSupersededBeforeItsDeadline: a loser that lost before its
// own deadline is superseded at the time it lost, even when it reports a
// DeadlineExceeded status after that deadline has passed (as a server
// that knew the deadline may): the other attempt's win came first, as
// node.DoHedged and timeouthttp say.
func TestHedgeLoserSupersededBeforeItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fixedHedger{Policy: policytest.New(300 * time.Millisecond)}
		late := func(context.Context, *wrapperspb.StringValue) error {
			time.Sleep(400 * time.Millisecond) // it does not watch its context
			return status.Error(codes.DeadlineExceeded, "deadline exceeded")
		}
		c := &calls{fs: []func(context.Context, *wrapperspb.StringValue) error{late, after(100 * time.Millisecond)}}
		_, err := call1(context.Background(), p, c.invoker(), hedgeAll)
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []policytest.Observation{
			{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 100 * time.Millisecond},
			{Dest: "h", Attempt: 1, Outcome: timeout.Superseded, Elapsed: 121 * time.Millisecond},
		}, p.Observed())
	})
}

// TestAnsweredAfterTheCallerLeft: a reply that comes after the caller's
// cancellation (an invoker that does not watch its context) is the
// destination's answer, the caller's reply, Completed at its latency,
// whether or not the call could become a probe, as node.Do has a fn that
// returns nil after its caller left, and as timeouthttp has a response
// whose body arrives then.
func TestAnsweredAfterTheCallerLeft(t *testing.T) {
	for _, probe := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			p := policytest.New(time.Second)
			if probe {
				p.OfferProbe(time.Minute)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			time.AfterFunc(20*time.Millisecond, cancel)
			reply, err := call1(ctx, p, invokeFunc(func(context.Context, *wrapperspb.StringValue) error {
				time.Sleep(50 * time.Millisecond) // it does not watch its context
				return nil
			}))
			require.NoError(t, err, "probeable: %v", probe)
			require.Equal(t, "ok", reply.GetValue(), "probeable: %v", probe)
			require.Equal(t, []policytest.Observation{{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 50 * time.Millisecond}}, p.Observed(),
				"probeable: %v", probe)
		})
	}
}

// TestHedgeLoserAfterTheCallerLeft: when the caller's context ended
// before the other attempt won (an answer that did not watch its
// context), a loser still running is the caller's, Canceled, not
// superseded: the cancellation came first, as node.DoHedged and
// timeouthttp say. The winner's reply is an answer, as in node.Do.
func TestHedgeLoserAfterTheCallerLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fixedHedger{Policy: policytest.New(time.Second)}
		slow := func(d time.Duration) func(context.Context, *wrapperspb.StringValue) error {
			return func(context.Context, *wrapperspb.StringValue) error {
				time.Sleep(d) // it does not watch its context
				return nil
			}
		}
		c := &calls{fs: []func(context.Context, *wrapperspb.StringValue) error{slow(200 * time.Millisecond), slow(50 * time.Millisecond)}}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		time.AfterFunc(40*time.Millisecond, cancel)
		_, err := call1(ctx, p, c.invoker(), hedgeAll)
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []policytest.Observation{
			{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 50 * time.Millisecond},
			{Dest: "h", Attempt: 1, Outcome: timeout.Canceled, Elapsed: 200 * time.Millisecond},
		}, p.Observed())
	})
}

// TestErrorBeforeTheDeadline: an error the invoker returned 1 ms before our
// timeout, or before the caller's deadline, is its own, Completed or
// Failed by its status at the latency measured, and not ErrTimeout, even
// when the deadline has ended the call's context by the time the
// interceptor looks at it (here the clock, read as the invoker returns,
// holds it for 2 ms), as node.Do decides by when fn returned.
func TestErrorBeforeTheDeadline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		caller  time.Duration // the caller's deadline; 0: none
		code    codes.Code
		outcome timeout.Outcome
	}{
		{"an answer, before our timeout", 0, codes.NotFound, timeout.Completed},
		{"a refusal, before our timeout", 0, codes.Unavailable, timeout.Failed},
		{"a refusal, before the caller's deadline", 250 * time.Millisecond, codes.Unavailable, timeout.Failed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var hold atomic.Bool
				clock := func() time.Time {
					now := time.Now()
					if hold.CompareAndSwap(true, false) {
						time.Sleep(2 * time.Millisecond) // past the deadline: the call's context ends
					}
					return now
				}
				p := policytest.New(250 * time.Millisecond)
				ctx := context.Background()
				if tc.caller > 0 {
					p = policytest.New(time.Second)
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.caller)
					defer cancel()
				}
				_, err := call1(ctx, p, invokeFunc(func(context.Context, *wrapperspb.StringValue) error {
					time.Sleep(249 * time.Millisecond)
					hold.Store(true)
					return status.Error(tc.code, "its own")
				}), WithClock(clock))
				require.Equal(t, tc.code, status.Code(err))
				require.NotErrorIs(t, err, ErrTimeout)
				require.Equal(t, []policytest.Observation{{Dest: "h", Attempt: 1, Outcome: tc.outcome, Elapsed: 249 * time.Millisecond}}, p.Observed())
			})
		})
	}
}

// TestHedgeErrorBeforeTheTimeout: a hedged attempt's error that came back
// 1 ms before its timeout is its own, though the timeout has ended its
// context by the time the call's coordinator takes it (here the clock,
// read as the invoker returns, holds the attempt for 2 ms before it is
// handed over), as node.DoHedged decides by when fn returned.
func TestHedgeErrorBeforeTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hold atomic.Bool
		clock := func() time.Time {
			now := time.Now()
			if hold.CompareAndSwap(true, false) {
				time.Sleep(2 * time.Millisecond) // past the timeout: the attempt's context ends
			}
			return now
		}
		p := &fixedHedger{Policy: policytest.New(250 * time.Millisecond)}
		refused := func(context.Context, *wrapperspb.StringValue) error {
			time.Sleep(249 * time.Millisecond)
			hold.Store(true)
			return status.Error(codes.Unavailable, "refused")
		}
		c := &calls{fs: []func(context.Context, *wrapperspb.StringValue) error{refused, after(time.Hour)}}
		_, err := call1(context.Background(), p, c.invoker(), hedgeAll, WithClock(clock))
		require.Equal(t, codes.Unavailable, status.Code(err), "the first attempt's error")
		require.NotErrorIs(t, err, ErrTimeout)
		require.Equal(t, []policytest.Observation{
			{Dest: "h", Attempt: 1, Outcome: timeout.Failed, Elapsed: 249 * time.Millisecond},
			{Dest: "h", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 250 * time.Millisecond},
		}, p.Observed())
	})
}

// TestHedgeLoserReturnedInTime: a loser whose invoker returned before its
// own timeout, though that timeout has ended its context by the time the
// call's coordinator, taking the winner, gets to it (here the clock holds
// the coordinator for 3 ms as it handles the win, past the loser's
// timeout), is superseded, not timed out, as node.DoHedged decides a loser
// by when its fn returned. Both are observed at their latencies when their
// invokers returned: the winner's 227 ms from its start, the loser's
// 249 ms (earlier than the coordinator's reading of the win, 251 ms), as
// node.DoHedged reads them when fn returned and as timeouthttp does: the
// coordinator's delay is not the destination's.
func TestHedgeLoserReturnedInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hold atomic.Bool
		clock := testutil.CallerHeldClock(&hold, 3*time.Millisecond) // past the loser's timeout
		p := &fixedHedger{Policy: policytest.New(250 * time.Millisecond)}
		loser := func(context.Context, *wrapperspb.StringValue) error {
			time.Sleep(249 * time.Millisecond) // it does not watch its context
			return nil
		}
		winner := func(context.Context, *wrapperspb.StringValue) error {
			time.Sleep(227 * time.Millisecond) // from 21 ms: at 248 ms
			hold.Store(true)
			return nil
		}
		c := &calls{fs: []func(context.Context, *wrapperspb.StringValue) error{loser, winner}}
		_, err := call1(context.Background(), p, c.invoker(), hedgeAll, WithClock(clock))
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []policytest.Observation{
			{Dest: "h", Attempt: 1, Outcome: timeout.Superseded, Elapsed: 249 * time.Millisecond}, // when it returned, before the win was handled
			{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 227 * time.Millisecond},  // when it returned, not when it was handled
		}, p.Observed())
	})
}

// TestHedgeAnswerInHandBeforeTheHedge: the first attempt's return that
// the call's coordinator has in hand when it handles the hedge delay's
// passing comes first, as in node.DoHedged and timeouthttp: a reply wins,
// and no hedge is sent (nothing spent, the invoker called once); an
// Unavailable is the call's error, as it is before the delay. Here the
// clock holds the coordinator (and only it: not the attempts' goroutines,
// which read it as their invokers return) for 2 ms on its first read after
// the first call started: the read that handles the delay's passing, when the timer
// is what it takes (or else the one that handles the reply). The invoker
// returns at the delay, 21 ms, the same instant the timer fires, so either
// may be taken first (repeated, so that each gets its turn), or 1 ms
// later, while the coordinator is held on the timer's firing.
func TestHedgeAnswerInHandBeforeTheHedge(t *testing.T) {
	for _, tc := range []struct {
		name    string
		returns time.Duration
		refused bool
		runs    int
	}{
		{"a reply at the delay", 21 * time.Millisecond, false, 64},
		{"a reply while the delay's passing is handled", 22 * time.Millisecond, false, 1},
		{"a refusal at the delay", 21 * time.Millisecond, true, 64},
		{"a refusal while the delay's passing is handled", 22 * time.Millisecond, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range tc.runs {
				synctest.Test(t, func(t *testing.T) {
					var hold atomic.Bool
					clock := testutil.CallerHeldClock(&hold, 2*time.Millisecond)
					p := &fixedHedger{Policy: policytest.New(time.Second)}
					first := func(context.Context, *wrapperspb.StringValue) error {
						hold.Store(true) // the coordinator's start is read
						time.Sleep(tc.returns)
						if tc.refused {
							return status.Error(codes.Unavailable, "refused")
						}
						return nil
					}
					c := &calls{fs: []func(context.Context, *wrapperspb.StringValue) error{first, after(time.Millisecond)}}
					reply, err := call1(context.Background(), p, c.invoker(), hedgeAll, WithClock(clock))
					if tc.refused {
						require.Equal(t, codes.Unavailable, status.Code(err))
					} else {
						require.NoError(t, err)
						require.Equal(t, "ok", reply.GetValue())
					}
					synctest.Wait()
					require.EqualValues(t, 1, c.n.Load(), "no hedge sent")
					require.Zero(t, p.spent.Load(), "no hedge token spent")
					want := timeout.Completed
					if tc.refused {
						want = timeout.Failed
					}
					require.Equal(t, []timeout.Outcome{want}, p.Outcomes())
				})
			}
		})
	}
}

// TestProbeableErrorBeforeTheTimeout: an error the invoker of a call that
// may become a probe returned 1 ms before its timeout is its own, by its
// status, not a timeout, though the timer has fired too by the time the
// interceptor looks: the return in hand comes first, and no probe is taken
// for it, as on the other path (TestErrorBeforeTheDeadline), in node.Do and
// in timeouthttp. Here the caller's context holds the interceptor for 101
// ms as it enters its wait, so the return (99 ms) and the timer's firing
// (100 ms) are both ready when it looks and Go's select takes either:
// repeated, so that each gets its turn. The latency is the invoker's,
// 99 ms, not the time the interceptor got to it.
func TestProbeableErrorBeforeTheTimeout(t *testing.T) {
	for range 64 {
		synctest.Test(t, func(t *testing.T) {
			p := policytest.New(100 * time.Millisecond)
			p.OfferProbe(time.Second)
			ctx := testutil.SlowDone(context.Background(), 101*time.Millisecond)
			_, err := call1(ctx, p, invokeFunc(func(context.Context, *wrapperspb.StringValue) error {
				time.Sleep(99 * time.Millisecond)
				return status.Error(codes.Unavailable, "refused")
			}))
			require.True(t, ctx.Held())
			require.Equal(t, codes.Unavailable, status.Code(err))
			require.NotErrorIs(t, err, ErrTimeout)
			synctest.Wait()
			require.Equal(t, []policytest.Observation{{Dest: "h", Attempt: 1, Outcome: timeout.Failed, Elapsed: 99 * time.Millisecond}}, p.Observed())
			require.Zero(t, p.Probes())
			require.False(t, p.InFlight("h"), "no reservation left")
		})
	}
}

// TestProbeableReplyBeforeTheCallerLeft: a reply the invoker of a call
// that may become a probe returned before the caller cancelled is the
// caller's, Completed, though the cancellation is in hand too by the time
// the interceptor looks, as on the other path and in node.DoHedged: the
// return in hand comes first. Here the caller's context holds the
// interceptor for 60 ms as it enters its wait, so the reply (40 ms) and the
// cancellation (50 ms) are both ready when it looks and Go's select takes
// either: repeated, so that each gets its turn. The latency is the
// invoker's, 40 ms, not the time the interceptor got to it.
func TestProbeableReplyBeforeTheCallerLeft(t *testing.T) {
	for range 64 {
		synctest.Test(t, func(t *testing.T) {
			p := policytest.New(100 * time.Millisecond)
			p.OfferProbe(time.Second)
			cctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			time.AfterFunc(50*time.Millisecond, cancel)
			ctx := testutil.SlowDone(cctx, 60*time.Millisecond)
			reply, err := call1(ctx, p, invokeFunc(func(context.Context, *wrapperspb.StringValue) error {
				time.Sleep(40 * time.Millisecond)
				return nil
			}))
			require.True(t, ctx.Held())
			require.NoError(t, err)
			require.Equal(t, "ok", reply.GetValue())
			synctest.Wait()
			require.Equal(t, []policytest.Observation{{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 40 * time.Millisecond}}, p.Observed())
		})
	}
}

// copyingProbe is a Policy whose Probe decides on a copy of the Attempt
// and stores the whole copy back: it writes every field of *a, not only
// Probe.
type copyingProbe struct{ *policytest.Policy }

func (p copyingProbe) Probe(a *timeout.Attempt, now time.Time) bool {
	b := *a
	ok := p.Policy.Probe(&b, now)
	*a = b
	return ok
}

// TestProbeWritesTheWholeAttempt: a probe's goroutine reads the call's
// Attempt only once the interceptor has handed the call over, so a Policy
// that writes all of *a in Probe races with nothing (-race).
func TestProbeWritesTheWholeAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := copyingProbe{policytest.New(100 * time.Millisecond)}
		p.OfferProbe(time.Second)
		_, err := call1(context.Background(), p, invokeFunc(func(context.Context, *wrapperspb.StringValue) error {
			time.Sleep(150 * time.Millisecond)
			return status.Error(codes.Unavailable, "refused")
		}))
		require.ErrorIs(t, err, ErrTimeout)
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []policytest.Observation{{Dest: "h", Attempt: 1, Outcome: timeout.Failed, Elapsed: 150 * time.Millisecond, Probe: true}}, p.Observed())
	})
}
