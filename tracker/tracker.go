package tracker

import "time"

// Tracker keeps, per destination, a sliding window of latency histograms
// and answers quantiles of it. It is not safe for concurrent use; use
// SyncTracker for that. Create one with New: the zero value is not usable.
//
// Time is an argument of every method. The tracker's current epoch is the
// highest epoch (Config.Epoch) of any time passed so far: a time earlier than
// that rotates nothing, and a sample recorded with it goes into the current
// sub-window.
type Tracker[D comparable] struct {
	s       settings
	clock   epochClock
	dests   map[D]*entry[D]
	lru     list[*entry[D]] // most recently recorded first; only when MaxDestinations > 0
	evicted uint64          // destinations dropped by MaxDestinations
}

// New returns an empty Tracker, or Config.Validate's error.
func New[D comparable](c Config) (*Tracker[D], error) {
	s, err := newSettings(c)
	if err != nil {
		return nil, err
	}
	return &Tracker[D]{s: s, clock: newEpochClock(), dests: make(map[D]*entry[D])}, nil
}

// Record records a latency to dest at now: truncated to whole milliseconds,
// 0 if negative, clamped to MaxTrackableLatency.
func (t *Tracker[D]) Record(dest D, latency time.Duration, now time.Time) {
	t.RecordMillis(dest, durationMillis(latency), now)
}

// RecordMillis records a latency of ms milliseconds to dest at now, clamped
// to MaxTrackableLatency. It creates dest on its first call and, when
// MaxDestinations is reached, first evicts a destination (see
// Config.MaxDestinations).
func (t *Tracker[D]) RecordMillis(dest D, ms uint64, now time.Time) {
	// entryFor's body, by hand: the call costs a plain record ~5 %.
	e := t.clock.advanceMillis(now.UnixMilli(), t.s.subMs)
	en := t.dests[dest]
	if en == nil {
		en = t.create(dest, e)
	} else {
		if t.s.cfg.MaxDestinations > 0 {
			t.lru.moveToFront(&en.recency)
		}
		en.rotate(e)
	}
	en.record(t.s.index(ms))
}

// RecordTimeout records a timed-out attempt to dest at now: a sample at its
// timeout, exactly as Record(dest, timeout, now) (so quantiles are
// unchanged), also counted as censored in its bucket: the attempt's
// latency was at least that.
func (t *Tracker[D]) RecordTimeout(dest D, timeout time.Duration, now time.Time) {
	t.RecordTimeoutMillis(dest, durationMillis(timeout), now)
}

// RecordTimeoutMillis is RecordTimeout with the timeout in milliseconds,
// clamped to MaxTrackableLatency.
func (t *Tracker[D]) RecordTimeoutMillis(dest D, ms uint64, now time.Time) {
	t.entryFor(dest, now).recordTimeout(t.s.index(ms))
}

// entryFor rotates to now and returns dest's rotated entry, made most
// recently recorded; it creates dest when unknown.
func (t *Tracker[D]) entryFor(dest D, now time.Time) *entry[D] {
	e := t.clock.advanceMillis(now.UnixMilli(), t.s.subMs)
	en := t.dests[dest]
	if en == nil {
		return t.create(dest, e)
	}
	if t.s.cfg.MaxDestinations > 0 {
		t.lru.moveToFront(&en.recency)
	}
	en.rotate(e)
	return en
}

// create adds dest at epoch e, first evicting a destination when
// MaxDestinations is reached (its storage is reused).
func (t *Tracker[D]) create(dest D, e int64) *entry[D] {
	var en *entry[D]
	if m := t.s.cfg.MaxDestinations; m > 0 && len(t.dests) >= m {
		en = t.victim(e)
		t.lru.remove(&en.recency)
		delete(t.dests, en.key)
		t.evicted++
		en.clear(e)
		en.key, en.ec = dest, nil // (a Tracker's entries have no cache; a reused one keeps none)
	} else {
		en = newEntry(&t.s.geo, t.s.n, e, dest)
	}
	t.dests[dest] = en
	if t.s.cfg.MaxDestinations > 0 {
		t.lru.pushFront(&en.recency)
	}
	return en
}

