package tracker

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// at is a wall-clock time ms milliseconds after the Unix epoch. With the
// default config, epoch e covers at(6000·e) .. at(6000·e+5999).
func at(ms int64) time.Time { return time.UnixMilli(ms) }

const sub = 6000 // default sub-window in ms

// testConfig is DefaultConfig changed by mut (nil: unchanged).
func testConfig(mut func(*Config)) Config {
	c := DefaultConfig()
	if mut != nil {
		mut(&c)
	}
	return c
}

func newT(t testing.TB, mut func(*Config)) *Tracker[string] {
	t.Helper()
	tr, err := New[string](testConfig(mut))
	require.NoError(t, err)
	return tr
}

// trio is a Tracker, a SyncTracker and the model on one Config, for the
// tests that drive all three with one workload and compare them.
type trio struct {
	c  Config
	g  geometry
	tr *Tracker[string]
	st *SyncTracker[string]
	m  *model
}

// newTrio returns an empty trio on testConfig(mut).
func newTrio(t testing.TB, mut func(*Config)) *trio {
	t.Helper()
	x := &trio{c: testConfig(mut)}
	var err error
	x.g, err = newGeometry(x.c.Layout())
	require.NoError(t, err)
	x.tr, err = New[string](x.c)
	require.NoError(t, err)
	x.st, err = NewSync[string](x.c)
	require.NoError(t, err)
	x.m = newModel(x.c)
	return x
}

// record records a latency of ms to dest at now in all three.
func (x *trio) record(dest string, ms uint64, now time.Time) {
	x.tr.RecordMillis(dest, ms, now)
	x.st.RecordMillis(dest, ms, now)
	x.m.record(dest, ms, now)
}

// clear forgets every destination in all three.
func (x *trio) clear() {
	x.tr.Clear()
	x.st.Clear()
	x.m.clear()
}

// checkWindows checks checkWindowInvariants on every window of both
// trackers.
func (x *trio) checkWindows(t *testing.T) {
	t.Helper()
	for _, en := range x.tr.dests {
		checkWindowInvariants(t, &x.g, &en.window)
	}
	for _, en := range syncEntries(x.st) {
		checkWindowInvariants(t, &x.g, &en.window)
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mut   func(*Config)
		field []string
	}{
		{"sub-windows 0", func(c *Config) { c.SubWindows = 0 }, []string{"SubWindows"}},
		{"sub-windows 256", func(c *Config) { c.SubWindows = 256 }, []string{"SubWindows"}},
		{"window 0", func(c *Config) { c.Window = 0 }, []string{"Window"}},
		{"sub-window below 1ms", func(c *Config) { c.Window = 9 * time.Millisecond }, []string{"Window/SubWindows"}},
		{"max latency 1ms", func(c *Config) { c.MaxTrackableLatency = time.Millisecond }, []string{"MaxTrackableLatency"}},
		{"negative max destinations", func(c *Config) { c.MaxDestinations = -1 }, []string{"MaxDestinations"}},
		{"all at once", func(c *Config) { *c = Config{SubWindows: -1, Window: -1, MaxDestinations: -2} },
			[]string{"SubWindows", "Window", "MaxTrackableLatency", "MaxDestinations"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mut(&c)
			tr, err := New[string](c)
			require.Nil(t, tr)
			require.Error(t, err)
			require.Equal(t, c.Validate().Error(), err.Error())
			for _, f := range tc.field {
				require.ErrorContains(t, err, f)
			}
			st, err := NewSync[string](c)
			require.Nil(t, st)
			require.Equal(t, c.Validate().Error(), err.Error())
		})
	}
	for _, c := range []Config{
		DefaultConfig(),
		{Window: time.Millisecond, SubWindows: 1, MaxTrackableLatency: 2 * time.Millisecond},
		{Window: 255 * time.Millisecond, SubWindows: 255, MaxTrackableLatency: math.MaxInt64, MaxDestinations: 1},
	} {
		_, err := New[int](c)
		require.NoError(t, err, "%+v", c)
	}
}

func TestDesignExamples(t *testing.T) {
	tr := newT(t, nil)
	now := at(1_700_000_000_000)
	for v := uint64(1); v <= 1000; v++ {
		tr.RecordMillis("db", v, now)
	}
	for _, tc := range []struct {
		q    float64
		want uint64
	}{{0.5, 501}, {0.99, 991}, {1, 1003}, {0, 1}} {
		got, ok := tr.QuantileMillis("db", tc.q, now)
		require.True(t, ok)
		require.Equal(t, tc.want, got, "q=%v", tc.q)
	}
	tr.Clear()
	for range 3 {
		tr.RecordMillis("db", 100_000, now)
	}
	got, ok := tr.QuantileMillis("db", 0.9999, now)
	require.True(t, ok)
	require.Equal(t, uint64(60159), got)
	d, ok := tr.Quantile("db", 0.9999, now)
	require.True(t, ok)
	require.Equal(t, 60159*time.Millisecond, d)
}

