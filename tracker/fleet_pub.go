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

// factsCell is one (destination, quantile)'s published fleetFacts. Its
// fields are a sequence lock, as pubCell's: seq is odd while the
// publisher (under the Fleet's lock) writes them, and a reader that sees
// seq odd or changed takes the locked path. key, id and q are immutable.
type factsCell struct {
	seq       atomic.Uint64
	flags     atomic.Uint64 // factsValid | the fleetFacts booleans; 0 until published
	ver       atomic.Uint64 // the Fleet's version the facts were read at
	epoch     atomic.Int64  // the Fleet's epoch then
	end       atomic.Int64  // its end, Unix ms: the facts hold for times before it
	fvQ       atomic.Uint64
	fvSamples atomic.Uint64
	fvCens    atomic.Uint64
	fvM       atomic.Uint64
	samples   atomic.Uint64
	peers     atomic.Int64
	effPeers  atomic.Uint64 // float64 bits
	newestEnd atomic.Int64
	key       string
	id        pubKey
	q         uint64 // float64 bits
}

// The bits of factsCell.flags.
const (
	factsValid = 1 << iota
	factsHasFleet
	factsTrusted
	factsHasFleetValue
	factsHasNewest
	factsHasM
	factsUnknown
)

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
	fl := uint64(factsValid) | bitIf(ff.hasFleet, factsHasFleet) | bitIf(ff.trusted, factsTrusted) |
		bitIf(ff.hasFleetValue, factsHasFleetValue) | bitIf(ff.hasNewest, factsHasNewest) |
		bitIf(ff.fv.hasM, factsHasM) | bitIf(ff.fv.unknown, factsUnknown)
	c.seq.Add(1)
	c.ver.Store(f.ver.Load())
	c.epoch.Store(f.epoch)
	c.end.Store(f.clock.end)
	c.fvQ.Store(ff.fv.q)
	c.fvSamples.Store(ff.fv.samples)
	c.fvCens.Store(ff.fv.censored)
	c.fvM.Store(ff.fv.m)
	c.samples.Store(ff.samples)
	c.peers.Store(int64(ff.peers))
	c.effPeers.Store(math.Float64bits(ff.effPeers))
	c.newestEnd.Store(ff.newestEnd)
	c.flags.Store(fl)
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

// readFacts sets *ff to dest's facts at quantile q published for now,
// and returns the Fleet's version and epoch they were read at and true;
// false when none holds (ff is then unspecified). It takes no lock: the
// answer is the one the locked path would compute at the version it
// read, which is ordered before any change made since.
func (f *Fleet) readFacts(ff *fleetFacts, dest string, q float64, now time.Time) (uint64, int64, bool) {
	tb := f.pub.Load()
	if tb == nil {
		return 0, 0, false
	}
	ver := f.ver.Load()
	k := tb.keys.key(dest)
	c := tb.cell(&k, dest, math.Float64bits(q))
	if c == nil {
		return 0, 0, false
	}
	s := c.seq.Load()
	fl := c.flags.Load()
	ep, end := c.epoch.Load(), c.end.Load()
	*ff = fleetFacts{
		fv: viewFacts{q: c.fvQ.Load(), samples: c.fvSamples.Load(), censored: c.fvCens.Load(), m: c.fvM.Load(),
			hasM: fl&factsHasM != 0, unknown: fl&factsUnknown != 0},
		hasFleet:      fl&factsHasFleet != 0,
		trusted:       fl&factsTrusted != 0,
		hasFleetValue: fl&factsHasFleetValue != 0,
		hasNewest:     fl&factsHasNewest != 0,
		samples:       c.samples.Load(),
		peers:         int(c.peers.Load()),
		effPeers:      math.Float64frombits(c.effPeers.Load()),
		newestEnd:     c.newestEnd.Load(),
	}
	if fl == 0 || s&1 != 0 || c.ver.Load() != ver || now.UnixMilli() >= end || c.seq.Load() != s {
		return 0, 0, false
	}
	return ver, ep, true
}

// bitIf returns bit when on, else 0.
func bitIf(on bool, bit uint64) uint64 {
	if on {
		return bit
	}
	return 0
}
