package tracker

import (
	"math"
	"time"
)

// settings is what Tracker and SyncTracker derive from a valid Config.
type settings struct {
	cfg        Config
	geo        geometry
	highest    uint64 // MaxTrackableLatency in whole ms: larger samples are clamped to it
	minSamples uint64 // max(MinSamples, 1)
	subMs      int64  // sub-window length in ms
	n          int    // sub-windows in the ring
}

func newSettings(c Config) (settings, error) {
	if err := c.Validate(); err != nil {
		return settings{}, err
	}
	g, err := newGeometry(c.Layout())
	if err != nil {
		return settings{}, err
	}
	return settings{
		cfg:        c,
		geo:        g,
		highest:    uint64(c.Layout().Highest),
		minSamples: max(uint64(c.MinSamples), 1),
		subMs:      c.subWindowMillis(),
		n:          c.SubWindows,
	}, nil
}

// index returns the counts index of a latency of ms, clamped.
func (s *settings) index(ms uint64) int {
	if ms > s.highest {
		ms = s.highest
	}
	return s.geo.index(int64(ms))
}

// quantile applies MinSamples and the bucket rule to a window's sum.
func (s *settings) quantile(w *window, q float64) (uint64, bool) {
	if w.sum.total < s.minSamples {
		return 0, false
	}
	v, ok := w.sum.quantileValue(&s.geo, q)
	return uint64(v), ok
}

// localView is the quantile of w by the bucket rule, ignoring MinSamples,
// and the samples in w.
func (s *settings) localView(w *window, q float64) (uint64, uint64, bool) {
	v, ok := w.sum.quantileValue(&s.geo, q)
	return uint64(v), w.sum.total, ok
}

// durationMillis truncates d to whole milliseconds; negative is 0.
func durationMillis(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64(d / time.Millisecond)
}

// millisDuration converts ms to a Duration, saturating.
func millisDuration(ms uint64) time.Duration {
	if ms > math.MaxInt64/uint64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// sinceNonNegative is now−start, 0 if negative.
func sinceNonNegative(start, now time.Time) time.Duration {
	return max(now.Sub(start), 0)
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
func (c *epochClock) advance(now time.Time, subMs int64) int64 {
	ms := now.UnixMilli()
	if ms >= c.start && ms < c.end {
		return c.epoch
	}
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

// entry is one destination: its window plus its place in the order of
// Record calls (kept only when MaxDestinations > 0).
type entry[D comparable] struct {
	window
	key        D
	prev, next *entry[D]
	stamp      uint64    // SyncTracker: sequence number of the last Record
	hash       uint64    // SyncTracker: maphash of key
	hnext      *entry[D] // SyncTracker: next entry with the same hash
}

// lruList orders entries by their last Record, most recent first.
type lruList[D comparable] struct {
	head, tail *entry[D]
}

func (l *lruList[D]) pushFront(e *entry[D]) {
	e.prev, e.next = nil, l.head
	if l.head != nil {
		l.head.prev = e
	} else {
		l.tail = e
	}
	l.head = e
}

func (l *lruList[D]) remove(e *entry[D]) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (l *lruList[D]) moveToFront(e *entry[D]) {
	if l.head == e {
		return
	}
	l.remove(e)
	l.pushFront(e)
}
