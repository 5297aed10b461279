package tracker

import (
	"iter"
	"maps"
	"slices"
	"sync"
	"time"
)

// Owned is what an owner keeps under destination-owned aggregation
// (protocol v2): every origin's sealed records of the destinations this
// node owns, by (destination, origin member, epoch), and their merge into
// one Aggregate per destination and epoch.
//
// The merge is the Fleet's, record for record: the Aggregate of a
// destination at epoch E sums the records of every included member with
// epochs in [E−N+1, E−1], applies the share cap over that window
// (FleetConfig.MaxOriginShare, the same rule and rounding), and counts
// peers, effective peers, censored counts and the newest epoch with data
// as Fleet.Estimate does; so a reader given the Aggregate has the fleet
// view a Fleet holding every origin's batches has (TestOwnedMatchesFleet).
// Records are deduplicated by (destination, origin, boot, epoch): the same
// record again is a duplicate, other contents a conflict.
//
// Records are kept packed (about a byte per bucket) and merged when an
// Aggregate is asked for, so memory is about 60 + buckets bytes per record
// held. Epochs outside [E−N−1, E+1] are refused and age out as in a Fleet;
// excluded members (Exclude) stay held but are not merged.
//
// An Owned is a pure core like the Fleet: time is an argument, no
// goroutines, no I/O; it is safe for concurrent use (one mutex).
type Owned struct {
	mu sync.Mutex

	cfg   FleetConfig
	geo   geometry
	n     int64 // sub-windows N
	swMs  int64
	clock epochClock
	epoch int64
	start bool

	members  map[memberKey]*ownedMember
	excluded map[memberKey]int64 // epoch of the last Exclude
	dests    map[string]*ownedDest
	buckets  int // buckets held over all records (censored counts included)
	stats    OwnedStats

	// merge scratch, dense in the layout
	counts, censored   []uint64
	pcounts, pcensored []uint64
}

// OwnedStats are an Owned's counters (monotonic) and sizes (current).
type OwnedStats struct {
	// Inserts counts InsertRecords calls by outcome, indexed by
	// InsertOutcome.
	Inserts [numInsertOutcomes]uint64
	// DestinationsRefused counts records refused because MaxDestinations
	// destinations were held.
	DestinationsRefused uint64
	// Merges counts Aggregate calls that merged records.
	Merges uint64
	// Members, Destinations, Records and Buckets are what is held now.
	Members, Destinations, Records, Buckets int
}

// Manifest is the count and hash (exclusive or of NameHash) of the
// destinations of one origin member's records of one epoch: an origin
// sends the manifest of what it sent an owner, the owner compares it with
// what it holds (Owned.Manifest) and pulls the records it lacks.
type Manifest struct {
	Records uint32
	Hash    uint64
}

// Add adds destination dest to the manifest.
func (m *Manifest) Add(dest string) {
	m.Records++
	m.Hash ^= NameHash(dest)
}

type ownedMember struct {
	key      memberKey
	excluded bool
	held     map[int64]*Manifest // per epoch: the destinations held
}

type ownedKey struct {
	m     *ownedMember
	epoch int64
}

type ownedRec struct {
	total    uint64
	counts   []byte // packBuckets
	timedOut []byte // packBuckets; nil when none
	unknown  bool
	buckets  int
}

type ownedDest struct {
	name string
	recs map[ownedKey]*ownedRec
}

// NewOwned returns an empty Owned, or cfg.Validate()'s error. Of cfg it
// uses Tracker (the epoch grid, the view and the layout), MaxOriginShare,
// MaxOrigins (members held; a new one beyond is refused as
// InsertOriginCapped), MaxDestinations, MaxEpochBuckets and MaxBuckets
// (as the Fleet does).
func NewOwned(cfg FleetConfig) (*Owned, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g, err := newGeometry(cfg.Tracker.Layout())
	if err != nil {
		return nil, err
	}
	return &Owned{
		cfg:      cfg,
		geo:      g,
		n:        int64(cfg.Tracker.SubWindows),
		swMs:     cfg.Tracker.SubWindow().Milliseconds(),
		clock:    newEpochClock(),
		members:  make(map[memberKey]*ownedMember),
		excluded: make(map[memberKey]int64),
		dests:    make(map[string]*ownedDest),
		counts:   make([]uint64, g.countsLen),
		censored: make([]uint64, g.countsLen),
	}, nil
}