// victim chooses the destination to evict at epoch e, by the rule of
// Config.MaxDestinations: among the evictionCandidates least recently
// recorded, the one with the fewest samples in the window (ties: the least
// recently recorded); the candidates with more samples than it move to the
// front, in the order they were examined. The list must not be empty.
func (t *Tracker[D]) victim(e int64) *entry[D] {
	var cands [evictionCandidates]*entry[D]
	k := 0
	var v *entry[D]
	for n := t.lru.tail; n != nil && k < evictionCandidates; n = n.prev {
		en := n.v
		en.rotate(e)
		cands[k] = en
		k++
		if v == nil || en.sum.total < v.sum.total {
			v = en
		}
	}
	for _, en := range cands[:k] {
		if en.sum.total > v.sum.total {
			t.lru.moveToFront(&en.recency)
		}
	}
	return v
}

// RecordSince records now−start (0 if negative) to dest at now, as Record
// does, and returns it untruncated.
func (t *Tracker[D]) RecordSince(dest D, start, now time.Time) time.Duration {
	d := sinceNonNegative(start, now)
	t.Record(dest, d, now)
	return d
}

// lookup rotates to now and returns dest's rotated entry, or nil. It never
// creates a destination nor refreshes its place in the eviction order.
func (t *Tracker[D]) lookup(dest D, now time.Time) *entry[D] {
	e := t.clock.advanceMillis(now.UnixMilli(), t.s.subMs)
	en := t.dests[dest]
	if en != nil {
		en.rotate(e)
	}
	return en
}

// Quantile is QuantileMillis as a Duration.
func (t *Tracker[D]) Quantile(dest D, q float64, now time.Time) (time.Duration, bool) {
	ms, ok := t.QuantileMillis(dest, q, now)
	return millisDuration(ms), ok
}

// QuantileMillis returns quantile q of dest's window at now in milliseconds,
// or 0, false when the window holds fewer than max(MinSamples, 1) samples.
// q > 1 is 1; the rank is ceil(q·samples), at least 1 (so a NaN or negative
// q is the minimum's bucket); the answer is the highest value equivalent to
// the bucket at which the cumulative count reaches the rank, except that
// q == 0 gives the lowest equivalent value.
func (t *Tracker[D]) QuantileMillis(dest D, q float64, now time.Time) (uint64, bool) {
	// lookup's body and settings.quantile's, by hand: the query then calls
	// only the map and quantileIndex, where it went through four more frames.
	e := t.clock.advanceMillis(now.UnixMilli(), t.s.subMs)
	en := t.dests[dest]
	if en == nil {
		return 0, false
	}
	en.rotate(e)
	if en.sum.total < t.s.minSamples {
		return 0, false
	}
	i, _ := en.sum.quantileIndex(q)
	return t.s.geo.quantileValue(i, q), true
}

// Samples returns the number of samples in dest's window at now.
func (t *Tracker[D]) Samples(dest D, now time.Time) uint64 {
	en := t.lookup(dest, now)
	if en == nil {
		return 0
	}
	return en.sum.total
}

// Clear forgets every destination. The current epoch is kept, so time still
// does not run backwards for the tracker.
func (t *Tracker[D]) Clear() {
	t.dests = make(map[D]*entry[D])
	t.lru = list[*entry[D]]{}
}

func (t *Tracker[D]) trackerStats() TrackerStats {
	return TrackerStats{Destinations: len(t.dests), DestinationsEvicted: t.evicted}
}

// Config returns the tracker's configuration.
func (t *Tracker[D]) Config() Config {
	return t.s.cfg
}

// localView rotates to now and sets *v to dest's window as a view
// (quantile q by the bucket rule ignoring MinSamples, samples, censored
// samples, M): the zero view when dest is unknown.
func (t *Tracker[D]) localView(dest D, q float64, now time.Time, v *viewFacts) {
	if en := t.lookup(dest, now); en != nil {
		t.s.view(&en.window, q, v)
	} else {
		*v = viewFacts{}
	}
}
