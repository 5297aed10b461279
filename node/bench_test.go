package node

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// benchNode is a node alone whose clock stays in one epoch, with 64
// destinations of 1000 samples each, sealed into the fleet view.
func benchNode(b *testing.B) (*Node, []string) {
	return benchNodeWith(b, DefaultConfig())
}

// benchNodeUnbounded is benchNode with no MaxDestinations: no eviction
// order.
func benchNodeUnbounded(b *testing.B) (*Node, []string) {
	cfg := DefaultConfig()
	cfg.Tracker.MaxDestinations = 0
	return benchNodeWith(b, cfg)
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
// without the eviction order's shared sequence number, the one thing the
// bound costs a record (its place in the order is kept lazily, at
// evictions). What the order costs a record is the difference.
func BenchmarkRecordUnbounded(b *testing.B) {
	n, dests := benchNodeUnbounded(b)
	recordLoop(b, n, dests)
}

// BenchmarkRecordParallelUnbounded is BenchmarkRecordParallel with no
// MaxDestinations: the shared sequence number is what the cores contend
// on otherwise.
func BenchmarkRecordParallelUnbounded(b *testing.B) {
	n, dests := benchNodeUnbounded(b)
	recordParallel(b, n, dests)
}

// BenchmarkRecordParallel is Node.Record from every core, each going
// through the same 64 destinations: the cores share every destination's
// window (and its shard's lock), so each record moves their cache lines
// from the other core. BenchmarkRecordParallelDistinct is the scaling case.
func BenchmarkRecordParallel(b *testing.B) {
	n, dests := benchNode(b)
	recordParallel(b, n, dests)
}

// BenchmarkRecordParallelDistinct is Node.Record from every core, each on
// its own 8 of the destinations: what scales when cores record to
// different destinations, but for the eviction order's shared sequence
// (see BenchmarkRecordParallelDistinctUnbounded).
func BenchmarkRecordParallelDistinct(b *testing.B) {
	n, dests := benchNode(b)
	recordDistinct(b, n, dests)
}

// BenchmarkRecordParallelDistinctUnbounded is
// BenchmarkRecordParallelDistinct with no MaxDestinations: no eviction
// order, so no counter shared by the cores.
func BenchmarkRecordParallelDistinctUnbounded(b *testing.B) {
	n, dests := benchNodeUnbounded(b)
	recordDistinct(b, n, dests)
}

// BenchmarkRecordFailingElsewhere is BenchmarkRecord while the failure
// detector holds state for another destination (one that failed
// FailingAfter times): the detector must then tell whether each recorded
// destination has state to reset.
func BenchmarkRecordFailingElsewhere(b *testing.B) {
	n, dests := benchNode(b)
	failElsewhere(n)
	recordLoop(b, n, dests)
}

// BenchmarkRecordParallelDistinctFailingElsewhere is
// BenchmarkRecordParallelDistinct while the detector holds state for
// another destination.
func BenchmarkRecordParallelDistinctFailingElsewhere(b *testing.B) {
	n, dests := benchNode(b)
	failElsewhere(n)
	recordDistinct(b, n, dests)
}

// failElsewhere makes the detector treat a destination outside the
// benchmark's as failing.
func failElsewhere(n *Node) {
	for range timeout.FailingAfter {
		n.learn("down", timeout.Failed, 0, n.clock())
	}
	if !n.dec.Failing("down") {
		panic("bench: down is not failing")
	}
}

// BenchmarkTimeout3 is Node.Timeout over 3 destinations: one cached
// estimate of each (see BenchmarkTimeout3Uncached), then the rule.
func BenchmarkTimeout3(b *testing.B) { benchTimeoutOf(b, 3, false, false) }

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

// recordDistinct measures Node.Record from every core, each going through
// its own 8 of dests (the k-th goroutine the k-th 8, modulo 64).
func recordDistinct(b *testing.B, n *Node, dests []string) {
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		own := dests[(next.Add(1)-1)*8&63:][:8]
		i := 0
		for pb.Next() {
			n.Record(own[i&7], 12*time.Millisecond)
			i++
		}
	})
}
