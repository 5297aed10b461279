package tracker

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// randomHist fills a histogram of g's layout with a random shape: a few
// clusters of samples, some in the same block, some blocks apart.
func randomHist(r *rand.Rand, g *geometry) hist {
	h := newHist(g)
	n := len(h.counts)
	for range 1 + r.IntN(4) {
		at, width := r.IntN(n), 1+r.IntN(80)
		for range 1 + r.IntN(60) {
			h.add(min(at+r.IntN(width), n-1), uint64(1+r.IntN(1+r.IntN(50))))
		}
	}
	return h
}

// randomCensored censors part of a random subset of h's non-empty buckets.
func randomCensored(r *rand.Rand, h *hist) sparseSum {
	var c sparseSum
	share := r.IntN(4) // 0: about every bucket, else about 1 in share+1
	for i, n := range h.counts {
		if n > 0 && r.IntN(share+1) == 0 {
			c.add(i, 1+r.Uint64N(n))
		}
	}
	return c
}

// kmReference is the Kaplan–Meier q-quantile the slow, exact way: the
// survival function as a big.Rat product over the non-empty buckets, and
// the first bucket where it is <= 1 − q (ok false when none is), q taken
// exactly as its float64 value. near reports whether S came within 1e-9
// of 1 − q at some bucket, where float rounding may decide a tie either
// way.
func kmReference(h *hist, c *sparseSum, q float64) (idx int, ok, near bool) {
	s := big.NewRat(1, 1)
	tail := new(big.Rat).Sub(big.NewRat(1, 1), new(big.Rat).SetFloat64(q))
	n := h.total
	for i, hc := range h.counts {
		if hc == 0 {
			continue
		}
		d := hc - c.get(i)
		s.Mul(s, big.NewRat(int64(n-d), int64(n)))
		n -= hc
		diff, _ := new(big.Rat).Sub(s, tail).Float64()
		near = near || (diff < 1e-9 && diff > -1e-9)
		if d > 0 && s.Cmp(tail) <= 0 {
			return i, true, near
		}
	}
	return 0, false, near
}

// randomQuantile draws a quantile in (0, 1]: the median, the hedge
// delay's quantiles at budgets 0.5 down to 0.01, the timeout's P99.99 and
// 1, or a uniform one.
func randomQuantile(r *rand.Rand) float64 {
	qs := []float64{0.5, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99, 0.9999, 1}
	if k := r.IntN(2 * len(qs)); k < len(qs) {
		return qs[k]
	}
	return 1 - r.Float64() // (0, 1]
}

// TestSurvivalQuantilePlain proves, over seeded random histograms and
// quantiles, that with nothing censored the Kaplan–Meier q-quantile is
// exactly the plain one (the bucket of quantileIndex(q), rank ⌈q·N⌉ as it
// rounds q·N), and that Survival then reports QuantileMillis's value.
func TestSurvivalQuantilePlain(t *testing.T) {
	g, err := newGeometry(DefaultConfig().Layout())
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(22, 1))
	var none sparseSum
	for k := range 4000 {
		h := randomHist(r, &g)
		q := randomQuantile(r)
		if k < 2000 {
			q = 0.5 // the median, as before the quantile was general
		}
		want, ok := h.quantileIndex(q)
		require.True(t, ok)
		got, ok := survivalWalk(&h, &none, q)
		require.True(t, ok, "histogram %d, q %v", k, q)
		require.Equal(t, want, got, "histogram %d: total %d, q %v", k, h.total, q)
		qv, _ := h.quantileValue(&g, q)
		require.Equal(t, Survival{Millis: uint64(qv), Samples: h.total}, survival(&g, &h, &none, false, q))
		// Censored counts in a view whose censoring is unknown: the plain
		// quantile too.
		c := randomCensored(r, &h)
		require.Equal(t, Survival{Millis: uint64(qv), Samples: h.total}, survival(&g, &h, &c, true, q))
	}
	// One sample, two, and even splits: rank ⌈q·N⌉.
	for _, tc := range []struct {
		counts map[int]uint64
		q      float64
		want   int
	}{
		{map[int]uint64{7: 1}, 0.5, 7},
		{map[int]uint64{3: 1, 9: 1}, 0.5, 3},
		{map[int]uint64{3: 2, 9: 2}, 0.5, 3},
		{map[int]uint64{3: 2, 9: 3}, 0.5, 9},
		{map[int]uint64{0: 5, 100: 5, 1000: 1}, 0.5, 100},
		{map[int]uint64{3: 19, 9: 1}, 0.95, 3}, // rank 19
		{map[int]uint64{3: 18, 9: 2}, 0.95, 9}, // rank 19
		{map[int]uint64{3: 95, 9: 5}, 0.95, 3}, // 0.95·100 rounds to 95
		{map[int]uint64{3: 9, 9: 1}, 0.9, 3},   // 0.9·10 rounds to 9
		{map[int]uint64{3: 1, 9: 1}, 1, 9},     // q = 1: the highest
		{map[int]uint64{3: 1, 9: 1}, 1e-9, 3},  // rank 1: the lowest
		{map[int]uint64{3: 7, 9: 3}, 0.7000001, 9},
	} {
		h := newHist(&g)
		for i, n := range tc.counts {
			h.add(i, n)
		}
		want, _ := h.quantileIndex(tc.q)
		require.Equal(t, tc.want, want, "%v at %v: the plain quantile", tc.counts, tc.q)
		got, ok := survivalWalk(&h, &none, tc.q)
		require.True(t, ok)
		require.Equal(t, tc.want, got, "%v at %v", tc.counts, tc.q)
	}
	got, ok := survivalQuantile(new(hist), &none, 0.5)
	require.False(t, ok)
	require.Zero(t, got)
}