// slide moves to the epoch of now (never back) and drops what aged out.
func (o *Owned) slide(now time.Time) {
	e := o.clock.advance(now, o.swMs)
	if !o.start {
		o.start, o.epoch = true, e
		return
	}
	if e <= o.epoch {
		return
	}
	o.epoch = e
	lo := e - o.n - 1
	for _, d := range o.dests {
		for k, r := range d.recs {
			if k.epoch < lo {
				delete(d.recs, k)
				o.buckets -= r.buckets
			}
		}
		if len(d.recs) == 0 {
			delete(o.dests, d.name)
		}
	}
	for k, m := range o.members {
		for ep := range m.held {
			if ep < lo {
				delete(m.held, ep)
			}
		}
		if len(m.held) == 0 {
			delete(o.members, k)
		}
	}
	for k, ep := range o.excluded {
		if ep+1 < lo && o.members[k] == nil {
			delete(o.excluded, k)
		}
	}
}

// Advance slides the window to the epoch of now.
func (o *Owned) Advance(now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.slide(now)
}

// InsertRecords stores the records of b (one origin's sealed counts of one
// epoch, for some destinations) and says what it did: InsertNew when at
// least one record was new, InsertDuplicate when every one was held with
// the same contents, InsertConflict (nothing stored) when one was held with
// other contents, and the Fleet's refusals (epoch, layout, malformed,
// sizes). Records with no samples are ignored. b.Key.Part is not part of a
// record's identity. InsertRecords copies what it keeps.
func (o *Owned) InsertRecords(b Batch, now time.Time) InsertOutcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.slide(now)
	out := o.insert(&b)
	o.stats.Inserts[out]++
	return out
}

func (o *Owned) insert(b *Batch) InsertOutcome {
	switch ep := b.Key.Epoch; {
	case b.Layout != o.geo.layout:
		return InsertLayoutMismatch
	case ep < o.epoch-o.n-1:
		return InsertTooOld
	case ep > o.epoch+1:
		return InsertTooNew
	case !ValidName(b.Key.Origin):
		return InsertMalformed
	case len(b.Dests) > o.cfg.MaxDestinations:
		return InsertTooLarge
	}
	k := memberKey{b.Key.Origin, b.Key.Boot}
	m := o.members[k]
	nb, fresh := 0, 0
	var samples uint64
	for i := range b.Dests {
		dc := &b.Dests[i]
		if !ValidName(dc.Dest) {
			return InsertMalformed
		}
		for j := range i {
			if i < 16 && b.Dests[j].Dest == dc.Dest {
				return InsertMalformed
			}
		}
		if !validCounts(dc.Buckets, dc.TimedOut, dc.Total, dc.CensoringUnknown, &o.geo) {
			return InsertMalformed
		}
		samples += dc.Total
		if samples > maxEpochSamples {
			return InsertTooLarge
		}
		if dc.Total == 0 {
			continue
		}
		if m != nil {
			if d := o.dests[dc.Dest]; d != nil {
				if r := d.recs[ownedKey{m, b.Key.Epoch}]; r != nil {
					if !r.equal(dc) {
						return InsertConflict
					}
					continue
				}
			}
		}
		fresh++
		nb += len(dc.Buckets) + len(dc.TimedOut)
	}
	if len(b.Dests) > 16 {
		names := make([]string, len(b.Dests))
		for i := range b.Dests {
			names[i] = b.Dests[i].Dest
		}
		slices.Sort(names)
		for i := 1; i < len(names); i++ {
			if names[i] == names[i-1] {
				return InsertMalformed
			}
		}
	}
	if fresh == 0 {
		return InsertDuplicate
	}
	if nb > o.cfg.MaxEpochBuckets {
		return InsertTooLarge
	}
	if o.buckets+nb > o.cfg.MaxBuckets {
		return InsertBucketsCapped
	}
	if m == nil {
		if len(o.members) >= o.cfg.MaxOrigins {
			return InsertOriginCapped
		}
		_, excl := o.excluded[k]
		m = &ownedMember{key: k, excluded: excl, held: make(map[int64]*Manifest)}
		o.members[k] = m
	}
	man := m.held[b.Key.Epoch]
	if man == nil {
		man = &Manifest{}
		m.held[b.Key.Epoch] = man
	}
	stored := false
	for i := range b.Dests {
		dc := &b.Dests[i]
		if dc.Total == 0 {
			continue
		}
		d := o.dests[dc.Dest]
		if d == nil {
			if len(o.dests) >= o.cfg.MaxDestinations {
				o.stats.DestinationsRefused++
				continue
			}
			d = &ownedDest{name: dc.Dest, recs: make(map[ownedKey]*ownedRec)}
			o.dests[dc.Dest] = d
		}
		key := ownedKey{m, b.Key.Epoch}
		if d.recs[key] != nil {
			continue
		}
		r := &ownedRec{total: dc.Total, counts: packBuckets(dc.Buckets), unknown: dc.CensoringUnknown,
			buckets: len(dc.Buckets) + len(dc.TimedOut)}
		if len(dc.TimedOut) > 0 {
			r.timedOut = packBuckets(dc.TimedOut)
		}
		d.recs[key] = r
		o.buckets += r.buckets
		man.Add(dc.Dest)
		stored = true
	}
	if !stored {
		return InsertDuplicate
	}
	return InsertNew
}

