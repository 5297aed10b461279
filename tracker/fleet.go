package tracker

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// localWindow is the node's own tracker window, as the fleet needs it for the
// local view: *Tracker[string] and *SyncTracker[string] implement it.
// localView returns the quantile q of dest's window [E−N+1, E] by the bucket
// rule, ignoring MinSamples (ok is false when the window is empty), and the
// samples in that window.
type localWindow interface {
	localView(dest string, q float64, now time.Time) (ms uint64, samples uint64, ok bool)
}

// InsertOutcome says what Fleet.Insert did with a batch. Every outcome is
// counted in FleetStats.
type InsertOutcome uint8

// The outcomes of Fleet.Insert. Only InsertNew changes the fleet's state.
const (
	// InsertNew: the batch was stored and counted.
	InsertNew InsertOutcome = iota
	// InsertDuplicate: a batch with this key and the same contents is held;
	// nothing changed.
	InsertDuplicate
	// InsertConflict: a batch with this key but other contents is held; the
	// first copy stays.
	InsertConflict
	// InsertTooOld: the epoch is before E−N−1.
	InsertTooOld
	// InsertTooNew: the epoch is after E+1.
	InsertTooNew
	// InsertLayoutMismatch: the histogram layout differs from this fleet's.
	InsertLayoutMismatch
	// InsertMalformed: an empty or over-long origin or destination name, a
	// repeated destination, bucket indices out of range or not ascending, a
	// zero bucket count, or a total that is not the sum of the counts.
	InsertMalformed
	// InsertTooLarge: more than MaxDestinations destinations, more than
	// MaxEpochBuckets buckets, or more than 2^40 samples, for one member's
	// epoch (over all its parts).
	InsertTooLarge
	// InsertOriginCapped: a new member beyond MaxOrigins, and every held
	// member is at least as recent.
	InsertOriginCapped
	// InsertBucketsCapped: holding the batch would take the buckets held
	// over all batches beyond MaxBuckets.
	InsertBucketsCapped

	numInsertOutcomes
)

var insertOutcomeNames = [numInsertOutcomes]string{
	"new", "duplicate", "conflict", "too_old", "too_new", "layout_mismatch", "malformed", "too_large", "origin_capped",
	"buckets_capped",
}

// String returns the outcome in snake_case, as used for metric labels.
func (o InsertOutcome) String() string {
	if o < numInsertOutcomes {
		return insertOutcomeNames[o]
	}
	return "unknown"
}

// FleetStats are a Fleet's counters (monotonic) and sizes (current).
type FleetStats struct {
	// Inserts counts Insert calls by outcome, indexed by InsertOutcome.
	Inserts [numInsertOutcomes]uint64
	// Expired counts batches dropped because they aged out.
	Expired uint64
	// OriginsEvicted counts members evicted by the MaxOrigins cap.
	OriginsEvicted uint64
	// DestinationsEvicted counts destinations evicted by MaxDestinations.
	DestinationsEvicted uint64
	// DestinationsRefused counts batch entries not counted because their
	// destination was new, MaxDestinations were held, and each had two or
	// more peers in view.
	DestinationsRefused uint64
	// ExclusionsEvicted counts exclusions forgotten early because more than
	// 4·MaxOrigins were remembered (see Fleet.Exclude).
	ExclusionsEvicted uint64

	// Members is the number of members (peer name + boot) whose batches
	// are held.
	Members int
	// Excluded is the number of exclusions remembered (see Fleet.Exclude).
	Excluded int
	// Peers is the number of distinct peer names held.
	Peers int
	// Destinations is the number of destinations with a fleet view.
	Destinations int
	// Batches is the number of batches held.
	Batches int
	// Buckets is the number of sparse buckets held over all batches.
	Buckets int
}

