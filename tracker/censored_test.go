package tracker

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSparseSum drives a sparseSum with random adds and subtracts, single
// and by sparse histograms, against a map.
func TestSparseSum(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	var s sparseSum
	want := map[int]uint64{}
	singles := map[int]uint64{} // added one index at a time, not yet subtracted
	var added [][]Bucket        // histograms added and not yet subtracted
	for step := range 2000 {
		switch r.IntN(5) {
		case 0:
			i, c := r.IntN(40), uint64(1+r.IntN(3))
			s.add(i, c)
			want[i] += c
			singles[i] += c
		case 1:
			for i, c := range singles {
				n := 1 + uint64(r.IntN(int(c)))
				s.sub(i, n)
				if want[i] -= n; want[i] == 0 {
					delete(want, i)
				}
				if singles[i] -= n; singles[i] == 0 {
					delete(singles, i)
				}
				break
			}
		case 2, 3:
			var bs []Bucket
			for i := range 40 {
				if r.IntN(4) == 0 {
					bs = append(bs, Bucket{Index: uint16(i), Count: 1 + r.Uint32N(5)})
				}
			}
			s.addBuckets(bs)
			for _, b := range bs {
				want[int(b.Index)] += uint64(b.Count)
			}
			added = append(added, bs)
		case 4:
			if len(added) == 0 {
				continue
			}
			k := r.IntN(len(added))
			s.subBuckets(added[k])
			for _, b := range added[k] {
				if want[int(b.Index)] -= uint64(b.Count); want[int(b.Index)] == 0 {
					delete(want, int(b.Index))
				}
			}
			added = slices.Delete(added, k, k+1)
		}
		require.Equal(t, want, sparseMap(t, &s), "step %d", step)
		for i := range 41 {
			require.Equal(t, want[i], s.get(i))
		}
	}
	var c sparseSum
	c.copyFrom(&s)
	require.Equal(t, want, sparseMap(t, &c))
	c.reset()
	require.Empty(t, sparseMap(t, &c))
}

// TestPackBuckets checks a sparse histogram packed in pack's format decodes
// back, and that newSparseForm packs exactly the wide ones.
func TestPackBuckets(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	for _, n := range []int{0, 1, 5, 160, 161, 1280} {
		var bs []Bucket
		for _, i := range r.Perm(1280)[:n] {
			bs = append(bs, Bucket{Index: uint16(i), Count: []uint32{1, 127, 128, 1 << 20, 1<<32 - 1}[r.IntN(5)]})
		}
		slices.SortFunc(bs, func(a, b Bucket) int { return int(a.Index) - int(b.Index) })
		require.Equal(t, bs, unpackOrNil(packBuckets(bs)), "%d buckets", n)
		f := newSparseForm(slices.Clone(bs), 1280)
		require.Equal(t, n > 160, f.packed != nil, "%d buckets", n)
		require.Equal(t, bs, nilIfEmpty(f.sparse()))
	}
}

func unpackOrNil(p []byte) []Bucket { return nilIfEmpty(unpackSparse(p)) }

func nilIfEmpty(bs []Bucket) []Bucket {
	if len(bs) == 0 {
		return nil
	}
	return bs
}

// TestMaxCompleted checks M on hand-made views: the highest bucket whose
// count exceeds its censored count.
func TestMaxCompleted(t *testing.T) {
	g, err := newGeometry(DefaultConfig().Layout())
	require.NoError(t, err)
	tests := []struct {
		name string
		h, c map[int]uint64
		want int // -1: none
	}{
		{"empty", nil, nil, -1},
		{"nothing censored", map[int]uint64{3: 1, 900: 2}, nil, 900},
		{"top partly censored", map[int]uint64{3: 1, 900: 2}, map[int]uint64{900: 1}, 900},
		{"top entirely censored", map[int]uint64{3: 1, 900: 2}, map[int]uint64{900: 2}, 3},
		{"several entirely censored, blocks apart", map[int]uint64{3: 1, 64: 2, 700: 1, 900: 2}, map[int]uint64{64: 1, 700: 1, 900: 2}, 64},
		{"censored below the top only", map[int]uint64{3: 1, 900: 2}, map[int]uint64{3: 1}, 900},
		{"all censored", map[int]uint64{3: 1, 900: 2}, map[int]uint64{3: 1, 900: 2}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHist(&g)
			var c sparseSum
			for i, n := range tt.h {
				h.add(i, n)
			}
			for i, n := range tt.c {
				c.add(i, n)
			}
			i, ok := maxCompleted(&h, &c)
			require.Equal(t, tt.want >= 0, ok)
			if ok {
				require.Equal(t, tt.want, i)
			}
		})
	}
}

// censoredWorkload is workload with some records turned into timed-out
// attempts: destination "f" times out in bursts (so its view is at times
// entirely censored: failing), the others at random, at a few timeout
// values or at the latency drawn.
func censoredWorkload(seed uint64, n int, c Config) []workOp {
	ops := workload(seed, n, c)
	r := rand.New(rand.NewPCG(seed, 9))
	dead := false
	for i := range ops {
		o := &ops[i]
		if r.IntN(500) == 0 {
			dead = !dead
		}
		if o.kind != 0 {
			continue
		}
		switch {
		case o.dest == "f" && dead, r.IntN(8) == 0:
			o.kind = 4
			if r.IntN(2) == 0 {
				o.ms = []uint64{250, 500, 1000}[r.IntN(3)]
			}
		}
	}
	return ops
}

