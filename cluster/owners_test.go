package cluster

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func numbered(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	return out
}

// TestOwnersBoundedLoad checks the bounds of the assignment: A distinct
// owners per destination, no peer first owner of more than ⌈1.25·D/N⌉
// destinations nor owner of more than ⌈1.25·A·D/N⌉; and that it depends on
// the sets only, not their order.
func TestOwnersBoundedLoad(t *testing.T) {
	for _, tc := range []struct{ n, d, a int }{
		{1, 5, 2}, {2, 1, 2}, {3, 10, 2}, {5, 3, 2}, {10, 100, 2}, {100, 100, 2}, {300, 300, 2}, {100, 1000, 3}, {1000, 1000, 2},
	} {
		t.Run(fmt.Sprintf("N=%d D=%d A=%d", tc.n, tc.d, tc.a), func(t *testing.T) {
			peers, dests := numbered("n", tc.n), numbered("d", tc.d)
			o := AssignOwners(peers, dests, tc.a)
			a := min(tc.a, tc.n)
			capFirst := (5*tc.d + 4*tc.n - 1) / (4 * tc.n)
			capAll := (5*a*tc.d + 4*tc.n - 1) / (4 * tc.n)
			first := map[string]int{}
			for _, d := range dests {
				own := o.Of(d)
				require.Len(t, own, a)
				require.Len(t, slices.Compact(slices.Sorted(slices.Values(own))), a, "distinct owners")
				first[own[0]]++
				require.Equal(t, 0, o.Rank(d, own[0]))
			}
			for _, p := range peers {
				require.LessOrEqual(t, first[p], capFirst, "%s: first owner of too many", p)
				require.LessOrEqual(t, o.Load(p), capAll, "%s: owns too many", p)
			}
			rev := slices.Clone(peers)
			slices.Reverse(rev)
			o2 := AssignOwners(rev, append(slices.Clone(dests), dests[0]), tc.a)
			for _, d := range dests {
				require.Equal(t, o.Of(d), o2.Of(d), "the same sets give the same owners")
			}
		})
	}
}

// TestOwnersTakeover checks that when a peer leaves, the destinations it
// owned get the next peers of their ranking and few others move.
func TestOwnersTakeover(t *testing.T) {
	peers, dests := numbered("n", 100), numbered("d", 100)
	before := AssignOwners(peers, dests, 2)
	gone := before.Of(dests[0])[0]
	after := AssignOwners(slices.DeleteFunc(slices.Clone(peers), func(p string) bool { return p == gone }), dests, 2)
	moved := 0
	for _, d := range dests {
		b, a := before.Of(d), after.Of(d)
		require.NotContains(t, a, gone)
		if b[0] == gone {
			require.Equal(t, b[1], a[0], "%s: the second owner takes over", d)
		}
		if !slices.Contains(b, gone) && !slices.Equal(a, b) {
			moved++
		}
	}
	require.LessOrEqual(t, moved, 10, "few destinations move that the peer did not own")
	require.Nil(t, AssignOwners(nil, dests, 2).Of(dests[0]))
}

func BenchmarkAssignOwners(b *testing.B) {
	for _, n := range []int{100, 1000} {
		peers, dests := numbered("n", n), numbered("d", n)
		b.Run(fmt.Sprintf("N=D=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				AssignOwners(peers, dests, 2)
			}
		})
	}
}
