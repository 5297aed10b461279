package timeoutgrpc

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/adaptivetimeout/adaptivetimeout/internal/policytest"
)

// seqInvoker answers its n-th call after delays[n] (bubble time) with the
// reply "n", unless the call's context ends first.
type seqInvoker struct {
	mu     sync.Mutex
	delays []time.Duration
	calls  int
	causes []error
}

func (s *seqInvoker) invoke(ctx context.Context, _ string, _, reply any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
	s.mu.Lock()
	i := s.calls
	s.calls++
	d := s.delays[min(i, len(s.delays)-1)]
	s.causes = append(s.causes, nil)
	s.mu.Unlock()
	select {
	case <-time.After(d):
		reply.(*wrapperspb.StringValue).Value = string(rune('0' + i))
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		s.causes[i] = context.Cause(ctx)
		s.mu.Unlock()
		return status.FromContextError(ctx.Err()).Err()
	}
}

func TestHedgeUnary(t *testing.T) {
	toH := WithDestination(func(context.Context, string, *grpc.ClientConn) string { return "h" })
	all := WithHedging(func(string) bool { return true })

	t.Run("a stalled call is hedged; the hedge's reply wins, the first is superseded", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, tr := policytest.Hedging(t)
			inv := &seqInvoker{delays: []time.Duration{time.Second, 5 * time.Millisecond}}
			ic := UnaryClientInterceptor(p, toH, all)
			reply := new(wrapperspb.StringValue)
			start := time.Now()
			err := ic(t.Context(), "/test.Echo/Unary", wrapperspb.String("x"), reply, nil, inv.invoke)
			require.NoError(t, err)
			require.Equal(t, 26*time.Millisecond, time.Since(start))
			require.Equal(t, "1", reply.GetValue())
			synctest.Wait()
			require.Equal(t, 2, inv.calls)
			require.Equal(t, context.Canceled, inv.causes[0])
			e := policytest.HedgedLocal(t, tr)
			require.EqualValues(t, 102, e.LocalSamples)
			require.EqualValues(t, 1, e.LocalCensored)
			require.EqualValues(t, 26, e.LocalValueMillis, "superseded at its elapsed time")
		})
	})
	t.Run("not an idempotent method, or not opted in: no hedge", func(t *testing.T) {
		for _, opts := range [][]Option{{toH}, {toH, WithHedging(func(m string) bool { return m == "/test.Echo/Get" })}} {
			synctest.Test(t, func(t *testing.T) {
				p, _ := policytest.Hedging(t)
				inv := &seqInvoker{delays: []time.Duration{100 * time.Millisecond, 5 * time.Millisecond}}
				reply := new(wrapperspb.StringValue)
				err := UnaryClientInterceptor(p, opts...)(t.Context(), "/test.Echo/Unary", wrapperspb.String("x"), reply, nil, inv.invoke)
				require.NoError(t, err)
				require.Equal(t, "0", reply.GetValue())
				require.Equal(t, 1, inv.calls)
			})
		}
	})
	t.Run("both time out: the first one's error", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, tr := policytest.Hedging(t)
			inv := &seqInvoker{delays: []time.Duration{time.Hour}}
			start := time.Now()
			err := UnaryClientInterceptor(p, toH, all)(t.Context(), "/m", wrapperspb.String("x"), new(wrapperspb.StringValue), nil, inv.invoke)
			require.ErrorIs(t, err, ErrTimeout)
			require.Equal(t, codes.DeadlineExceeded, status.Code(err))
			require.Equal(t, 271*time.Millisecond, time.Since(start))
			e := policytest.HedgedLocal(t, tr)
			require.EqualValues(t, 2, e.LocalCensored)
		})
	})
	t.Run("the caller's cancellation ends both and records nothing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, tr := policytest.Hedging(t)
			inv := &seqInvoker{delays: []time.Duration{time.Hour}}
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(50*time.Millisecond, cancel)
			err := UnaryClientInterceptor(p, toH, all)(ctx, "/m", wrapperspb.String("x"), new(wrapperspb.StringValue), nil, inv.invoke)
			require.Equal(t, codes.Canceled, status.Code(err))
			require.NotErrorIs(t, err, ErrTimeout)
			require.Equal(t, 2, inv.calls)
			e := policytest.HedgedLocal(t, tr)
			require.EqualValues(t, 100, e.LocalSamples)
		})
	})
}