// TestSurvivalQuantileKaplanMeier checks survivalQuantile against the
// exact product on seeded random histograms with random censoring, at the
// median and at random quantiles.
func TestSurvivalQuantileKaplanMeier(t *testing.T) {
	g, err := newGeometry(DefaultConfig().Layout())
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(22, 2))
	above, ties := 0, 0
	for k := range 2000 {
		h := randomHist(r, &g)
		c := randomCensored(r, &h)
		q := randomQuantile(r)
		if k < 1000 {
			q = 0.5
		}
		want, wantOK, near := kmReference(&h, &c, q)
		got, ok := survivalQuantile(&h, &c, q)
		if near && (got != want || ok != wantOK) {
			ties++
			continue
		}
		require.Equal(t, wantOK, ok, "histogram %d, q %v", k, q)
		require.Equal(t, want, got, "histogram %d, q %v", k, q)
		if !ok {
			above++
		}
	}
	t.Logf("%d histograms with S above 1 − q to the end, %d float ties", above, ties)
	require.Positive(t, above, "some histograms have S above 1 − q to the end")
	require.Less(t, ties, 20, "float ties are rare")
}

// TestSurvivalQuantileMonotone: on one view the Kaplan–Meier quantile
// never falls as q rises, and once S stays above 1 − q it stays above for
// every higher q.
func TestSurvivalQuantileMonotone(t *testing.T) {
	g, err := newGeometry(DefaultConfig().Layout())
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(22, 4))
	for k := range 300 {
		h := randomHist(r, &g)
		c := randomCensored(r, &h)
		prev, prevOK := 0, true
		for _, q := range []float64{0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 0.99, 1} {
			got, ok := survivalQuantile(&h, &c, q)
			if !prevOK {
				require.False(t, ok, "histogram %d at %v", k, q)
				continue
			}
			if ok {
				require.GreaterOrEqual(t, got, prev, "histogram %d at %v", k, q)
			}
			prev, prevOK = got, ok
		}
	}
}