func (r *ownedRec) equal(dc *DestCounts) bool {
	if r.total != dc.Total || r.unknown != dc.CensoringUnknown || (r.timedOut == nil) != (len(dc.TimedOut) == 0) {
		return false
	}
	if !slices.Equal(r.counts, packBuckets(dc.Buckets)) {
		return false
	}
	return r.timedOut == nil || slices.Equal(r.timedOut, packBuckets(dc.TimedOut))
}

// Manifest returns the manifest of the records held from member (origin,
// boot) for epoch.
func (o *Owned) Manifest(origin string, boot uint64, epoch int64, now time.Time) Manifest {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.slide(now)
	if m := o.members[memberKey{origin, boot}]; m != nil {
		if man := m.held[epoch]; man != nil {
			return *man
		}
	}
	return Manifest{}
}

// ManifestWithout is Manifest with the records of the destinations in
// leave left out: what the origin's manifest says when it no longer gives
// this node those destinations and this node still holds them.
func (o *Owned) ManifestWithout(origin string, boot uint64, epoch int64, leave iter.Seq[string], now time.Time) Manifest {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.slide(now)
	m := o.members[memberKey{origin, boot}]
	if m == nil || m.held[epoch] == nil {
		return Manifest{}
	}
	man := *m.held[epoch]
	for dest := range leave {
		if d := o.dests[dest]; d != nil && d.recs[ownedKey{m, epoch}] != nil {
			man.Records--
			man.Hash ^= NameHash(dest)
		}
	}
	return man
}

// Destinations returns the destinations with records held, sorted.
func (o *Owned) Destinations(now time.Time) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.slide(now)
	return slices.Sorted(maps.Keys(o.dests))
}

// Retain drops the records of every destination keep refuses (one this
// node no longer owns): their origins resend them if it owns them again.
func (o *Owned) Retain(keep func(dest string) bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for name, d := range o.dests {
		if keep(name) {
			continue
		}
		for k, r := range d.recs {
			o.buckets -= r.buckets
			if man := k.m.held[k.epoch]; man != nil {
				man.Records--
				man.Hash ^= NameHash(name)
				if man.Records == 0 {
					delete(k.m.held, k.epoch)
				}
			}
		}
		delete(o.dests, name)
	}
	for k, m := range o.members {
		if len(m.held) == 0 {
			delete(o.members, k)
		}
	}
}

