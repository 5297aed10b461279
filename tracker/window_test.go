package tracker

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPackRoundTrip packs counts of every uvarint length, up to the largest
// a sub-window bucket can hold, and decodes them back.
func TestPackRoundTrip(t *testing.T) {
	for _, cl := range []int{256, 1280, 1 << 16} {
		r := rand.New(rand.NewPCG(uint64(cl), 3))
		cur := make([]uint32, cl)
		touched := make([]uint64, (cl+63)/64)
		var want []Bucket
		size := 2 + 8*len(touched)
		for i := range cur {
			if r.IntN(3) == 0 {
				continue
			}
			c := []uint32{1, 127, 128, 16383, 16384, 1<<21 - 1, 1 << 21, 1<<28 - 1, 1 << 28, math.MaxUint32, r.Uint32() | 1}[r.IntN(11)]
			cur[i] = c
			touched[i>>6] |= 1 << (uint(i) & 63)
			want = append(want, Bucket{Index: uint16(i), Count: c})
			size += uvarintLen(c)
		}
		p := pack(cur, touched)
		require.Len(t, p, size, "exactly sized")
		require.Equal(t, size, cap(p), "no spare capacity")
		s := sealedSub{packed: p}
		require.Equal(t, want, s.sparse())
		var got []Bucket
		s.each(func(i int, c uint32) { got = append(got, Bucket{Index: uint16(i), Count: c}) })
		require.Equal(t, want, got)
	}
	for c, n := range map[uint32]int{0: 1, 1: 1, 127: 1, 128: 2, 16383: 2, 16384: 3, 1<<28 - 1: 4, 1 << 28: 5, math.MaxUint32: 5} {
		require.Equal(t, n, uvarintLen(c), "%d", c)
	}
}

// TestWideSubWindowsEqualRecorded drives sub-windows on both sides of the
// sparse/packed threshold (countsLen/8 buckets), up to every bucket of the
// layout and counts of up to three uvarint bytes, and checks after every
// epoch the sealed sub-windows against what was recorded, the sums against a
// rebuild from the parts, and at some epochs the quantiles against the model.
func TestWideSubWindowsEqualRecorded(t *testing.T) {
	for _, mut := range []func(*Config){
		nil,
		func(c *Config) {
			c.SubWindows = 3
			c.Window = 3 * time.Second
			c.MaxTrackableLatency = 300 * time.Millisecond
		},
	} {
		x := newTrio(t, mut)
		c, g, tr, st, m := x.c, x.g, x.tr, x.st, x.m
		r := rand.New(rand.NewPCG(7, uint64(c.SubWindows)))
		subMs := c.SubWindow().Milliseconds()
		reachable := int(g.highestIndex) + 1
		threshold := int(g.countsLen) / 8
		// spread returns n distinct reachable indices.
		spread := func(n int) []int {
			return r.Perm(reachable)[:n]
		}
		type kept struct{ got, copy []DestCounts }
		var held []kept
		var packed, sparse int
		epoch := int64(1_700_000_000_000) / subMs
		// recorded[epoch][dest][index] is what went into each sub-window,
		// the expectation for SealedSubWindow (the clock never goes back here).
		recorded := map[int64]map[string]map[int]uint32{}
		expected := func(ep, e int64) []DestCounts {
			if ep >= e || e-ep >= int64(c.SubWindows) {
				return nil
			}
			var out []DestCounts
			for _, d := range slices.Sorted(maps.Keys(recorded[ep])) {
				dc := DestCounts{Dest: d}
				for _, i := range slices.Sorted(maps.Keys(recorded[ep][d])) {
					dc.Buckets = append(dc.Buckets, Bucket{Index: uint16(i), Count: recorded[ep][d][i]})
					dc.Total += uint64(recorded[ep][d][i])
				}
				out = append(out, dc)
			}
			return out
		}
		for step := range 40 {
			switch x := r.IntN(20); {
			case x == 0:
				epoch += int64(c.SubWindows) + r.Int64N(3) // a gap that clears everything
			case x < 4:
				epoch += 2 + r.Int64N(int64(c.SubWindows)) // some sub-windows expire at once
			default:
				epoch++
			}
			now := at(epoch*subMs + r.Int64N(subMs))
			rec := func(d string, i, count int) {
				v := uint64(g.lowestEquivalent(i))
				for range count {
					tr.RecordMillis(d, v, now)
					st.RecordMillis(d, v, now)
					m.record(d, v, now)
				}
				if recorded[epoch] == nil {
					recorded[epoch] = map[string]map[int]uint32{}
				}
				if recorded[epoch][d] == nil {
					recorded[epoch][d] = map[int]uint32{}
				}
				recorded[epoch][d][i] += uint32(count)
			}
			for _, d := range []string{"a", "b", "c"} {
				switch r.IntN(6) {
				case 0: // idle
				case 1: // narrow
					for range 50 {
						rec(d, g.index(min(int64(math.Exp(r.NormFloat64()+2)), g.layout.Highest)), 1)
					}
				case 2: // the widest kept as []Bucket
					for _, i := range spread(threshold) {
						rec(d, i, 1+r.IntN(2))
					}
				case 3: // the narrowest packed
					for _, i := range spread(threshold + 1) {
						rec(d, i, 1+r.IntN(2))
					}
				default: // every bucket, counts of one to three uvarint bytes
					for i := range reachable {
						rec(d, i, 1+r.IntN(3))
					}
					for _, i := range spread(5) {
						rec(d, i, 126)
					}
					if r.IntN(4) == 0 {
						rec(d, spread(1)[0], 16383)
					}
				}
			}
			e := m.advance(now)
			// Drop what the model no longer needs, to keep it fast.
			for d, ss := range m.dests {
				m.dests[d] = slices.DeleteFunc(ss, func(s modelSample) bool { return e-s.epoch > int64(c.SubWindows) })
			}
			for ep := e - int64(c.SubWindows) - 1; ep <= e+1; ep++ {
				want := expected(ep, e)
				require.Equal(t, want, SealedSubWindow(tr, ep, now), "step %d epoch %d (current %d)", step, ep, e)
				got := SealedSubWindow(st, ep, now)
				require.Equal(t, want, got, "step %d epoch %d (current %d)", step, ep, e)
				if len(got) > 0 {
					held = append(held, kept{got, cloneDestCounts(got)})
				}
			}
			for _, d := range []string{"a", "b", "c"} {
				if step%5 != 0 {
					break // the model's quantile sorts the window: check some steps
				}
				for _, q := range []float64{0, 0.5, 0.99, 0.9999, 1} {
					want, wok := m.quantile(&g, d, q, now, max(uint64(c.MinSamples), 1))
					got, ok := tr.QuantileMillis(d, q, now)
					require.Equal(t, [2]any{want, wok}, [2]any{got, ok}, "step %d %s q=%v", step, d, q)
					got, ok = st.QuantileMillis(d, q, now)
					require.Equal(t, [2]any{want, wok}, [2]any{got, ok}, "step %d %s q=%v", step, d, q)
				}
			}
			for _, en := range tr.dests {
				checkWindowInvariants(t, &g, &en.window)
				for _, s := range en.ring {
					if s.packed != nil {
						packed++
					} else if s.buckets != nil {
						sparse++
					}
				}
			}
		}
		require.NotZero(t, packed, "some sub-windows were packed")
		require.NotZero(t, sparse, "some sub-windows were sparse")
		for _, h := range held {
			require.Equal(t, h.copy, h.got, "handed-out buckets changed")
		}
	}
}
