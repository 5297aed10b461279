package tracker

import (
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// localWindow is the node's own tracker window, as the fleet needs it for the
// local view: *Tracker[string] and *SyncTracker[string] implement it.
// viewOf returns dest's window [E−N+1, E] as a view at now: quantile q by
// the bucket rule ignoring MinSamples (when it holds any sample), its
// samples, censored samples and M. It returns the view rather than writing
// through a pointer because a pointer passed through an interface escapes:
// the view would be on the heap. (The Fleet calls the two trackers'
// localView directly, which writes through v: a returned struct is stored
// field by field and then copied with wider loads, which the CPU cannot
// forward from those stores.)
type localWindow interface {
	viewOf(dest string, q float64, now time.Time) viewFacts
}

// viewOf is localView returning the view, for localWindow.
func (t *Tracker[D]) viewOf(dest D, q float64, now time.Time) (v viewFacts) {
	t.localView(dest, q, now, &v)
	return v
}

// viewOf is localView returning the view, for localWindow.
func (t *SyncTracker[D]) viewOf(dest D, q float64, now time.Time) (v viewFacts) {
	t.localView(dest, q, now, &v)
	return v
}

type memberKey struct {
	name string
	boot uint64
}

// fleetPeer is a distinct peer name and the members (boots) held for it.
type fleetPeer struct {
	name    string
	members []*fleetMember
}

// fleetMember is one process of a peer: its batches by epoch, and whether
// membership excluded it (mirrors Fleet.excluded, which outlives it).
type fleetMember struct {
	key      memberKey
	peer     *fleetPeer
	excluded bool
	epochs   map[int64]*memberEpoch
}

type memberEpoch struct {
	parts   map[uint16]*heldBatch
	samples uint64 // over all parts
	entries int    // Σ max(1, len(Dests)) over all parts
	buckets int    // over all parts
}

// viewParts yields m's held batches (every part) whose epoch is in the
// view, [E−N+1, E−1], in no set order; none when m is excluded.
func (f *Fleet) viewParts(m *fleetMember) iter.Seq[*heldBatch] {
	return func(yield func(*heldBatch) bool) {
		if m.excluded {
			return
		}
		for ep := f.epoch - f.n + 1; ep <= f.epoch-1; ep++ {
			me := m.epochs[ep]
			if me == nil {
				continue
			}
			for _, hb := range me.parts {
				if !yield(hb) {
					return
				}
			}
		}
	}
}

// heldBatch is a stored batch in canonical form (destinations sorted by name,
// private copy) and, per destination, the state it is counted in (nil when
// not counted: an excluded member, or an empty destination).
//
// It is held compactly: a destination is a heldDest (48 bytes, where a
// DestCounts is 80), its censored parts are out of line in cens, which
// stays nil unless some destination of the batch has censored counts or
// unknown censoring, and the layout is the Fleet's (Insert refuses any
// other). The DestCounts are built where they are handed out (dest, Lookup).
type heldBatch struct {
	key     BatchKey
	dests   []heldDest
	cens    []heldCensoring // nil, or one per destination
	ds      []*destState
	buckets int
}

// heldDest is one destination of a held batch: DestCounts without its
// censored parts.
type heldDest struct {
	name    string
	total   uint64
	buckets []Bucket
}

// heldCensoring is the censored part of a held destination: DestCounts'
// TimedOut and CensoringUnknown.
type heldCensoring struct {
	timedOut []Bucket
	unknown  bool
}

// dest returns destination i of hb as a DestCounts, sharing its slices.
func (hb *heldBatch) dest(i int) DestCounts {
	hd := &hb.dests[i]
	dc := DestCounts{Dest: hd.name, Total: hd.total, Buckets: hd.buckets}
	if hb.cens != nil {
		dc.TimedOut, dc.CensoringUnknown = hb.cens[i].timedOut, hb.cens[i].unknown
	}
	return dc
}

// batch returns hb as the Batch it was inserted as (canonical order),
// sharing its buckets; layout is the Fleet's.
func (hb *heldBatch) batch(layout Layout) Batch {
	b := Batch{Key: hb.key, Layout: layout, Dests: make([]DestCounts, len(hb.dests))}
	for i := range hb.dests {
		b.Dests[i] = hb.dest(i)
	}
	return b
}

// equal reports whether hb holds exactly the destinations of ds, in ds's
// order: the same names, totals, buckets and censored counts.
func (hb *heldBatch) equal(ds []DestCounts) bool {
	if len(hb.dests) != len(ds) {
		return false
	}
	for i := range ds {
		// Compared on the held form: building each DestCounts to
		// compare it cost a duplicate insert ~10 %.
		hd, d := &hb.dests[i], &ds[i]
		var c heldCensoring
		if hb.cens != nil {
			c = hb.cens[i]
		}
		if hd.name != d.Dest || hd.total != d.Total || c.unknown != d.CensoringUnknown ||
			!slices.Equal(hd.buckets, d.Buckets) || !slices.Equal(c.timedOut, d.TimedOut) {
			return false
		}
	}
	return true
}

// destState is one destination's fleet view and the bookkeeping to keep it
// incrementally: the merged histogram over counted batches whose epoch is in
// the view and their censored counts, each peer's samples in it, and counted
// samples per held epoch.
type destState struct {
	name    string
	h       hist
	c       sparseSum // censored counts of the view, bucket by bucket <= h's
	unknown int       // entries in the view whose censoring is unknown
	epochN  []uint64  // counted samples per held epoch, at index epoch mod (N+3)
	contrib map[*fleetPeer]uint64
	refs    int // held batch entries counted in this state
	evicted bool
	gen     uint64

	// level is min(peers in view, 2). Destinations at level 0 and 1 are
	// the eviction candidates, kept in f.lists[level] from least to most
	// recently inserted; level 2 is in no list.
	level int8
	cand  listNode[*destState] // in f.lists[level] when level < 2
	sum   destSummary
}

// Fleet is the fleet view: it holds peers' sealed batches and answers, per
// destination, an estimate backed by the whole fleet.
//
// A Fleet is a pure core: time is an argument of every method that depends
// on it, and each such call first slides the window to the epoch of now
// (never backwards: a now before the current epoch slides nothing). It
// starts no goroutine and does no I/O. It is safe for concurrent use: every
// method takes one mutex for its whole call (queries too: they slide the
// window and fill caches), except an estimate whose fleet facts are
// published (factsTable: they hold while no change was made and now is in
// the Fleet's epoch, so the call would slide nothing), which reads them
// without it. The cluster inserts and serves batches while the node answers
// estimates; each call is short (an estimate costs about a hundred
// nanoseconds, an insert of a 100-destination batch about 100 µs on the
// machines this was measured on), so one lock is enough.
//
// Each destination's view is kept incrementally: a batch is added to it when
// inserted or when its epoch enters the view, and subtracted when its epoch
// leaves the view, when it expires or when its member is excluded. A query
// never merges batches.
type Fleet struct {
	mu sync.Mutex // guards everything below but the fixed configuration and ver

	// ver counts the changes of the Fleet's state (inserts, exclusions,
	// live members, slides): written under mu after each change, read
	// without it by the estimate caches (estCache, factsTable), which hold
	// while ver stays.
	ver atomic.Uint64
	// pub is the table of published fleet facts (written under mu, read
	// without it by estimates), nil until the first estimate.
	pub atomic.Pointer[factsTable]

	cfg   FleetConfig
	geo   geometry
	n     int64 // sub-windows N
	swMs  int64 // sub-window length in ms
	ring  int64 // held epochs N+3
	local localWindow
	// The local tracker again, typed, so the estimate calls it directly
	// rather than through the interface (cheaper on the request path).
	localSync  *SyncTracker[string]
	localPlain *Tracker[string]

	clock   epochClock // the epoch of the newest time seen, its bounds cached
	started bool
	epoch   int64 // E, the newest epoch seen
	live    int

	members map[memberKey]*fleetMember
	peers   map[string]*fleetPeer
	// excluded holds, per excluded member, the epoch E of its last Exclude,
	// apart from the batches and the MaxOrigins cap: kept while the member
	// is held or any batch it sent before E+2 could still be accepted, so
	// evicting or forgetting its batches never lets them count again.
	excluded map[memberKey]int64
	dests    map[string]*destState
	lists    [2]list[*destState] // eviction candidates by level
	// aggs holds the aggregates (protocol v2) by destination, aggCount
	// how many over all destinations and epochs.
	aggs     map[string]*aggDest
	aggCount int
	// aggHorizon is Tracker.AggregateHorizon: the view reads E−1 …
	// E−aggHorizon, and one more epoch is kept.
	aggHorizon int64

	stats   FleetStats
	batches int
	buckets int

	// scratch for the share cap
	scratch  []uint64
	scratchC []uint64 // censored counts, made on first use
	touched  []int
	contribs []peerCount
	// the local view of the estimate being made: on the heap already, so
	// passing it to localWindow.localView moves nothing there
	lv viewFacts
}

// NewFleet returns an empty Fleet, or cfg.Validate()'s error. local is this
// node's tracker for the local view: a *SyncTracker[string], a
// *Tracker[string] only if nothing else uses it concurrently with the
// Fleet, or nil for a fleet without a local view. The Fleet reads a
// *Tracker under its own mutex, and a *SyncTracker under the tracker's
// shard lock, with or without its own (an estimate from published facts
// takes none): the tracker never calls the Fleet, so the order of the
// locks is fixed.
func NewFleet(cfg FleetConfig, local localWindow) (*Fleet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g, err := newGeometry(cfg.Tracker.Layout())
	if err != nil {
		return nil, err
	}
	n := int64(cfg.Tracker.SubWindows)
	f := &Fleet{
		cfg:      cfg,
		geo:      g,
		n:        n,
		swMs:     cfg.Tracker.SubWindow().Milliseconds(),
		ring:     n + 3,
		local:    local,
		clock:    newEpochClock(),
		live:     1,
		members:  make(map[memberKey]*fleetMember),
		peers:    make(map[string]*fleetPeer),
		excluded: make(map[memberKey]int64),
		dests:    make(map[string]*destState),
		aggs:     make(map[string]*aggDest),
		scratch:  make([]uint64, g.countsLen),
	}
	f.aggHorizon = cfg.Tracker.AggregateHorizon()
	switch l := local.(type) {
	case *SyncTracker[string]:
		f.localSync = l
	case *Tracker[string]:
		f.localPlain = l
	}
	return f, nil
}

// Config returns the configuration the Fleet was made with (fixed: no lock).
func (f *Fleet) Config() FleetConfig { return f.cfg }

// SetLiveMembers tells the Fleet how many members are alive or suspect, self
// included; auto MinPeers is min(3, n). Values below 1 count as 1. Until
// first called it is 1.
func (f *Fleet) SetLiveMembers(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.changed()
	f.live = max(n, 1)
}

// Stats returns the counters and sizes.
func (f *Fleet) Stats() FleetStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats
	s.Members = len(f.members)
	s.Excluded = len(f.excluded)
	s.Peers = len(f.peers)
	s.Destinations, s.AggregateDestinations = len(f.dests), len(f.aggs)
	for name := range f.aggs {
		if _, ok := f.dests[name]; !ok {
			s.Destinations++
		}
	}
	s.Batches = f.batches
	s.Buckets = f.buckets
	s.Aggregates = f.aggCount
	return s
}

// lockChange locks f for a change made at now, the window slid to now
// first; defer unlockChange to end it.
func (f *Fleet) lockChange(now time.Time) {
	f.mu.Lock()
	f.slide(now)
}

// unlockChange marks the change lockChange began (changed) and unlocks f.
func (f *Fleet) unlockChange() {
	f.changed()
	f.mu.Unlock()
}

// changed marks a change of the Fleet's state, after it is made; f.mu is
// held.
func (f *Fleet) changed() { f.ver.Add(1) }
