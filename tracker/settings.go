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
	// small[ms] is the counts index of ms for ms below min(smallIndexes,
	// highest+1): a record's bucket for a typical latency in one load,
	// where geometry.index is a dozen dependent instructions.
	small []uint16
}

// smallIndexes is how many latencies (0 … 1023 ms) settings.small maps.
const smallIndexes = 1024

func newSettings(c Config) (settings, error) {
	if err := c.Validate(); err != nil {
		return settings{}, err
	}
	g, err := newGeometry(c.Layout())
	if err != nil {
		return settings{}, err
	}
	highest := uint64(c.Layout().Highest)
	small := make([]uint16, min(smallIndexes, highest+1))
	for ms := range small {
		small[ms] = uint16(g.index(int64(ms)))
	}
	return settings{
		cfg:        c,
		geo:        g,
		highest:    highest,
		minSamples: max(uint64(c.MinSamples), 1),
		subMs:      c.subWindowMillis(),
		n:          c.SubWindows,
		small:      small,
	}, nil
}

// index returns the counts index of a latency of ms, clamped.
func (s *settings) index(ms uint64) int {
	if ms < uint64(len(s.small)) {
		return int(s.small[ms])
	}
	return s.indexFrom(ms)
}

// indexFrom is index for a latency of ms beyond the small table, out of
// line so that index inlines into the record paths.
//
//go:noinline
func (s *settings) indexFrom(ms uint64) int {
	if ms > s.highest {
		ms = s.highest
	}
	return s.geo.index(int64(ms))
}

// view is what w says as a view: quantile q by the bucket rule, ignoring
// MinSamples, its samples, censored samples and M.
func (s *settings) view(w *window, q float64, v *viewFacts) {
	s.viewAt(w, q, v)
}

// viewAt is view, also returning the buckets of Q and M (qi, mi; -1 when
// the view has no Q or no M), which the estimate cache keeps to tell a
// record that cannot change the view (viewPos).
func (s *settings) viewAt(w *window, q float64, v *viewFacts) (qi, mi int) {
	*v = viewFacts{samples: w.sum.total}
	qi, ok := w.sum.quantileIndex(q)
	if !ok {
		return -1, -1
	}
	if q == 0 {
		v.q = uint64(s.geo.lowestEquivalent(qi))
	} else {
		v.q = uint64(s.geo.highestEquivalent(qi))
	}
	m, hasM := w.sum.hi, true
	if w.cens != nil {
		v.censored = w.cens.sum.total
		m, hasM = w.maxCompleted()
	}
	if !hasM {
		return qi, -1
	}
	v.m, v.hasM = uint64(s.geo.highestEquivalent(m)), true
	return qi, m
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

// entry is one destination: its window plus its place in the order of
// Record calls (kept only when MaxDestinations > 0: Tracker's list,
// SyncTracker's stamp).
//
// What a record reads and writes comes first: the key, its words, stamp,
// tag and caches, then the window's own, 168 bytes for a string key, which
// makes 256 bytes in all, a size the allocator places on 256-byte
// boundaries, so those fields take three cache lines, not four or five
// (TestEntryLayout).
type entry[D comparable] struct {
	key D
	// words are the two words wyhash reads of a string key of at most 16
	// bytes (shortWords), which with its length are the key: a record
	// compares them, not the bytes (SyncTracker; zero otherwise).
	words [2]uint64
	stamp uint64     // SyncTracker: sequence number of the last Record
	tag   uint64     // SyncTracker: the caller's tag (SetTag)
	ec    *estCaches // SyncTracker under a Fleet: the cached estimates, nil until queried
	window
	recency listNode[*entry[D]] // Tracker: in the list of entries by last Record, most recent first
	hash    uint64              // SyncTracker: hash of key
}

// newEntry returns an empty destination at epoch e.
func newEntry[D comparable](g *geometry, n int, e int64, key D) *entry[D] {
	en := &entry[D]{key: key}
	en.recency.v = en
	en.init(g, n, e)
	return en
}
