package tracker

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// latencies returns n seeded, realistic latencies in ms: log-normal around
// 5ms with a 1% slow mode around 200ms.
func latencies(n int) []uint64 {
	r := rand.New(rand.NewPCG(42, 7))
	out := make([]uint64, n)
	for i := range out {
		if r.IntN(100) == 0 {
			out[i] = uint64(math.Exp(r.NormFloat64()*0.5 + math.Log(200)))
		} else {
			out[i] = uint64(math.Exp(r.NormFloat64()*0.6 + math.Log(5)))
		}
	}
	return out
}

const benchPerSub = 6000 // samples per sub-window: 1000/s to one destination

var benchLat = latencies(1 << 12)

// benchStart is the start of an epoch on the default grid.
var benchStart = time.UnixMilli(1_700_000_004_000)

// fullWindow records benchPerSub samples into each of the default 10
// sub-windows of dest and returns a time in the last of them.
func fullWindow(rec func(dest string, ms uint64, now time.Time), dest string) time.Time {
	return fillWindow(rec, dest, benchPerSub)
}

// fillWindow records perSub samples into each of the 10 sub-windows.
func fillWindow(rec func(dest string, ms uint64, now time.Time), dest string, perSub int) time.Time {
	now := benchStart
	k := 0
	for e := range 10 {
		now = benchStart.Add(time.Duration(e) * 6 * time.Second)
		for range perSub {
			rec(dest, benchLat[k&(len(benchLat)-1)], now)
			k++
		}
	}
	return now
}

func mustNew(b *testing.B) *Tracker[string] {
	t, err := New[string](DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	return t
}

func mustNewSync(b *testing.B) *SyncTracker[string] {
	t, err := NewSync[string](DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	return t
}

// BenchmarkRecordMillis: Tracker.RecordMillis in steady state (no rotation).
func BenchmarkRecordMillis(b *testing.B) {
	t := mustNew(b)
	now := fullWindow(t.RecordMillis, "db-1")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		t.RecordMillis("db-1", benchLat[i&(len(benchLat)-1)], now)
		i++
	}
}

// BenchmarkNaiveRecord: the naive approach's record, hdrhistogram-go's
// WindowedHistogram.Current.RecordValue, for comparison.
func BenchmarkNaiveRecord(b *testing.B) {
	w := naiveWindow()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = w.Current.RecordValue(int64(benchLat[i&(len(benchLat)-1)]))
		i++
	}
}

// BenchmarkQuantileMillis: Tracker.QuantileMillis(0.9999) over a full window
// of 10 × 6000 realistic samples.
func BenchmarkQuantileMillis(b *testing.B) {
	t := mustNew(b)
	now := fullWindow(t.RecordMillis, "db-1")
	b.ReportAllocs()
	var sink uint64
	for b.Loop() {
		v, _ := t.QuantileMillis("db-1", 0.9999, now)
		sink += v
	}
	_ = sink
}

// naiveWindow is the same full window in hdrhistogram-go's WindowedHistogram.
func naiveWindow() *hdrhistogram.WindowedHistogram {
	w := hdrhistogram.NewWindowed(10, 1, 60000, 2)
	k := 0
	for e := range 10 {
		if e > 0 {
			w.Rotate()
		}
		for range benchPerSub {
			_ = w.Current.RecordValue(int64(benchLat[k&(len(benchLat)-1)]))
			k++
		}
	}
	return w
}

// BenchmarkNaiveQuantile: the naive Go approach per query, merge the
// WindowedHistogram then ValueAtQuantile(99.99).
func BenchmarkNaiveQuantile(b *testing.B) {
	w := naiveWindow()
	b.ReportAllocs()
	var sink int64
	for b.Loop() {
		sink += w.Merge().ValueAtQuantile(99.99)
	}
	_ = sink
}

// BenchmarkQuantileVsNaive runs both quantiles in one benchmark run and
// reports the ratio naive/tracker as the metric "x-faster".
func BenchmarkQuantileVsNaive(b *testing.B) {
	t := mustNew(b)
	now := fullWindow(t.RecordMillis, "db-1")
	w := naiveWindow()
	const rounds = 200
	var sink int64
	var fast, slow time.Duration
	b.ReportAllocs()
	for b.Loop() {
		s := time.Now()
		for range rounds {
			v, _ := t.QuantileMillis("db-1", 0.9999, now)
			sink += int64(v)
		}
		m := time.Now()
		sink += w.Merge().ValueAtQuantile(99.99)
		fast += m.Sub(s)
		slow += time.Since(m)
	}
	_ = sink
	b.ReportMetric(float64(fast.Nanoseconds())/float64(b.N*rounds), "ns/quantile")
	b.ReportMetric(float64(slow.Nanoseconds())/float64(b.N), "ns/naive")
	b.ReportMetric(float64(slow.Nanoseconds())*rounds/float64(fast.Nanoseconds()), "x-faster")
}

