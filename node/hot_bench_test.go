package node

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// The embedded hot path: each benchmark beside its naive (uncached)
// reference, in one run so that their ratio is what to read on a shared
// machine.

// BenchmarkTimeout1 is Node.Timeout for one destination: its estimate
// from the cache in the local tracker's entry, the rule, the metrics.
func BenchmarkTimeout1(b *testing.B) { benchTimeoutOf(b, 1, false, false) }

// BenchmarkTimeout1FailingElsewhere is BenchmarkTimeout1 while the
// failure detector holds state for another destination: the decider is
// not quiet, so every decision takes the locked path.
func BenchmarkTimeout1FailingElsewhere(b *testing.B) {
	n, dests := benchNode(b)
	failElsewhere(n)
	benchTimeout(b, n, dests[:1])
}

// BenchmarkTimeout1Uncached is BenchmarkTimeout1 on EstimateUncached.
func BenchmarkTimeout1Uncached(b *testing.B) { benchTimeoutOf(b, 1, true, false) }

// BenchmarkTimeout3Uncached is BenchmarkTimeout3 on EstimateUncached.
func BenchmarkTimeout3Uncached(b *testing.B) { benchTimeoutOf(b, 3, true, false) }

// BenchmarkTimeout1Parallel is BenchmarkTimeout1 from every core at once,
// for the same destination: its published decision input is read without
// the shard lock, so the cores share no written cache line but the
// chosen-timeout histogram's.
func BenchmarkTimeout1Parallel(b *testing.B) { benchTimeoutOf(b, 1, false, true) }

// BenchmarkTimeout1ParallelUncached is BenchmarkTimeout1Parallel on
// EstimateUncached (the Fleet's lock and the shard's at every decision).
func BenchmarkTimeout1ParallelUncached(b *testing.B) { benchTimeoutOf(b, 1, true, true) }

// benchTimeoutOf measures Node.Timeout of the bench node's first k
// destinations, on EstimateUncached when uncached, from every core at once
// when parallel.
func benchTimeoutOf(b *testing.B, k int, uncached, parallel bool) {
	n, dests := benchNode(b)
	if uncached {
		useUncached(b, n)
	}
	if parallel {
		benchTimeoutParallel(b, n, dests[:k])
	} else {
		benchTimeout(b, n, dests[:k])
	}
}

func benchTimeoutParallel(b *testing.B, n *Node, ds []string) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := n.Timeout(ds, 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func benchTimeout(b *testing.B, n *Node, ds []string) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := n.Timeout(ds, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func noop(context.Context) error { return nil }

// BenchmarkDo is Node.Do around a no-op fn with the clock injected: the
// decision, the context, and learning the completion (a record below the
// quantile's bucket, which the cached local view takes on its room and
// its published input outlives: estCaches.recorded).
func BenchmarkDo(b *testing.B) {
	n, dests := benchNode(b)
	benchDo(b, n, dests[0])
}

// BenchmarkDoUncached is BenchmarkDo on EstimateUncached.
func BenchmarkDoUncached(b *testing.B) {
	n, dests := benchNode(b)
	useUncached(b, n)
	benchDo(b, n, dests[0])
}

func benchDo(b *testing.B, n *Node, dest string) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := n.Do(ctx, dest, 1, noop); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDoWithoutContext is Do's own work without the context: the
// poll, the quick verdict, the Attempt and its count, and the completion's
// record and counts, as Do runs them (Do minus DoBare is more than this:
// the two share the core's caches and predictors).
func BenchmarkDoWithoutContext(b *testing.B) {
	n, dests := benchNode(b)
	dest := dests[0]
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		start := n.clock()
		n.poll(start)
		var a timeout.Attempt
		if v, known := n.dec.Quick1(dest, 1, start); known {
			n.quickAttempt(&a, v, dest, 1)
			n.completed(&a, start)
		} else {
			// (now and then: a record uses up the cached view's room)
			n.attemptDecided(&a, dest, 1, start)
			if err := n.done(ctx, ctx, &a, start, nil, false, false); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkDoBare is a bare context.WithTimeout around the same fn: what
// BenchmarkDo is compared with (target: at most 1.25 times it).
func BenchmarkDoBare(b *testing.B) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		if err := noop(cctx); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
}

// BenchmarkRecordParallelSharedCounter is BenchmarkRecordParallel plus
// the shared Prometheus counter Record used to increment (now the local
// tracker counts samples per shard under the lock it already holds).
func BenchmarkRecordParallelSharedCounter(b *testing.B) {
	n, dests := benchNode(b)
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "c"})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			n.Record(dests[i&63], 12*time.Millisecond)
			c.Inc()
			i++
		}
	})
}

// BenchmarkChosenObserve is one observation of
// atnode_timeout_chosen_seconds (chosenHist.observe) of a whole number of
// milliseconds, as every decision's is: one add to its value's count.
func BenchmarkChosenObserve(b *testing.B) {
	h := newChosenHist()
	d := 250 * time.Millisecond
	for b.Loop() {
		h.observe(tracker.SourceFleet, d)
	}
}

// BenchmarkChosenObservePrometheus is BenchmarkChosenObserve through the
// prometheus.HistogramVec child it stands in for.
func BenchmarkChosenObservePrometheus(b *testing.B) {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "h", Buckets: chosenBounds}, []string{"source"})
	o := h.WithLabelValues("fleet")
	d := 250 * time.Millisecond
	for b.Loop() {
		o.Observe(d.Seconds())
	}
}