// Exclude leaves member (name, boot) out of every merge from now on, as
// when membership declares it dead; its records stay until they age out,
// so a refuted death (Include) costs nothing. Remembered like the Fleet's
// exclusions (at most 4·MaxOrigins).
func (o *Owned) Exclude(name string, boot uint64, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.slide(now)
	k := memberKey{name, boot}
	if _, ok := o.excluded[k]; !ok && len(o.excluded) >= 4*o.cfg.MaxOrigins {
		var victim memberKey
		first := true
		for x, ep := range o.excluded {
			if first || ep < o.excluded[victim] || ep == o.excluded[victim] && compareMembers(x, victim) < 0 {
				victim, first = x, false
			}
		}
		delete(o.excluded, victim)
	}
	o.excluded[k] = o.epoch
	if m := o.members[k]; m != nil {
		m.excluded = true
	}
}

// Include merges member (name, boot) again and forgets its exclusion.
func (o *Owned) Include(name string, boot uint64, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.slide(now)
	k := memberKey{name, boot}
	delete(o.excluded, k)
	if m := o.members[k]; m != nil {
		m.excluded = false
	}
}

// SetLiveMembers does nothing: an Owned has no trust threshold. It lets an
// Owned stand where the protocol applies membership.
func (o *Owned) SetLiveMembers(int) {}

// Coverage returns the coverage the Aggregate of dest at now would have,
// without merging: what a publisher compares with what it published.
func (o *Owned) Coverage(dest string, now time.Time) Coverage {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.slide(now)
	return o.coverage(dest, o.epoch-1)
}

// CoverageOf returns the coverage AggregateOf(dest, epoch, now) would
// have, without merging.
func (o *Owned) CoverageOf(dest string, epoch int64, now time.Time) Coverage {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.slide(now)
	if !o.held(epoch) {
		return Coverage{}
	}
	return o.coverage(dest, epoch)
}

func (o *Owned) coverage(dest string, top int64) Coverage {
	var c Coverage
	if d := o.dests[dest]; d != nil {
		for k := range d.recs {
			if !k.m.excluded && inWindow(k.epoch, top, o.n) {
				c.Records++
				c.Hash ^= RecordHash(k.m.key.name, k.m.key.boot, k.epoch)
			}
		}
	}
	return c
}

// inWindow reports whether records of epoch ep are in the window of the
// aggregate of epoch top (published in top+1): [top−N+2, top].
func inWindow(ep, top, n int64) bool { return ep >= top-n+2 && ep <= top }

// held reports whether Owned still holds every record of the window of
// the aggregate of epoch top, and top is not ahead of E−1: E−1, E−2 and
// E−3.
func (o *Owned) held(top int64) bool { return top <= o.epoch-1 && top-o.n+2 >= o.epoch-o.n-1 }

// Aggregate merges dest's records into its aggregate at now: the window
// [E−N+1, E−1] of E = the epoch of now, Epoch E−1. It reports false when
// no included member has a record of dest in the window. The result owns
// its slices.
func (o *Owned) Aggregate(dest string, now time.Time) (Aggregate, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.slide(now)
	return o.aggregate(dest, o.epoch-1)
}

// AggregateOf is the Aggregate of dest's epoch at now, for an epoch
// whose window Owned still holds whole: E−1 (Aggregate), or E−2 or E−3,
// a round an owner missed (its loop stalled over its publish). It reports
// false for any other epoch.
func (o *Owned) AggregateOf(dest string, epoch int64, now time.Time) (Aggregate, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.slide(now)
	if !o.held(epoch) {
		return Aggregate{}, false
	}
	return o.aggregate(dest, epoch)
}

