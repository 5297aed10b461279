package tracker

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCapSealed checks the cut of a sealed sub-window to a batch's budgets
// on hand-made cases.
func TestCapSealed(t *testing.T) {
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
	tests := []struct {
		name                  string
		maxDests, maxBuckets  int
		kept, dropped         []string
		keptIsInput, noChange bool
	}{
		{"everything fits", 6, 100, []string{"!junk-1", "!junk-2", "a", "b", "c", "z"}, nil, true, true},
		{"most samples first, never the first names", 3, 100, []string{"a", "b", "c"}, []string{"!junk-1", "!junk-2", "z"}, false, false},
		{"ties by name", 2, 100, []string{"a", "b"}, []string{"!junk-1", "!junk-2", "c", "z"}, false, false},
		{"censored entries count as buckets", 6, 47, []string{"!junk-1", "!junk-2", "b"}, []string{"a", "c", "z"}, false, false},
		{"a wide one does not push out smaller ones", 6, 30, []string{"!junk-1", "!junk-2", "a", "c", "z"}, []string{"b"}, false, false},
		{"no budget keeps nothing", 0, 100, nil, []string{"!junk-1", "!junk-2", "a", "b", "c", "z"}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(all)
			kept, dropped := CapSealed(in, tt.maxDests, tt.maxBuckets)
			require.Equal(t, tt.kept, names(kept))
			require.Equal(t, tt.dropped, names(dropped))
			require.Equal(t, all, in, "the input is not changed")
			if tt.keptIsInput {
				require.Same(t, &in[0], &kept[0])
				require.Nil(t, dropped)
			}
		})
	}
}

// TestCapSealedProperties checks on random sub-windows that the cut holds
// its budgets, keeps and drops every destination once, in name order, and
// that every destination dropped either did not fit what was left or had
// no more samples than every one kept.
func TestCapSealedProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	for range 300 {
		var in []DestCounts
		for i := range r.IntN(40) {
			dc := DestCounts{Dest: fmt.Sprintf("d%03d", i), Total: uint64(1 + r.IntN(20))}
			for j := range 1 + r.IntN(8) {
				dc.Buckets = append(dc.Buckets, Bucket{Index: uint16(j), Count: 1})
			}
			in = append(in, dc)
		}
		maxDests, maxBuckets := r.IntN(45), r.IntN(200)
		kept, dropped := CapSealed(in, maxDests, maxBuckets)
		require.Len(t, append(slices.Clone(kept), dropped...), len(in))
		require.LessOrEqual(t, len(kept), max(maxDests, 0))
		buckets := 0
		for _, k := range kept {
			buckets += len(k.Buckets)
		}
		require.LessOrEqual(t, buckets, maxBuckets)
		require.True(t, slices.IsSortedFunc(kept, compareDests))
		require.True(t, slices.IsSortedFunc(dropped, compareDests))
		if len(kept) < maxDests {
			for _, x := range dropped {
				require.Greater(t, buckets+len(x.Buckets), maxBuckets, "%s was dropped though it fit", x.Dest)
			}
		}
	}
}
