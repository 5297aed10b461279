package timeoutgrpc

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/adaptivetimeout/adaptivetimeout/internal/policytest"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// noUnary is the unary interceptor of tests about streams.
func noUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(ctx, method, req, reply, cc, opts...)
}

// openStream starts /test.Echo/Stream with cmd.
func openStream(t *testing.T, ctx context.Context, cc *grpc.ClientConn, cmd string) (grpc.ClientStream, error) {
	t.Helper()
	cs, err := cc.NewStream(ctx, streamDesc, "/test.Echo/Stream")
	if err != nil {
		return nil, err
	}
	require.NoError(t, cs.SendMsg(wrapperspb.String(cmd)))
	require.NoError(t, cs.CloseSend())
	return cs, nil
}

// recvAll reads the stream to its end: the messages and the final error
// (nil for io.EOF).
func recvAll(cs grpc.ClientStream) ([]string, error) {
	var got []string
	for {
		m := new(wrapperspb.StringValue)
		if err := cs.RecvMsg(m); err != nil {
			if err == io.EOF {
				err = nil
			}
			return got, err
		}
		got = append(got, m.GetValue())
	}
}

func TestStream(t *testing.T) {
	eachTransport(t, func(t *testing.T, e *echo, target string, dial []grpc.DialOption) {
		t.Run("first message in time, the rest the caller's", func(t *testing.T) {
			p := policytest.New(500 * time.Millisecond)
			cc, spy := client(t, target, dial, noUnary, StreamClientInterceptor(p))
			cs, err := openStream(t, context.Background(), cc, "two")
			require.NoError(t, err)
			first := new(wrapperspb.StringValue)
			require.NoError(t, cs.RecvMsg(first))
			require.Equal(t, "1", first.GetValue())
			require.Equal(t, []timeout.Outcome{timeout.Completed}, p.Outcomes(), "observed at the first message")
			// Wait past the timeout before the second message: the
			// stream is the caller's now and must not be cut.
			time.Sleep(600 * time.Millisecond)
			e.Release()
			rest, err := recvAll(cs)
			require.NoError(t, err)
			require.Equal(t, []string{"2"}, rest)
			require.Len(t, p.Observed(), 1, "observed once")
			_, has := spy.get()
			require.False(t, has, "the stream's context has no deadline of ours")
		})
		t.Run("no first message: our timeout", func(t *testing.T) {
			p := policytest.New(50 * time.Millisecond)
			cc, _ := client(t, target, dial, noUnary, StreamClientInterceptor(p))
			// On a starved machine our 50 ms can end the stream while it
			// opens: NewStream then fails, or SendMsg reports io.EOF and
			// RecvMsg the stream's error. Either way it is our timeout.
			cs, err := cc.NewStream(context.Background(), streamDesc, "/test.Echo/Stream")
			if err == nil {
				if serr := cs.SendMsg(wrapperspb.String("hang")); serr != nil {
					require.ErrorIs(t, serr, io.EOF)
				}
				_ = cs.CloseSend()
				_, err = recvAll(cs)
			}
			require.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
			require.ErrorIs(t, err, ErrTimeout)
			var te *TimeoutError
			require.ErrorAs(t, err, &te)
			require.Equal(t, "/test.Echo/Stream", te.Method)
			require.Equal(t, []timeout.Outcome{timeout.TimedOut}, p.Outcomes())
		})
		for _, tt := range []struct {
			name string
			cmd  string
			code codes.Code
			want timeout.Outcome
		}{
			{"ends without a message", "empty", codes.OK, timeout.Completed},
			{"application error", code(codes.NotFound), codes.NotFound, timeout.Completed},
			{"unavailable", code(codes.Unavailable), codes.Unavailable, timeout.Failed},
		} {
			t.Run(tt.name, func(t *testing.T) {
				p := policytest.New(10 * time.Second)
				cc, _ := client(t, target, dial, noUnary, StreamClientInterceptor(p))
				cs, err := openStream(t, context.Background(), cc, tt.cmd)
				require.NoError(t, err)
				_, err = recvAll(cs)
				require.Equal(t, tt.code, status.Code(err))
				require.NotErrorIs(t, err, ErrTimeout)
				require.Equal(t, []timeout.Outcome{tt.want}, p.Outcomes())
			})
		}
		t.Run("caller's deadline first", func(t *testing.T) {
			p := policytest.New(10 * time.Second)
			cc, spy := client(t, target, dial, noUnary, StreamClientInterceptor(p))
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			cs, err := openStream(t, ctx, cc, "hang")
			require.NoError(t, err)
			_, err = recvAll(cs)
			require.Equal(t, codes.DeadlineExceeded, status.Code(err))
			require.NotErrorIs(t, err, ErrTimeout)
			want, _ := ctx.Deadline()
			got, _ := spy.get()
			require.Equal(t, want, got, "never past the caller's deadline")
			require.Equal(t, []timeout.Outcome{timeout.Canceled}, p.Outcomes())
		})
		t.Run("caller cancels before reading", func(t *testing.T) {
			p := policytest.New(10 * time.Second)
			cc, _ := client(t, target, dial, noUnary, StreamClientInterceptor(p))
			ctx, cancel := context.WithCancel(context.Background())
			_, err := openStream(t, ctx, cc, "hang")
			require.NoError(t, err)
			cancel() // the caller gives up without a RecvMsg
			require.Eventually(t, func() bool { return len(p.Observed()) == 1 }, 10*time.Second, time.Millisecond)
			require.Equal(t, []timeout.Outcome{timeout.Canceled}, p.Outcomes())
		})
	})
}

// TestStreamEstablishTimesOut: a stream that cannot even be established
// (the streamer blocks until its context ends) fails at our timeout.
func TestStreamEstablishTimesOut(t *testing.T) {
	p := policytest.New(20 * time.Millisecond)
	i := StreamClientInterceptor(p, WithDestination(func(context.Context, string, *grpc.ClientConn) string { return "db-1" }))
	streamer := func(ctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	cs, err := i(context.Background(), streamDesc, nil, "/test.Echo/Stream", streamer)
	require.Nil(t, cs)
	require.ErrorIs(t, err, ErrTimeout)
	require.Equal(t, codes.DeadlineExceeded, status.Code(err))
	require.Equal(t, []timeout.Outcome{timeout.TimedOut}, p.Outcomes())
}
