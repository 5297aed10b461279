package sim

import (
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// maxParts is the most parts one origin's batch may have in a simulation:
// a node's held set reserves this many bits per (epoch, origin). At the
// default 64 KiB part size that is room for about 3000 destinations.
const maxParts = 4

// sharedBatch is one sealed batch part, held once for the whole simulation
// and shared by every node that holds it: nodes hold a bit, not a copy.
// It is never modified once registered.
type sharedBatch struct {
	b      tracker.Batch
	origin int32
	size   int           // encoded size in bytes
	sealAt time.Duration // when its origin sealed it; -1 until then
	// holders counts the nodes holding it, origin included.
	holders int32
}

// batchTable holds every batch part of the accepted epochs, by ring slot
// (epoch mod ring), origin and part. A slot is cleared when its epoch
// expires, at the same instant on every node (they share one clock).
type batchTable struct {
	nodes  int
	ring   int
	trk    tracker.Config
	layout tracker.Layout
	slots  [][maxParts]*sharedBatch // [slot*nodes+origin][part]
	index  map[string]int32         // origin name → node
	boots  []uint64                 // node → boot ID
	old    map[int32][]uint64       // node → the boot IDs it had before a restart
}

func newBatchTable(trk tracker.Config, names []string, boots []uint64) *batchTable {
	t := &batchTable{
		nodes:  len(names),
		ring:   trk.SubWindows + 4,
		trk:    trk,
		layout: trk.Layout(),
		index:  make(map[string]int32, len(names)),
		boots:  boots,
	}
	t.slots = make([][maxParts]*sharedBatch, t.ring*t.nodes)
	for i, n := range names {
		t.index[n] = int32(i)
	}
	return t
}

// slot is the ring slot of epoch e.
func (t *batchTable) slot(e int64) int {
	r := int64(t.ring)
	return int(((e % r) + r) % r)
}

// origin returns the node that k names, or false for an unknown origin or
// boot (the node's current one, or one it had before a restart).
func (t *batchTable) origin(k tracker.BatchKey) (int32, bool) {
	o, ok := t.index[k.Origin]
	return o, ok && (t.boots[o] == k.Boot || slices.Contains(t.old[o], k.Boot))
}

// reboot makes boot node o's current boot. A node's boots seal disjoint
// epochs (a boot seals only those that start after it did), so their
// batches share the node's slots.
func (t *batchTable) reboot(o int32, boot uint64) {
	if t.old == nil {
		t.old = map[int32][]uint64{}
	}
	t.old[o] = append(t.old[o], t.boots[o])
	t.boots[o] = boot
}

// bit is the index of k's part in a node's held set, and the entry for it;
// ok is false for a key the table cannot name.
func (t *batchTable) bit(k tracker.BatchKey) (int, *sharedBatch, bool) {
	o, ok := t.origin(k)
	if !ok || int(k.Part) >= maxParts {
		return 0, nil, false
	}
	i := t.slot(k.Epoch)*t.nodes + int(o)
	sb := t.slots[i][k.Part]
	if sb != nil && (sb.b.Key.Epoch != k.Epoch || sb.b.Key.Boot != k.Boot) {
		sb = nil // cannot happen while slots are cleared on time
	}
	return i*maxParts + int(k.Part), sb, true
}

// register stores a private copy of b, the first copy of its key anyone
// inserted, and returns it.
func (t *batchTable) register(b tracker.Batch) (*sharedBatch, error) {
	bit, sb, ok := t.bit(b.Key)
	if !ok {
		return nil, fmt.Errorf("sim: cannot hold batch %v (unknown origin or more than %d parts)", b.Key, maxParts)
	}
	if sb != nil {
		return sb, nil
	}
	b = codec.CloneBatch(b)
	msg, err := codec.AppendBatch(nil, b)
	if err != nil {
		return nil, fmt.Errorf("sim: encode batch %v: %w", b.Key, err)
	}
	sb = &sharedBatch{b: b, origin: int32(bit / maxParts % t.nodes), size: len(msg), sealAt: -1}
	t.slots[bit/maxParts][b.Key.Part] = sb
	return sb, nil
}

// expire clears the slot of epoch e and calls fn with each batch in it.
func (t *batchTable) expire(e int64, fn func(*sharedBatch)) {
	base := t.slot(e) * t.nodes
	for o := range t.nodes {
		for p, sb := range t.slots[base+o] {
			if sb != nil {
				fn(sb)
				t.slots[base+o][p] = nil
			}
		}
	}
}

// each calls fn with every batch held in the table.
func (t *batchTable) each(fn func(*sharedBatch)) {
	for i := range t.slots {
		for _, sb := range t.slots[i] {
			if sb != nil {
				fn(sb)
			}
		}
	}
}

// sharedStore is the cluster.Store of a node that is not an observer: the
// batches it holds are bits over the shared batchTable, so a thousand
// nodes cost a thousand bitsets, not a thousand fleet views. It answers
// Insert, Keys, Missing and Lookup exactly as tracker.Fleet does for the
// batches a simulation makes (TestSharedStoreMatchesFleet); it keeps no
// views, so Exclude, Include and SetLiveMembers, which act on views only,
// do nothing.
type sharedStore struct {
	t    *batchTable
	self int32 // this node: the only origin whose batches it registers
	held bitset
	n    int // batches held
}

var _ cluster.Store = (*sharedStore)(nil)

func newSharedStore(t *batchTable, self int32) *sharedStore {
	return &sharedStore{t: t, self: self, held: newBitset(len(t.slots) * maxParts)}
}

// accepts reports whether epoch e is accepted at now: [E−N−1, E+1].
func (s *sharedStore) accepts(e int64, now time.Time) bool {
	E := s.t.trk.Epoch(now)
	return e >= E-int64(s.t.trk.SubWindows)-1 && e <= E+1
}

// Insert holds b if the table has it with the same contents, or registers
// it when it is this node's own (at seal: the table is written only then,
// never while nodes receive in parallel). A batch whose contents differ
// from the registered copy is a conflict, and one of another origin that
// is not registered is malformed: in a simulation either is a bug.
func (s *sharedStore) Insert(b tracker.Batch, now time.Time) tracker.InsertOutcome {
	switch {
	case b.Layout != s.t.layout:
		return tracker.InsertLayoutMismatch
	case b.Key.Epoch > s.t.trk.Epoch(now)+1:
		return tracker.InsertTooNew
	case !s.accepts(b.Key.Epoch, now):
		return tracker.InsertTooOld
	}
	bit, sb, ok := s.t.bit(b.Key)
	if !ok {
		return tracker.InsertMalformed
	}
	if sb == nil {
		if o, _ := s.t.origin(b.Key); o != s.self {
			return tracker.InsertMalformed
		}
		if _, err := s.t.register(b); err != nil {
			return tracker.InsertMalformed
		}
	} else if !sameBatch(&sb.b, &b) {
		return tracker.InsertConflict
	}
	if s.held.has(bit) {
		return tracker.InsertDuplicate
	}
	s.held.set(bit)
	s.n++
	return tracker.InsertNew
}

// sameBatch reports whether a and b have the same key, layout and
// destinations in the same order.
func sameBatch(a, b *tracker.Batch) bool {
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

// Keys returns the keys held, newest epochs first, then by origin, boot and
// part (Fleet.Keys' order: node names sort as node indices).
func (s *sharedStore) Keys(now time.Time) []tracker.BatchKey {
	E := s.t.trk.Epoch(now)
	keys := make([]tracker.BatchKey, 0, s.n)
	per := s.t.nodes * maxParts
	for e := E + 1; e >= E-int64(s.t.trk.SubWindows)-1; e-- {
		lo := s.t.slot(e) * per
		for i := lo; i < lo+per; {
			if i%64 == 0 && i+64 <= lo+per && s.held[i/64] == 0 {
				i += 64
				continue
			}
			if s.held.has(i) {
				if sb := s.t.slots[i/maxParts][i%maxParts]; sb != nil && sb.b.Key.Epoch == e {
					keys = append(keys, sb.b.Key)
				}
			}
			i++
		}
	}
	return keys
}

// Missing returns the keys of theirs this node does not hold and would
// accept now, without repeats, newest epochs first.
func (s *sharedStore) Missing(theirs []tracker.BatchKey, now time.Time) []tracker.BatchKey {
	var out []tracker.BatchKey
	for _, k := range theirs {
		if !s.accepts(k.Epoch, now) {
			continue
		}
		if _, ok := s.Lookup(k); !ok {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, cluster.CompareKeysNewestFirst)
	return slices.Compact(out)
}

// Lookup returns the shared batch under k if this node holds it.
func (s *sharedStore) Lookup(k tracker.BatchKey) (tracker.Batch, bool) {
	bit, sb, ok := s.t.bit(k)
	if !ok || sb == nil || !s.held.has(bit) {
		return tracker.Batch{}, false
	}
	return sb.b, true
}

// Exclude does nothing: a sharedStore keeps no views.
func (s *sharedStore) Exclude(string, uint64, time.Time) {}

// Include does nothing: a sharedStore keeps no views.
func (s *sharedStore) Include(string, uint64, time.Time) {}

// SetLiveMembers does nothing: a sharedStore keeps no views.
func (s *sharedStore) SetLiveMembers(int) {}

// drop clears the bits of the slot of epoch e.
func (s *sharedStore) drop(e int64) {
	per := s.t.nodes * maxParts
	lo := s.t.slot(e) * per
	for i := lo; i < lo+per; {
		if i%64 == 0 && i+64 <= lo+per {
			s.n -= bits.OnesCount64(s.held[i/64])
			s.held[i/64] = 0
			i += 64
			continue
		}
		if s.held.has(i) {
			s.n--
			s.held.clear(i)
		}
		i++
	}
}

// bitset is a fixed-size set of small integers.
type bitset []uint64

func newBitset(n int) bitset    { return make(bitset, (n+63)/64) }
func (b bitset) set(i int)      { b[i/64] |= 1 << (i % 64) }
func (b bitset) clear(i int)    { b[i/64] &^= 1 << (i % 64) }
func (b bitset) has(i int) bool { return b[i/64]&(1<<(i%64)) != 0 }
func (b bitset) count() int {
	c := 0
	for _, w := range b {
		c += bits.OnesCount64(w)
	}
	return c
}
