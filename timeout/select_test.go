package timeout

import (
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// estimates is a fake Estimator: a destination missing from the map has no
// data. It records the last quantile and time it was asked with.
type estimates struct {
	v     map[string]uint64
	lastQ float64
	lastT time.Time
	calls int
}

func newEstimates(v map[string]uint64) *estimates { return &estimates{v: v} }

func (e *estimates) QuantileMillis(dest string, q float64, now time.Time) (uint64, bool) {
	e.lastQ, e.lastT = q, now
	e.calls++
	v, ok := e.v[dest]
	return v, ok
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func cfg(minMS, maxMS int64, safety float64) Config {
	return Config{
		Backoff:      BackoffInterval{Min: ms(minMS), Max: ms(maxMS)},
		Quantile:     0.9999,
		SafetyFactor: safety,
	}
}

func TestSelectRules(t *testing.T) {
	def := DefaultConfig() // 250ms..1m, safety 2
	tests := []struct {
		name    string
		c       Config
		est     map[string]uint64
		dests   []string
		attempt int
		want    uint64
		by      int // Explain's DecidedBy; -1 = fallback
	}{
		{"no dests", def, nil, nil, 1, 250, -1},
		{"no dests, attempt 3", def, nil, nil, 3, 1000, -1},
		{"no data", def, map[string]uint64{}, []string{"a", "b"}, 1, 250, -1},
		{"adaptive", def, map[string]uint64{"a": 1000}, []string{"a"}, 1, 2000, 0},
		{"adaptive, attempt 0 is the first", def, map[string]uint64{"a": 1000}, []string{"a"}, 0, 2000, 0},
		{"adaptive, attempt -7 is the first", def, map[string]uint64{"a": 1000}, []string{"a"}, -7, 2000, 0},
		{"adaptive doubles per attempt", def, map[string]uint64{"a": 1000}, []string{"a"}, 3, 8000, 0},
		{"floor", def, map[string]uint64{"a": 10}, []string{"a"}, 1, 250, -1},
		{"zero estimate", def, map[string]uint64{"a": 0}, []string{"a"}, 1, 250, -1},
		{"ceiling", def, map[string]uint64{"a": 40_000}, []string{"a"}, 1, 60_000, 0},
		{"equal to fallback is fallback", def, map[string]uint64{"a": 125}, []string{"a"}, 1, 250, -1},
		{"one above fallback", def, map[string]uint64{"a": 126}, []string{"a"}, 1, 252, 0},
		{"fallback is a lower bound", def, map[string]uint64{"a": 200}, []string{"a"}, 3, 1600, 0},
		{"fallback beats adaptive", def, map[string]uint64{"a": 100}, []string{"a"}, 3, 1000, -1},
		{"max over dests", def, map[string]uint64{"a": 200, "b": 900, "c": 300}, []string{"a", "b", "c"}, 1, 1800, 1},
		{"missing dests ignored", def, map[string]uint64{"b": 900}, []string{"a", "b", "c"}, 1, 1800, 1},
		{"first of equals decides", def, map[string]uint64{"a": 200, "b": 900, "c": 900}, []string{"a", "c", "b"}, 1, 1800, 1},
		{"equal after clamp", def, map[string]uint64{"a": 40_000, "b": 90_000}, []string{"a", "b"}, 1, 60_000, 0},
		{"duplicate dests", def, map[string]uint64{"a": 500}, []string{"a", "a"}, 1, 1000, 0},
		{"trunc", cfg(1, 60_000, 1.5), map[string]uint64{"a": 333}, []string{"a"}, 1, 499, 0},
		{"trunc after doubling", cfg(1, 60_000, 1.5), map[string]uint64{"a": 333}, []string{"a"}, 2, 999, 0},
		{"safety < 1", cfg(1, 60_000, 0.5), map[string]uint64{"a": 333}, []string{"a"}, 1, 166, 0},
		{"exponent capped at 20", cfg(1, MaxBackoffMillis, 1), map[string]uint64{"a": 3}, []string{"a"}, 30, 3 << 20, 0},
		{"saturating multiply", cfg(1, MaxBackoffMillis, 1), map[string]uint64{"a": math.MaxUint64 / 2}, []string{"a"}, 3, MaxBackoffMillis, 0},
		{"max estimate", def, map[string]uint64{"a": math.MaxUint64}, []string{"a"}, 1, 60_000, 0},
		{"safety +Inf saturates", cfg(1, 1000, math.Inf(1)), map[string]uint64{"a": 1}, []string{"a"}, 1, 1000, 0},
		{"safety +Inf times 0 is NaN → 0", cfg(1, 1000, math.Inf(1)), map[string]uint64{"a": 0}, []string{"a"}, 1, 1, -1},
		{"safety NaN → 0", cfg(5, 1000, math.NaN()), map[string]uint64{"a": 100}, []string{"a"}, 1, 5, -1},
		{"safety negative → 0", cfg(5, 1000, -3), map[string]uint64{"a": 100}, []string{"a"}, 1, 5, -1},
		{"inverted: floor then ceiling", cfg(10, 5, 2), map[string]uint64{"a": 1}, []string{"a"}, 1, 5, -1},
		{"inverted, high estimate", cfg(10, 5, 2), map[string]uint64{"a": 100}, []string{"a"}, 1, 5, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEstimates(tt.est)
			require.Equal(t, tt.want, SelectMillis(tt.c, e, tt.dests, tt.attempt, t0))
			require.Equal(t, ms(int64(tt.want)), Select(tt.c, e, tt.dests, tt.attempt, t0))
			require.Equal(t, Decision{Timeout: ms(int64(tt.want)), DecidedBy: tt.by, Fallback: tt.by < 0},
				Explain(tt.c, e, tt.dests, tt.attempt, t0))
			require.Equal(t, ms(int64(tt.want)), SelectQuorum(tt.c, e, tt.dests, len(tt.dests), tt.attempt, t0))
			require.Equal(t, Decision{Timeout: ms(int64(tt.want)), DecidedBy: tt.by, Fallback: tt.by < 0},
				ExplainQuorum(tt.c, e, tt.dests, len(tt.dests), tt.attempt, t0))
		})
	}
}

func TestSelectPassesQuantileAndTime(t *testing.T) {
	c := DefaultConfig()
	c.Quantile = 0.99
	e := newEstimates(map[string]uint64{"a": 1})
	Select(c, e, []string{"a", "b", "c"}, 1, t0)
	require.Equal(t, 3, e.calls, "one query per destination")
	require.Equal(t, 0.99, e.lastQ)
	require.Equal(t, t0, e.lastT)
}

func TestSelectQuorum(t *testing.T) {
	def := DefaultConfig()
	est := map[string]uint64{"fast": 100, "mid": 1000, "slow": 20_000}
	dests := []string{"slow", "fast", "nodata", "mid"} // own timeouts 40000, 250, 250, 2000
	tests := []struct {
		name          string
		dests         []string
		need, attempt int
		want          uint64
		by            int
	}{
		{"need 1", dests, 1, 1, 250, -1},
		{"need 0 is 1", dests, 0, 1, 250, -1},
		{"need -5 is 1", dests, -5, 1, 250, -1},
		{"need 2", dests, 2, 1, 250, -1},
		{"need 3", dests, 3, 1, 2000, 3},
		{"need 4 = Select", dests, 4, 1, 40_000, 0},
		{"need 9 is len", dests, 9, 1, 40_000, 0},
		{"attempt 2 raises the fallback", dests, 2, 2, 500, -1},
		{"attempt 2, need 3", dests, 3, 2, 4000, 3},
		{"no dests", nil, 2, 3, 1000, -1},
		{"two of three replicas", []string{"slow", "mid", "fast"}, 2, 1, 2000, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEstimates(est)
			require.Equal(t, ms(int64(tt.want)), SelectQuorum(def, e, tt.dests, tt.need, tt.attempt, t0))
			require.Equal(t, Decision{Timeout: ms(int64(tt.want)), DecidedBy: tt.by, Fallback: tt.by < 0},
				ExplainQuorum(def, e, tt.dests, tt.need, tt.attempt, t0))
		})
	}
}

