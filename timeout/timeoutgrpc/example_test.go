package timeoutgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/test/bufconn"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/timeout/timeoutgrpc"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

func Example() {
	// A server to call: gRPC's health service, in memory.
	ln := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	dialer := func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }

	// The failure-aware Policy over this process's own tracker (a node
	// would pass its *node.Node: the fleet's view). Until the tracker holds
	// MinSamples latencies of a destination, its attempts get the fallback:
	// 1s, doubling per attempt.
	tr, err := tracker.NewSync[string](tracker.DefaultConfig())
	if err != nil {
		panic(err)
	}
	cfg := timeout.DefaultConfig()
	cfg.Backoff = timeout.BackoffInterval{Min: time.Second, Max: time.Minute}
	p, err := timeout.NewPolicy(cfg, tr)
	if err != nil {
		panic(err)
	}
	cc, err := grpc.NewClient("passthrough:///db-1",
		grpc.WithContextDialer(dialer), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(timeoutgrpc.UnaryClientInterceptor(p)),
		grpc.WithStreamInterceptor(timeoutgrpc.StreamClientInterceptor(p)))
	if err != nil {
		panic(err)
	}
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)

	for attempt := 1; attempt <= 2; attempt++ {
		ctx := timeout.WithAttempt(context.Background(), attempt) // every retry's timeout grows
		fmt.Println("attempt", attempt, "timeout", p.Decide(cc.Target(), attempt, time.Now()).Timeout)
		resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		if errors.Is(err, timeoutgrpc.ErrTimeout) {
			continue // our adaptive timeout: retry with attempt+1
		}
		if err != nil {
			panic(err)
		}
		fmt.Println(resp.GetStatus())
	}
	// Output:
	// attempt 1 timeout 1s
	// SERVING
	// attempt 2 timeout 2s
	// SERVING
}
