package tracker

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const (
	benchOrigins = 100
	benchDests   = 100
	benchPerDest = 100 // samples per (origin, destination, epoch)
)

func benchDestNames() []string {
	dests := make([]string, benchDests)
	for i := range dests {
		dests[i] = fmt.Sprintf("dest-%03d", i)
	}
	return dests
}

// benchTemplates returns one 100-destination batch per origin.
func benchTemplates(seed uint64) []Batch {
	r := rand.New(rand.NewPCG(seed, 1))
	dests := benchDestNames()
	out := make([]Batch, benchOrigins)
	for o := range out {
		b := randomBatch(r, fmt.Sprintf("node-%03d", o), uint64(o+1), 0, dests, benchPerDest)
		// every origin has every destination, so each batch has 100
		have := map[string]bool{}
		for _, d := range b.Dests {
			have[d.Dest] = true
		}
		for _, d := range dests {
			if !have[d] {
				b.Dests = append(b.Dests, dcBuckets(d, 50, 3))
			}
		}
		out[o] = b
	}
	return out
}

// benchFleet returns a fleet at epoch testE holding 100 origins × 100
// destinations for every epoch it accepts up to E−1 (the view's N−1 epochs
// plus E−N and E−N−1).
func benchFleet(b *testing.B, c FleetConfig, local localWindow) (*Fleet, []Batch) {
	return benchFleetOf(b, c, local, benchTemplates(1))
}

// benchFleetOf is benchFleet holding the batches tpl, one per origin.
func benchFleetOf(b *testing.B, c FleetConfig, local localWindow, tpl []Batch) (*Fleet, []Batch) {
	f := newTestFleet(b, c, local)
	now := fleetAt(c, testE, 0)
	N := int64(c.Tracker.SubWindows)
	for ep := testE - N - 1; ep <= testE-1; ep++ {
		for _, t := range tpl {
			t.Key.Epoch = ep
			if o := f.Insert(t, now); o != InsertNew {
				b.Fatal(o)
			}
		}
	}
	return f, tpl
}

// BenchmarkFleetEstimate is the estimate of one destination at 100 origins ×
// 100 destinations, its view kept incrementally (the first query after a
// change recomputes the peers and cap; see EstimateAfterChange).
func BenchmarkFleetEstimate(b *testing.B) { benchFleetEstimate(b, false) }

// BenchmarkFleetEstimateLocked is BenchmarkFleetEstimate's estimate made
// the way it was before the fleet facts were published: under the Fleet's
// lock, from the destination's view (its quantile walk) every time
// (EstimateUncached, which neither reads nor publishes them).
func BenchmarkFleetEstimateLocked(b *testing.B) { benchFleetEstimate(b, true) }

func benchFleetEstimate(b *testing.B, locked bool) {
	c := testFleetConfig()
	f, _ := benchFleet(b, c, fakeLocal{"dest-042": {ms: 80, samples: 500, ok: true}})
	benchEstimate(b, f, locked)
}

// benchEstimate measures f's estimate of dest-042 at the 99.99th
// percentile, 100 sub-windows into testE: Estimate, or EstimateUncached
// when uncached.
func benchEstimate(b *testing.B, f *Fleet, uncached bool) {
	now := fleetAt(f.cfg, testE, 100)
	b.ReportAllocs()
	for b.Loop() {
		var e Estimate
		if uncached {
			e, _ = f.EstimateUncached("dest-042", 0.9999, now)
		} else {
			e, _ = f.Estimate("dest-042", 0.9999, now)
		}
		if e.Source != SourceFleet {
			b.Fatal(e)
		}
	}
}

// BenchmarkFleetEstimateAfterChange forces the per-destination summary
// (peer counts, effective peers, share cap check) to be recomputed on every
// query, as happens once after each insert touching the destination.
func BenchmarkFleetEstimateAfterChange(b *testing.B) {
	c := testFleetConfig()
	f, _ := benchFleet(b, c, nil)
	now := fleetAt(c, testE, 100)
	d := f.dests["dest-042"]
	b.ReportAllocs()
	for b.Loop() {
		d.gen++
		f.changed() // as a change does: the published facts go too
		if e, _ := f.Estimate("dest-042", 0.9999, now); e.Source != SourceFleet {
			b.Fatal(e)
		}
	}
}

// BenchmarkFleetEstimateCapped is the estimate when one origin floods the
// destination and the share cap bites (cached capped view).
func BenchmarkFleetEstimateCapped(b *testing.B) {
	c := testFleetConfig()
	f, _ := benchFleet(b, c, nil)
	now := fleetAt(c, testE, 100)
	flood := mkBatch("flood", 1, testE-1, dcBuckets("dest-042", 700, 1_000_000))
	if o := f.Insert(flood, now); o != InsertNew {
		b.Fatal(o)
	}
	e, _ := f.Estimate("dest-042", 0.9999, now)
	if !f.dests["dest-042"].sum.capped {
		b.Fatal("cap does not bite", e)
	}
	b.ReportAllocs()
	for b.Loop() {
		f.Estimate("dest-042", 0.9999, now)
	}
}