// TestRecordValues covers truncation, negatives and clamping: each case
// records one value three times and reads P0 and P100.
func TestRecordValues(t *testing.T) {
	huge := func(c *Config) { c.MaxTrackableLatency = math.MaxInt64 }
	for _, tc := range []struct {
		name     string
		mut      func(*Config)
		record   func(tr *Tracker[string], now time.Time)
		min, max uint64
	}{
		{"zero", nil, func(tr *Tracker[string], now time.Time) { tr.Record("d", 0, now) }, 0, 0},
		{"sub-millisecond truncates to 0", nil, func(tr *Tracker[string], now time.Time) { tr.Record("d", 999*time.Microsecond, now) }, 0, 0},
		{"1.999ms truncates to 1", nil, func(tr *Tracker[string], now time.Time) { tr.Record("d", 1999*time.Microsecond, now) }, 1, 1},
		{"negative records 0", nil, func(tr *Tracker[string], now time.Time) { tr.Record("d", -5*time.Second, now) }, 0, 0},
		{"min duration records 0", nil, func(tr *Tracker[string], now time.Time) { tr.Record("d", math.MinInt64, now) }, 0, 0},
		{"255 is exact", nil, func(tr *Tracker[string], now time.Time) { tr.RecordMillis("d", 255, now) }, 255, 255},
		{"256 shares a bucket with 257", nil, func(tr *Tracker[string], now time.Time) { tr.RecordMillis("d", 256, now) }, 256, 257},
		{"1000 is in 1000..1003", nil, func(tr *Tracker[string], now time.Time) { tr.Record("d", time.Second, now) }, 1000, 1003},
		{"max trackable is kept", nil, func(tr *Tracker[string], now time.Time) { tr.RecordMillis("d", 60000, now) }, 59904, 60159},
		{"above max is clamped", nil, func(tr *Tracker[string], now time.Time) { tr.RecordMillis("d", 60001, now) }, 59904, 60159},
		{"max uint64 is clamped", nil, func(tr *Tracker[string], now time.Time) { tr.RecordMillis("d", math.MaxUint64, now) }, 59904, 60159},
		{"max duration is clamped", nil, func(tr *Tracker[string], now time.Time) { tr.Record("d", math.MaxInt64, now) }, 59904, 60159},
		{"custom max 2ms", func(c *Config) { c.MaxTrackableLatency = 2 * time.Millisecond }, func(tr *Tracker[string], now time.Time) { tr.RecordMillis("d", 7, now) }, 2, 2},
		{"huge max keeps large values", huge, func(tr *Tracker[string], now time.Time) { tr.Record("d", 100*time.Hour, now) }, 358612992, 360710143}, // as hdrhistogram-go New(1, MaxInt64/1e6, 2),
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newT(t, tc.mut)
			now := at(12345)
			for range 3 {
				tc.record(tr, now)
			}
			lo, ok := tr.QuantileMillis("d", 0, now)
			require.True(t, ok)
			hi, ok := tr.QuantileMillis("d", 1, now)
			require.True(t, ok)
			require.Equal(t, [2]uint64{tc.min, tc.max}, [2]uint64{lo, hi})
			require.Equal(t, uint64(3), tr.Samples("d", now))
		})
	}
}

func TestQuantileRule(t *testing.T) {
	tr := newT(t, nil)
	now := at(0)
	// 10 samples: 1×5ms, 8×300ms (bucket 300..301), 1×2000ms (bucket 2000..2007).
	tr.RecordMillis("d", 5, now)
	for range 8 {
		tr.RecordMillis("d", 300, now)
	}
	tr.RecordMillis("d", 2000, now)
	for _, tc := range []struct {
		name string
		q    float64
		want uint64
	}{
		{"zero is the lowest equivalent of the minimum", 0, 5},
		{"smallest positive q is rank 1", math.SmallestNonzeroFloat64, 5},
		{"rank ceil(0.1·10)=1", 0.1, 5},
		{"rank ceil(0.11·10)=2", 0.11, 301},
		{"rank 9", 0.9, 301},
		{"rank ceil(0.91·10)=10", 0.91, 2007},
		{"one", 1, 2007},
		{"above one is one", 1.5, 2007},
		{"+Inf is one", math.Inf(1), 2007},
		{"negative is rank 1", -0.5, 5},
		{"-Inf is rank 1", math.Inf(-1), 5},
		{"NaN is rank 1", math.NaN(), 5},
		{"P99.99", 0.9999, 2007},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tr.QuantileMillis("d", tc.q, now)
			require.True(t, ok)
			require.Equal(t, tc.want, got)
			d, ok := tr.Quantile("d", tc.q, now)
			require.True(t, ok)
			require.Equal(t, time.Duration(tc.want)*time.Millisecond, d)
		})
	}
}

func TestQuantileSaturatesDuration(t *testing.T) {
	tr := newT(t, func(c *Config) { c.MaxTrackableLatency = math.MaxInt64; c.MinSamples = 1 })
	tr.Record("d", math.MaxInt64, at(0))
	ms, ok := tr.QuantileMillis("d", 1, at(0))
	require.True(t, ok)
	require.Greater(t, ms, uint64(math.MaxInt64/int64(time.Millisecond)))
	d, ok := tr.Quantile("d", 1, at(0))
	require.True(t, ok)
	require.Equal(t, time.Duration(math.MaxInt64), d)
}

