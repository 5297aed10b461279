package timeout

import (
	"math"
	"slices"
	"strconv"
	"testing"
	"time"
)

var attempts = [8]int{1, 2, 3, 1, 5, 1, 30, 0}

func BenchmarkExponentialBackoffMillis(b *testing.B) {
	c := DefaultConfig()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = c.ExponentialBackoffMillis(attempts[i&7])
		i++
	}
}

// naiveExponentialBackoff is the obvious float version: math.Pow on
// durations. Beside the real one to show what integer shifts buy.
func naiveExponentialBackoff(c Config, attempt int) time.Duration {
	a := math.Min(math.Max(float64(attempt-1), 0), 20)
	d := time.Duration(float64(c.Backoff.Min) * math.Pow(2, a))
	return min(d, c.Backoff.Max)
}

func BenchmarkExponentialBackoffNaive(b *testing.B) {
	c := DefaultConfig()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = naiveExponentialBackoff(c, attempts[i&7])
		i++
	}
}

// naiveSelect is Select written the obvious way: durations and floats,
// math.Pow, and every candidate collected into a slice before taking the max.
func naiveSelect(c Config, e Estimator[string], dests []string, attempt int, now time.Time) time.Duration {
	mult := math.Pow(2, math.Min(math.Max(float64(attempt-1), 0), 20))
	fallback := min(time.Duration(float64(c.Backoff.Min)*mult), c.Backoff.Max)
	candidates := make([]time.Duration, 0, len(dests)+1)
	candidates = append(candidates, fallback)
	for _, d := range dests {
		v, ok := e.QuantileMillis(d, c.Quantile, now)
		if !ok {
			continue
		}
		t := time.Duration(c.SafetyFactor * float64(time.Duration(v)*time.Millisecond) * mult)
		candidates = append(candidates, min(max(t, c.Backoff.Min), c.Backoff.Max))
	}
	return slices.Max(candidates)
}

// spread estimates 1000+i ms for destination "d<i>": every destination is on
// the adaptive path (above the 250 ms floor), the estimator itself costs an
// array index.
type spread []uint64

func (s spread) QuantileMillis(dest string, _ float64, _ time.Time) (uint64, bool) {
	i, err := strconv.Atoi(dest[1:])
	if err != nil || i >= len(s) {
		return 0, false
	}
	return s[i], true
}

// constEst is the cheapest possible Estimator, so the benchmark measures
// Select itself.
type constEst uint64

func (v constEst) QuantileMillis(string, float64, time.Time) (uint64, bool) { return uint64(v), true }

func benchDests(n int) []string {
	d := make([]string, n)
	for i := range d {
		d[i] = "d" + strconv.Itoa(i)
	}
	return d
}

func BenchmarkSelectMillis(b *testing.B) {
	c := DefaultConfig()
	now := time.Unix(1_700_000_000, 0)
	for _, n := range []int{1, 10} {
		dests := benchDests(n)
		var est Estimator[string] = constEst(1500) // 2·1500ms: adaptive path
		b.Run("dests="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_ = SelectMillis(c, est, dests, attempts[i&3], now)
				i++
			}
		})
		b.Run("dests="+strconv.Itoa(n)+"/naive", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_ = naiveSelect(c, est, dests, attempts[i&3], now)
				i++
			}
		})
	}
}

// spread3 is what the quorum and Explain benchmarks decide over: the
// defaults, three destinations estimated at 1, 3 and 2 s, and a time.
func spread3() (Config, time.Time, []string, Estimator[string]) {
	return DefaultConfig(), time.Unix(1_700_000_000, 0), benchDests(3), spread{1000, 3000, 2000}
}

func BenchmarkSelectQuorum(b *testing.B) {
	c, now, dests, est := spread3()
	b.ReportAllocs()
	for b.Loop() {
		_ = SelectQuorum(c, est, dests, 2, 1, now)
	}
}

func BenchmarkExplain(b *testing.B) {
	c, now, dests, est := spread3()
	b.ReportAllocs()
	for b.Loop() {
		_ = Explain(c, est, dests, 1, now)
	}
}

func BenchmarkParseBackoffInterval(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_, _ = ParseBackoffInterval("250ms..1m")
	}
}

// TestNaiveSelectAgrees keeps the baselines honest: on ordinary inputs they
// compute the same values as the real functions.
func TestNaiveSelectAgrees(t *testing.T) {
	c := DefaultConfig()
	dests := benchDests(4)
	est := spread{100, 1500, 20_000, 700}
	for attempt := -1; attempt < 25; attempt++ {
		if got, want := naiveSelect(c, est, dests, attempt, time.Time{}), Select(c, est, dests, attempt, time.Time{}); got != want {
			t.Fatalf("attempt %d: naive %v, Select %v", attempt, got, want)
		}
		if got, want := naiveExponentialBackoff(c, attempt), c.ExponentialBackoff(attempt); got != want {
			t.Fatalf("attempt %d: naive %v, ExponentialBackoff %v", attempt, got, want)
		}
	}
}
