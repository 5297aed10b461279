package timeoutgrpc

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/adaptivetimeout/adaptivetimeout/internal/policytest"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// noStream is the stream interceptor of tests about unary calls.
func noStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(ctx, desc, cc, method, opts...)
}

func code(c codes.Code) string { return "code:" + strconv.Itoa(int(c)) }

func TestUnary(t *testing.T) {
	eachTransport(t, func(t *testing.T, _ *echo, target string, dial []grpc.DialOption) {
		for _, tt := range []struct {
			name string
			cmd  string
			d    time.Duration // the policy's timeout
			code codes.Code
			want timeout.Outcome
		}{
			{"reply", "ok:hello", 10 * time.Second, codes.OK, timeout.Completed},
			{"application error", code(codes.NotFound), 10 * time.Second, codes.NotFound, timeout.Completed},
			{"server's own deadline", code(codes.DeadlineExceeded), 10 * time.Second, codes.DeadlineExceeded, timeout.Completed},
			{"unavailable", code(codes.Unavailable), 10 * time.Second, codes.Unavailable, timeout.Failed},
			{"our timeout", "hang", 50 * time.Millisecond, codes.DeadlineExceeded, timeout.TimedOut},
		} {
			t.Run(tt.name, func(t *testing.T) {
				p := policytest.New(tt.d)
				cc, spy := client(t, target, dial, UnaryClientInterceptor(p), noStream)
				before := time.Now()
				got, err := unary(context.Background(), cc, tt.cmd)
				after := time.Now()
				require.Equal(t, tt.code, status.Code(err), "%v", err)
				require.Equal(t, []timeout.Outcome{tt.want}, p.Outcomes())
				require.Equal(t, target, p.Observed()[0].Dest, "the destination is cc.Target()")
				deadline, ok := spy.get()
				require.True(t, ok)
				require.False(t, deadline.Before(before.Add(tt.d)), "the policy's timeout")
				require.False(t, deadline.After(after.Add(tt.d)))
				if tt.want == timeout.TimedOut {
					require.ErrorIs(t, err, ErrTimeout)
					require.ErrorIs(t, err, context.DeadlineExceeded)
					var te *TimeoutError
					require.ErrorAs(t, err, &te)
					require.Equal(t, TimeoutError{Dest: target, Method: "/test.Echo/Unary", Attempt: 1, Limit: 50 * time.Millisecond, Err: te.Err}, *te)
					require.Equal(t, codes.DeadlineExceeded, status.Code(te.Err), "gRPC's own error, wrapped")
					require.Equal(t, "timeoutgrpc: adaptive timeout exceeded (dest "+target+
						", method /test.Echo/Unary, attempt 1, timeout 50ms)", status.Convert(err).Message())
					return
				}
				require.NotErrorIs(t, err, ErrTimeout)
				if tt.code == codes.OK {
					require.NoError(t, err)
					require.Equal(t, "hello", got)
				}
			})
		}
	})
}

func TestUnaryCallerDeadlineAndCancel(t *testing.T) {
	eachTransport(t, func(t *testing.T, _ *echo, target string, dial []grpc.DialOption) {
		t.Run("caller's deadline first: the caller's, never extended", func(t *testing.T) {
			p := policytest.New(10 * time.Second)
			cc, spy := client(t, target, dial, UnaryClientInterceptor(p), noStream)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := unary(ctx, cc, "hang")
			require.Equal(t, codes.DeadlineExceeded, status.Code(err))
			require.NotErrorIs(t, err, ErrTimeout)
			want, _ := ctx.Deadline()
			got, _ := spy.get()
			require.Equal(t, want, got)
			require.Equal(t, []timeout.Outcome{timeout.Canceled}, p.Outcomes())
		})
		t.Run("caller cancels", func(t *testing.T) {
			p := policytest.New(10 * time.Second)
			cc, _ := client(t, target, dial, UnaryClientInterceptor(p), noStream)
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(20*time.Millisecond, cancel)
			_, err := unary(ctx, cc, "hang")
			require.Equal(t, codes.Canceled, status.Code(err))
			require.Equal(t, []timeout.Outcome{timeout.Canceled}, p.Outcomes())
		})
	})
}

func TestUnaryAttemptAndDestination(t *testing.T) {
	_, target, dial := serve(t, "bufconn")
	p := policytest.New(time.Second)
	p.SetTimeout("/test.Echo/Unary", 2*time.Second)
	perMethod := WithDestination(func(_ context.Context, method string, _ *grpc.ClientConn) string { return method })
	cc, spy := client(t, target, dial, UnaryClientInterceptor(p, perMethod), noStream)
	for attempt := 1; attempt <= 3; attempt++ {
		before := time.Now()
		_, err := unary(timeout.WithAttempt(context.Background(), attempt), cc, "ok:x")
		require.NoError(t, err)
		d := 2 * time.Second << (attempt - 1)
		deadline, _ := spy.get()
		require.False(t, deadline.Before(before.Add(d)), "attempt %d gets %v", attempt, d)
		require.False(t, deadline.After(time.Now().Add(d)))
	}
	for i, o := range p.Observed() {
		require.Equal(t, policytest.Observation{Dest: "/test.Echo/Unary", Attempt: i + 1, Outcome: timeout.Completed, Elapsed: o.Elapsed}, o)
	}
}