func TestMinSamples(t *testing.T) {
	for _, tc := range []struct {
		min     uint32
		samples int
		ok      bool
	}{
		{3, 0, false}, {3, 2, false}, {3, 3, true}, {3, 4, true},
		{0, 0, false}, {0, 1, true}, {1, 1, true}, {1000, 999, false}, {1000, 1000, true},
	} {
		tr := newT(t, func(c *Config) { c.MinSamples = tc.min })
		for range tc.samples {
			tr.RecordMillis("d", 7, at(0))
		}
		got, ok := tr.QuantileMillis("d", 0.5, at(0))
		require.Equal(t, tc.ok, ok, "MinSamples %d, %d samples", tc.min, tc.samples)
		if ok {
			require.Equal(t, uint64(7), got)
		} else {
			require.Zero(t, got)
			d, ok := tr.Quantile("d", 0.5, at(0))
			require.False(t, ok)
			require.Zero(t, d)
		}
		require.Equal(t, uint64(tc.samples), tr.Samples("d", at(0)))
		ms, n, ok := view(tr, "d", 0.5, at(0)).qsOK()
		require.Equal(t, tc.samples > 0, ok, "localView ignores MinSamples")
		require.Equal(t, uint64(tc.samples), n)
		if ok {
			require.Equal(t, uint64(7), ms)
		}
	}
}

// TestWindow checks which samples a query sees: a sample recorded in epoch e
// is in the window at epochs e … e+N−1 and gone at e+N.
func TestWindow(t *testing.T) {
	type rec struct {
		ms int64 // wall clock
		v  uint64
	}
	for _, tc := range []struct {
		name    string
		mut     func(*Config)
		records []rec
		queryMs int64
		samples uint64
		p100    uint64
	}{
		{"same epoch", nil, []rec{{0, 5}}, 5999, 1, 5},
		{"last epoch of the window", nil, []rec{{0, 5}}, 9*sub + 5999, 1, 5},
		{"expired at e+N", nil, []rec{{5999, 5}}, 10 * sub, 0, 0},
		{"older expires, newer stays", nil, []rec{{0, 9}, {sub, 5}}, 10 * sub, 1, 5},
		{"gap of N-1 keeps", nil, []rec{{0, 9}, {9 * sub, 5}}, 9 * sub, 2, 9},
		{"gap of N clears", nil, []rec{{0, 9}, {10 * sub, 5}}, 10 * sub, 1, 5},
		{"huge gap clears", nil, []rec{{0, 9}, {1 << 50, 5}}, 1 << 50, 1, 5},
		{"every epoch of a window", nil, []rec{{0, 1}, {sub, 2}, {2 * sub, 3}, {3 * sub, 4}, {4 * sub, 5}, {5 * sub, 6}, {6 * sub, 7}, {7 * sub, 8}, {8 * sub, 9}, {9 * sub, 10}, {10 * sub, 11}}, 10 * sub, 10, 11},
		{"negative epochs", nil, []rec{{-sub - 1, 7}, {-1, 9}}, 8*sub + 1, 1, 9},
		{"across zero", nil, []rec{{-5 * sub, 3}, {-1, 9}, {0, 1}, {4 * sub, 2}}, 4*sub + 1, 4, 9},
		{"one sub-window", func(c *Config) { c.SubWindows = 1; c.Window = time.Second }, []rec{{999, 3}, {1000, 4}}, 1999, 1, 4},
		{"255 sub-windows of 1ms", func(c *Config) { c.SubWindows = 255; c.Window = 255 * time.Millisecond }, []rec{{0, 3}, {254, 4}}, 254, 2, 4},
		{"255 sub-windows expire", func(c *Config) { c.SubWindows = 255; c.Window = 255 * time.Millisecond }, []rec{{0, 3}, {254, 4}}, 255, 1, 4},
		{"sub-window truncated to whole ms", func(c *Config) { c.Window = 10*time.Second + 9*time.Millisecond }, []rec{{0, 3}}, 10000, 0, 0},
		{"clock backwards goes into the current sub-window", nil, []rec{{5 * sub, 9}, {3 * sub, 4}}, 14*sub + 1, 2, 9},
		{"clock backwards expires with the current sub-window", nil, []rec{{5 * sub, 9}, {3 * sub, 4}}, 15 * sub, 0, 0},
		{"query in the past sees the current window", nil, []rec{{5 * sub, 9}}, 0, 1, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newT(t, func(c *Config) {
				c.MinSamples = 1
				if tc.mut != nil {
					tc.mut(c)
				}
			})
			for _, r := range tc.records {
				tr.RecordMillis("d", r.v, at(r.ms))
			}
			require.Equal(t, tc.samples, tr.Samples("d", at(tc.queryMs)))
			got, ok := tr.QuantileMillis("d", 1, at(tc.queryMs))
			require.Equal(t, tc.samples > 0, ok)
			require.Equal(t, tc.p100, got)
		})
	}
}

// TestQueriesRotate checks that a query alone moves the window: after a
// query far in the future, a record at an earlier time goes into the
// future sub-window.
func TestQueriesRotate(t *testing.T) {
	tr := newT(t, func(c *Config) { c.MinSamples = 1 })
	tr.RecordMillis("a", 3, at(0))
	require.Zero(t, tr.Samples("b", at(20*sub)), "query on another destination moves the clock")
	tr.RecordMillis("a", 4, at(0)) // the past: lands in epoch 20
	require.Equal(t, uint64(1), tr.Samples("a", at(29*sub)))
	require.Zero(t, tr.Samples("a", at(30*sub)))
}

