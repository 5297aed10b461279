package timeoutgrpc

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo is the test service, /test.Echo/Unary and /test.Echo/Stream (server
// streaming), written by hand over protobuf's wrapper types. The request
// is a command:
//
//	ok:TEXT     reply TEXT (the stream: one message)
//	code:N      fail with status code N
//	block       wait until release is closed (then reply "late") or the call ends
//	hang        wait until the call ends
//	empty       (stream) end at once without a message
//	two         (stream) send "1", wait for release (or the end), send "2"
//
// Every reply carries the header "served: yes" and the trailer "done: yes".
type echo struct {
	release chan struct{}
	once    sync.Once
}

func (e *echo) Release() { e.once.Do(func() { close(e.release) }) }

func (e *echo) unary(ctx context.Context, cmd string) (string, error) {
	_ = grpc.SetHeader(ctx, metadata.Pairs("served", "yes"))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("done", "yes"))
	switch {
	case strings.HasPrefix(cmd, "ok:"):
		return strings.TrimPrefix(cmd, "ok:"), nil
	case strings.HasPrefix(cmd, "code:"):
		n, _ := strconv.Atoi(strings.TrimPrefix(cmd, "code:"))
		return "", status.Error(codes.Code(n), "as asked")
	case cmd == "hang":
		<-ctx.Done()
		return "", status.FromContextError(ctx.Err()).Err()
	case cmd == "block":
		select {
		case <-e.release:
			return "late", nil
		case <-ctx.Done():
			return "", status.FromContextError(ctx.Err()).Err()
		}
	}
	return "", status.Error(codes.InvalidArgument, "unknown command "+cmd)
}

func (e *echo) stream(cmd string, ss grpc.ServerStream) error {
	ctx := ss.Context()
	switch cmd {
	case "empty":
		return nil
	case "two":
		if err := ss.SendMsg(wrapperspb.String("1")); err != nil {
			return err
		}
		select {
		case <-e.release:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
		return ss.SendMsg(wrapperspb.String("2"))
	}
	s, err := e.unary(ctx, cmd)
	if err != nil {
		return err
	}
	return ss.SendMsg(wrapperspb.String(s))
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Unary", Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		out, err := srv.(*echo).unary(ctx, in.GetValue())
		if err != nil {
			return nil, err
		}
		return wrapperspb.String(out), nil
	}}},
	Streams: []grpc.StreamDesc{{StreamName: "Stream", ServerStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
		in := new(wrapperspb.StringValue)
		if err := ss.RecvMsg(in); err != nil {
			return err
		}
		return srv.(*echo).stream(in.GetValue(), ss)
	}}},
}

var streamDesc = &grpc.StreamDesc{StreamName: "Stream", ServerStreams: true}

// serve starts the echo service on a listener: bufconn (in memory) or a
// loopback TCP port. Everything stops when the test ends.
func serve(t testing.TB, transport string) (*echo, string, []grpc.DialOption) {
	t.Helper()
	e := &echo{release: make(chan struct{})}
	srv := grpc.NewServer()
	srv.RegisterService(&echoDesc, e)
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	var ln net.Listener
	target := ""
	switch transport {
	case "bufconn":
		bl := bufconn.Listen(1 << 20)
		ln, target = bl, "passthrough:///bufnet"
		dial = append(dial, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return bl.DialContext(ctx) }))
	case "loopback":
		tl, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ln, target = tl, tl.Addr().String()
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		e.Release()
		srv.Stop()
		<-done
	})
	return e, target, dial
}

// client dials target with the interceptors given, and a spy after them that
// records the deadline each call reaches gRPC with.
func client(t *testing.T, target string, dial []grpc.DialOption, unary grpc.UnaryClientInterceptor, stream grpc.StreamClientInterceptor) (*grpc.ClientConn, *deadlineSpy) {
	t.Helper()
	spy := &deadlineSpy{}
	opts := append(dial[:len(dial):len(dial)],
		grpc.WithChainUnaryInterceptor(unary, spy.unary),
		grpc.WithChainStreamInterceptor(stream, spy.stream))
	cc, err := grpc.NewClient(target, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return cc, spy
}

type deadlineSpy struct {
	mu       sync.Mutex
	deadline time.Time
	has      bool
}

func (s *deadlineSpy) record(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deadline, s.has = ctx.Deadline()
}

func (s *deadlineSpy) get() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline, s.has
}

func (s *deadlineSpy) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	s.record(ctx)
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (s *deadlineSpy) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s.record(ctx)
	return streamer(ctx, desc, cc, method, opts...)
}

// unary calls /test.Echo/Unary with cmd.
func unary(ctx context.Context, cc *grpc.ClientConn, cmd string, opts ...grpc.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	err := cc.Invoke(ctx, "/test.Echo/Unary", wrapperspb.String(cmd), out, opts...)
	return out.GetValue(), err
}

var transports = []string{"bufconn", "loopback"}

// eachTransport runs f as a subtest per transport, against a server of its
// own.
func eachTransport(t *testing.T, f func(t *testing.T, e *echo, target string, dial []grpc.DialOption)) {
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			e, target, dial := serve(t, transport)
			f(t, e, target, dial)
		})
	}
}