// TestSurvivalMedianHedged is the case it is for: a demoted replica whose
// attempts are mostly hedges that lose after a few milliseconds.
func TestSurvivalMedianHedged(t *testing.T) {
	tr, err := New[string](DefaultConfig())
	require.NoError(t, err)
	now := time.Unix(1_700_000_000, 0)
	for range 60 {
		tr.Record("r0", 20*time.Millisecond, now) // it answered, when first
	}
	for k := range 200 {
		tr.RecordTimeout("r0", time.Duration(2+k%6)*time.Millisecond, now) // superseded at 2–7 ms
	}
	q, ok := tr.QuantileMillis("r0", 0.5, now)
	require.True(t, ok)
	require.Equal(t, uint64(5), q, "the plain median counts the losers at their elapsed time")
	// S stays 1 through the losers (nothing completed), the at-risk share
	// falling to 60 of 260: lim = 130·60/260 = 30, reached half way through
	// the 60 completed at 20 ms.
	require.Equal(t, Survival{Millis: 20, Samples: 260}, LocalMedian(tr, "r0", now))

	// So much censored above what completed that S stays above 1/2.
	for range 10 {
		tr.Record("r1", 5*time.Millisecond, now)
	}
	for range 90 {
		tr.RecordTimeout("r1", 10*time.Millisecond, now)
	}
	require.Equal(t, Survival{Samples: 100, Above: true}, LocalMedian(tr, "r1", now))
	require.Equal(t, Survival{}, LocalMedian(tr, "nosuch", now))

	// A hedged-to replica's hedge-delay quantile: 100 losers superseded at
	// 3 ms, completions at 10 (80), 20 (15) and 40 ms (5). The plain P90
	// counts the losers as latencies (rank 180: 10 ms); under censoring S
	// is 1 past the losers, 20/100 after 10 ms and 5/100 after 20 ms.
	for range 100 {
		tr.RecordTimeout("r2", 3*time.Millisecond, now)
	}
	for _, c := range []struct{ ms, n int }{{10, 80}, {20, 15}, {40, 5}} {
		for range c.n {
			tr.Record("r2", time.Duration(c.ms)*time.Millisecond, now)
		}
	}
	q, ok = tr.QuantileMillis("r2", 0.9, now)
	require.True(t, ok)
	require.Equal(t, uint64(10), q)
	for _, c := range []struct {
		q    float64
		want uint64
	}{{0.5, 10}, {0.8, 10}, {0.81, 20}, {0.9, 20}, {0.95, 20}, {0.951, 40}, {1, 40}} {
		require.Equal(t, Survival{Millis: c.want, Samples: 200}, LocalSurvival(tr, "r2", c.q, now), "q %v", c.q)
	}
	for _, q := range []float64{0, -1, 1.5, math.NaN()} {
		require.Equal(t, Survival{}, LocalSurvival(tr, "r2", q, now), "q %v", q)
	}
}

// TestFleetMedian checks Fleet.Median reads the views Estimate reads: the
// fleet view (censoring unknown: the plain median) and the local one.
func TestFleetMedian(t *testing.T) {
	c := testFleetConfig()
	local, err := NewSync[string](c.Tracker)
	require.NoError(t, err)
	f := newTestFleet(t, c, local)
	now := fleetAt(c, testE, 0)
	// Buckets 5 and 10 are 5 and 10 ms in the default layout.
	x := timedOut(dcBuckets("x", 5, 30, 10, 20), 5, 30) // 30 censored at 5 ms, 20 completed at 10
	y := dcBuckets("y", 5, 30, 10, 20)
	y.CensoringUnknown = true
	require.Equal(t, InsertNew, f.Insert(mkBatch("a", 1, testE-1, x, y), now))
	e, err := f.Estimate("x", 0.5, now)
	require.NoError(t, err)
	require.Equal(t, uint64(5), e.FleetValueMillis)
	require.Equal(t, Survival{Millis: 10, Samples: 50}, f.Median("x", SourceFleet, now))
	require.Equal(t, Survival{Millis: 5, Samples: 50}, f.Median("y", SourceFleet, now), "censoring unknown")
	require.Equal(t, Survival{}, f.Median("nosuch", SourceFleet, now))
	require.Equal(t, Survival{}, f.Median("x", SourceNone, now))
	require.Equal(t, Survival{Millis: 10, Samples: 50}, f.Survival("x", SourceFleet, 0.95, now))
	require.Equal(t, Survival{Millis: 10, Samples: 50}, f.Survival("y", SourceFleet, 0.95, now))
	require.Equal(t, Survival{Millis: 5, Samples: 50}, f.Survival("y", SourceFleet, 0.6, now), "censoring unknown: the plain quantile")
	require.Equal(t, Survival{}, f.Survival("x", SourceFleet, 0, now))
	require.Equal(t, Survival{Millis: 10, Samples: 50}, f.Survival("y", SourceFleet, 1, now), "q = 1 is in (0, 1]")
	require.Equal(t, Survival{}, f.Survival("y", SourceFleet, 1.5, now))

	for range 3 {
		local.Record("x", 40*time.Millisecond, now)
	}
	local.RecordTimeout("x", 2*time.Millisecond, now)
	require.Equal(t, Survival{Millis: 40, Samples: 4}, f.Median("x", SourceLocal, now))
	require.Equal(t, LocalMedian(local, "x", now), f.Median("x", SourceLocal, now))
	require.Equal(t, Survival{}, f.Median("x", SourceLocal, now.Add(time.Hour)), "rotated out")

	plain, err := New[string](c.Tracker)
	require.NoError(t, err)
	plain.Record("x", 7*time.Millisecond, now)
	fp := newTestFleet(t, c, plain)
	require.Equal(t, Survival{Millis: 7, Samples: 1}, fp.Median("x", SourceLocal, now))
	require.Equal(t, Survival{}, newTestFleet(t, c, nil).Median("x", SourceLocal, now))
}