func TestLazyCreationAndEviction(t *testing.T) {
	type op struct {
		record bool
		dest   string
	}
	for _, tc := range []struct {
		name string
		max  int
		ops  []op
		want map[string]uint64 // samples per destination at the end
	}{
		{"queries never create", 0, []op{{false, "a"}, {false, "b"}}, map[string]uint64{}},
		{"unlimited", 0, []op{{true, "a"}, {true, "b"}, {true, "c"}, {true, "a"}}, map[string]uint64{"a": 2, "b": 1, "c": 1}},
		{"max 1 keeps the last", 1, []op{{true, "a"}, {true, "b"}}, map[string]uint64{"b": 1}},
		{"max 2 evicts the least recently recorded", 2, []op{{true, "a"}, {true, "b"}, {true, "c"}}, map[string]uint64{"b": 1, "c": 1}},
		{"recording refreshes", 2, []op{{true, "a"}, {true, "b"}, {true, "a"}, {true, "c"}}, map[string]uint64{"a": 2, "c": 1}},
		{"queries do not refresh", 2, []op{{true, "a"}, {true, "b"}, {false, "a"}, {true, "c"}}, map[string]uint64{"b": 1, "c": 1}},
		{"queries of unknown do not evict", 1, []op{{true, "a"}, {false, "b"}, {false, "c"}}, map[string]uint64{"a": 1}},
		{"evicted comes back empty", 1, []op{{true, "a"}, {true, "a"}, {true, "b"}, {true, "a"}}, map[string]uint64{"a": 1}},
		{"more samples beat recency", 2, []op{{true, "a"}, {true, "a"}, {true, "a"}, {true, "b"}, {true, "c"}}, map[string]uint64{"a": 3, "c": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newT(t, func(c *Config) { c.MaxDestinations = tc.max; c.MinSamples = 1 })
			st, err := NewSync[string](tr.Config())
			require.NoError(t, err)
			for _, o := range tc.ops {
				if o.record {
					tr.RecordMillis(o.dest, 1, at(0))
					st.RecordMillis(o.dest, 1, at(0))
					continue
				}
				_, _ = tr.QuantileMillis(o.dest, 0.5, at(0))
				_, _ = tr.Quantile(o.dest, 0.5, at(0))
				_ = tr.Samples(o.dest, at(0))
				_ = view(tr, o.dest, 0.5, at(0))
				_ = ExportHistogram(tr, o.dest, at(0))
				_, _ = st.QuantileMillis(o.dest, 0.5, at(0))
				_, _ = st.Quantile(o.dest, 0.5, at(0))
				_ = st.Samples(o.dest, at(0))
				_ = view(st, o.dest, 0.5, at(0))
				_ = ExportHistogram(st, o.dest, at(0))
			}
			got, gotSync := map[string]uint64{}, map[string]uint64{}
			for _, d := range []string{"a", "b", "c"} {
				if n := tr.Samples(d, at(0)); n > 0 {
					got[d] = n
				}
				if n := st.Samples(d, at(0)); n > 0 {
					gotSync[d] = n
				}
			}
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.want, gotSync)
			require.Len(t, tr.dests, len(tc.want))
			require.Equal(t, len(tc.want), st.destinations())
			require.Equal(t, Stats(tr), Stats(st))
			require.Equal(t, len(tc.want), Stats(tr).Destinations)
		})
	}
}

func TestRecordSince(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start time.Time
		now   time.Time
		ret   time.Duration
		ms    uint64
	}{
		{"positive", at(1000), at(1000).Add(2500 * time.Microsecond), 2500 * time.Microsecond, 2},
		{"zero", at(1000), at(1000), 0, 0},
		{"negative records 0", at(2000), at(1000), 0, 0},
		{"saturating", time.Time{}, time.Unix(1<<40, 0), math.MaxInt64, 59904},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newT(t, func(c *Config) { c.MinSamples = 1 })
			st, err := NewSync[string](tr.Config())
			require.NoError(t, err)
			require.Equal(t, tc.ret, tr.RecordSince("d", tc.start, tc.now))
			require.Equal(t, tc.ret, st.RecordSince("d", tc.start, tc.now))
			got, ok := tr.QuantileMillis("d", 0, tc.now)
			require.True(t, ok)
			require.Equal(t, tc.ms, got)
			got, ok = st.QuantileMillis("d", 0, tc.now)
			require.True(t, ok)
			require.Equal(t, tc.ms, got)
		})
	}
}

func TestClearAndConfig(t *testing.T) {
	c := DefaultConfig()
	c.MaxDestinations = 2
	tr, err := New[int](c)
	require.NoError(t, err)
	require.Equal(t, c, tr.Config())
	tr.RecordMillis(1, 10, at(5*sub))
	tr.RecordMillis(2, 10, at(5*sub))
	tr.Clear()
	require.Zero(t, tr.Samples(1, at(5*sub)))
	require.Zero(t, tr.Samples(2, at(5*sub)))
	// The clock is kept: a record in the past goes into epoch 5.
	tr.RecordMillis(1, 10, at(0))
	tr.RecordMillis(2, 10, at(0))
	tr.RecordMillis(3, 10, at(0)) // evicts 1: the eviction order was reset too
	require.Zero(t, tr.Samples(1, at(0)))
	require.Equal(t, uint64(1), tr.Samples(2, at(14*sub)))
	require.Zero(t, tr.Samples(2, at(15*sub)))
}