// BenchmarkRotateRecord: every op moves to the next sub-window (sealing one,
// expiring one) and records. "1sample" has one sample per sub-window;
// "100samples" records 100 realistic samples per sub-window, so each op is
// one rotation of ~40-bucket sub-windows plus 100 records. "everybucket"
// records one sample in each of the 1259 reachable buckets, so each op (once
// the window is full of them) seals and expires a packed sub-window, the
// worst case for memory, besides its 1259 records.
func BenchmarkRotateRecord(b *testing.B) {
	for _, per := range []int{1, 100} {
		b.Run(fmt.Sprintf("%dsamples", per), func(b *testing.B) {
			t := mustNew(b)
			now := fullWindow(t.RecordMillis, "db-1")
			b.ReportAllocs()
			k := 0
			for b.Loop() {
				now = now.Add(6 * time.Second)
				for range per {
					t.RecordMillis("db-1", benchLat[k&(len(benchLat)-1)], now)
					k++
				}
			}
		})
	}
	b.Run("everybucket", func(b *testing.B) {
		g, err := newGeometry(DefaultConfig().Layout())
		if err != nil {
			b.Fatal(err)
		}
		t := mustNew(b)
		now := fullWindow(t.RecordMillis, "db-1")
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(6 * time.Second)
			for i := range int(g.highestIndex) + 1 {
				t.RecordMillis("db-1", uint64(g.lowestEquivalent(i)), now)
			}
		}
	})
}

// BenchmarkNaiveRotate: the naive window's rotation (Rotate resets a dense
// histogram) plus one record, for comparison.
func BenchmarkNaiveRotate(b *testing.B) {
	w := naiveWindow()
	b.ReportAllocs()
	k := 0
	for b.Loop() {
		w.Rotate()
		_ = w.Current.RecordValue(int64(benchLat[k&(len(benchLat)-1)]))
		k++
	}
}

// mutexTracker is the naive concurrent alternative: one mutex around a Tracker.
type mutexTracker struct {
	mu sync.Mutex
	t  *Tracker[string]
}

func (m *mutexTracker) RecordMillis(dest string, ms uint64, now time.Time) {
	m.mu.Lock()
	m.t.RecordMillis(dest, ms, now)
	m.mu.Unlock()
}

func (m *mutexTracker) QuantileMillis(dest string, q float64, now time.Time) (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.t.QuantileMillis(dest, q, now)
}

type recQuery interface {
	RecordMillis(dest string, ms uint64, now time.Time)
	QuantileMillis(dest string, q float64, now time.Time) (uint64, bool)
}

// fillParallel fills the window of each of dests (a full window when there
// is one, else 600 samples per sub-window) and returns a time in its last
// sub-window and a function that hands each parallel goroutine its
// destination, dests in turn; the timer starts afresh.
func fillParallel(b *testing.B, t recQuery, dests []string) (time.Time, func() string) {
	var now time.Time
	for _, d := range dests {
		if len(dests) == 1 {
			now = fullWindow(t.RecordMillis, d)
		} else {
			now = fillWindow(t.RecordMillis, d, 600)
		}
	}
	var id atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	return now, func() string { return dests[id.Add(1)%int64(len(dests))] }
}

// BenchmarkSync compares SyncTracker with a mutex around a Tracker:
// RecordMillis uncontended (one goroutine), in parallel on distinct
// destinations (one per goroutine) and on the same destination, and
// QuantileMillis(0.9999) on a full window, alone and in parallel.
func BenchmarkSync(b *testing.B) {
	impls := []struct {
		name string
		make func(b *testing.B) recQuery
	}{
		{"SyncTracker", func(b *testing.B) recQuery { return mustNewSync(b) }},
		{"MutexTracker", func(b *testing.B) recQuery { return &mutexTracker{t: mustNew(b)} }},
	}
	dests := make([]string, 64)
	for i := range dests {
		dests[i] = fmt.Sprintf("db-%d", i)
	}
	for _, im := range impls {
		b.Run(im.name+"/RecordMillis/uncontended", func(b *testing.B) {
			t := im.make(b)
			now := fullWindow(t.RecordMillis, "db-1")
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				t.RecordMillis("db-1", benchLat[i&(len(benchLat)-1)], now)
				i++
			}
		})
		for _, p := range []struct {
			name  string
			dests []string
		}{{"parallel-distinct", dests}, {"parallel-same", []string{"db-1"}}} {
			b.Run(im.name+"/RecordMillis/"+p.name, func(b *testing.B) {
				t := im.make(b)
				now, next := fillParallel(b, t, p.dests)
				b.RunParallel(func(pb *testing.PB) {
					d := next()
					i := 0
					for pb.Next() {
						t.RecordMillis(d, benchLat[i&(len(benchLat)-1)], now)
						i++
					}
				})
			})
		}
		b.Run(im.name+"/QuantileMillis/uncontended", func(b *testing.B) {
			t := im.make(b)
			now := fullWindow(t.RecordMillis, "db-1")
			b.ReportAllocs()
			for b.Loop() {
				t.QuantileMillis("db-1", 0.9999, now)
			}
		})
		b.Run(im.name+"/QuantileMillis/parallel-distinct", func(b *testing.B) {
			t := im.make(b)
			now, next := fillParallel(b, t, dests)
			b.RunParallel(func(pb *testing.PB) {
				d := next()
				for pb.Next() {
					t.QuantileMillis(d, 0.9999, now)
				}
			})
		})
	}
}