// Outcome returns how many inserts had outcome o.
func (s FleetStats) Outcome(o InsertOutcome) uint64 {
	if o < numInsertOutcomes {
		return s.Inserts[o]
	}
	return 0
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

// heldBatch is a stored batch in canonical form (destinations sorted by name,
// private copy) and, per destination, the state it is counted in (nil when
// not counted: an excluded member, or an empty destination).
type heldBatch struct {
	b       Batch
	ds      []*destState
	buckets int
}

// destState is one destination's fleet view and the bookkeeping to keep it
// incrementally: the merged histogram over counted batches whose epoch is in
// the view, each peer's samples in it, and counted samples per held epoch.
type destState struct {
	name    string
	h       hist
	epochN  []uint64 // counted samples per held epoch, at index epoch mod (N+3)
	contrib map[*fleetPeer]uint64
	refs    int // held batch entries counted in this state
	evicted bool
	gen     uint64

	// level is min(peers in view, 2). Destinations at level 0 and 1 are
	// the eviction candidates, kept in f.lists[level] from least to most
	// recently inserted; level 2 is in no list.
	level      int8
	prev, next *destState
	sum        destSummary
}

// Fleet is the fleet view: it holds peers' sealed batches and answers, per
// destination, an estimate backed by the whole fleet (DESIGN.md section 5).
//
// A Fleet is a pure core: time is an argument of every method that depends
// on it, and each such call first slides the window to the epoch of now
// (never backwards: a now before the current epoch slides nothing). It
// starts no goroutine and does no I/O. It is not safe for concurrent use,
// queries included (they slide the window and fill caches); the node guards
// it with a mutex.
//
// Each destination's view is kept incrementally: a batch is added to it when
// inserted or when its epoch enters the view, and subtracted when its epoch
// leaves the view, when it expires or when its member is excluded. A query
// never merges batches.
type Fleet struct {
	cfg   FleetConfig
	geo   geometry
	n     int64 // sub-windows N
	swMs  int64 // sub-window length in ms
	ring  int64 // held epochs N+3
	local localWindow

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
	lists    [2]destList // eviction candidates by level

	stats   FleetStats
	batches int
	buckets int

	// scratch for the share cap
	scratch  []uint64
	touched  []int
	contribs []peerCount
}

// NewFleet returns an empty Fleet, or cfg.Validate()'s error. local is this
// node's tracker (a *SyncTracker[string] or *Tracker[string]) for the local
// view; nil means the node has no local view.
func NewFleet(cfg FleetConfig, local localWindow) (*Fleet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g, err := newGeometry(cfg.Tracker.Layout())
	if err != nil {
		return nil, err
	}
	n := int64(cfg.Tracker.SubWindows)
	return &Fleet{
		cfg:      cfg,
		geo:      g,
		n:        n,
		swMs:     cfg.Tracker.SubWindow().Milliseconds(),
		ring:     n + 3,
		local:    local,
		live:     1,
		members:  make(map[memberKey]*fleetMember),
		peers:    make(map[string]*fleetPeer),
		excluded: make(map[memberKey]int64),
		dests:    make(map[string]*destState),
		scratch:  make([]uint64, g.countsLen),
	}, nil
}

// Config returns the configuration the Fleet was made with.
func (f *Fleet) Config() FleetConfig { return f.cfg }

// SetLiveMembers tells the Fleet how many members are alive or suspect, self
// included; auto MinPeers is min(3, n). Values below 1 count as 1. Until
// first called it is 1.
func (f *Fleet) SetLiveMembers(n int) { f.live = max(n, 1) }

// Stats returns the counters and sizes.
func (f *Fleet) Stats() FleetStats {
	s := f.stats
	s.Members = len(f.members)
	s.Excluded = len(f.excluded)
	s.Peers = len(f.peers)
	s.Destinations = len(f.dests)
	s.Batches = f.batches
	s.Buckets = f.buckets
	return s
}

// Advance slides the window to the epoch of now. Every method that takes a
// time does it first; Advance lets the node expire batches when idle.
func (f *Fleet) Advance(now time.Time) { f.advance(f.epochOf(now)) }

// epochOf is Config.Epoch with the sub-window length computed once.
func (f *Fleet) epochOf(now time.Time) int64 {
	ms := now.UnixMilli()
	e := ms / f.swMs
	if ms%f.swMs != 0 && ms < 0 {
		e--
	}
	return e
}

func (f *Fleet) inView(ep int64) bool { return ep >= f.epoch-f.n+1 && ep <= f.epoch-1 }

func (f *Fleet) slot(ep int64) int64 {
	s := ep % f.ring
	if s < 0 {
		s += f.ring
	}
	return s
}

// advance slides to epoch e: batches whose epoch leaves the view are
// subtracted, those entering it added, those older than e−N−1 dropped.
func (f *Fleet) advance(e int64) {
	if !f.started {
		f.started, f.epoch = true, e
		return
	}
	if e <= f.epoch {
		return
	}
	old := f.epoch
	oldIn := func(ep int64) bool { return ep >= old-f.n+1 && ep <= old-1 }
	f.epoch = e
	lo := e - f.n - 1
	for _, m := range f.members {
		for ep, me := range m.epochs {
			wasIn, isIn := oldIn(ep), f.inView(ep)
			if ep < lo {
				for _, hb := range me.parts {
					if !m.excluded {
						f.uncount(m, hb, ep, wasIn)
					}
					f.batches--
					f.buckets -= hb.buckets
					f.stats.Expired++
				}
				delete(m.epochs, ep)
				continue
			}
			if m.excluded || wasIn == isIn {
				continue
			}
			for _, hb := range me.parts {
				f.moveView(m, hb, isIn)
			}
		}
	}
	for _, m := range f.members {
		f.maybeForget(m)
	}
	for k, ep := range f.excluded {
		if ep+1 < lo && f.members[k] == nil {
			delete(f.excluded, k) // any batch it sent before ep+2 is too old
		}
	}
}

// maybeForget drops a member that holds no batch. Its exclusion, if any,
// stays in f.excluded until it expires.
func (f *Fleet) maybeForget(m *fleetMember) {
	if len(m.epochs) == 0 {
		f.dropMember(m)
	}
}

func (f *Fleet) dropMember(m *fleetMember) {
	for ep, me := range m.epochs {
		for _, hb := range me.parts {
			if !m.excluded {
				f.uncount(m, hb, ep, f.inView(ep))
			}
			f.batches--
			f.buckets -= hb.buckets
		}
	}
	delete(f.members, m.key)
	if ep, ok := f.excluded[m.key]; ok && ep+1 < f.epoch-f.n-1 {
		delete(f.excluded, m.key) // held it alone past its expiry
	}
	p := m.peer
	p.members = slices.DeleteFunc(p.members, func(x *fleetMember) bool { return x == m })
	if len(p.members) == 0 {
		delete(f.peers, p.name)
	}
}

func (f *Fleet) member(k memberKey) *fleetMember {
	_, excl := f.excluded[k]
	m := &fleetMember{key: k, excluded: excl, epochs: make(map[int64]*memberEpoch)}
	p := f.peers[k.name]
	if p == nil {
		p = &fleetPeer{name: k.name}
		f.peers[k.name] = p
	}
	m.peer = p
	p.members = append(p.members, m)
	f.members[k] = m
	return m
}

// count adds hb (of an included member) to the states of its destinations.
func (f *Fleet) count(m *fleetMember, hb *heldBatch, ep int64, inView bool) {
	s := f.slot(ep)
	for i := range hb.b.Dests {
		dc := &hb.b.Dests[i]
		if dc.Total == 0 {
			continue
		}
		d := f.destFor(dc.Dest)
		if d == nil {
			continue // refused: not counted while this batch is held
		}
		hb.ds[i] = d
		d.refs++
		d.epochN[s] += dc.Total
		if inView {
			f.viewAdd(d, m.peer, dc)
		}
		d.gen++
	}
}

// uncount reverses count.
func (f *Fleet) uncount(m *fleetMember, hb *heldBatch, ep int64, inView bool) {
	s := f.slot(ep)
	for i, d := range hb.ds {
		if d == nil {
			continue
		}
		hb.ds[i] = nil
		d.refs--
		if d.evicted {
			continue
		}
		dc := &hb.b.Dests[i]
		d.epochN[s] -= dc.Total
		if inView {
			f.viewSub(d, m.peer, dc)
		}
		d.gen++
		if d.refs == 0 {
			f.unlist(d)
			delete(f.dests, d.name)
		}
	}
}

// moveView moves a counted batch into or out of the view.
func (f *Fleet) moveView(m *fleetMember, hb *heldBatch, in bool) {
	for i, d := range hb.ds {
		if d == nil || d.evicted {
			continue
		}
		if in {
			f.viewAdd(d, m.peer, &hb.b.Dests[i])
		} else {
			f.viewSub(d, m.peer, &hb.b.Dests[i])
		}
		d.gen++
	}
}

func (f *Fleet) viewAdd(d *destState, p *fleetPeer, dc *DestCounts) {
	d.h.addBuckets(dc.Buckets)
	d.contrib[p] += dc.Total
	f.relevel(d)
}

func (f *Fleet) viewSub(d *destState, p *fleetPeer, dc *DestCounts) {
	d.h.subBuckets(dc.Buckets)
	if n := d.contrib[p] - dc.Total; n == 0 {
		delete(d.contrib, p)
	} else {
		d.contrib[p] = n
	}
	f.relevel(d)
}

// relevel moves d to the list of its level after its view's peers changed.
func (f *Fleet) relevel(d *destState) {
	l := int8(min(len(d.contrib), 2))
	if l == d.level {
		return
	}
	f.unlist(d)
	d.level = l
	if l < 2 {
		f.lists[l].pushBack(d)
	}
}

// destFor returns the state of dest, or nil when dest has none and none can
// be made. A new destination beyond MaxDestinations evicts the least
// recently inserted destination with no peer in view, else the least
// recently inserted with one peer in view; when every destination has two
// or more, dest is refused. So one peer's junk destinations never evict a
// destination several peers report.
func (f *Fleet) destFor(dest string) *destState {
	if d := f.dests[dest]; d != nil {
		if d.level < 2 {
			f.lists[d.level].unlink(d)
			f.lists[d.level].pushBack(d)
		}
		return d
	}
	if len(f.dests) >= f.cfg.MaxDestinations {
		v := f.lists[0].head
		if v == nil {
			v = f.lists[1].head
		}
		if v == nil {
			f.stats.DestinationsRefused++
			return nil
		}
		f.unlist(v)
		delete(f.dests, v.name)
		v.evicted = true
		v.h, v.epochN, v.contrib, v.sum = hist{}, nil, nil, destSummary{}
		f.stats.DestinationsEvicted++
	}
	d := &destState{
		name:    dest,
		h:       newHist(&f.geo),
		epochN:  make([]uint64, f.ring),
		contrib: make(map[*fleetPeer]uint64),
	}
	f.dests[dest] = d
	f.lists[0].pushBack(d)
	return d
}

// unlist takes d out of its level's list, if it is in one.
func (f *Fleet) unlist(d *destState) {
	if d.level < 2 {
		f.lists[d.level].unlink(d)
	}
}

// destList is a doubly linked list of destinations, head first.
type destList struct{ head, tail *destState }

func (l *destList) pushBack(d *destState) {
	d.prev, d.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = d
	} else {
		l.head = d
	}
	l.tail = d
}

