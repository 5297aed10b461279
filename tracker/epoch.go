package tracker

import (
	"math"
	"time"
)

// The epoch grid's arithmetic, used by the trackers, their windows and the
// fleet: epoch e covers [e·S, (e+1)·S) of Unix milliseconds.

// floorDiv divides rounding toward negative infinity; d must be > 0.
func floorDiv(n, d int64) int64 {
	if d <= 0 {
		return 0
	}
	q := n / d
	if n%d != 0 && n < 0 {
		q--
	}
	return q
}

// floorMod is n mod d in [0, d), rounding the quotient toward negative
// infinity, so consecutive epochs take consecutive ring slots across zero
// too; d must be > 0.
func floorMod(n, d int64) int64 {
	m := n % d
	if m < 0 {
		m += d
	}
	return m
}

// epochClock turns wall-clock times into epochs that never go backwards: the
// current epoch is the highest epoch seen so far. It caches the current
// epoch's bounds so the common case costs two comparisons, no division.
type epochClock struct {
	epoch      int64 // math.MinInt64 until the first call
	start, end int64 // ms bounds of epoch; start > end until the first call
}

func newEpochClock() epochClock {
	return epochClock{epoch: math.MinInt64, start: 1, end: 0}
}

// advance returns max(current epoch, epoch of now) and makes it current.
// The common case, now in the current epoch, is small enough to inline into
// the trackers' record and query paths; the rest is moveTo.
func (c *epochClock) advance(now time.Time, subMs int64) int64 {
	return c.advanceMillis(now.UnixMilli(), subMs)
}

// advanceMillis is advance with now in Unix milliseconds.
func (c *epochClock) advanceMillis(ms, subMs int64) int64 {
	if ms >= c.start && ms < c.end {
		return c.epoch
	}
	return c.moveTo(ms, subMs)
}

// moveTo is advance for a time ms outside the current epoch's bounds.
func (c *epochClock) moveTo(ms, subMs int64) int64 {
	e := floorDiv(ms, subMs)
	if e > c.epoch {
		c.epoch = e
		c.start, c.end = epochBounds(e, subMs)
	}
	return c.epoch
}

// epochBounds returns [start, end) of epoch e in ms. For epochs at the edges
// of int64 it returns an empty range, which only disables the fast path.
func epochBounds(e, subMs int64) (start, end int64) {
	if e > math.MaxInt64/subMs || e < math.MinInt64/subMs {
		return 1, 0
	}
	start = e * subMs
	if start > math.MaxInt64-subMs {
		return 1, 0
	}
	return start, start + subMs
}
