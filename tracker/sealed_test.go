package tracker

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCutMostSamplesCensored checks that the cut counts censored entries as
// buckets, as the fleet's MaxEpochBuckets does, and never keeps the first
// names for being first.
func TestCutMostSamplesCensored(t *testing.T) {
	d := func(name string, total uint64, buckets, timedOut int) DestCounts {
		dc := DestCounts{Dest: name, Total: total}
		for i := range buckets {
			dc.Buckets = append(dc.Buckets, Bucket{Index: uint16(i), Count: 1})
		}
		for i := range timedOut {
			dc.TimedOut = append(dc.TimedOut, Bucket{Index: uint16(i), Count: 1})
		}
		return dc
	}
	names := func(ds []DestCounts) []string {
		var out []string
		for _, x := range ds {
			out = append(out, x.Dest)
		}
		return out
	}
	all := []DestCounts{d("!junk-1", 1, 1, 0), d("!junk-2", 1, 1, 0), d("a", 50, 10, 0), d("b", 900, 40, 5), d("c", 50, 10, 2), d("z", 7, 3, 0)}
	for _, tc := range []struct {
		name                 string
		maxDests, maxBuckets int
		kept                 []string
	}{
		{"everything fits", 6, 72, []string{"!junk-1", "!junk-2", "a", "b", "c", "z"}},
		{"censored entries count: one bucket short", 6, 71, []string{"!junk-1", "a", "b", "c", "z"}},
		{"b's 45 with its censored counts leave room for the junk only", 6, 47, []string{"!junk-1", "!junk-2", "b"}},
		{"most samples first, never the first names", 3, 100, []string{"a", "b", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(all)
			kept, dropped := CutMostSamples(in, tc.maxDests, tc.maxBuckets)
			require.Equal(t, tc.kept, names(kept))
			require.Equal(t, len(all)-len(tc.kept), dropped)
			require.Equal(t, all, in, "the input is not changed")
		})
	}
}

// TestCutMostSamplesProperties checks on random sub-windows, censored
// counts included, that the cut holds its budgets, keeps destinations in
// their order, counts the others, and drops one only when it did not fit
// what was left or maxDests were kept.
func TestCutMostSamplesProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	width := func(d DestCounts) int { return len(d.Buckets) + len(d.TimedOut) }
	for range 300 {
		var in []DestCounts
		for i := range r.IntN(40) {
			dc := DestCounts{Dest: fmt.Sprintf("d%03d", i), Total: uint64(1 + r.IntN(20))}
			for j := range 1 + r.IntN(8) {
				dc.Buckets = append(dc.Buckets, Bucket{Index: uint16(j), Count: 1})
				if r.IntN(3) == 0 {
					dc.TimedOut = append(dc.TimedOut, Bucket{Index: uint16(j), Count: 1})
				}
			}
			in = append(in, dc)
		}
		maxDests, maxBuckets := 1+r.IntN(45), 1+r.IntN(200)
		kept, dropped := CutMostSamples(in, maxDests, maxBuckets)
		require.Equal(t, len(in)-len(kept), dropped)
		require.LessOrEqual(t, len(kept), maxDests)
		buckets := 0
		for _, k := range kept {
			buckets += width(k)
		}
		require.LessOrEqual(t, buckets, maxBuckets)
		require.True(t, slices.IsSortedFunc(kept, compareDests))
		if len(kept) < maxDests {
			for _, x := range in {
				if !slices.ContainsFunc(kept, func(k DestCounts) bool { return k.Dest == x.Dest }) {
					require.Greater(t, buckets+width(x), maxBuckets, "%s was dropped though it fit", x.Dest)
				}
			}
		}
	}
}