// Over 64 destinations SelectQuorum uses heap buffers; the answer is the same.
func TestSelectQuorumManyDests(t *testing.T) {
	est := map[string]uint64{}
	var dests []string
	for i := range 200 {
		d := string(rune('A' + i))
		dests = append(dests, d)
		est[d] = uint64(1000 + (i*7919)%200) // distinct, shuffled
	}
	e := newEstimates(est)
	c := cfg(1, 1_000_000, 1)
	require.Equal(t, ms(1000), SelectQuorum(c, e, dests, 1, 1, t0))
	require.Equal(t, ms(1099), SelectQuorum(c, e, dests, 100, 1, t0))
	require.Equal(t, Select(c, e, dests, 1, t0), SelectQuorum(c, e, dests, 200, 1, t0))
	d := ExplainQuorum(c, e, dests, 100, 1, t0)
	require.Equal(t, uint64(1099), est[dests[d.DecidedBy]])
}

// refOwn is the reference for one destination's clamped value, computed with
// math/big instead of shifts and float casts.
func refClamp(c Config, v uint64, attempt int) uint64 {
	k := max(attempt-1, 0)
	k = min(k, 20)
	prod := new(big.Int).Lsh(new(big.Int).SetUint64(v), uint(k))
	maxU := new(big.Int).SetUint64(math.MaxUint64)
	if prod.Cmp(maxU) > 0 {
		prod = maxU
	}
	pf, _ := new(big.Float).SetInt(prod).Float64() // nearest, like Go's uint64→float64
	x := c.SafetyFactor * pf
	var a uint64
	switch {
	case math.IsNaN(x) || x < 0:
		a = 0
	default:
		a, _ = big.NewFloat(x).Uint64() // truncates, saturates at 2^64−1
	}
	floor, ceiling := uint64(c.Backoff.Min/time.Millisecond), uint64(c.Backoff.Max/time.Millisecond)
	return min(max(a, floor), ceiling)
}