func (o *Owned) aggregate(dest string, ep int64) (Aggregate, bool) {
	d := o.dests[dest]
	if d == nil {
		return Aggregate{}, false
	}
	a := Aggregate{Dest: dest, Epoch: ep, Layout: o.geo.layout, Newest: minEpoch}
	peers := map[string]uint64{}
	anyCensored := false
	for k, r := range d.recs {
		if k.m.excluded || !inWindow(k.epoch, ep, o.n) {
			continue
		}
		a.Coverage.Records++
		a.Coverage.Hash ^= RecordHash(k.m.key.name, k.m.key.boot, k.epoch)
		peers[k.m.key.name] += r.total
		a.Total += r.total
		a.Newest = max(a.Newest, k.epoch)
		a.CensoringUnknown = a.CensoringUnknown || r.unknown
		unpack(r.counts, func(i int, c uint32) { o.counts[i] += uint64(c) })
		if r.timedOut != nil {
			anyCensored = true
			unpack(r.timedOut, func(i int, c uint32) { o.censored[i] += uint64(c) })
		}
	}
	if a.Coverage.Records == 0 {
		return Aggregate{}, false
	}
	o.stats.Merges++
	a.Peers = len(peers)
	pcs := make([]peerCount, 0, len(peers))
	for name, n := range peers {
		pcs = append(pcs, peerCount{p: &fleetPeer{name: name}, n: n})
	}
	var top uint64
	for _, pc := range pcs {
		top = max(top, pc.n)
	}
	share := o.cfg.MaxOriginShare
	if share > 0 && len(pcs) >= 4 && float64(top) > share*float64(a.Total) {
		slices.SortFunc(pcs, comparePeerCounts)
		if k, t, ok := shareCap(pcs, share); ok {
			for i := range k {
				pcs[i].n = o.capPeer(d, pcs[i].p.name, ep, pcs[i].n, t, anyCensored)
			}
		}
	}
	for _, pc := range pcs {
		addSquare(&a.SquareSum, pc.n)
	}
	a.Total = 0
	for i, c := range o.counts {
		if c == 0 {
			continue
		}
		o.counts[i] = 0
		c = min(c, 1<<32-1) // a hostile flood only: Bucket counts are 32-bit
		a.Buckets = append(a.Buckets, Bucket{Index: uint16(i), Count: uint32(c)})
		a.Total += c
		if anyCensored {
			if ci := o.censored[i]; ci > 0 {
				o.censored[i] = 0
				a.TimedOut = append(a.TimedOut, Bucket{Index: uint16(i), Count: uint32(min(ci, 1<<32-1))})
			}
		}
	}
	if anyCensored {
		clear(o.censored) // entries whose bucket the cap emptied
	}
	return a, true
}

// capPeer scales peer's counts in the merge scratch by t/n as the Fleet's
// capPeer does (the cumulative counts rounded down, censored counts as a
// bucket's last samples), and returns the peer's capped count.
func (o *Owned) capPeer(d *ownedDest, peer string, top int64, n, t uint64, censored bool) uint64 {
	t = min(t, n)
	if o.pcounts == nil {
		o.pcounts = make([]uint64, o.geo.countsLen)
		o.pcensored = make([]uint64, o.geo.countsLen)
	}
	for k, r := range d.recs {
		if k.m.excluded || k.m.key.name != peer || !inWindow(k.epoch, top, o.n) {
			continue
		}
		unpack(r.counts, func(i int, c uint32) { o.pcounts[i] += uint64(c) })
		if r.timedOut != nil {
			unpack(r.timedOut, func(i int, c uint32) { o.pcensored[i] += uint64(c) })
		}
	}
	var cum, kept uint64
	for i, c := range o.pcounts {
		if c == 0 {
			continue
		}
		o.pcounts[i] = 0
		cum += c
		k := mulDiv(cum, t, n)
		o.counts[i] -= c - (k - kept)
		kept = k
		if censored {
			if ci := o.pcensored[i]; ci > 0 {
				o.pcensored[i] = 0
				o.censored[i] -= ci - (k - mulDiv(cum-ci, t, n))
			}
		}
	}
	return kept
}

// Stats returns the counters and sizes.
func (o *Owned) Stats() OwnedStats {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.stats
	s.Members, s.Destinations, s.Buckets = len(o.members), len(o.dests), o.buckets
	for _, d := range o.dests {
		s.Records += len(d.recs)
	}
	return s
}