// TestUnaryConnectionRefused: a destination nobody listens on fails fast
// with Unavailable, observed as failed.
func TestUnaryConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	target := ln.Addr().String()
	require.NoError(t, ln.Close())
	p := policytest.New(10 * time.Second)
	cc, _ := client(t, target, []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, UnaryClientInterceptor(p), noStream)
	_, err = unary(context.Background(), cc, "ok:x")
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Equal(t, []timeout.Outcome{timeout.Failed}, p.Outcomes())
}

// TestUnaryClock: with an injected clock, latency is measured on it.
func TestUnaryClock(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { now = now.Add(7 * time.Millisecond); return now }
	require.Equal(t, []policytest.Observation{{Dest: "fixed", Attempt: 1, Outcome: timeout.Completed, Elapsed: 7 * time.Millisecond}},
		policyWithDest(t, WithClock(clock)))
}

// policyWithDest runs one call through an interceptor whose destination is
// "fixed" and returns what was observed.
func policyWithDest(t *testing.T, opts ...Option) []policytest.Observation {
	t.Helper()
	p := policytest.New(time.Second)
	opts = append(opts, WithDestination(func(context.Context, string, *grpc.ClientConn) string { return "fixed" }))
	i := UnaryClientInterceptor(p, opts...)
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	require.NoError(t, i(context.Background(), "/m", nil, nil, nil, invoker))
	return p.Observed()
}

func TestNilPolicyPanics(t *testing.T) {
	require.PanicsWithValue(t, "timeoutgrpc: nil Policy", func() { UnaryClientInterceptor(nil) })
	require.PanicsWithValue(t, "timeoutgrpc: nil Policy", func() { StreamClientInterceptor(nil) })
}

func TestTimeoutError(t *testing.T) {
	inner := status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	e := &TimeoutError{Dest: "db-1:7000", Method: "/kv.KV/Get", Attempt: 2, Limit: 1500 * time.Millisecond, Err: inner}
	require.EqualError(t, e, "timeoutgrpc: adaptive timeout exceeded (dest db-1:7000, method /kv.KV/Get, attempt 2, timeout 1.5s)")
	require.ErrorIs(t, e, ErrTimeout)
	require.ErrorIs(t, e, context.DeadlineExceeded)
	require.True(t, e.Timeout())
	require.Same(t, inner, errors.Unwrap(e))
	s, ok := status.FromError(e)
	require.True(t, ok)
	require.Equal(t, codes.DeadlineExceeded, s.Code())
	require.Equal(t, e.Error(), s.Message())
	require.NotErrorIs(t, inner, ErrTimeout, "the caller's own deadline does not match")
}

// seqInvoker is a unary invoker over seq: its n-th call replies "n",
// unless the call's context ends first.
func seqInvoker(seq *policytest.Seq) grpc.UnaryInvoker {
	return func(ctx context.Context, _ string, _, reply any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		i, err := seq.Call(ctx)
		if err != nil {
			return status.FromContextError(err).Err()
		}
		reply.(*wrapperspb.StringValue).Value = string(rune('0' + i))
		return nil
	}
}

func TestHedgeUnary(t *testing.T) {
	toH := WithDestination(func(context.Context, string, *grpc.ClientConn) string { return "h" })
	all := WithHedging(func(string) bool { return true })

	policytest.HedgeScenarios(t,
		func(t *testing.T, ctx context.Context, p *timeout.Decider, seq *policytest.Seq) (string, error) {
			reply := new(wrapperspb.StringValue)
			err := UnaryClientInterceptor(p, toH, all)(ctx, "/test.Echo/Unary", wrapperspb.String("x"), reply, nil, seqInvoker(seq))
			return reply.GetValue(), err
		},
		func(t *testing.T, err error) {
			require.ErrorIs(t, err, ErrTimeout)
			require.Equal(t, codes.DeadlineExceeded, status.Code(err))
		},
		func(t *testing.T, err error) {
			require.Equal(t, codes.Canceled, status.Code(err))
			require.NotErrorIs(t, err, ErrTimeout)
		})
	t.Run("not an idempotent method, or not opted in: no hedge", func(t *testing.T) {
		for _, opts := range [][]Option{{toH}, {toH, WithHedging(func(m string) bool { return m == "/test.Echo/Get" })}} {
			synctest.Test(t, func(t *testing.T) {
				p, _ := policytest.Hedging(t)
				seq := &policytest.Seq{Delays: []time.Duration{100 * time.Millisecond, 5 * time.Millisecond}}
				reply := new(wrapperspb.StringValue)
				err := UnaryClientInterceptor(p, opts...)(t.Context(), "/test.Echo/Unary", wrapperspb.String("x"), reply, nil, seqInvoker(seq))
				require.NoError(t, err)
				require.Equal(t, "0", reply.GetValue())
				require.Equal(t, 1, len(seq.Causes()))
			})
		}
	})
}