// view is the reference view of d at now: exact quantile by the bucket rule
// ignoring MinSamples, samples, censored samples, and M, by brute force
// over the samples kept.
func (m *model) view(g *geometry, d string, q float64, now time.Time) viewFacts {
	e := m.advance(now)
	h, c := map[int]uint64{}, map[int]uint64{}
	var v viewFacts
	for _, s := range m.dests[d] {
		if uint64(e)-uint64(s.epoch) >= uint64(m.cfg.SubWindows) {
			continue
		}
		i := g.index(s.v)
		h[i]++
		v.samples++
		if s.censored {
			c[i]++
			v.censored++
		}
	}
	v.q, _ = m.quantile(g, d, q, now, 1)
	top := -1
	for i, n := range h {
		if n > c[i] && i > top {
			top = i
		}
	}
	if top >= 0 {
		v.m, v.hasM = uint64(g.highestEquivalent(top)), true
	}
	return v
}

// TestCensoredMatchesModel replays seeded random workloads with timed-out
// attempts on both trackers and compares, against the brute-force model,
// each view's censored samples and M (and so failing), the sealed
// sub-windows' censored counts, and LocalEstimate's decision input; the
// incremental censored sums are checked against a rebuild.
func TestCensoredMatchesModel(t *testing.T) {
	for _, tc := range []modelConfig{modelDefaults, modelMaxDests, modelShortMax} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig(tc.mut)
			minSamples := max(uint64(c.MinSamples), 1)
			seen := map[string]int{}
			for seed := uint64(1); seed <= 2; seed++ {
				x := newTrio(t, tc.mut)
				g, tr, st, m := x.g, x.tr, x.st, x.m
				for i, o := range censoredWorkload(seed, 5000, c) {
					switch o.kind {
					case 0:
						x.record(o.dest, o.ms, o.now)
					case 4:
						tr.RecordTimeoutMillis(o.dest, o.ms, o.now)
						st.RecordTimeout(o.dest, time.Duration(o.ms)*time.Millisecond, o.now)
						m.recordTimeout(o.dest, o.ms, o.now)
					case 1:
						want := m.view(&g, o.dest, o.q, o.now)
						got := view(tr, o.dest, o.q, o.now)
						require.Equal(t, want, got, "seed %d op %d", seed, i)
						require.Equal(t, want, view(st, o.dest, o.q, o.now), "seed %d op %d", seed, i)
						q := o.q
						if !(q > 0 && q <= 1) {
							q = 0.5
						}
						a, err := LocalEstimate(tr, o.dest, q, o.now)
						require.NoError(t, err)
						b, err := LocalEstimate(st, o.dest, q, o.now)
						require.NoError(t, err)
						require.Equal(t, a, b)
						w := m.view(&g, o.dest, q, o.now)
						require.Equal(t, w.samples >= minSamples && w.censored > 0 && !w.hasM, a.Failing, "seed %d op %d", seed, i)
						require.Equal(t, w.censored, a.LocalCensored)
						if v, ok := a.DecisionValue(); ok {
							require.Equal(t, min(w.q, w.m), v)
							require.Equal(t, w.q, a.DecisionQuantileMillis())
						}
						seen[fmt.Sprintf("failing=%v capped=%v", a.Failing, a.Trusted() && !a.Failing && a.Decision.ValueMillis < a.ValueMillis)]++
					case 2:
						e := c.Epoch(o.now) - 1 - int64(i%3)
						want := m.expectedSealed(&g, e, o.now)
						require.Equal(t, want, SealedSubWindow(tr, e, o.now), "seed %d op %d", seed, i)
						require.Equal(t, want, SealedSubWindow(st, e, o.now), "seed %d op %d", seed, i)
					case 3:
						x.clear()
					}
				}
				x.checkWindows(t)
				require.Equal(t, Stats(tr), Stats(st))
			}
			for _, k := range []string{"failing=true capped=false", "failing=false capped=true", "failing=false capped=false"} {
				require.NotZero(t, seen[k], "no case %q in %v", k, seen)
			}
		})
	}
}

// TestRecordTimeoutKeepsQuantiles checks that a timed-out attempt is a
// sample exactly as Record makes it: the same workload recorded with and
// without timeouts gives the same quantiles and sealed buckets.
func TestRecordTimeoutKeepsQuantiles(t *testing.T) {
	c := DefaultConfig()
	plain, err := New[string](c)
	require.NoError(t, err)
	cens, err := NewSync[string](c)
	require.NoError(t, err)
	for i, o := range censoredWorkload(4, 8000, c) {
		switch o.kind {
		case 0:
			plain.RecordMillis(o.dest, o.ms, o.now)
			cens.RecordMillis(o.dest, o.ms, o.now)
		case 4:
			plain.RecordMillis(o.dest, o.ms, o.now)
			cens.RecordTimeoutMillis(o.dest, o.ms, o.now)
		case 1:
			a, aok := plain.QuantileMillis(o.dest, o.q, o.now)
			b, bok := cens.QuantileMillis(o.dest, o.q, o.now)
			require.Equal(t, [2]any{a, aok}, [2]any{b, bok}, "op %d", i)
		case 2:
			e := c.Epoch(o.now) - 1
			want := SealedSubWindow(plain, e, o.now)
			got := SealedSubWindow(cens, e, o.now)
			require.Len(t, got, len(want))
			for k := range got {
				got[k].TimedOut = nil
			}
			require.Equal(t, want, got, "op %d", i)
		case 3:
			plain.Clear()
			cens.Clear()
		}
	}
}
