package tracker

import (
	"math"
	"reflect"
	"testing"
	"time"
)

// FuzzTrackers feeds arbitrary latencies, times, quantiles and timed-out
// attempts to both trackers: nothing may panic, both must answer alike
// (quantiles, sealed sub-windows with their censored counts, the local
// estimate and its decision input), an answer must obey the bucket rule's
// bounds, and censored samples never exceed samples.
func FuzzTrackers(f *testing.F) {
	f.Add(uint64(5), int64(-3), 0.5, int64(0), int64(6000), uint8(10), uint8(0))
	f.Add(uint64(math.MaxUint64), int64(math.MinInt64), math.NaN(), int64(math.MinInt64), int64(math.MaxInt64), uint8(1), uint8(3))
	f.Add(uint64(0), int64(math.MaxInt64), math.Inf(1), int64(math.MaxInt64), int64(math.MinInt64), uint8(255), uint8(1))
	f.Add(uint64(60000), int64(1), -1.0, int64(-1), int64(-60001), uint8(3), uint8(2))
	f.Add(uint64(1000), int64(999999), 0.0, int64(1_700_000_000_000), int64(1_700_000_060_000), uint8(0), uint8(7))
	f.Add(uint64(250), int64(250_000_000), 0.99, int64(1_700_000_000_000), int64(1_700_000_001_000), uint8(10), uint8(3))
	f.Fuzz(func(t *testing.T, ms uint64, latency int64, q float64, t1, t2 int64, subs uint8, timedOut uint8) {
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
			if timedOut&1 != 0 {
				tr.RecordTimeoutMillis("d", ms, now)
				st.RecordTimeoutMillis("d", ms, now)
			} else {
				tr.RecordMillis("d", ms, now)
				st.RecordMillis("d", ms, now)
			}
			if timedOut&2 != 0 {
				tr.RecordTimeout("d", time.Duration(latency), now)
				st.RecordTimeout("d", time.Duration(latency), now)
			} else {
				tr.Record("d", time.Duration(latency), now)
				st.Record("d", time.Duration(latency), now)
			}
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
			if !reflect.DeepEqual(SealedSubWindow(tr, e, now), SealedSubWindow(st, e, now)) {
				t.Fatal("sealed sub-windows differ")
			}
			la, aerr := LocalEstimate(tr, "d", q, now)
			lb, berr := LocalEstimate(st, "d", q, now)
			la.Quantile, lb.Quantile = 0, 0 // NaN != NaN
			if (aerr == nil) != (berr == nil) || la != lb {
				t.Fatalf("local estimates differ: %+v, %+v", la, lb)
			}
			if aerr == nil && la.LocalCensored > la.LocalSamples {
				t.Fatalf("%d censored of %d samples", la.LocalCensored, la.LocalSamples)
			}
			if v, ok := la.DecisionValue(); ok && v > la.ValueMillis {
				t.Fatalf("decision value %d above the quantile %d", v, la.ValueMillis)
			}
		}
	})
}
