package tracker

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCutMostSamples(t *testing.T) {
	// d0..d5 with 3 buckets each; d3 and d5 hold the most samples, then d1,
	// the others tie.
	totals := []uint64{3, 30, 3, 300, 3, 3000}
	var dests []DestCounts
	for i, tot := range totals {
		c := uint32(tot / 3)
		dests = append(dests, DestCounts{Dest: fmt.Sprintf("d%d", i), Total: tot,
			Buckets: []Bucket{{Index: 1, Count: c}, {Index: 5, Count: c}, {Index: 9, Count: c}}})
	}
	names := func(ds []DestCounts) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.Dest)
		}
		return out
	}
	for _, tc := range []struct {
		name                 string
		maxDests, maxBuckets int
		want                 []string
	}{
		{"under both caps", 10, 18, []string{"d0", "d1", "d2", "d3", "d4", "d5"}},
		{"no caps", 0, 0, []string{"d0", "d1", "d2", "d3", "d4", "d5"}},
		{"destination cap keeps the most samples", 3, 100, []string{"d1", "d3", "d5"}},
		{"ties by name", 4, 100, []string{"d0", "d1", "d3", "d5"}},
		{"bucket cap", 10, 8, []string{"d3", "d5"}}, // 3 + 3 fit in 8, a third would make 9
		{"one destination", 1, 0, []string{"d5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, dropped := CutMostSamples(dests, tc.maxDests, tc.maxBuckets)
			require.Equal(t, tc.want, names(got))
			require.Equal(t, len(dests)-len(tc.want), dropped)
		})
	}

	// A destination too wide for the bucket cap is skipped; narrower ones
	// with fewer samples still fit.
	wide := append([]DestCounts{{Dest: "a-wide", Total: 1 << 20, Buckets: make([]Bucket, 10)}}, dests...)
	got, dropped := CutMostSamples(wide, 10, 9)
	require.Equal(t, []string{"d1", "d3", "d5"}, names(got))
	require.Equal(t, 4, dropped)
}