func (l *destList) unlink(d *destState) {
	if d.prev != nil {
		d.prev.next = d.next
	} else {
		l.head = d.next
	}
	if d.next != nil {
		d.next.prev = d.prev
	} else {
		l.tail = d.prev
	}
	d.prev, d.next = nil, nil
}

// Insert adds a peer's sealed batch (this node's own sealed batches
// included) and says what it did. A batch is stored once per BatchKey: the
// same key again with the same contents is a no-op, with other contents a
// conflict (the first copy stays). Epochs outside [E−N−1, E+1] are refused,
// E being the epoch of now. Insert copies what it keeps: the caller may reuse
// b's slices. Malformed or oversized batches are refused and counted, never
// a panic.
func (f *Fleet) Insert(b Batch, now time.Time) InsertOutcome {
	f.advance(f.epochOf(now))
	o := f.insert(&b)
	f.stats.Inserts[o]++
	return o
}

func (f *Fleet) insert(b *Batch) InsertOutcome {
	if b.Layout != f.geo.layout {
		return InsertLayoutMismatch
	}
	ep := b.Key.Epoch
	if ep < f.epoch-f.n-1 {
		return InsertTooOld
	}
	if ep > f.epoch+1 {
		return InsertTooNew
	}
	if b.Key.Origin == "" || len(b.Key.Origin) > maxDestName {
		return InsertMalformed
	}
	if len(b.Dests) > f.cfg.MaxDestinations {
		return InsertTooLarge
	}
	k := memberKey{b.Key.Origin, b.Key.Boot}
	m := f.members[k]
	var me *memberEpoch
	if m != nil {
		me = m.epochs[ep]
	}
	if me != nil {
		// A re-delivery in canonical order is recognised without a copy.
		if old := me.parts[b.Key.Part]; old != nil && equalBatch(&old.b, b) {
			return InsertDuplicate
		}
	}
	if me == nil || me.parts[b.Key.Part] == nil {
		// A new part: check the bucket budgets before copying anything.
		nb, held := 0, 0
		for i := range b.Dests {
			nb += len(b.Dests[i].Buckets)
		}
		if me != nil {
			held = me.buckets
		}
		if held+nb > f.cfg.MaxEpochBuckets {
			return InsertTooLarge
		}
		if f.buckets+nb > f.cfg.MaxBuckets {
			return InsertBucketsCapped
		}
	}
	hb, samples, o := f.canonical(b)
	if o != InsertNew {
		return o
	}
	entries := max(1, len(hb.b.Dests))
	if me != nil {
		if old := me.parts[b.Key.Part]; old != nil {
			if equalBatch(&old.b, &hb.b) {
				return InsertDuplicate
			}
			return InsertConflict
		}
		if me.samples+samples > maxEpochSamples || me.entries+entries > f.cfg.MaxDestinations {
			return InsertTooLarge
		}
	}
	if m == nil {
		if len(f.members) >= f.cfg.MaxOrigins && !f.evictMember(ep) {
			return InsertOriginCapped
		}
		m = f.member(k)
	}
	if me == nil {
		me = &memberEpoch{parts: make(map[uint16]*heldBatch, 1)}
		m.epochs[ep] = me
	}
	me.parts[b.Key.Part] = hb
	me.samples += samples
	me.entries += entries
	me.buckets += hb.buckets
	f.batches++
	f.buckets += hb.buckets
	if !m.excluded {
		f.count(m, hb, ep, f.inView(ep))
	}
	return InsertNew
}