// TestNothingPanics feeds extreme times, latencies and quantiles.
func TestNothingPanics(t *testing.T) {
	times := []time.Time{
		{}, at(math.MinInt64), at(math.MaxInt64), at(-1), at(0), time.Unix(math.MaxInt64, 999999999),
		time.Unix(math.MinInt64, 0), at(math.MaxInt64 - 1), at(math.MinInt64 + 1), time.Unix(1<<40, 0),
	}
	qs := []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1, 0, 1e-300, 0.5, 1, 2, math.MaxFloat64}
	for _, mut := range []func(*Config){
		nil,
		func(c *Config) {
			c.SubWindows = 1
			c.Window = time.Millisecond
			c.MinSamples = 0
			c.MaxDestinations = 1
		},
		func(c *Config) { c.SubWindows = 7; c.Window = 7 * time.Hour; c.MaxTrackableLatency = math.MaxInt64 },
	} {
		tr := newT(t, mut)
		st, err := NewSync[string](tr.Config())
		require.NoError(t, err)
		for i, now := range times {
			for _, d := range []string{"a", "b"} {
				for _, l := range []time.Duration{math.MinInt64, -1, 0, 1, math.MaxInt64} {
					tr.Record(d, l, now)
					st.Record(d, l, now)
				}
				tr.RecordMillis(d, math.MaxUint64, now)
				st.RecordMillis(d, math.MaxUint64, now)
				tr.RecordSince(d, times[(i+3)%len(times)], now)
				st.RecordSince(d, times[(i+3)%len(times)], now)
				for _, q := range qs {
					a, aok := tr.QuantileMillis(d, q, now)
					b, bok := st.QuantileMillis(d, q, now)
					require.Equal(t, [2]any{a, aok}, [2]any{b, bok})
					tr.Quantile(d, q, now)
					st.Quantile(d, q, now)
				}
				require.Equal(t, tr.Samples(d, now), st.Samples(d, now))
				_ = SealedSubWindow(tr, tr.s.cfg.Epoch(now)-1, now)
				_ = SealedSubWindow(st, math.MinInt64, now)
				_ = ExportHistogram(st, d, now)
			}
		}
	}
}

// model is the reference: it keeps every sample with the epoch it was
// recorded in, and computes quantiles exactly by sorting.
type model struct {
	cfg     Config
	epoch   int64 // highest epoch seen; starts below every epoch
	seen    bool
	dests   map[string][]modelSample
	order   map[string]int // sequence number of the last Record (or of surviving an eviction)
	seq     int
	evicted uint64
}

type modelSample struct {
	epoch    int64
	v        int64
	censored bool // a timed-out attempt (RecordTimeout)
}

func newModel(c Config) *model {
	m := &model{cfg: c}
	m.clear()
	return m
}

// clear forgets every destination, as Tracker.Clear (the epoch is kept).
func (m *model) clear() {
	m.dests, m.order = map[string][]modelSample{}, map[string]int{}
}

func (m *model) advance(now time.Time) int64 {
	e := m.cfg.Epoch(now)
	if !m.seen || e > m.epoch {
		m.epoch, m.seen = e, true
	}
	return m.epoch
}

func (m *model) record(d string, ms uint64, now time.Time) { m.add(d, ms, now, false) }

func (m *model) recordTimeout(d string, ms uint64, now time.Time) { m.add(d, ms, now, true) }

func (m *model) add(d string, ms uint64, now time.Time, censored bool) {
	e := m.advance(now)
	highest := uint64(m.cfg.Layout().Highest)
	if ms > highest {
		ms = highest
	}
	if _, ok := m.dests[d]; !ok && m.cfg.MaxDestinations > 0 && len(m.dests) >= m.cfg.MaxDestinations {
		m.evict(now)
	}
	if _, ok := m.dests[d]; !ok {
		m.dests[d] = []modelSample{}
	}
	m.dests[d] = append(m.dests[d], modelSample{e, int64(ms), censored})
	m.seq++
	m.order[d] = m.seq
}

// evict applies Config.MaxDestinations' rule by brute force: of the
// evictionCandidates least recently recorded destinations, the one with the
// fewest samples in the window goes (ties: the least recent); the others
// with more samples become the most recent, in order.
func (m *model) evict(now time.Time) {
	byAge := slices.SortedFunc(maps.Keys(m.order), func(a, b string) int { return m.order[a] - m.order[b] })
	cands := byAge[:min(len(byAge), evictionCandidates)]
	n := make([]int, len(cands))
	victim := 0
	for k, c := range cands {
		if n[k] = m.count(c, now); n[k] < n[victim] {
			victim = k
		}
	}
	for k, c := range cands {
		if n[k] > n[victim] {
			m.seq++
			m.order[c] = m.seq
		}
	}
	delete(m.dests, cands[victim])
	delete(m.order, cands[victim])
	m.evicted++
}

// count returns the number of samples in d's window at now.
func (m *model) count(d string, now time.Time) int {
	e := m.advance(now)
	n := 0
	for _, s := range m.dests[d] {
		if uint64(e)-uint64(s.epoch) < uint64(m.cfg.SubWindows) {
			n++
		}
	}
	return n
}

