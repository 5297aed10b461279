package tracker

import (
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

// kmReference is the Kaplan–Meier median the slow, exact way: the
// survival function as a big.Rat product over the non-empty buckets, and
// the first bucket where it is <= 1/2 (ok false when none is). near
// reports whether S came within 1e-9 of 1/2 at some bucket, where float
// rounding may decide a tie either way.
func kmReference(h *hist, c *sparseSum) (idx int, ok, near bool) {
	s := big.NewRat(1, 1)
	half := big.NewRat(1, 2)
	n := h.total
	for i, hc := range h.counts {
		if hc == 0 {
			continue
		}
		d := hc - c.get(i)
		s.Mul(s, big.NewRat(int64(n-d), int64(n)))
		n -= hc
		diff, _ := new(big.Rat).Sub(s, half).Float64()
		near = near || (diff < 1e-9 && diff > -1e-9)
		if d > 0 && s.Cmp(half) <= 0 {
			return i, true, near
		}
	}
	return 0, false, near
}

// TestSurvivalMedianPlain proves, over seeded random histograms, that with
// nothing censored the Kaplan–Meier median is exactly the plain median
// (the bucket of quantileIndex(0.5), rank ceil(N/2)), and that Median then
// reports QuantileMillis's value.
func TestSurvivalMedianPlain(t *testing.T) {
	g, err := newGeometry(DefaultConfig().Layout())
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(22, 1))
	var none sparseSum
	for k := range 2000 {
		h := randomHist(r, &g)
		want, ok := h.quantileIndex(0.5)
		require.True(t, ok)
		got, ok := survivalMedian(&h, &none)
		require.True(t, ok, "histogram %d", k)
		require.Equal(t, want, got, "histogram %d: total %d", k, h.total)
		qv, _ := h.quantileValue(&g, 0.5)
		require.Equal(t, Median{Millis: uint64(qv), Samples: h.total}, median(&g, &h, &none, false))
	}
	// One sample, two, and an even split: rank ceil(N/2).
	for _, tc := range []struct {
		counts map[int]uint64
		want   int
	}{
		{map[int]uint64{7: 1}, 7},
		{map[int]uint64{3: 1, 9: 1}, 3},
		{map[int]uint64{3: 2, 9: 2}, 3},
		{map[int]uint64{3: 2, 9: 3}, 9},
		{map[int]uint64{0: 5, 100: 5, 1000: 1}, 100},
	} {
		h := newHist(&g)
		for i, n := range tc.counts {
			h.add(i, n)
		}
		got, ok := survivalMedian(&h, &none)
		require.True(t, ok)
		require.Equal(t, tc.want, got, "%v", tc.counts)
	}
	got, ok := survivalMedian(new(hist), &none)
	require.False(t, ok)
	require.Zero(t, got)
}

// TestSurvivalMedianKaplanMeier checks survivalMedian against the exact
// product on seeded random histograms with random censoring.
func TestSurvivalMedianKaplanMeier(t *testing.T) {
	g, err := newGeometry(DefaultConfig().Layout())
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(22, 2))
	above, ties := 0, 0
	for k := range 1000 {
		h := randomHist(r, &g)
		c := randomCensored(r, &h)
		want, wantOK, near := kmReference(&h, &c)
		got, ok := survivalMedian(&h, &c)
		if near && (got != want || ok != wantOK) {
			ties++
			continue
		}
		require.Equal(t, wantOK, ok, "histogram %d", k)
		require.Equal(t, want, got, "histogram %d", k)
		if !ok {
			above++
		}
	}
	t.Logf("%d histograms with S above 1/2 to the end, %d float ties", above, ties)
	require.Positive(t, above, "some histograms have S above 1/2 to the end")
	require.Less(t, ties, 10, "float ties are rare")
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
	require.Equal(t, Median{Millis: 20, Samples: 260}, LocalMedian(tr, "r0", now))

	// So much censored above what completed that S stays above 1/2.
	for range 10 {
		tr.Record("r1", 5*time.Millisecond, now)
	}
	for range 90 {
		tr.RecordTimeout("r1", 10*time.Millisecond, now)
	}
	require.Equal(t, Median{Samples: 100, Above: true}, LocalMedian(tr, "r1", now))
	require.Equal(t, Median{}, LocalMedian(tr, "nosuch", now))
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
	require.Equal(t, Median{Millis: 10, Samples: 50}, f.Median("x", SourceFleet, now))
	require.Equal(t, Median{Millis: 5, Samples: 50}, f.Median("y", SourceFleet, now), "censoring unknown")
	require.Equal(t, Median{}, f.Median("nosuch", SourceFleet, now))
	require.Equal(t, Median{}, f.Median("x", SourceNone, now))

	for range 3 {
		local.Record("x", 40*time.Millisecond, now)
	}
	local.RecordTimeout("x", 2*time.Millisecond, now)
	require.Equal(t, Median{Millis: 40, Samples: 4}, f.Median("x", SourceLocal, now))
	require.Equal(t, LocalMedian(local, "x", now), f.Median("x", SourceLocal, now))
	require.Equal(t, Median{}, f.Median("x", SourceLocal, now.Add(time.Hour)), "rotated out")

	plain, err := New[string](c.Tracker)
	require.NoError(t, err)
	plain.Record("x", 7*time.Millisecond, now)
	fp := newTestFleet(t, c, plain)
	require.Equal(t, Median{Millis: 7, Samples: 1}, fp.Median("x", SourceLocal, now))
	require.Equal(t, Median{}, newTestFleet(t, c, nil).Median("x", SourceLocal, now))
}