// canonical validates b and returns a private copy with destinations sorted
// by name, and its number of samples. It copies each bucket once and checks
// the copy.
func (f *Fleet) canonical(b *Batch) (*heldBatch, uint64, InsertOutcome) {
	nb := 0
	for i := range b.Dests {
		nb += len(b.Dests[i].Buckets)
	}
	if nb > len(b.Dests)*int(f.geo.countsLen) {
		return nil, 0, InsertMalformed
	}
	hb := &heldBatch{
		b:       Batch{Key: b.Key, Layout: b.Layout, Dests: make([]DestCounts, len(b.Dests))},
		ds:      make([]*destState, len(b.Dests)),
		buckets: nb,
	}
	all := make([]Bucket, nb)
	// Copy in ascending order of name: through a permutation when the sender
	// did not sort (ours do), which is cheaper than sorting the copies.
	var order []int32
	for i := 1; i < len(b.Dests); i++ {
		if b.Dests[i].Dest <= b.Dests[i-1].Dest {
			order = nameOrder(b.Dests)
			break
		}
	}
	var samples uint64
	for i := range b.Dests {
		dc := &b.Dests[i]
		if order != nil {
			dc = &b.Dests[order[i]]
		}
		if dc.Dest == "" || len(dc.Dest) > maxDestName || i > 0 && dc.Dest == hb.b.Dests[i-1].Dest {
			return nil, 0, InsertMalformed
		}
		out := all[:len(dc.Buckets):len(dc.Buckets)]
		all = all[len(dc.Buckets):]
		copy(out, dc.Buckets) // then check the copy, which the sender cannot change
		sum, last, ok := sumBuckets(out)
		if !ok || last >= int(f.geo.countsLen) || sum != dc.Total {
			return nil, 0, InsertMalformed
		}
		samples += sum
		if samples > maxEpochSamples {
			return nil, 0, InsertTooLarge
		}
		hb.b.Dests[i] = DestCounts{Dest: dc.Dest, Total: dc.Total, Buckets: out}
	}
	return hb, samples, InsertNew
}

