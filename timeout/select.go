package timeout

import (
	"slices"
	"time"
)

// Estimator gives a latency quantile per destination. tracker.Tracker,
// tracker.SyncTracker and the fleet view satisfy it.
//
// QuantileMillis returns the q-quantile (0 < q <= 1) of the latency to dest
// observed in the window that now falls in, in whole milliseconds, and false
// when there is not enough data for an estimate (the value is then ignored).
// Select calls it once per destination and does not keep dest.
type Estimator[D comparable] interface {
	QuantileMillis(dest D, q float64, now time.Time) (uint64, bool)
}

// Recorder takes an observed latency per destination, in whole milliseconds.
// tracker.Tracker and tracker.SyncTracker satisfy it. (The transport
// adapters learn through a Policy instead.)
type Recorder[D comparable] interface {
	RecordMillis(dest D, ms uint64, now time.Time)
}

// Decision is a selected timeout with its reason.
type Decision struct {
	// Timeout is the selected timeout (what Select returns).
	Timeout time.Duration
	// DecidedBy is the index in dests of the first destination whose clamped
	// value equals Timeout, or -1 when Fallback is true.
	DecidedBy int
	// Fallback is true when no destination's clamped value exceeds the
	// exponential fallback (including when none has data), so Timeout is the
	// fallback.
	Fallback bool
}

// clampedMillis is one destination's adaptive timeout:
// clamp(trunc(safety·float64(v·2^k)), floor, ceiling) with a saturating
// multiply, a saturating float→uint64 cast (NaN or negative → 0) and the
// floor applied before the ceiling.
func clampedMillis(v uint64, k uint, safety float64, floor, ceiling uint64) uint64 {
	t := saturatingUint64(safety * float64(saturatingShift(v, k)))
	if t < floor {
		t = floor
	}
	if t > ceiling {
		t = ceiling
	}
	return t
}

// explain is the one loop behind Explain, Select and SelectMillis.
func explain[D comparable](c Config, e Estimator[D], dests []D, attempt int, now time.Time) (ms uint64, decidedBy int) {
	floor, ceiling := millis(c.Backoff.Min), millis(c.Backoff.Max)
	k := exponent(attempt)
	ms, decidedBy = fallbackMillis(floor, ceiling, k), -1
	for i, d := range dests {
		v, ok := e.QuantileMillis(d, c.Quantile, now)
		if !ok {
			continue
		}
		if t := clampedMillis(v, k, c.SafetyFactor, floor, ceiling); t > ms {
			ms, decidedBy = t, i
		}
	}
	return ms, decidedBy
}

// SelectMillis returns the timeout in milliseconds for a request that must
// hear from every destination in dests, on the given attempt (1 is the
// first; anything below 1 counts as 1):
//
//	m        = 2^min(max(attempt−1, 0), 20)
//	fallback = min(floor·m, ceiling)
//	result   = max(fallback, max over dests with an estimate v of
//	               clamp(trunc(SafetyFactor·float64(v·m)), floor, ceiling))
//
// where floor and ceiling are c.Backoff's Min and Max in ms, v is
// e.QuantileMillis(dest, c.Quantile, now), v·m saturates at 2^64−1, the
// float→uint64 conversion saturates (NaN or negative → 0) and the clamp
// applies the floor first, then the ceiling. With no destinations (or none
// with an estimate) it is the fallback. It does not allocate.
func SelectMillis[D comparable](c Config, e Estimator[D], dests []D, attempt int, now time.Time) uint64 {
	ms, _ := explain(c, e, dests, attempt, now)
	return ms
}

// Select is SelectMillis as a time.Duration.
func Select[D comparable](c Config, e Estimator[D], dests []D, attempt int, now time.Time) time.Duration {
	ms, _ := explain(c, e, dests, attempt, now)
	return fromMillis(ms)
}

// Explain is Select with its reason: which destination decided the timeout,
// or whether the exponential fallback did.
func Explain[D comparable](c Config, e Estimator[D], dests []D, attempt int, now time.Time) Decision {
	ms, by := explain(c, e, dests, attempt, now)
	return Decision{Timeout: fromMillis(ms), DecidedBy: by, Fallback: by < 0}
}

// quorumStack is how many destinations SelectQuorum handles without
// allocating.
const quorumStack = 64

// quorum fills own with each destination's own timeout and returns the
// need-th smallest.
func quorum[D comparable](c Config, e Estimator[D], dests []D, need, attempt int, now time.Time, own, sorted []uint64) (ms, fallback uint64) {
	floor, ceiling := millis(c.Backoff.Min), millis(c.Backoff.Max)
	k := exponent(attempt)
	fallback = fallbackMillis(floor, ceiling, k)
	if len(dests) == 0 {
		return fallback, fallback
	}
	for i, d := range dests {
		t := fallback
		if v, ok := e.QuantileMillis(d, c.Quantile, now); ok {
			t = max(fallback, clampedMillis(v, k, c.SafetyFactor, floor, ceiling))
		}
		own[i] = t
	}
	copy(sorted, own)
	slices.Sort(sorted)
	need = min(max(need, 1), len(dests))
	return sorted[need-1], fallback
}

// buffers returns two slices of length n, on the caller's stack arrays when
// n fits.
func buffers(n int, a, b *[quorumStack]uint64) (own, sorted []uint64) {
	if n <= quorumStack {
		return a[:n], b[:n]
	}
	return make([]uint64, n), make([]uint64, n)
}

// SelectQuorum returns the timeout for a request that needs answers from only
// need of dests (a write to 3 replicas that succeeds on 2 must not wait for
// the slowest). Each destination gets its own timeout, max(fallback, clamp(...))
// as in SelectMillis when it has an estimate and the fallback when not, and
// the result is the need-th smallest of them; need is clamped to
// 1..len(dests). With need == len(dests) it equals Select; with no
// destinations it is the fallback. It allocates only for more than 64
// destinations.
func SelectQuorum[D comparable](c Config, e Estimator[D], dests []D, need, attempt int, now time.Time) time.Duration {
	var a, b [quorumStack]uint64
	own, sorted := buffers(len(dests), &a, &b)
	ms, _ := quorum(c, e, dests, need, attempt, now, own, sorted)
	return fromMillis(ms)
}

// ExplainQuorum is SelectQuorum with its reason. Fallback is true when the
// result equals the exponential fallback (DecidedBy is then -1); otherwise
// DecidedBy is the index of the first destination whose own timeout equals
// the result. With need == len(dests) it equals Explain.
func ExplainQuorum[D comparable](c Config, e Estimator[D], dests []D, need, attempt int, now time.Time) Decision {
	var a, b [quorumStack]uint64
	own, sorted := buffers(len(dests), &a, &b)
	ms, fallback := quorum(c, e, dests, need, attempt, now, own, sorted)
	d := Decision{Timeout: fromMillis(ms), DecidedBy: -1, Fallback: ms == fallback}
	if !d.Fallback {
		d.DecidedBy = slices.Index(own, ms)
	}
	return d
}
