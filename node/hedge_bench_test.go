package node

import (
	"context"
	"testing"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// BenchmarkDoHedged is DoHedged over three replicas with an fn that answers
// at once (no hedge is sent): the ordering by fleet median, the hedge delay,
// one attempt's decision, context and goroutine, the call's timer and
// channel. Beside it, Do on one of them, and two naive ways: a bare loop
// over the replicas under a fixed context.WithTimeout each (no hedge,
// ordering, budget or learning), and racing them (fn on a goroutine per
// call, the caller waiting on a channel).
func BenchmarkDoHedged(b *testing.B) {
	n, dests := benchNode(b)
	replicas := dests[:3]
	ctx := context.Background()
	noop := func(context.Context, string) error { return nil }
	b.Run("DoHedged", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := n.DoHedged(ctx, replicas, 1, noop); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Do", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := n.Do(ctx, replicas[0], 1, func(ctx context.Context) error { return noop(ctx, replicas[0]) }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("naive loop", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var err error
			for _, r := range replicas {
				cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				err = noop(cctx, r)
				cancel()
				if err == nil {
					break
				}
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("naive goroutine race", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			done := make(chan error, len(replicas))
			cctx, cancel := context.WithCancel(ctx)
			go func() { done <- noop(cctx, replicas[0]) }()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			cancel()
		}
	})
}

// BenchmarkReplicaOrder is DoHedged's ordering of three replicas: per
// replica the estimate at q = 0.5 and the censoring-aware median of the
// view it names (tracker.Fleet.Median), then timeout.OrderReplicas. Beside
// it, the order by the plain median alone (the estimate's quantile, as
// before the median was censoring-aware): what the median's walk adds.
// Each replica holds 1000 samples at 0–199 ms and 300 hedges' losers
// superseded at 1–6 ms.
func BenchmarkReplicaOrder(b *testing.B) {
	n, dests := benchNode(b)
	replicas := dests[:3]
	now := n.clock()
	for _, d := range replicas {
		for k := range 300 {
			n.Observe(timeout.Attempt{Dest: d, Attempt: 1, Timeout: time.Second}, timeout.Superseded, time.Duration(1+k%6)*time.Millisecond, now)
		}
	}
	b.Run("censoring-aware median", func(b *testing.B) {
		h := &hedgeRun{}
		b.ReportAllocs()
		for b.Loop() {
			if o := n.replicaOrderIn(replicas, now, h); len(o) != 3 {
				b.Fatal(o)
			}
		}
	})
	b.Run("plain median", func(b *testing.B) {
		rs := make([]timeout.Replica, len(replicas))
		idx := make([]int, len(replicas))
		b.ReportAllocs()
		for b.Loop() {
			for i, d := range replicas {
				idx[i] = i
				r := &rs[i]
				if err := n.fleet.EstimateTo(&r.Estimate, d, timeout.MedianQuantile, now); err != nil {
					b.Fatal(err)
				}
				r.Estimate.Failing = r.Estimate.Failing || n.dec.Failing(d)
				r.Median = tracker.Survival{Millis: r.Estimate.DecisionQuantileMillis(), Samples: r.Estimate.Samples}
			}
			timeout.OrderReplicas(rs, idx)
		}
	})
}