// nameOrder returns the indices of ds in ascending order of Dest.
func nameOrder(ds []DestCounts) []int32 {
	order := make([]int32, len(ds))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return strings.Compare(ds[a].Dest, ds[b].Dest) })
	return order
}

// sumBuckets returns the sum of bs's counts and its last index, and false
// unless indices strictly ascend and every count is non-zero. A leaf of its
// own, so the loop keeps its state in registers (Insert's hottest loop).
func sumBuckets(bs []Bucket) (sum uint64, last int, ok bool) {
	last = -1
	for _, b := range bs {
		if int(b.Index) <= last || b.Count == 0 {
			return 0, 0, false
		}
		last = int(b.Index)
		sum += uint64(b.Count) // < 2^16 · 2^32: no overflow
	}
	return sum, last, true
}

func equalBatch(a, b *Batch) bool {
	if a.Key != b.Key || a.Layout != b.Layout || len(a.Dests) != len(b.Dests) {
		return false
	}
	for i := range a.Dests {
		x, y := &a.Dests[i], &b.Dests[i]
		if x.Dest != y.Dest || x.Total != y.Total || !slices.Equal(x.Buckets, y.Buckets) {
			return false
		}
	}
	return true
}

// evictMember makes room for a new member whose first batch has epoch ep:
// it evicts an excluded member (its exclusion stays remembered, so its
// batches never count if delivered again), else the member with the oldest
// newest batch, that is older than ep (never one of Self's members). Ties
// break by name and boot, so the choice is deterministic.
func (f *Fleet) evictMember(ep int64) bool {
	var victim *fleetMember
	var vExcl bool
	var vNewest int64
	for _, m := range f.members {
		if m.key.name == f.cfg.Self && f.cfg.Self != "" {
			continue
		}
		newest := int64(minEpoch)
		for e := range m.epochs {
			newest = max(newest, e)
		}
		if !m.excluded && newest >= ep {
			continue
		}
		better := victim == nil ||
			(m.excluded && !vExcl) ||
			(m.excluded == vExcl && (newest < vNewest || newest == vNewest &&
				cmp.Or(cmp.Compare(m.key.name, victim.key.name), cmp.Compare(m.key.boot, victim.key.boot)) < 0))
		if better {
			victim, vExcl, vNewest = m, m.excluded, newest
		}
	}
	if victim == nil {
		return false
	}
	f.dropMember(victim)
	f.stats.OriginsEvicted++
	return true
}

