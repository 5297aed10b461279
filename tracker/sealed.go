package tracker

import (
	"math"
	"slices"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// SealedSubWindow rotates t to now and returns, per destination with samples
// in it, the sealed sub-window of epoch: the latencies recorded while that
// epoch was the tracker's current one. Destinations are sorted by Dest;
// each Buckets ascends by Index and Total is the sum of its Counts; TimedOut
// holds the censored counts (RecordTimeout) of those buckets, empty when
// nothing timed out.
//
// Only sealed epochs that the ring still holds are available: with E the
// tracker's current epoch after rotating (Config.Epoch(now), unless the clock
// went backwards), epochs in [E−N+1, E−1]. Any other epoch, including the
// current one, gives nil.
//
// A sub-window of typical width (at most 160 non-empty buckets at defaults)
// is handed out without copying: its Buckets slice is shared with the
// tracker, never modified after the sub-window is sealed, and callers must not
// modify it either. A wider one is kept packed, about one byte per bucket,
// and decoded into a new slice here. Either may be kept for as long as wanted.
func SealedSubWindow[T interface {
	*Tracker[string] | *SyncTracker[string]
}](t T, epoch int64, now time.Time) []DestCounts {
	var out []DestCounts
	collect := func(key string, en *entry[string], e int64) {
		en.rotate(e)
		if s, timedOut, ok := en.sealedAt(epoch); ok {
			dc := DestCounts{Dest: key, Total: s.total, Buckets: s.sparse()}
			if timedOut != nil {
				dc.TimedOut = timedOut.sparse()
			}
			out = append(out, dc)
		}
	}
	switch t := any(t).(type) {
	case *Tracker[string]:
		e := t.clock.advance(now, t.s.subMs)
		if !sealedAvailable(epoch, e, t.s.n) {
			return nil
		}
		for key, en := range t.dests {
			collect(key, en, e)
		}
	case *SyncTracker[string]:
		e := t.advance(now)
		if !sealedAvailable(epoch, e, t.s.n) {
			return nil
		}
		for k := range t.shards {
			sh := &t.shards[k]
			sh.mu.Lock()
			sh.each(func(en *entry[string]) { collect(en.key, en, e) })
			sh.mu.Unlock()
		}
	}
	slices.SortFunc(out, compareDests)
	return out
}

// sealedAvailable reports whether epoch is in [current−n+1, current−1].
func sealedAvailable(epoch, current int64, n int) bool {
	return epoch < current && uint64(current)-uint64(epoch) < uint64(n)
}

// ExportHistogram rotates t to now and returns dest's window as a standard
// hdrhistogram-go Histogram in the tracker's layout (Config.Layout): the same
// counts at the same indices, for HdrHistogram tooling. A destination the
// tracker does not hold gives an empty histogram. The result is a copy.
func ExportHistogram[D comparable, T interface {
	*Tracker[D] | *SyncTracker[D]
}](t T, dest D, now time.Time) *hdrhistogram.Histogram {
	var s *settings
	var counts []int64
	copyCounts := func(en *entry[D]) {
		counts = make([]int64, len(en.sum.counts))
		for i, c := range en.sum.counts {
			counts[i] = int64(min(c, math.MaxInt64))
		}
	}
	switch t := any(t).(type) {
	case *Tracker[D]:
		s = &t.s
		if en := t.lookup(dest, now); en != nil {
			copyCounts(en)
		}
	case *SyncTracker[D]:
		s = &t.s
		t.withEntry(dest, now, copyCounts)
	}
	l := s.cfg.Layout()
	return hdrhistogram.Import(&hdrhistogram.Snapshot{
		LowestTrackableValue:  l.Lowest,
		HighestTrackableValue: l.Highest,
		SignificantFigures:    int64(l.SignificantDigits),
		Counts:                counts,
	})
}

// Destinations rotates t (a *Tracker[D] or *SyncTracker[D]) to now and
// returns the destinations with at least one sample in the window, in no
// particular order. Like SealedSubWindow it is a function rather than a
// method, because both tracker types have exactly the methods their
// contract lists.
func Destinations[D comparable](t destLister[D], now time.Time) []D {
	return t.destinationsAt(now)
}

type destLister[D comparable] interface {
	destinationsAt(now time.Time) []D
}

func (t *Tracker[D]) destinationsAt(now time.Time) []D {
	e := t.clock.advance(now, t.s.subMs)
	var out []D
	for _, en := range t.dests {
		if en.rotate(e); en.sum.total > 0 {
			out = append(out, en.key)
		}
	}
	return out
}

func (t *SyncTracker[D]) destinationsAt(now time.Time) []D {
	e := t.advance(now)
	var out []D
	for k := range t.shards {
		sh := &t.shards[k]
		sh.mu.Lock()
		sh.each(func(en *entry[D]) {
			if en.rotate(e); en.sum.total > 0 {
				out = append(out, en.key)
			}
		})
		sh.mu.Unlock()
	}
	return out
}

// TrackerStats are a tracker's counters (monotonic) and sizes (current).
type TrackerStats struct {
	// Destinations is the number of destinations held.
	Destinations int
	// DestinationsEvicted counts destinations dropped to stay within
	// MaxDestinations (Clear is not counted).
	DestinationsEvicted uint64
}

// Stats returns the counters of t, a *Tracker[D] or *SyncTracker[D]. Like
// Destinations it is a function rather than a method (the tracker types have
// exactly the methods their contract lists).
func Stats(t interface{ trackerStats() TrackerStats }) TrackerStats {
	return t.trackerStats()
}
