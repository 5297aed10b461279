package timeoutgrpc

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/adaptivetimeout/adaptivetimeout/internal/policytest"
)

// fixedUnary is the naive alternative: a fixed context.WithTimeout per call,
// learning nothing.
func fixedUnary(d time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

func bare(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(ctx, method, req, reply, cc, opts...)
}

// BenchmarkUnary compares no interceptor, the naive fixed timeout and
// timeoutgrpc (over a Policy that costs nothing, so the adapter's own cost
// shows): around an invoker that does nothing (the interceptor's whole
// cost), and around real calls over bufconn.
func BenchmarkUnary(b *testing.B) {
	adaptive := UnaryClientInterceptor(policytest.Fixed(time.Second))
	// The nop invoker has no ClientConn to take the destination from.
	adaptiveNop := UnaryClientInterceptor(policytest.Fixed(time.Second),
		WithDestination(func(context.Context, string, *grpc.ClientConn) string { return "db-1" }))
	interceptors := []struct {
		name string
		i    grpc.UnaryClientInterceptor
	}{{"bare", bare}, {"fixed", fixedUnary(time.Second)}, {"timeoutgrpc", adaptive}}

	nop := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	for _, ic := range interceptors {
		if ic.name == "timeoutgrpc" {
			ic.i = adaptiveNop
		}
		b.Run("nop/"+ic.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := ic.i(ctx, "/test.Echo/Unary", nil, nil, nil, nop); err != nil {
					b.Fatal(err)
				}
			}
		})
	}

	_, target, dial := serve(b, "bufconn")
	for _, ic := range interceptors {
		b.Run("bufconn/"+ic.name, func(b *testing.B) {
			cc, err := grpc.NewClient(target, append(dial[:len(dial):len(dial)], grpc.WithUnaryInterceptor(ic.i))...)
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			req, reply := wrapperspb.String("ok:x"), new(wrapperspb.StringValue)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := cc.Invoke(ctx, "/test.Echo/Unary", req, reply); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