const minEpoch = -1 << 63

// Exclude removes member (name, boot) from every view at once, as when
// membership declares it dead; its batches are kept until they age out, so
// a refuted death (Include) costs nothing. Batches that arrive for it later
// are stored but not counted.
//
// The exclusion is remembered apart from the batches and the MaxOrigins cap,
// known member or not, until Include, or until the member holds no batch and
// any batch it sent before E+2 (E the epoch of the last Exclude) is refused
// as too old: so a dead member whose batches the MaxOrigins cap evicted is
// still not counted when they are delivered again. At most 4·MaxOrigins
// exclusions are remembered; beyond, the one excluded longest ago is
// forgotten with its member's batches (counted in
// FleetStats.ExclusionsEvicted), and that member's batches would count if
// delivered again.
func (f *Fleet) Exclude(name string, boot uint64, now time.Time) {
	f.advance(f.epochOf(now))
	k := memberKey{name, boot}
	if _, ok := f.excluded[k]; !ok && len(f.excluded) >= f.maxExclusions() {
		f.evictExclusion()
	}
	f.excluded[k] = f.epoch
	m := f.members[k]
	if m == nil || m.excluded {
		return
	}
	m.excluded = true
	for ep, me := range m.epochs {
		for _, hb := range me.parts {
			f.uncount(m, hb, ep, f.inView(ep))
		}
	}
}

