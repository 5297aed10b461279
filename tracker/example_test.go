package tracker_test

import (
	"fmt"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

func Example() {
	t, err := tracker.New[string](tracker.DefaultConfig())
	if err != nil {
		panic(err)
	}
	now := time.UnixMilli(1_700_000_000_000)
	for ms := uint64(1); ms <= 1000; ms++ {
		t.RecordMillis("db-1", ms, now)
	}
	p50, _ := t.QuantileMillis("db-1", 0.5, now)
	p99, _ := t.Quantile("db-1", 0.99, now)
	fmt.Println(t.Samples("db-1", now), p50, p99)

	// One window (60s) later every sample has expired.
	_, ok := t.Quantile("db-1", 0.99, now.Add(time.Minute))
	fmt.Println(ok)
	// Output:
	// 1000 501 991ms
	// false
}

func ExampleSyncTracker() {
	t, err := tracker.NewSync[string](tracker.DefaultConfig())
	if err != nil {
		panic(err)
	}
	now := time.UnixMilli(1_700_000_000_000)
	start := now.Add(-12 * time.Millisecond)
	fmt.Println(t.RecordSince("db-1", start, now))
	t.Record("db-1", 100*time.Second, now) // clamped to MaxTrackableLatency
	t.Record("db-1", 5*time.Millisecond, now)
	p, ok := t.Quantile("db-1", 0.9999, now)
	fmt.Println(p, ok)
	// Output:
	// 12ms
	// 1m0.159s true
}

func ExampleSealedSubWindow() {
	cfg := tracker.DefaultConfig()
	t, err := tracker.NewSync[string](cfg)
	if err != nil {
		panic(err)
	}
	now := time.UnixMilli(1_700_000_000_000)
	e := cfg.Epoch(now)
	t.RecordMillis("db-2", 7, now)
	t.RecordMillis("db-1", 7, now)
	t.RecordMillis("db-1", 300, now)

	// One sub-window later, epoch e is sealed.
	later := cfg.EpochStart(e + 1)
	for _, d := range tracker.SealedSubWindow(t, e, later) {
		fmt.Println(d.Dest, d.Total, d.Buckets)
	}
	fmt.Println(tracker.SealedSubWindow(t, e+1, later) == nil) // the current epoch is not sealed
	// Output:
	// db-1 2 [{7 1} {278 1}]
	// db-2 1 [{7 1}]
	// true
}

func ExampleExportHistogram() {
	t, err := tracker.New[string](tracker.DefaultConfig())
	if err != nil {
		panic(err)
	}
	now := time.UnixMilli(1_700_000_000_000)
	for ms := uint64(1); ms <= 100; ms++ {
		t.RecordMillis("db-1", ms, now)
	}
	h := tracker.ExportHistogram(t, "db-1", now)
	fmt.Println(h.TotalCount(), h.Max(), h.ValueAtQuantile(50))
	// Output:
	// 100 100 50
}

// ExampleLocalEstimate records a destination that stops answering: its
// timed-out attempts are samples at their timeout, so the quantile climbs
// to the timeout, but they are censored, so the decision does not follow
// it up, and once nothing completes in the window the destination is
// failing (the decision takes the exponential fallback).
func ExampleLocalEstimate() {
	t, err := tracker.NewSync[string](tracker.DefaultConfig())
	if err != nil {
		panic(err)
	}
	now := time.UnixMilli(1_700_000_000_000)
	for range 97 {
		t.RecordMillis("db-1", 20, now)
	}
	for range 3 {
		t.RecordTimeoutMillis("db-1", 250, now) // ended by a 250 ms timeout
	}
	e, _ := tracker.LocalEstimate(t, "db-1", 0.99, now)
	v, ok := e.DecisionValue()
	fmt.Println(e.ValueMillis, e.LocalCensored, e.MaxCompletedMillis, v, ok, e.Failing)

	// A window later only timeouts remain.
	later := now.Add(time.Minute)
	for range 5 {
		t.RecordTimeoutMillis("db-1", 250, later)
	}
	e, _ = tracker.LocalEstimate(t, "db-1", 0.99, later)
	_, ok = e.DecisionValue()
	fmt.Println(e.ValueMillis, e.LocalCensored, e.HasMaxCompleted, ok, e.Failing)
	// Output:
	// 250 3 20 20 true false
	// 250 5 false false true
}