func refFallback(c Config, attempt int) uint64 {
	k := min(max(attempt-1, 0), 20)
	floor := new(big.Int).SetUint64(uint64(c.Backoff.Min / time.Millisecond))
	f := new(big.Int).Lsh(floor, uint(k))
	ceiling := new(big.Int).SetUint64(uint64(c.Backoff.Max / time.Millisecond))
	if f.Cmp(ceiling) > 0 {
		return ceiling.Uint64()
	}
	return f.Uint64()
}

// TestSelectMatchesReference checks Select, Explain, SelectQuorum and
// ExplainQuorum against a literal big-number reading of the formula, over
// seeded random configs, estimates and attempts.
func TestSelectMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 5))
	safeties := []float64{2, 1, 0.5, 1.5, 3.7, 1e-300, 1e300, math.Inf(1), math.NaN(), -1, 0}
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for i := range 20_000 {
		floor := 1 + rng.Int64N(MaxBackoffMillis)
		if rng.IntN(2) == 0 {
			floor = 1 + rng.Int64N(1000)
		}
		ceiling := floor + rng.Int64N(MaxBackoffMillis-floor+1)
		if rng.IntN(20) == 0 { // some inverted configs too
			ceiling = 1 + rng.Int64N(floor)
		}
		c := cfg(floor, ceiling, safeties[rng.IntN(len(safeties))])
		if rng.IntN(2) == 0 {
			c.SafetyFactor = rng.Float64() * 4
		}
		est := map[string]uint64{}
		dests := names[:rng.IntN(len(names)+1)]
		for _, d := range dests {
			switch rng.IntN(6) {
			case 0: // no data
			case 1:
				est[d] = rng.Uint64()
			case 2:
				est[d] = uint64(floor) + rng.Uint64N(3)
			default:
				est[d] = rng.Uint64N(uint64(ceiling) + 1)
			}
		}
		attempt := rng.IntN(30) - 3
		e := newEstimates(est)

		fb := refFallback(c, attempt)
		own := make([]uint64, len(dests))
		want, by := fb, -1
		for j, d := range dests {
			own[j] = fb
			if v, ok := est[d]; ok {
				cl := refClamp(c, v, attempt)
				own[j] = max(fb, cl)
				if cl > want {
					want, by = cl, j
				}
			}
		}
		require.Equal(t, want, SelectMillis(c, e, dests, attempt, t0), "case %d", i)
		require.Equal(t, Decision{ms(int64(want)), by, by < 0}, Explain(c, e, dests, attempt, t0), "case %d", i)
		require.Equal(t, fb, c.ExponentialBackoffMillis(attempt), "case %d", i)

		need := rng.IntN(len(dests)+3) - 1
		n := min(max(need, 1), max(len(dests), 1))
		sorted := slices.Sorted(slices.Values(own))
		wantQ := fb
		if len(dests) > 0 {
			wantQ = sorted[n-1]
		}
		require.Equal(t, ms(int64(wantQ)), SelectQuorum(c, e, dests, need, attempt, t0), "case %d", i)
		dq := ExplainQuorum(c, e, dests, need, attempt, t0)
		require.Equal(t, ms(int64(wantQ)), dq.Timeout)
		require.Equal(t, wantQ == fb, dq.Fallback)
		if !dq.Fallback {
			require.Equal(t, slices.Index(own, wantQ), dq.DecidedBy)
		} else {
			require.Equal(t, -1, dq.DecidedBy)
		}
		require.Equal(t, Explain(c, e, dests, attempt, t0), ExplainQuorum(c, e, dests, len(dests), attempt, t0))
	}
}

func TestSelectDoesNotAllocate(t *testing.T) {
	c := DefaultConfig()
	var e Estimator[string] = constEstimator(1000)
	dests := []string{"a", "b", "c"}
	many := make([]string, 64)
	allocs := testing.AllocsPerRun(100, func() {
		_ = Select(c, e, dests, 2, t0)
		_ = SelectMillis(c, e, dests, 2, t0)
		_ = Explain(c, e, dests, 2, t0)
		_ = SelectQuorum(c, e, many, 2, 2, t0)
		_ = ExplainQuorum(c, e, many, 2, 2, t0)
	})
	require.Zero(t, allocs)
}

// constEstimator estimates the same value for every destination.
type constEstimator uint64

func (v constEstimator) QuantileMillis(string, float64, time.Time) (uint64, bool) {
	return uint64(v), true
}
