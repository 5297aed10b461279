package tracker

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/stretchr/testify/require"
)

// TestGeometryMatchesHdrHistogram checks, for every value of several layouts,
// that the bucket index is exactly hdrhistogram-go's, and for every index that
// the equivalent-value range is.
//
// Every value in [0, Highest] is recorded once into an hdrhistogram-go
// histogram and counted at g.index in our own array; the two count arrays must
// be equal. Both mappings are non-decreasing in the value (ours is checked
// here, hdrhistogram-go's by construction), and two non-decreasing maps with
// the same number of values per index are the same map, so this checks every
// value without an Export per value.
func TestGeometryMatchesHdrHistogram(t *testing.T) {
	layouts := []Layout{
		{1, 60000, 2},
		{1, 2, 2},
		{1, 2000, 2},
		{1, 100000, 3},
		{1, 600000, 1},
		{4, 10000, 2},
	}
	for _, l := range layouts {
		g, err := newGeometry(l)
		require.NoError(t, err, "%+v", l)
		h := hdrhistogram.New(l.Lowest, l.Highest, l.SignificantDigits)
		mine := make([]int64, g.countsLen)
		prev := 0
		for v := int64(0); v <= l.Highest; v++ {
			require.NoError(t, h.RecordValue(v))
			i := g.index(v)
			if i < prev {
				require.GreaterOrEqual(t, i, prev, "index of %d in %+v decreases", v, l)
			}
			prev = i
			mine[i]++
		}
		require.Equal(t, h.Export().Counts, mine, "%+v", l)
		for i := 0; i <= g.index(l.Highest); i++ {
			lo, hi := g.lowestEquivalent(i), g.highestEquivalent(i)
			h.Reset()
			require.NoError(t, h.RecordValue(min(lo, l.Highest)))
			require.Equal(t, lo, h.ValueAtQuantile(0), "lowest equivalent of index %d in %+v", i, l)
			require.Equal(t, hi, h.ValueAtQuantile(100), "highest equivalent of index %d in %+v", i, l)
			require.Equal(t, i, g.index(lo))
			if hi <= l.Highest {
				require.Equal(t, i, g.index(hi))
			}
		}
	}
}

func TestDefaultLayoutHas1280Counts(t *testing.T) {
	require.Equal(t, 1280, Layout{1, 60000, 2}.CountsLen())
}

func TestLayoutValidate(t *testing.T) {
	for _, l := range []Layout{{0, 100, 2}, {1, 1, 2}, {1, 100, 0}, {1, 100, 6}, {1, 1 << 62, 5}} {
		require.ErrorIs(t, l.Validate(), ErrLayout, "%+v", l)
		require.Zero(t, l.CountsLen())
	}
}

func TestHistQuantileRule(t *testing.T) {
	g, err := newGeometry(Layout{1, 60000, 2})
	require.NoError(t, err)
	h := newHist(&g)
	for v := int64(1); v <= 1000; v++ {
		h.add(g.index(v), 1)
	}
	for _, tc := range []struct {
		q    float64
		want int64
	}{{0.5, 501}, {0.99, 991}, {1, 1003}, {2, 1003}, {0, 1}} {
		got, ok := h.quantileValue(&g, tc.q)
		require.True(t, ok)
		require.Equal(t, tc.want, got, "q=%v", tc.q)
	}
	h.reset()
	h.add(g.index(60000), 1)
	got, _ := h.quantileValue(&g, 0.9999)
	require.Equal(t, int64(60159), got)
}

func TestHistAddSub(t *testing.T) {
	g, err := newGeometry(DefaultConfig().Layout())
	require.NoError(t, err)
	h := newHist(&g)
	h.add(3, 5)
	h.add(7, 2)
	h.sub(3, 5)
	require.Equal(t, uint64(2), h.total)
	i, ok := h.quantileIndex(0.5)
	require.True(t, ok)
	require.Equal(t, 7, i)
	h.sub(7, 2)
	_, ok = h.quantileIndex(0.5)
	require.False(t, ok)
}

// TestHistQuantileIndexMatchesScan compares quantileIndex, which skips
// blocks, with a plain cumulative scan over seeded random histograms,
// sparse and dense, with counts added and removed (so the highest index
// moves down too), at quantiles on both of its walks.
func TestHistQuantileIndexMatchesScan(t *testing.T) {
	g, err := newGeometry(DefaultConfig().Layout())
	require.NoError(t, err)
	scan := func(h *hist, q float64) int {
		r, cum := rank(q, h.total), uint64(0)
		for i, c := range h.counts {
			if cum += c; cum >= r {
				return i
			}
		}
		return -1
	}
	r := rand.New(rand.NewPCG(18, 1))
	h := newHist(&g)
	n := int(g.countsLen)
	for round := range 300 {
		h.reset()
		spread := 1 + r.IntN(n)
		base := r.IntN(n - spread + 1)
		var held []int
		for range 1 + r.IntN(200) {
			i := base + r.IntN(spread)
			h.add(i, 1+uint64(r.IntN(1000)))
			held = append(held, i)
		}
		for _, i := range held[:r.IntN(len(held))] { // remove some, the top among them at times
			h.sub(i, h.counts[i])
		}
		for _, q := range []float64{0, 0.001, 0.25, 0.5, 0.51, 0.9, 0.99, 0.9999, 1} {
			got, ok := h.quantileIndex(q)
			if h.total == 0 {
				require.False(t, ok)
				continue
			}
			require.True(t, ok)
			require.Equal(t, scan(&h, q), got, "round %d, q=%v", round, q)
		}
	}
}