// window returns the sorted values of d's window at now.
func (m *model) window(d string, now time.Time) []int64 {
	e := m.advance(now)
	var vs []int64
	for _, s := range m.dests[d] {
		if uint64(e)-uint64(s.epoch) < uint64(m.cfg.SubWindows) {
			vs = append(vs, s.v)
		}
	}
	slices.Sort(vs)
	return vs
}

// quantile is the exact sort-based quantile mapped through the bucket rule:
// the value at rank ceil(q·n) (q clamped to [0, 1], rank >= 1) reported as its
// bucket's highest equivalent value, or lowest for q == 0.
func (m *model) quantile(g *geometry, d string, q float64, now time.Time, minSamples uint64) (uint64, bool) {
	vs := m.window(d, now)
	n := uint64(len(vs))
	if n == 0 || n < minSamples {
		return 0, false
	}
	r := 1
	if q > 0 { // NaN and negatives stay at rank 1
		r = int(math.Ceil(min(q, 1) * float64(n)))
		r = max(1, min(r, int(n)))
	}
	v := vs[r-1]
	if q == 0 {
		return uint64(g.lowestEquivalent(g.index(v))), true
	}
	return uint64(g.highestEquivalent(g.index(v))), true
}

// workload is a seeded random sequence of operations over a few destinations
// with time moving mostly forward, sometimes back, sometimes by large gaps.
type workOp struct {
	kind int // 0 record, 1 quantile, 2 samples, 3 clear
	dest string
	ms   uint64
	q    float64
	now  time.Time
}

func workload(seed uint64, n int, c Config) []workOp {
	r := rand.New(rand.NewPCG(seed, 1))
	dests := []string{"a", "b", "c", "d", "e", "f"}
	subMs := c.SubWindow().Milliseconds()
	now := int64(1_700_000_000_000) + r.Int64N(1_000_000)
	qs := []float64{0, 0.001, 0.25, 0.5, 0.9, 0.99, 0.999, 0.9999, 1, 1.5, math.NaN(), -1}
	ops := make([]workOp, 0, n)
	for range n {
		switch x := r.IntN(1000); {
		case x < 5:
			now -= r.Int64N(3 * subMs) // backwards
		case x < 10:
			now += r.Int64N(int64(c.SubWindows)*subMs*2 + 1) // maybe beyond the window
		case x < 100:
			now += r.Int64N(subMs)
		default:
			now += r.Int64N(subMs / 50)
		}
		o := workOp{dest: dests[r.IntN(len(dests))], now: at(now)}
		switch x := r.IntN(100); {
		case x < 70:
			o.kind = 0
			// Log-normal-ish latency with a heavy tail, sometimes beyond the max.
			o.ms = uint64(math.Exp(r.NormFloat64()*1.5 + 3))
			if r.IntN(500) == 0 {
				o.ms = 1 << 40
			}
		case x < 90:
			o.kind = 1
			o.q = qs[r.IntN(len(qs))]
			if r.IntN(2) == 0 {
				o.q = r.Float64()
			}
		case x < 99:
			o.kind = 2
		default:
			if r.IntN(20) == 0 {
				o.kind = 3
			} else {
				o.kind = 2
			}
		}
		ops = append(ops, o)
	}
	return ops
}

// A modelConfig is a configuration the model tests replay their workloads
// on: its name and how it changes testConfig's.
type modelConfig struct {
	name string
	mut  func(*Config)
}

// The model configurations more than one model test replays on.
var (
	modelDefaults = modelConfig{"defaults", nil}
	modelMaxDests = modelConfig{"max destinations 3", func(c *Config) { c.MaxDestinations = 3 }}
	modelShortMax = modelConfig{"3 sub-windows, 1s max", func(c *Config) {
		c.SubWindows = 3
		c.Window = 3 * time.Second
		c.MaxTrackableLatency = time.Second
	}}
)

func TestTrackerMatchesExactQuantiles(t *testing.T) {
	for _, tc := range []modelConfig{
		modelDefaults,
		{"min samples 0", func(c *Config) { c.MinSamples = 0 }},
		modelMaxDests,
		{"one sub-window", func(c *Config) { c.SubWindows = 1; c.Window = 2 * time.Second }},
		modelShortMax,
		{"255 sub-windows", func(c *Config) { c.SubWindows = 255; c.Window = 255 * 100 * time.Millisecond }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig(tc.mut)
			tr := newT(t, tc.mut)
			g, err := newGeometry(c.Layout())
			require.NoError(t, err)
			minSamples := max(uint64(c.MinSamples), 1)
			for seed := uint64(1); seed <= 3; seed++ {
				m := newModel(c)
				tr.Clear()
				tr.clock = newEpochClock()
				for i, o := range workload(seed, 10000, c) {
					switch o.kind {
					case 0:
						tr.RecordMillis(o.dest, o.ms, o.now)
						m.record(o.dest, o.ms, o.now)
					case 1:
						got, ok := tr.QuantileMillis(o.dest, o.q, o.now)
						want, wok := m.quantile(&g, o.dest, o.q, o.now, minSamples)
						require.Equal(t, wok, ok, "seed %d op %d", seed, i)
						require.Equal(t, want, got, "seed %d op %d q=%v", seed, i, o.q)
						gotMs, n, ok := view(tr, o.dest, o.q, o.now).qsOK()
						want, wok = m.quantile(&g, o.dest, o.q, o.now, 1)
						require.Equal(t, wok, ok)
						require.Equal(t, want, gotMs)
						require.Equal(t, uint64(len(m.window(o.dest, o.now))), n)
					case 2:
						require.Equal(t, uint64(len(m.window(o.dest, o.now))), tr.Samples(o.dest, o.now), "seed %d op %d", seed, i)
					case 3:
						tr.Clear()
						m.clear()
					}
				}
				// The incrementally kept sum equals a rebuild from the parts.
				for _, en := range tr.dests {
					checkWindowInvariants(t, &g, &en.window)
				}
			}
		})
	}
}