// BenchmarkFleetEstimateNaive is the naive alternative: merge every held
// batch of the destination in the view into a dense histogram per query,
// then take the quantile.
func BenchmarkFleetEstimateNaive(b *testing.B) {
	c := testFleetConfig()
	f, _ := benchFleet(b, c, nil)
	h := newHist(&f.geo)
	b.ReportAllocs()
	for b.Loop() {
		h.reset()
		for _, m := range f.members {
			for hb := range f.viewParts(m) {
				i, ok := findDest(hb.dests, "dest-042")
				if !ok {
					continue
				}
				for _, bk := range hb.dests[i].buckets {
					h.add(int(bk.Index), uint64(bk.Count))
				}
			}
		}
		if _, ok := h.quantileValue(&f.geo, 0.9999); !ok {
			b.Fatal("empty")
		}
	}
}

// BenchmarkFleetInsert inserts a new 100-destination batch of the previous
// epoch (so it enters the view at once) into a fleet of 100 origins × 100
// destinations. Each epoch, every origin sends one; the move to the next
// epoch is not timed here (see BenchmarkFleetInsertSteady).
// Its destinations come in random order, so Insert sorts them.
func BenchmarkFleetInsert(b *testing.B) { benchInsert(b, false, false, false) }

// BenchmarkFleetInsertHot is BenchmarkFleetInsertSorted with the batch's
// buckets in the CPU cache, as they are when Insert runs right after the
// codec decoded a peer's message: every origin sends the same contents under
// its own key. The other Insert benchmarks cycle through 100 distinct
// batches (7 MB), so each Insert first reads its 70 KB input from memory.
func BenchmarkFleetInsertHot(b *testing.B) { benchInsert(b, false, true, true) }

// BenchmarkFleetInsertSorted is BenchmarkFleetInsert with destinations
// already sorted by name (as Lookup serves them), which skips the sort.
func BenchmarkFleetInsertSorted(b *testing.B) { benchInsert(b, false, true, false) }

// BenchmarkFleetInsertSteady is BenchmarkFleetInsert with the move to the
// next epoch timed: after each 100 inserts the window slides, subtracting
// the epoch that leaves the view and dropping the expired one (about 2 × 100
// batches of work), amortized over the epoch's 100 inserts.
func BenchmarkFleetInsertSteady(b *testing.B) { benchInsert(b, true, false, false) }

func benchInsert(b *testing.B, timeSlide, sorted, hot bool) {
	c := testFleetConfig()
	f, tpl := benchFleet(b, c, nil)
	if hot {
		for i := range tpl {
			tpl[i].Dests = tpl[0].Dests
		}
	}
	if sorted {
		for _, t := range tpl {
			slices.SortFunc(t.Dests, func(x, y DestCounts) int { return strings.Compare(x.Dest, y.Dest) })
		}
	}
	e := int64(testE) // the fleet holds up to testE−1
	i := len(tpl)
	b.ReportAllocs()
	for b.Loop() {
		if i == len(tpl) {
			i = 0
			e++
			if !timeSlide {
				b.StopTimer()
				f.Advance(fleetAt(c, e, 0))
				b.StartTimer()
			}
		}
		t := tpl[i]
		t.Key.Epoch = e - 1
		if o := f.Insert(t, fleetAt(c, e, 1)); o != InsertNew {
			b.Fatal(o)
		}
		i++
	}
}

// BenchmarkFleetInsertDuplicate is a re-delivered batch as a peer serves it
// (Lookup's canonical order): compared in place and dropped, no copy.
func BenchmarkFleetInsertDuplicate(b *testing.B) {
	c := testFleetConfig()
	f, _ := benchFleet(b, c, nil)
	now := fleetAt(c, testE, 1)
	held, _ := f.Lookup(BatchKey{Origin: "node-007", Boot: 8, Epoch: testE - 1})
	t := held
	t.Dests = slices.Clone(held.Dests)
	b.ReportAllocs()
	for b.Loop() {
		if o := f.Insert(t, now); o != InsertDuplicate {
			b.Fatal(o)
		}
	}
}

// BenchmarkFleetMemory measures the heap a fleet holding 100 origins × 100
// destinations × 12 epochs (N+2 held epochs) takes, and reports it per
// (origin, destination, epoch), dense per-destination views included.
func BenchmarkFleetMemory(b *testing.B) {
	c := testFleetConfig()
	var f *Fleet
	var ms0, ms1 runtime.MemStats
	for b.Loop() {
		f = nil
		runtime.GC()
		runtime.ReadMemStats(&ms0)
		f, _ = benchFleet(b, c, nil)
		runtime.GC()
		runtime.ReadMemStats(&ms1)
	}
	s := f.Stats()
	cells := float64(benchOrigins * benchDests * s.Batches / benchOrigins)
	b.ReportMetric(float64(ms1.HeapAlloc-ms0.HeapAlloc)/cells, "B/origin·dest·epoch")
	b.ReportMetric(float64(s.Buckets)/cells, "buckets/origin·dest·epoch")
	runtime.KeepAlive(f)
}

// BenchmarkFleetEstimateLocalTracker is BenchmarkFleetEstimate with a real
// local Tracker (500 samples of the destination in its window) in place of
// the fake local view: the node's request path.
func BenchmarkFleetEstimateLocalTracker(b *testing.B) {
	c := testFleetConfig()
	local := mustNew(b)
	now := fleetAt(c, testE, 100)
	for i := range 500 {
		local.RecordMillis("dest-042", uint64(40+i%40), now)
	}
	f, _ := benchFleet(b, c, local)
	b.ReportAllocs()
	for b.Loop() {
		e, _ := f.Estimate("dest-042", 0.9999, now)
		if e.Source != SourceFleet {
			b.Fatal(e)
		}
	}
}
