package tracker

import (
	"fmt"
	"testing"
	"time"
)

// fullCensoredWindow is fullWindow with 1 in 50 samples a timed-out
// attempt at one of three timeouts, as an adaptive timeout's would be.
func fullCensoredWindow(t *Tracker[string], dest string) time.Time {
	k := 0
	return fillWindow(func(d string, ms uint64, now time.Time) {
		if k++; k%50 == 0 {
			t.RecordTimeoutMillis(d, []uint64{250, 500, 1000}[k/50%3], now)
			return
		}
		t.RecordMillis(d, ms, now)
	}, dest, benchPerSub)
}

// censoredBenchWindow is the window of a full censored window's
// destination, rotated to its last sub-window.
func censoredBenchWindow(b *testing.B) *window {
	t := mustNew(b)
	now := fullCensoredWindow(t, "db-1")
	return &t.lookup("db-1", now).window
}

// BenchmarkRecordTimeoutMillis: Tracker.RecordTimeoutMillis in steady state
// (no rotation), into a window holding censored counts; compare
// BenchmarkRecordMillis, which it must not slow down.
func BenchmarkRecordTimeoutMillis(b *testing.B) {
	t := mustNew(b)
	now := fullCensoredWindow(t, "db-1")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		t.RecordTimeoutMillis("db-1", []uint64{250, 500, 1000}[i%3], now)
		i++
	}
}

// BenchmarkLocalEstimate is the local window's view with M and the decision
// input (LocalEstimate at P99.99) over a full window of 10 × 6000 samples,
// 1 in 50 timed out: Q's walk from the top plus M's, which stops at the
// first bucket not entirely censored.
func BenchmarkLocalEstimate(b *testing.B) {
	t := mustNew(b)
	now := fullCensoredWindow(t, "db-1")
	b.ReportAllocs()
	for b.Loop() {
		if e, _ := LocalEstimate(t, "db-1", 0.9999, now); !e.Trusted() {
			b.Fatal(e)
		}
	}
}

// BenchmarkMaxCompleted is M alone on that window, from the censored sum
// kept incrementally, stepping between non-empty buckets by bitmap (the
// 1000 ms and 500 ms buckets hold only timeouts, so it steps twice);
// BenchmarkMaxCompletedByCounts steps by the counts and their block sums
// instead (what the fleet does once per change of a view), and
// BenchmarkMaxCompletedNaive is the naive alternative: merge the
// sub-windows' censored counts into a dense array per query, then scan the
// histogram down from its highest bucket for one not entirely censored.
func BenchmarkMaxCompleted(b *testing.B) {
	w := censoredBenchWindow(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := w.maxCompleted(); !ok {
			b.Fatal("none")
		}
	}
}

func BenchmarkMaxCompletedByCounts(b *testing.B) {
	w := censoredBenchWindow(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := maxCompleted(&w.sum, w.censored()); !ok {
			b.Fatal("none")
		}
	}
}

func BenchmarkMaxCompletedNaive(b *testing.B) {
	w := censoredBenchWindow(b)
	dense := make([]uint64, len(w.sum.counts))
	b.ReportAllocs()
	for b.Loop() {
		clear(dense)
		for _, bk := range w.cens.cur {
			dense[bk.Index] += uint64(bk.Count)
		}
		for _, s := range w.cens.ring {
			if s != nil {
				for _, bk := range s.buckets {
					dense[bk.Index] += uint64(bk.Count)
				}
			}
		}
		found := false
		for i := len(w.sum.counts) - 1; i >= 0; i-- {
			if w.sum.counts[i] > dense[i] {
				found = true
				break
			}
		}
		if !found {
			b.Fatal("none")
		}
	}
}

// BenchmarkFleetEstimateCensored is BenchmarkFleetEstimate with 1 in 50 of
// every origin's samples of the destination timed out, in the fleet view and
// the local one.
func BenchmarkFleetEstimateCensored(b *testing.B) {
	c := testFleetConfig()
	local := mustNew(b)
	tpl := benchTemplates(1)
	for _, t := range tpl {
		for i := range t.Dests {
			if d := &t.Dests[i]; d.Dest == "dest-042" {
				top := d.Buckets[len(d.Buckets)-1]
				d.TimedOut = []Bucket{{Index: top.Index, Count: top.Count}}
			}
		}
	}
	f, _ := benchFleetOf(b, c, local, tpl)
	now := fleetAt(c, testE, 100)
	for i := range 500 {
		if i%50 == 0 {
			local.RecordTimeoutMillis("dest-042", 250, now)
		} else {
			local.RecordMillis("dest-042", uint64(40+i%40), now)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if e, _ := f.Estimate("dest-042", 0.9999, now); e.Source != SourceFleet || e.Censored == 0 {
			b.Fatal(e)
		}
	}
}

// BenchmarkRecordEvicting records a new destination into a tracker holding
// MaxDestinations (10 000) destinations with a few samples each, so every
// op evicts one: the cost a flood of junk names puts on the tracker.
func BenchmarkRecordEvicting(b *testing.B) {
	c := DefaultConfig()
	c.MaxDestinations = 10_000
	names := make([]string, 1<<16)
	for i := range names {
		names[i] = fmt.Sprintf("junk-%d", i)
	}
	for _, im := range recTrackers(c) {
		b.Run(im.name, func(b *testing.B) {
			t, err := im.make()
			if err != nil {
				b.Fatal(err)
			}
			for i := range c.MaxDestinations {
				t.RecordMillis(fmt.Sprint("d", i), 5, benchStart)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				t.RecordMillis(names[i&(len(names)-1)], 5, benchStart)
				i++
			}
		})
	}
}

// recTracker is one of the trackers a record benchmark compares.
type recTracker struct {
	name string
	make func() (recQuery, error)
}

// recTrackers are the trackers the record benchmarks compare, both of c.
func recTrackers(c Config) []recTracker {
	return []recTracker{
		{"Tracker", func() (recQuery, error) { return New[string](c) }},
		{"SyncTracker", func() (recQuery, error) { return NewSync[string](c) }},
	}
}
