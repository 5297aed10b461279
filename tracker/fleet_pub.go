package tracker

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// factsTable is where an estimate finds the fleet's facts of a destination
// without the Fleet's lock: the facts the locked path last computed for a
// (destination, quantile), published with the Fleet's version and epoch
// they were read at. It is a two-way set-associative table indexed by a
// seeded hash of the name and the quantile; a slot holds the cell last
// published there, and a collision costs a miss (the locked path), never a
// wrong answer.
//
// A cell holds while the Fleet's version is the one it was read at (every
// insert, exclusion, change of live members and slide moves the version)
// and now is before the end of its epoch (an estimate at such a time would
// slide nothing), which are exactly the conditions under which the locked
// path would compute the same facts again.
type factsTable struct {
	slots []atomic.Pointer[factsCell]
	mask  uint64
	keys  pubTable // only its seed is set: its key function digests names
}

// factsCell is one (destination, quantile)'s published fleet facts: an
// immutable factsSnap, and what it holds for (the Fleet's version and
// epoch it was read at, and the end of that epoch). Those fields are a
// sequence lock, as pubCell's: seq is odd while the publisher (under the
// Fleet's lock) writes them, and a reader that sees seq odd or changed
// takes the locked path. The facts themselves are read in place, without a
// copy: a snapshot is never written once published, and a new one is made
// only when the facts differ from the last one's (a change elsewhere in
// the Fleet moves the version but leaves most destinations' facts as they
// were). key, id and q are immutable.
type factsCell struct {
	seq   atomic.Uint64
	ver   atomic.Uint64 // the Fleet's version the facts were read at
	epoch atomic.Int64  // the Fleet's epoch then
	end   atomic.Int64  // its end, Unix ms: the facts hold for times before it
	snap  atomic.Pointer[factsSnap]
	key   string
	id    pubKey
	q     uint64 // float64 bits
}

// factsSnap is a published fleetFacts, never written once published.
type factsSnap struct{ ff fleetFacts }

// of reports whether c is the cell of the name with digest k at quantile
// bits q.
func (c *factsCell) of(k *pubKey, name string, q uint64) bool {
	return c.q == q && c.id == *k && (k.n <= 16 || c.key == name)
}

// index returns the first of the two slots of digest k at quantile bits q.
func (tb *factsTable) index(k *pubKey, q uint64) uint64 {
	return (k.hash ^ q*0x9e3779b97f4a7c15) & tb.mask
}

// cell returns the cell of (name, q) in tb, or nil.
func (tb *factsTable) cell(k *pubKey, name string, q uint64) *factsCell {
	i := tb.index(k, q)
	if c := tb.slots[i].Load(); c != nil && c.of(k, name, q) {
		return c
	}
	if c := tb.slots[i^1].Load(); c != nil && c.of(k, name, q) {
		return c
	}
	return nil
}

// publishFacts publishes ff, dest's facts at quantile q just computed by
// the locked path at the Fleet's current version and epoch; f.mu is held
// (the only writers). The table is made at the first publication.
func (f *Fleet) publishFacts(dest string, q float64, ff *fleetFacts) {
	if f.clock.start > f.clock.end {
		return // an epoch at the edge of time: its end is not cached
	}
	tb := f.pub.Load()
	if tb == nil {
		n := pubTableSize(f.cfg.MaxDestinations)
		tb = &factsTable{slots: make([]atomic.Pointer[factsCell], n), mask: uint64(n - 1)}
		tb.keys.seed = rand.Uint64()
		f.pub.Store(tb)
	}
	k := tb.keys.key(dest)
	qb := math.Float64bits(q)
	c := tb.cell(&k, dest, qb)
	fresh := c == nil
	if fresh {
		c = &factsCell{key: dest, id: k, q: qb}
	}
	sp := c.snap.Load()
	if sp == nil || sp.ff != *ff {
		sp = &factsSnap{ff: *ff}
	}
	c.seq.Add(1)
	c.ver.Store(f.ver.Load())
	c.epoch.Store(f.epoch)
	c.end.Store(f.clock.end)
	c.snap.Store(sp)
	c.seq.Add(1)
	if !fresh {
		return
	}
	// A new cell takes a slot whose cell no longer holds, else the first.
	i, ver := tb.index(&k, qb), f.ver.Load()
	a, b := &tb.slots[i], &tb.slots[i^1]
	switch pa, pb := a.Load(), b.Load(); {
	case pa == nil || pa.ver.Load() != ver:
		a.Store(c)
	case pb == nil || pb.ver.Load() != ver:
		b.Store(c)
	default:
		a.Store(c)
	}
}

// readFacts returns dest's facts at quantile q published for now, with
// the Fleet's version and epoch they were read at; nil when none holds.
// It takes no lock: the answer is the one the locked path would compute at
// the version it read, which is ordered before any change made since. The
// facts returned must not be modified.
func (f *Fleet) readFacts(dest string, q float64, now time.Time) (*fleetFacts, uint64, int64) {
	tb := f.pub.Load()
	if tb == nil {
		return nil, 0, 0
	}
	ver := f.ver.Load()
	k := tb.keys.key(dest)
	c := tb.cell(&k, dest, math.Float64bits(q))
	if c == nil {
		return nil, 0, 0
	}
	s := c.seq.Load()
	sp, ep, end := c.snap.Load(), c.epoch.Load(), c.end.Load()
	if sp == nil || s&1 != 0 || c.ver.Load() != ver || now.UnixMilli() >= end || c.seq.Load() != s {
		return nil, 0, 0
	}
	return &sp.ff, ver, ep
}