// checkWindowInvariants rebuilds the sum from cur and the ring and compares
// it with the incrementally kept one, block sums and highest index included.
func checkWindowInvariants(t *testing.T, g *geometry, w *window) {
	t.Helper()
	want := newHist(g)
	var curN uint64
	for i, c := range w.cur {
		want.add(i, uint64(c))
		curN += uint64(c)
		require.Equal(t, c != 0, w.touched[i>>6]&(1<<(uint(i)&63)) != 0, "touched bit %d", i)
	}
	require.Equal(t, curN, w.curN)
	for _, s := range w.ring {
		require.False(t, s.buckets != nil && s.packed != nil, "one form per sealed sub-window")
		var tot uint64
		last := -1
		s.each(func(i int, c uint32) {
			require.NotZero(t, c)
			require.Less(t, last, i)
			last = i
			want.add(i, uint64(c))
			tot += uint64(c)
		})
		require.Equal(t, s.total, tot)
		if !s.empty() {
			require.Less(t, uint64(w.epoch)-uint64(s.epoch)-1, uint64(len(w.ring)-1), "sealed epoch in [epoch−N+1, epoch−1]")
			require.Equal(t, s.packed != nil, 8*len(s.sparse()) > len(w.cur), "packed exactly when []Bucket would exceed a byte per count")
		}
	}
	require.Equal(t, want.counts, w.sum.counts)
	require.Equal(t, want.blocks, w.sum.blocks)
	require.Equal(t, want.total, w.sum.total)
	require.Equal(t, want.hi, w.sum.hi)

	// Censored counts: the sum is the rebuild from cur and the ring, C <= H
	// everywhere, and censoring is dropped once nothing censored is left.
	wantC := map[int]uint64{}
	subset := func(to []Bucket, h func(i int) uint32) {
		for k, b := range to {
			require.NotZero(t, b.Count)
			require.LessOrEqual(t, b.Count, h(int(b.Index)), "C <= H at %d", b.Index)
			if k > 0 {
				require.Less(t, to[k-1].Index, b.Index)
			}
			wantC[int(b.Index)] += uint64(b.Count)
		}
	}
	if w.cens == nil {
		return // (the censored counts of sealed sub-windows live in it)
	}
	subset(w.cens.cur, func(i int) uint32 { return w.cur[i] })
	require.Len(t, w.cens.ring, len(w.ring))
	for k, s := range w.ring {
		to := w.cens.ring[k]
		if to == nil {
			continue
		}
		require.False(t, s.empty(), "censored counts only beside a sealed sub-window")
		h := map[int]uint32{}
		s.each(func(i int, c uint32) { h[i] = c })
		subset(to.sparse(), func(i int) uint32 { return h[i] })
		require.Equal(t, to.packed != nil, 8*len(to.sparse()) > len(w.cur))
	}
	require.Positive(t, w.cens.sum.total, "an empty censoring is dropped")
	bm := make([]uint64, len(w.touched))
	for _, s := range w.ring {
		s.each(func(i int, _ uint32) { bm[i>>6] |= 1 << (uint(i) & 63) })
	}
	require.Equal(t, bm, w.cens.sealed, "the sealed sub-windows' index bitmap")
	mi, mok := w.maxCompleted()
	gi, gok := maxCompleted(&w.sum, &w.cens.sum)
	require.Equal(t, [2]any{gi, gok}, [2]any{mi, mok}, "M through the bitmaps and through the counts")
	require.Equal(t, wantC, sparseMap(t, &w.cens.sum))
}

func TestDestinations(t *testing.T) {
	c := DefaultConfig() // 10 sub-windows of 6 s
	tr, err := New[string](c)
	require.NoError(t, err)
	st, err := NewSync[string](c)
	require.NoError(t, err)
	record := func(dest string, ms int64) {
		tr.RecordMillis(dest, 5, at(ms))
		st.RecordMillis(dest, 5, at(ms))
	}
	sorted := func(d []string) []string { slices.Sort(d); return d }
	check := func(ms int64, want ...string) {
		t.Helper()
		require.Equal(t, want, sorted(Destinations(tr, at(ms))), "Tracker at %d", ms)
		require.Equal(t, want, sorted(Destinations(st, at(ms))), "SyncTracker at %d", ms)
	}

	check(0)
	record("a", 0)
	record("b", 30_000)
	tr.Quantile("never-recorded", 0.5, at(30_000)) // queries create nothing
	check(30_000, "a", "b")
	check(59_999, "a", "b")
	check(60_000, "b") // a's epoch 0 left the window at epoch 10
	check(90_000)
}

