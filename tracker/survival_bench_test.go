package tracker

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// hedgedView is a replica's view as hedging leaves it: 6000 samples,
// lognormal around 10 ms (σ 0.3), a share of them censored at 1–8 ms
// (hedges that lost after a few milliseconds).
func hedgedView(b *testing.B, censoredShare float64) (*geometry, hist, sparseSum) {
	g, err := newGeometry(DefaultConfig().Layout())
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(22, 3))
	h := newHist(&g)
	var c sparseSum
	for range 6000 {
		if r.Float64() < censoredShare {
			i := g.index(1 + r.Int64N(8))
			h.add(i, 1)
			c.add(i, 1)
			continue
		}
		h.add(g.index(int64(10*math.Exp(0.3*r.NormFloat64()))+1), 1)
	}
	return &g, h, c
}

// BenchmarkSurvivalQuantile: the censoring-aware quantile beside the plain
// one it replaces (quantileIndex), on a hedged replica's view with 0, 30
// and 70 % of its samples censored, at q = 0.5 (the median replicas are
// ordered by) and q = 0.95 (the hedge delay's at the default budget; the
// plain quantile walks down from the top there).
func BenchmarkSurvivalQuantile(b *testing.B) {
	for _, q := range []float64{0.5, 0.95} {
		for _, share := range []float64{0, 0.3, 0.7} {
			_, h, c := hedgedView(b, share)
			name := fmt.Sprintf("q=%v/censored=%.0f%%", q, 100*share)
			for _, kind := range []struct {
				name string
				walk func() (int, bool)
			}{
				{"plain", func() (int, bool) { return h.quantileIndex(q) }},
				{"kaplan-meier", func() (int, bool) { return survivalQuantile(&h, &c, q) }},
			} {
				b.Run(name+"/"+kind.name, func(b *testing.B) {
					b.ReportAllocs()
					var sink int
					for b.Loop() {
						i, _ := kind.walk()
						sink += i
					}
					_ = sink
				})
			}
		}
	}
}

// BenchmarkFleetMedian: Fleet.Median of a destination's fleet view (three
// peers' batches over the window, 30 % censored at 1–8 ms) beside the
// Estimate at q = 0.5 that DoHedged reads with it, and the hedge delay's
// pair at q = 0.95 (Estimate and Fleet.Survival).
func BenchmarkFleetMedian(b *testing.B) {
	c := testFleetConfig()
	local, err := NewSync[string](c.Tracker)
	if err != nil {
		b.Fatal(err)
	}
	f := newTestFleet(b, c, local)
	now := fleetAt(c, testE, 100)
	_, h, cs := hedgedView(b, 0.3)
	d := DestCounts{Dest: "r0"}
	for i, n := range h.counts {
		if n > 0 {
			d.Buckets = append(d.Buckets, Bucket{Index: uint16(i), Count: uint32(n)})
			d.Total += n
		}
	}
	for k, i := range cs.idx {
		d.TimedOut = append(d.TimedOut, Bucket{Index: i, Count: uint32(cs.n[k])})
	}
	for _, peer := range []string{"a", "b", "c"} {
		for ep := testE - int64(c.Tracker.SubWindows); ep <= testE-1; ep++ {
			if o := f.Insert(mkBatch(peer, 1, ep, d), now); o != InsertNew {
				b.Fatal(o)
			}
		}
	}
	if m := f.Median("r0", SourceFleet, now); m.Samples == 0 || m.Above {
		b.Fatal(m)
	}
	// The median's pair (the estimate DoHedged reads with it), and the
	// hedge delay's two reads at the default budget: the estimate (cached)
	// and the quantile under censoring (a walk, no cache).
	for _, q := range []float64{0.5, 0.95} {
		b.Run(fmt.Sprintf("estimate q=%v", q), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if e, _ := f.Estimate("r0", q, now); e.Source != SourceFleet {
					b.Fatal(e)
				}
			}
		})
		name := fmt.Sprintf("survival q=%v", q)
		if q == 0.5 {
			name = "median" // Fleet.Median is Survival at q = 0.5
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if m := f.Survival("r0", SourceFleet, q, now); m.Samples == 0 {
					b.Fatal(m)
				}
			}
		})
	}
}
