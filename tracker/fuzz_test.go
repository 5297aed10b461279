package tracker

import (
	"math"
	"testing"
	"time"
)

// FuzzTrackers feeds arbitrary latencies, times and quantiles to both
// trackers: nothing may panic, both must answer alike, and an answer must
// obey the bucket rule's bounds.
func FuzzTrackers(f *testing.F) {
	f.Add(uint64(5), int64(-3), 0.5, int64(0), int64(6000), uint8(10))
	f.Add(uint64(math.MaxUint64), int64(math.MinInt64), math.NaN(), int64(math.MinInt64), int64(math.MaxInt64), uint8(1))
	f.Add(uint64(0), int64(math.MaxInt64), math.Inf(1), int64(math.MaxInt64), int64(math.MinInt64), uint8(255))
	f.Add(uint64(60000), int64(1), -1.0, int64(-1), int64(-60001), uint8(3))
	f.Add(uint64(1000), int64(999999), 0.0, int64(1_700_000_000_000), int64(1_700_000_060_000), uint8(0))
	f.Fuzz(func(t *testing.T, ms uint64, latency int64, q float64, t1, t2 int64, subs uint8) {
		c := DefaultConfig()
		c.SubWindows = max(int(subs), 1)
		c.Window = time.Duration(c.SubWindows) * time.Second
		c.MinSamples = 2
		tr, err := New[string](c)
		if err != nil {
			t.Fatal(err)
		}
		st, err := NewSync[string](c)
		if err != nil {
			t.Fatal(err)
		}
		for _, now := range []time.Time{at(t1), at(t2), at(t1)} {
			tr.RecordMillis("d", ms, now)
			st.RecordMillis("d", ms, now)
			tr.Record("d", time.Duration(latency), now)
			st.Record("d", time.Duration(latency), now)
			a, aok := tr.QuantileMillis("d", q, now)
			b, bok := st.QuantileMillis("d", q, now)
			if a != b || aok != bok {
				t.Fatalf("Tracker %d,%v != SyncTracker %d,%v", a, aok, b, bok)
			}
			if aok && a > 60159 {
				t.Fatalf("quantile %d above the highest bucket", a)
			}
			if tr.Samples("d", now) != st.Samples("d", now) {
				t.Fatal("samples differ")
			}
			e := c.Epoch(now) - 1
			if len(SealedSubWindow(tr, e, now)) != len(SealedSubWindow(st, e, now)) {
				t.Fatal("sealed sub-windows differ")
			}
		}
	})
}
