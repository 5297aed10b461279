package timeoutgrpc

import (
	"context"
	"testing"
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

func TestShadowProbeUnary(t *testing.T) {
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			t.Run("the caller leaves at the timeout, the call completes unseen", func(t *testing.T) {
				e, target, dial := serve(t, transport)
				p := policytest.New(50 * time.Millisecond)
				p.OfferProbe(time.Minute)
				cc, _ := client(t, target, dial, UnaryClientInterceptor(p), noStream)
				reply := new(wrapperspb.StringValue)
				var header, trailer metadata.MD
				var from peer.Peer
				req := wrapperspb.String("block")
				err := cc.Invoke(context.Background(), "/test.Echo/Unary", req, reply,
					grpc.Header(&header), grpc.Trailer(&trailer), grpc.Peer(&from))
				require.ErrorIs(t, err, ErrTimeout)
				require.Equal(t, codes.DeadlineExceeded, status.Code(err))
				require.Empty(t, p.Observed(), "the probe goes on")
				require.True(t, p.InFlight(target))
				req.Value = "changed" // the caller may reuse its request at once

				e.Release()
				testutil.Eventually(t, "the probe observed", func() bool { return len(p.Observed()) == 1 })
				o := p.Observed()[0]
				require.Equal(t, timeout.Completed, o.Outcome)
				require.True(t, o.Probe)
				require.GreaterOrEqual(t, o.Elapsed, 50*time.Millisecond)
				require.Empty(t, reply.GetValue(), "never written into the caller's reply")
				require.Nil(t, header)
				require.Nil(t, trailer)
				require.Nil(t, from.Addr)
			})
			t.Run("the probe times out", func(t *testing.T) {
				_, target, dial := serve(t, transport)
				p := policytest.New(20 * time.Millisecond)
				p.OfferProbe(200 * time.Millisecond)
				cc, _ := client(t, target, dial, UnaryClientInterceptor(p), noStream)
				ctx, cancel := context.WithCancel(context.Background())
				_, err := unary(ctx, cc, "hang")
				cancel() // the caller leaves, as a deferred cancel does: the probe is detached
				require.ErrorIs(t, err, ErrTimeout)
				testutil.Eventually(t, "the probe observed", func() bool { return len(p.Observed()) == 1 })
				o := p.Observed()[0]
				require.Equal(t, timeout.TimedOut, o.Outcome)
				require.True(t, o.Probe)
				require.GreaterOrEqual(t, o.Elapsed, 200*time.Millisecond)
				require.False(t, p.InFlight(target))
			})
			t.Run("answered in time: reply and options copied", func(t *testing.T) {
				_, target, dial := serve(t, transport)
				p := policytest.New(10 * time.Second)
				p.OfferProbe(time.Minute)
				cc, spy := client(t, target, dial, UnaryClientInterceptor(p), noStream)
				reply := wrapperspb.String("stale")
				var header, trailer metadata.MD
				var from peer.Peer
				err := cc.Invoke(context.Background(), "/test.Echo/Unary", wrapperspb.String("ok:fresh"), reply,
					grpc.Header(&header), grpc.Trailer(&trailer), grpc.Peer(&from))
				require.NoError(t, err)
				require.Equal(t, "fresh", reply.GetValue())
				require.Equal(t, []string{"yes"}, header.Get("served"))
				require.Equal(t, []string{"yes"}, trailer.Get("done"))
				require.NotNil(t, from.Addr)
				require.Equal(t, []timeout.Outcome{timeout.Completed}, p.Outcomes())
				require.Zero(t, p.Probes())
				deadline, _ := spy.get()
				require.True(t, time.Until(deadline) > 30*time.Second, "the call ran under the probe's deadline")
			})
			t.Run("application error in time: trailer copied", func(t *testing.T) {
				_, target, dial := serve(t, transport)
				p := policytest.New(10 * time.Second)
				p.OfferProbe(time.Minute)
				cc, _ := client(t, target, dial, UnaryClientInterceptor(p), noStream)
				var trailer metadata.MD
				_, err := unary(context.Background(), cc, code(codes.NotFound), grpc.Trailer(&trailer))
				require.Equal(t, codes.NotFound, status.Code(err))
				require.Equal(t, []string{"yes"}, trailer.Get("done"))
				require.Equal(t, []timeout.Outcome{timeout.Completed}, p.Outcomes())
			})
			t.Run("declined: the call ends at its timeout", func(t *testing.T) {
				_, target, dial := serve(t, transport)
				p := policytest.New(50 * time.Millisecond)
				p.OfferProbe(time.Minute)
				cc, _ := client(t, target, dial, UnaryClientInterceptor(declining{p}), noStream)
				_, err := unary(context.Background(), cc, "hang")
				require.ErrorIs(t, err, ErrTimeout)
				require.Equal(t, []timeout.Outcome{timeout.TimedOut}, p.Outcomes(), "observed before the call returned")
				require.Zero(t, p.Probes())
			})
			t.Run("caller cancels first", func(t *testing.T) {
				_, target, dial := serve(t, transport)
				p := policytest.New(10 * time.Second)
				p.OfferProbe(time.Minute)
				cc, _ := client(t, target, dial, UnaryClientInterceptor(p), noStream)
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(20*time.Millisecond, cancel)
				_, err := unary(ctx, cc, "hang")
				require.Equal(t, codes.Canceled, status.Code(err))
				require.NotErrorIs(t, err, ErrTimeout)
				require.Equal(t, []timeout.Outcome{timeout.Canceled}, p.Outcomes())
			})
			t.Run("caller's deadline before the probe timeout: no probe", func(t *testing.T) {
				_, target, dial := serve(t, transport)
				p := policytest.New(50 * time.Millisecond)
				p.OfferProbe(time.Minute)
				cc, spy := client(t, target, dial, UnaryClientInterceptor(p), noStream)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				before := time.Now()
				_, err := unary(ctx, cc, "hang")
				require.ErrorIs(t, err, ErrTimeout)
				deadline, _ := spy.get()
				require.False(t, deadline.Before(before.Add(50*time.Millisecond)))
				require.True(t, deadline.Before(time.Now().Add(50*time.Millisecond)), "the normal timeout's deadline")
				require.Equal(t, []timeout.Outcome{timeout.TimedOut}, p.Outcomes())
				require.Zero(t, p.Probes())
			})
		})
	}
}

func TestProbeable(t *testing.T) {
	p := policytest.New(time.Second)
	p.OfferProbe(time.Minute)
	c := call{o: newOptions(p, nil), a: p.Decide("d", 1, time.Now())}
	msg := wrapperspb.String("x")
	bg := context.Background()
	require.True(t, c.probeable(bg, msg, msg, nil))
	require.True(t, c.probeable(bg, msg, msg, []grpc.CallOption{grpc.WaitForReady(true)}))
	require.False(t, c.probeable(bg, "not proto", msg, nil))
	require.False(t, c.probeable(bg, msg, new(int), nil))
	require.False(t, c.probeable(bg, msg, msg, []grpc.CallOption{grpc.OnFinish(func(error) {})}))
	short, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	require.False(t, c.probeable(short, msg, msg, nil), "the caller's deadline comes before the probe timeout")
	c.a.ProbeTimeout = 0
	require.False(t, c.probeable(bg, msg, msg, nil), "no probe offered")
}

// declining offers probes at Decide but declines them at Probe, as when
// another attempt reserved the probe in between.
type declining struct{ *policytest.Policy }

func (declining) Probe(*timeout.Attempt, time.Time) bool { return false }
