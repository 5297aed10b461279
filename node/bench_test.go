package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// benchNode is a node alone whose clock stays in one epoch, with 64
// destinations of 1000 samples each, sealed into the fleet view.
func benchNode(b *testing.B) (*Node, []string) {
	return benchNodeWith(b, DefaultConfig())
}

// benchNodeWith is benchNode from cfg.
func benchNodeWith(b *testing.B, cfg Config) (*Node, []string) {
	clk := &testClock{now: epochStart(e0)}
	cfg.Name, cfg.DisableGossip, cfg.HTTP, cfg.Clock = "b", true, "", clk.Now
	n, err := New(cfg, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = n.Close() })
	dests := make([]string, 64)
	for i := range dests {
		dests[i] = fmt.Sprintf("dest-%02d", i)
		for k := range 1000 {
			n.Record(dests[i], time.Duration(k%200)*time.Millisecond)
		}
	}
	now := epochStart(e0 + 1).Add(time.Second)
	clk.Set(now)
	n.poll(now)
	// From here on a fixed clock: the test clock's mutex would otherwise be
	// what the parallel benchmarks measure. The node is not started, so no
	// goroutine reads n.clock concurrently.
	n.clock = func() time.Time { return now }
	return n, dests
}

// BenchmarkRecord is Node.Record: the destination check, the tracker's
// record and the records counter.
func BenchmarkRecord(b *testing.B) {
	n, dests := benchNode(b)
	recordLoop(b, n, dests)
}

// BenchmarkRecordUnbounded is BenchmarkRecord with no MaxDestinations:
// without the eviction order (the shared sequence number and the move to
// the front of the shard's list) that the bound needs. What the order
// costs a record is the difference.
func BenchmarkRecordUnbounded(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Tracker.MaxDestinations = 0
	n, dests := benchNodeWith(b, cfg)
	recordLoop(b, n, dests)
}

// BenchmarkRecordParallelUnbounded is BenchmarkRecordParallel with no
// MaxDestinations: the shared sequence number is what the cores contend
// on otherwise.
func BenchmarkRecordParallelUnbounded(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Tracker.MaxDestinations = 0
	n, dests := benchNodeWith(b, cfg)
	recordParallel(b, n, dests)
}

// BenchmarkRecordParallel is Node.Record from every core on distinct
// destinations.
func BenchmarkRecordParallel(b *testing.B) {
	n, dests := benchNode(b)
	recordParallel(b, n, dests)
}

// BenchmarkTimeout3 is Node.Timeout over 3 destinations: one cached
// estimate of each (see BenchmarkTimeout3Uncached), then the rule.
func BenchmarkTimeout3(b *testing.B) {
	n, dests := benchNode(b)
	ds := dests[:3]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := n.Timeout(ds, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTimeout3Naive is timeout.Explain on the fleet (a
// timeout.Estimator whose values are the guarded decision values, cached
// like the node's), then a second read of the fleet for its source.
func BenchmarkTimeout3Naive(b *testing.B) {
	n, dests := benchNode(b)
	ds := dests[:3]
	tc := n.cfg.Timeout
	b.ReportAllocs()
	for b.Loop() {
		now := n.clock()
		d := timeout.Explain(tc, n.fleet, ds, 1, now)
		if d.DecidedBy >= 0 {
			_, _ = n.fleet.Estimate(ds[d.DecidedBy], tc.Quantile, now)
		}
	}
}

// BenchmarkEstimate is Node.Estimate at the configured quantile.
func BenchmarkEstimate(b *testing.B) {
	n, dests := benchNode(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := n.Estimate(dests[0], 0); err != nil {
			b.Fatal(err)
		}
	}
}

// recordLoop measures Node.Record over dests, one destination after the
// other.
func recordLoop(b *testing.B, n *Node, dests []string) {
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		n.Record(dests[i&63], 12*time.Millisecond)
		i++
	}
}

// recordParallel measures Node.Record from every core, each going through
// dests on its own.
func recordParallel(b *testing.B, n *Node, dests []string) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			n.Record(dests[i&63], 12*time.Millisecond)
			i++
		}
	})
}
