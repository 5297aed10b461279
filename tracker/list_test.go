package tracker

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestListMatchesSlice applies random pushes, removals and moves to a list
// and to a slice and compares both directions of the list after each.
func TestListMatchesSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	nodes := make([]listNode[int], 8)
	for i := range nodes {
		nodes[i].v = i
	}
	var l list[int]
	var want []int // head first
	for step := range 3000 {
		i := rng.IntN(len(nodes))
		n := &nodes[i]
		k := slices.Index(want, i)
		switch op := rng.IntN(4); {
		case k < 0 && op < 2:
			l.pushFront(n)
			want = slices.Insert(want, 0, i)
		case k < 0:
			l.pushBack(n)
			want = append(want, i)
		case op == 0:
			l.remove(n)
			want = slices.Delete(want, k, k+1)
		case op == 1:
			l.moveToBack(n)
			want = append(slices.Delete(want, k, k+1), i)
		default:
			l.moveToFront(n)
			want = slices.Insert(slices.Delete(want, k, k+1), 0, i)
		}
		var fwd, back []int
		for x := l.head; x != nil; x = x.next {
			fwd = append(fwd, x.v)
		}
		for x := l.tail; x != nil; x = x.prev {
			back = append(back, x.v)
		}
		slices.Reverse(back)
		require.True(t, slices.Equal(want, fwd), "step %d: %v, want %v", step, fwd, want)
		require.True(t, slices.Equal(fwd, back), "step %d: %v backwards %v", step, fwd, back)
	}
}
