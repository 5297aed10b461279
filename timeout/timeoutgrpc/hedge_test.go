package timeoutgrpc

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/adaptivetimeout/adaptivetimeout/internal/policytest"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

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