func TestConfigEpochGrid(t *testing.T) {
	c := DefaultConfig()
	require.NoError(t, c.Validate())
	require.Equal(t, 6*time.Second, c.SubWindow())
	require.Equal(t, int64(0), c.Epoch(time.UnixMilli(5999)))
	require.Equal(t, int64(1), c.Epoch(time.UnixMilli(6000)))
	require.Equal(t, int64(-1), c.Epoch(time.UnixMilli(-1)))
	require.Equal(t, time.UnixMilli(12000), c.EpochStart(2))
	require.Equal(t, Layout{1, 60000, 2}, c.Layout())
	bad := Config{Window: 0, SubWindows: 256, MaxTrackableLatency: time.Millisecond, MaxDestinations: -1}
	err := bad.Validate()
	require.Error(t, err)
	for _, field := range []string{"SubWindows", "Window", "MaxTrackableLatency", "MaxDestinations"} {
		require.ErrorContains(t, err, field)
	}
}

// TestQuantileValueEquivalents checks geometry.quantileValue, index by
// index over every count of several layouts, against lowestEquivalent (q
// == 0) and highestEquivalent (any other q).
func TestQuantileValueEquivalents(t *testing.T) {
	for _, l := range []Layout{{1, 60000, 2}, {1, 2, 1}, {1, 3_600_000, 3}, {7, 1 << 40, 2}, {1000, 1 << 50, 1}, {1, 1 << 14, 4}, {3, 1 << 62, 1}} {
		g, err := newGeometry(l)
		require.NoError(t, err)
		for i := range int(g.countsLen) {
			require.Equal(t, uint64(g.lowestEquivalent(i)), g.quantileValue(i, 0), "%+v index %d", l, i)
			for _, q := range []float64{1e-9, 0.5, 1, math.NaN(), -1} {
				require.Equal(t, uint64(g.highestEquivalent(i)), g.quantileValue(i, q), "%+v index %d q %v", l, i, q)
			}
		}
	}
}

// TestRankReference checks rank against its definition computed the plain
// way, ceil(q·total) clamped to [1, total] in float64 with q > 1 as 1, for
// totals on both sides of 2^53 and 2^63 and edge quantiles.
func TestRankReference(t *testing.T) {
	// rankHuge is that computation, for q <= 1 (NaN stays NaN).
	ref := func(q float64, total uint64) uint64 { return rankHuge(min(q, 1), total) }
	r := rand.New(rand.NewPCG(18, 2))
	totals := []uint64{1, 2, 3, 7, 100, 60000, 1<<53 - 1, 1 << 53, 1<<53 + 1, 1<<63 - 1, 1 << 63, 1<<63 + 1, math.MaxUint64}
	for range 200 {
		totals = append(totals, r.Uint64N(1<<20)+1, r.Uint64()>>r.IntN(64)|1)
	}
	qs := []float64{0, -0.5, math.NaN(), math.Inf(1), math.Inf(-1), 1e-300, 0.5, 0.9, 0.99, 0.9999, 1, 1.5, math.Nextafter(1, 0)}
	for range 200 {
		qs = append(qs, r.Float64())
	}
	for _, n := range totals {
		for _, q := range qs {
			require.Equal(t, ref(q, n), rank(q, n), "q %v total %d", q, n)
		}
	}
	// From 2^63 on rank is rankHuge itself: pin it by hand there.
	for _, c := range []struct {
		q     float64
		total uint64
		want  uint64
	}{
		{0.5, 1 << 63, 1 << 62}, {1, 1 << 63, 1 << 63}, {1.5, math.MaxUint64, math.MaxUint64},
		{1e-300, 1 << 63, 1}, {math.NaN(), 1 << 63, 1}, {0.25, 1<<64 - 1, 1 << 62},
	} {
		require.Equal(t, c.want, rank(c.q, c.total), "q %v total %d", c.q, c.total)
	}
}

// TestEntryLayout pins what entry's layout is for: an entry of a string
// key is 256 bytes (a size class whose objects are 256-aligned), and the
// fields a record of a known destination reads or writes lie in its first
// three cache lines.
func TestEntryLayout(t *testing.T) {
	var en entry[string]
	require.Equal(t, uintptr(256), unsafe.Sizeof(en))
	for name, end := range map[string]uintptr{
		"key":   unsafe.Offsetof(en.key) + unsafe.Sizeof(en.key),
		"words": unsafe.Offsetof(en.words) + unsafe.Sizeof(en.words),
		"stamp": unsafe.Offsetof(en.stamp) + 8,
		"tag":   unsafe.Offsetof(en.tag) + 8,
		"ec":    unsafe.Offsetof(en.ec) + 8,
		"epoch": unsafe.Offsetof(en.epoch) + 8,
		"curN":  unsafe.Offsetof(en.curN) + 8,
		"ver":   unsafe.Offsetof(en.ver) + 8,
		"cur":   unsafe.Offsetof(en.cur) + unsafe.Sizeof(en.cur),
		"sum":   unsafe.Offsetof(en.sum) + unsafe.Sizeof(en.sum),
	} {
		require.LessOrEqual(t, end, uintptr(3*64), "%s ends at %d", name, end)
	}
}

// TestShardSize pins a shard of a string-keyed SyncTracker at 128 bytes
// (syncShard's padding).
func TestShardSize(t *testing.T) {
	require.Equal(t, uintptr(128), unsafe.Sizeof(syncShard[string]{}))
}
