package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/node"
)

// clock is a settable clock for the examples.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// A node alone: record latencies, then ask for an estimate and a timeout.
func Example() {
	clk := &clock{t: time.UnixMilli(6000 * 1_000_000)} // the start of an epoch
	cfg := node.DefaultConfig()
	cfg.Name = "replica-1"
	cfg.DisableGossip = true // no cluster: the fleet view is this node's own
	cfg.HTTP = ""            // no listener; Handler can still be served
	cfg.Clock = clk.now
	n, err := node.New(cfg, nil, nil)
	if err != nil {
		panic(err)
	}
	defer n.Close()

	for ms := 100; ms < 200; ms++ {
		n.Record("db-1", time.Duration(ms)*time.Millisecond)
	}
	clk.t = clk.t.Add(7 * time.Second) // the next epoch: the first one sealed

	e, _ := n.Estimate("db-1", 0.99)
	fmt.Println(e.Source, e.ValueMillis, e.Samples, e.Peers)
	d, _ := n.Timeout([]string{"db-1"}, 1)
	fmt.Println(d.Timeout, d.DecidedBy, d.Source)
	d, _ = n.Timeout([]string{"db-1"}, 2) // a retry doubles it
	fmt.Println(d.Timeout)
	// Output:
	// fleet 198 100 1
	// 398ms db-1 fleet
	// 796ms
}

// Do runs a call under the adaptive timeout and tells the node's timeout
// from the caller's cancellation.
func ExampleNode_Do() {
	cfg := node.DefaultConfig()
	cfg.Name = "replica-1"
	cfg.DisableGossip, cfg.HTTP = true, ""
	n, err := node.New(cfg, nil, nil)
	if err != nil {
		panic(err)
	}
	defer n.Close()

	err = n.Do(context.Background(), "db-1", 1, func(ctx context.Context) error {
		<-ctx.Done() // a call that never answers
		return ctx.Err()
	})
	fmt.Println(errors.Is(err, node.ErrTimeout), errors.Is(err, context.Canceled))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = n.Do(ctx, "db-1", 1, func(ctx context.Context) error { return ctx.Err() })
	fmt.Println(errors.Is(err, node.ErrTimeout), errors.Is(err, context.Canceled))

	e, _ := n.Estimate("db-1", 1)
	fmt.Println(e.LocalSamples, e.LocalValueMillis) // the timed-out attempt, censored at 250 ms
	// Output:
	// true false
	// false true
	// 1 250
}

// The HTTP API, here through httptest.
func ExampleNode_Handler() {
	cfg := node.DefaultConfig()
	cfg.Name = "replica-1"
	cfg.DisableGossip, cfg.HTTP = true, ""
	n, err := node.New(cfg, nil, nil)
	if err != nil {
		panic(err)
	}
	defer n.Close()
	h := n.Handler()

	for _, r := range []struct{ method, target, body string }{
		{"POST", "/v1/record", `{"samples":[{"dest":"db-1","latency_ms":12.5},{"dest":"db-1","latency_ms":600}]}`},
		{"GET", "/v1/timeout?dest=db-1&dest=db-2&attempt=1", ""},
		{"POST", "/v1/record", `{"samples":[{"dest":"db-1","latency_ms":-1}]}`},
		{"GET", "/v1/nope", ""},
	} {
		w := httptest.NewRecorder()
		req := httptest.NewRequest(r.method, r.target, strings.NewReader(r.body))
		if r.method == "POST" {
			req.Header.Set("Content-Type", "application/json") // 415 otherwise
		}
		h.ServeHTTP(w, req)
		b, _ := io.ReadAll(w.Body)
		fmt.Print(w.Code, " ", string(b))
	}
	// Output:
	// 200 {"recorded":2}
	// 200 {"timeout_ms":250,"attempt":1,"need":2,"decided_by":"","source":"none","guarded":false,"fallback":true,"reason":"fallback","failing":[],"probe_ms":null}
	// 400 {"error":"samples[0]: \"latency_ms\" must be a finite number >= 0, got -1"}
	// 404 {"error":"no such path: /v1/nope"}
}
