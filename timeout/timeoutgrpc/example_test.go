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
)

// backoffPolicy stands in for a real timeout.Policy (*node.Node, or
// timeout.NewPolicy over a tracker): every attempt gets timeout.Config's
// exponential fallback, nothing is probed, and it prints what it decides
// and learns.
type backoffPolicy struct{ cfg timeout.Config }

func (p backoffPolicy) Decide(dest string, attempt int, _ time.Time) timeout.Attempt {
	d := p.cfg.ExponentialBackoff(attempt)
	fmt.Println("attempt", attempt, "to", dest, "timeout", d)
	return timeout.Attempt{Dest: dest, Attempt: attempt, Timeout: d, Reason: timeout.ReasonFallback}
}

func (backoffPolicy) Probe(*timeout.Attempt, time.Time) bool { return false }

func (backoffPolicy) Observe(a timeout.Attempt, o timeout.Outcome, _ time.Duration, _ time.Time) {
	fmt.Println("observed attempt", a.Attempt, o)
}

func Example() {
	// A server to call: gRPC's health service, in memory.
	ln := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	dialer := func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }

	var p timeout.Policy = backoffPolicy{timeout.Config{Backoff: timeout.BackoffInterval{Min: time.Second, Max: time.Minute}}}
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
	// attempt 1 to passthrough:///db-1 timeout 1s
	// observed attempt 1 completed
	// SERVING
	// attempt 2 to passthrough:///db-1 timeout 2s
	// observed attempt 2 completed
	// SERVING
}