// TestEvictionKeepsSteadyDestinations is a flood of junk names at the
// destination cap: every 100 ms, 18 new names with one sample each (180 a
// second against a cap of 200, so a name reaches the end of the recency
// order in about a second), beside 20 real destinations with a few samples
// each, then recorded once every 1.5 s, more rarely than that. Evicting by
// recency alone would drop the real ones again and again; keeping the
// destinations with the most samples keeps every one of their samples.
// Every eviction is counted.
func TestEvictionKeepsSteadyDestinations(t *testing.T) {
	c := DefaultConfig()
	c.Window, c.SubWindows, c.MaxDestinations = 10*time.Second, 10, 200
	tr, err := New[string](c)
	require.NoError(t, err)
	st, err := NewSync[string](c)
	require.NoError(t, err)
	const reals, ticks = 20, 250 // 25 s of 100 ms ticks
	base := int64(1_700_000_000_000)
	junk, records := 0, map[string][]int64{}
	for tick := range int64(ticks) {
		now := at(base + tick*100)
		for range 18 {
			d := fmt.Sprintf("junk-%d", junk)
			junk++
			tr.RecordMillis(d, 5, now)
			st.RecordMillis(d, 5, now)
		}
		for r := range int64(reals) {
			if tick < 3 || (tick+r)%15 == 0 {
				d := fmt.Sprintf("real-%d", r)
				tr.RecordMillis(d, 40, now)
				st.RecordMillis(d, 40, now)
				records[d] = append(records[d], base+tick*100)
			}
		}
	}
	now := at(base + ticks*100)
	e := c.Epoch(now)
	for d, ts := range records {
		want := 0
		for _, ms := range ts {
			if c.Epoch(at(ms)) > e-int64(c.SubWindows) {
				want++
			}
		}
		require.Equal(t, uint64(want), tr.Samples(d, now), "%s, Tracker", d)
		require.Equal(t, uint64(want), st.Samples(d, now), "%s, SyncTracker", d)
	}
	require.Equal(t, Stats(tr), Stats(st))
	require.Equal(t, TrackerStats{Destinations: 200, DestinationsEvicted: uint64(junk + reals - 200)}, Stats(tr))
}

// TestEvictionComparesSixteenCandidates pins how many destinations an
// eviction compares: the 16 least recently recorded (Config.MaxDestinations).
// Counts are per destination in recency order, least recent first; a new
// destination then evicts the one named.
func TestEvictionComparesSixteenCandidates(t *testing.T) {
	twos := func(n int, rest ...uint64) []uint64 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = 2
		}
		return append(out, rest...)
	}
	for _, tc := range []struct {
		name    string
		counts  []uint64
		evicted int
	}{
		// The 16th least recent has the fewest samples: it goes, not the
		// least recent.
		{"fewest is the 16th", twos(15, 1, 1, 1, 1, 1), 15},
		// The 17th has fewer, but it is not a candidate: among the 16, all
		// equal, the least recent goes.
		{"fewest is the 17th", twos(16, 1, 1, 1, 1), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newT(t, func(c *Config) { c.MaxDestinations = len(tc.counts); c.MinSamples = 1 })
			st, err := NewSync[string](tr.Config())
			require.NoError(t, err)
			name := func(i int) string { return fmt.Sprintf("d%02d", i) }
			for i, n := range tc.counts {
				for range n {
					tr.RecordMillis(name(i), 1, at(0))
					st.RecordMillis(name(i), 1, at(0))
				}
			}
			tr.RecordMillis("new", 1, at(0))
			st.RecordMillis("new", 1, at(0))
			for i, n := range tc.counts {
				if i == tc.evicted {
					n = 0
				}
				require.Equal(t, n, tr.Samples(name(i), at(0)), "Tracker, %s", name(i))
				require.Equal(t, n, st.Samples(name(i), at(0)), "SyncTracker, %s", name(i))
			}
			require.Equal(t, uint64(1), Stats(tr).DestinationsEvicted)
			require.Equal(t, Stats(tr), Stats(st))
		})
	}
}

// TestRecordSaturatesBucket fills one bucket of the current sub-window to
// one below its limit (2^32−1, the wire format's count): the next sample
// still counts, those after it are dropped, and a timed-out one dropped so
// is not counted as censored either (C stays <= H).
func TestRecordSaturatesBucket(t *testing.T) {
	tr := newT(t, func(c *Config) { c.MinSamples = 1 })
	tr.RecordMillis("a", 5, at(0))
	en, i := tr.dests["a"], tr.s.index(5)
	const fill = math.MaxUint32 - 2 // the bucket then holds 2^32−2
	en.cur[i] += fill
	en.curN += fill
	en.sum.add(i, fill)
	tr.RecordMillis("a", 5, at(0))
	require.Equal(t, uint32(math.MaxUint32), en.cur[i])
	require.Equal(t, uint64(math.MaxUint32), tr.Samples("a", at(0)))
	tr.RecordMillis("a", 5, at(0))
	tr.RecordTimeoutMillis("a", 5, at(0))
	require.Equal(t, uint64(math.MaxUint32), tr.Samples("a", at(0)))
	e, err := LocalEstimate(tr, "a", 0.5, at(0))
	require.NoError(t, err)
	require.Equal(t, uint64(math.MaxUint32), e.LocalSamples)
	require.Zero(t, e.LocalCensored, "a dropped timeout is not censored")
	require.Nil(t, en.censored())
}
