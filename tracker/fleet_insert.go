package tracker

import (
	"slices"
	"time"
)

// Insert adds a peer's sealed batch (this node's own sealed batches
// included) and says what it did. A batch is stored once per BatchKey: the
// same key again with the same contents is a no-op, with other contents a
// conflict (the first copy stays). Epochs outside [E−N−1, E+1] are refused,
// E being the epoch of now. Insert copies what it keeps: the caller may reuse
// b's slices. Malformed or oversized batches are refused and counted, never
// a panic.
func (f *Fleet) Insert(b Batch, now time.Time) InsertOutcome {
	f.lockChange(now)
	defer f.unlockChange()
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
	if !ValidName(b.Key.Origin) {
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
		if old := me.parts[b.Key.Part]; old != nil && old.equal(b.Dests) {
			return InsertDuplicate
		}
	}
	if me == nil || me.parts[b.Key.Part] == nil {
		// A new part: check the bucket budgets before copying anything.
		nb, held := 0, 0
		for i := range b.Dests {
			nb += len(b.Dests[i].Buckets) + len(b.Dests[i].TimedOut)
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
	entries := max(1, len(hb.dests))
	if me != nil {
		if old := me.parts[b.Key.Part]; old != nil {
			if old.equal(hb.batch(f.geo.layout).Dests) { // (rare: a conflict, or a re-delivery out of order)
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
// by name, and its number of samples. It copies each bucket (counts and
// censored counts) once and checks the copy.
func (f *Fleet) canonical(b *Batch) (*heldBatch, uint64, InsertOutcome) {
	nb := 0
	for i := range b.Dests {
		nb += len(b.Dests[i].Buckets) + len(b.Dests[i].TimedOut)
	}
	if nb > 2*len(b.Dests)*int(f.geo.countsLen) {
		return nil, 0, InsertMalformed
	}
	hb := &heldBatch{
		key:     b.Key,
		dests:   make([]heldDest, len(b.Dests)),
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
		if !ValidName(dc.Dest) || i > 0 && dc.Dest == hb.dests[i-1].name {
			return nil, 0, InsertMalformed
		}
		out := all[:len(dc.Buckets):len(dc.Buckets)]
		all = all[len(dc.Buckets):]
		copy(out, dc.Buckets) // then check the copies, which the sender cannot change
		var to []Bucket
		if len(dc.TimedOut) > 0 {
			to = all[:len(dc.TimedOut):len(dc.TimedOut)]
			all = all[len(dc.TimedOut):]
			copy(to, dc.TimedOut)
		}
		if !validCounts(out, to, dc.Total, dc.CensoringUnknown, &f.geo) {
			return nil, 0, InsertMalformed
		}
		samples += dc.Total
		if samples > maxEpochSamples {
			return nil, 0, InsertTooLarge
		}
		hb.dests[i] = heldDest{name: dc.Dest, total: dc.Total, buckets: out}
		if to != nil || dc.CensoringUnknown {
			if hb.cens == nil {
				hb.cens = make([]heldCensoring, len(b.Dests))
			}
			hb.cens[i] = heldCensoring{timedOut: to, unknown: dc.CensoringUnknown}
		}
	}
	return hb, samples, InsertNew
}

// nameOrder returns the indices of ds in ascending order of Dest.
func nameOrder(ds []DestCounts) []int32 {
	order := make([]int32, len(ds))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return compareDestPtrs(&ds[a], &ds[b]) })
	return order
}

// validCounts reports whether a destination's counts bs, of total samples,
// and censored counts to are valid in geometry g: bs's indices strictly
// ascending and in range, its counts non-zero and summing to total, and to
// within bs (censoredWithin), empty when censoring is unknown. Every path
// that takes counts from a peer checks them with it.
func validCounts(bs, to []Bucket, total uint64, unknown bool, g *geometry) bool {
	sum, last, ok := sumBuckets(bs)
	if !ok || last >= int(g.countsLen) || sum != total {
		return false
	}
	return len(to) == 0 || !unknown && censoredWithin(to, bs)
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

// censoredWithin reports whether censored counts to are consistent with the
// counts bs (both as DestCounts holds them): to ascends strictly, each
// count is at least 1, at an index of bs, and at most the count there.
func censoredWithin(to, bs []Bucket) bool {
	k, last := 0, -1
	for _, c := range to {
		if int(c.Index) <= last || c.Count == 0 {
			return false
		}
		last = int(c.Index)
		for k < len(bs) && bs[k].Index < c.Index {
			k++
		}
		if k == len(bs) || bs[k].Index != c.Index || c.Count > bs[k].Count {
			return false
		}
	}
	return true
}
