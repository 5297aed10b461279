package tracker

import (
	"time"

	"testing"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/stretchr/testify/require"
)

// TestGeometryMatchesHdrHistogram checks, for every value of several layouts,
// that the bucket index and its equivalent-value range are exactly those of
// hdrhistogram-go.
func TestGeometryMatchesHdrHistogram(t *testing.T) {
	layouts := []Layout{
		{1, 60000, 2},
		{1, 2, 2},
		{1, 2000, 2},
		{1, 100000, 3},
		{1, 3600000, 1},
		{4, 10000, 2},
	}
	for _, l := range layouts {
		g, err := newGeometry(l)
		require.NoError(t, err, "%+v", l)
		h := hdrhistogram.New(l.Lowest, l.Highest, l.SignificantDigits)
		require.Len(t, h.Export().Counts, int(g.countsLen), "%+v", l)
		step := int64(1)
		if l.Highest > 200000 {
			step = 7
		}
		for v := int64(0); v <= l.Highest; v += step {
			h.Reset()
			require.NoError(t, h.RecordValue(v))
			counts := h.Export().Counts
			want := -1
			for i, c := range counts {
				if c == 1 {
					want = i
					break
				}
			}
			i := g.index(v)
			require.Equal(t, want, i, "index of %d in %+v", v, l)
			require.Equal(t, h.ValueAtQuantile(0), g.lowestEquivalent(i), "lowest equivalent of %d", v)
			require.Equal(t, h.ValueAtQuantile(100), g.highestEquivalent(i), "highest equivalent of %d", v)
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