// maxExclusions bounds f.excluded: 4·MaxOrigins records of about 100 bytes
// plus the name.
func (f *Fleet) maxExclusions() int { return 4 * f.cfg.MaxOrigins }

// evictExclusion forgets the exclusion made longest ago (ties by name and
// boot) and drops its member's batches, which were not counted.
func (f *Fleet) evictExclusion() {
	var victim memberKey
	vEpoch, found := int64(0), false
	for k, ep := range f.excluded {
		if !found || ep < vEpoch || ep == vEpoch &&
			cmp.Or(cmp.Compare(k.name, victim.name), cmp.Compare(k.boot, victim.boot)) < 0 {
			victim, vEpoch, found = k, ep, true
		}
	}
	if !found {
		return
	}
	delete(f.excluded, victim)
	if m := f.members[victim]; m != nil {
		f.dropMember(m)
	}
	f.stats.ExclusionsEvicted++
}

// Include counts member (name, boot) in the views again, as when it refuted
// its death, and forgets its exclusion. A member not excluded is left as is.
func (f *Fleet) Include(name string, boot uint64, now time.Time) {
	f.advance(f.epochOf(now))
	k := memberKey{name, boot}
	delete(f.excluded, k)
	m := f.members[k]
	if m == nil || !m.excluded {
		return
	}
	m.excluded = false
	for ep, me := range m.epochs {
		for _, hb := range me.parts {
			f.count(m, hb, ep, f.inView(ep))
		}
	}
	f.maybeForget(m)
}

// Keys returns the keys of every batch held (for an anti-entropy digest),
// newest epochs first, then by origin, boot and part.
func (f *Fleet) Keys(now time.Time) []BatchKey {
	f.advance(f.epochOf(now))
	keys := make([]BatchKey, 0, f.batches)
	for _, m := range f.members {
		for _, me := range m.epochs {
			for _, hb := range me.parts {
				keys = append(keys, hb.b.Key)
			}
		}
	}
	slices.SortFunc(keys, compareKeysNewestFirst)
	return keys
}

// Missing returns the keys of theirs (a peer's digest) that this fleet does
// not hold and would accept now (epoch in [E−N−1, E+1]), without repeats,
// newest epochs first: what to pull from that peer.
func (f *Fleet) Missing(theirs []BatchKey, now time.Time) []BatchKey {
	f.advance(f.epochOf(now))
	var out []BatchKey
	for _, k := range theirs {
		if k.Epoch < f.epoch-f.n-1 || k.Epoch > f.epoch+1 {
			continue
		}
		if _, ok := f.Lookup(k); !ok {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, compareKeysNewestFirst)
	return slices.Compact(out)
}

// Lookup returns the batch held under k, to serve a peer's pull. Its
// destinations are sorted by name. The batch shares the Fleet's memory, which
// is never written again once stored: it must not be modified, and it may be
// read (encoded) after the caller releases the lock guarding the Fleet.
func (f *Fleet) Lookup(k BatchKey) (Batch, bool) {
	m := f.members[memberKey{k.Origin, k.Boot}]
	if m == nil {
		return Batch{}, false
	}
	me := m.epochs[k.Epoch]
	if me == nil {
		return Batch{}, false
	}
	hb := me.parts[k.Part]
	if hb == nil {
		return Batch{}, false
	}
	return hb.b, true
}

func compareKeysNewestFirst(a, b BatchKey) int {
	return cmp.Or(
		cmp.Compare(b.Epoch, a.Epoch),
		cmp.Compare(a.Origin, b.Origin),
		cmp.Compare(a.Boot, b.Boot),
		cmp.Compare(a.Part, b.Part),
	)
}
