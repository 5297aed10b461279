package tracker

import (
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// numShards is the number of independently locked parts of a SyncTracker.
// Destinations are spread over them by hash, so recording to different
// destinations rarely contends.
const numShards = 64

// SyncTracker is a Tracker safe for concurrent use: for the same sequence of
// calls it gives exactly the answers Tracker gives. Destinations are spread
// over 64 shards by hash, each with its own mutex, so calls on different
// destinations rarely contend. Create one with NewSync: the zero value is not
// usable.
//
// The current epoch is shared by all shards: the highest epoch of any time
// passed to any method so far.
//
// With MaxDestinations > 0 every Record also takes a global sequence number
// (one atomic add, skipped when the destination is already the most
// recently recorded) to order destinations for eviction, and creating a
// destination beyond the bound briefly locks each shard in turn to find the
// least recently recorded ones, then the few it compares (see
// Config.MaxDestinations). While concurrent calls create destinations the
// bound may be exceeded for the duration of those calls.
type SyncTracker[D comparable] struct {
	s     settings
	seed  maphash.Seed               // for a key not a string
	sseed uint64                     // for a string key (strHash)
	clock atomic.Pointer[clockState] // nil until the first call
	pubs  atomic.Pointer[pubTable]   // the published decision inputs (pubCell), nil until the first
	// clock and pubs, read by every call, share no cache line with a
	// shard's lock (this padding) nor with seq (the last shard's).
	_      [64]byte
	shards [numShards]syncShard[D]

	// Eviction, used only when MaxDestinations > 0.
	seq     atomic.Uint64 // sequence number of Record calls
	count   atomic.Int64  // destinations; changed only under a shard lock
	evicted atomic.Uint64 // destinations dropped by MaxDestinations
	evictMu sync.Mutex    // one evictor at a time; guards the scratch below
	refs    []evictRef
	cands   []evictCand[D]
}

// syncShard holds the destinations whose hash falls in it, in an open
// addressing table keyed by that hash (computed once per call, for choosing
// the shard too, so a lookup does not hash the key a second time): linear
// probing from the hash's bits above the shard's, the hash kept beside each
// entry so a probe compares a key only when the hashes are equal. One
// lookup is then an index, a compare of the hash and one of the key, where
// the map it replaces spent ~10 % of a record on its own hash of the key
// and its groups.
type syncShard[D comparable] struct {
	mu   sync.Mutex
	recs uint64 // samples recorded into the shard, under mu (Recorded)
	// anyRecs counts the records that took recordAny, under mu: tests
	// check that the common record does not.
	anyRecs uint64
	slots   []destSlot[D] // a power of two long, at most half full; nil while empty
	n       atomic.Int64  // entries; written under mu, read without it to skip empty shards
	order   recency[D]    // the eviction order, when MaxDestinations > 0
	// The padding keeps neighbouring shards' locks off one cache line
	// (the last 48 bytes of a shard are never written) and makes a shard
	// 128 bytes, so a record finds its shard with a shift.
	_ [48]byte
}

// destSlot is a slot of a shard's table: an entry and its slot hash
// (slotHash), en nil when the slot is free.
type destSlot[D comparable] struct {
	hash uint64
	en   *entry[D]
}

// slotHash is what a slot holds of an entry of hash h and key k: h with
// its low bits, the shard's index (the same for every entry of a shard),
// replaced by the key's length when a string (at most numShards−1; 0
// otherwise). A record of a short name then learns from the one compare
// of the hashes that the lengths are equal too (isKey).
func slotHash[D comparable](h uint64, k D) uint64 {
	return slotHashLen(h, keyLen(k))
}

// slotHashLen is slotHash for a key of length n (0 when not a string).
func slotHashLen(h uint64, n int) uint64 {
	return h&^(numShards-1) | uint64(min(n, numShards-1))
}

// minSlots is the length of a shard's table when it first holds an entry.
const minSlots = 8

// home returns the slot a hash h probes first in a table of mask+1 slots:
// the bits above the shard index's.
func home(h, mask uint64) uint64 { return h >> 6 & mask }

func (sh *syncShard[D]) get(h uint64, dest D) *entry[D] {
	if len(sh.slots) == 0 {
		return nil
	}
	// The slot hash's low bits (slotHash) are left out: the key decides.
	mask, hi := uint64(len(sh.slots)-1), h&^(numShards-1)
	for j := home(h, mask); ; j = (j + 1) & mask {
		s := &sh.slots[j]
		if s.en == nil {
			return nil
		}
		if s.hash&^(numShards-1) == hi && s.en.key == dest {
			return s.en
		}
	}
}

// isKey reports whether s holds the string key of at most 16 bytes
// whose slot hash is sh (slotHashLen of its hash and length) and whose
// words (shortWords) are a and b, comparing those, not the key's bytes: a
// call of the runtime's memequal, and the spills around it, per record.
func (s *destSlot[D]) isKey(sh, a, b uint64) bool {
	return s.hash == sh && s.en.words == [2]uint64{a, b}
}

// keyLen is the length of k when it is a string.
func keyLen[D comparable](k D) int {
	s, _ := any(k).(string)
	return len(s)
}

func (sh *syncShard[D]) put(en *entry[D]) {
	if n := int(sh.n.Load()) + 1; 2*n > len(sh.slots) {
		sh.grow(max(2*len(sh.slots), minSlots))
	}
	sh.insert(en)
	sh.n.Add(1)
}

// insert puts en in the first free slot from its home; one must be free.
func (sh *syncShard[D]) insert(en *entry[D]) {
	mask := uint64(len(sh.slots) - 1)
	j := home(en.hash, mask)
	for sh.slots[j].en != nil {
		j = (j + 1) & mask
	}
	sh.slots[j] = destSlot[D]{hash: slotHash(en.hash, en.key), en: en}
}

// grow moves the entries to a table of size slots.
func (sh *syncShard[D]) grow(size int) {
	old := sh.slots
	sh.slots = make([]destSlot[D], size)
	for _, s := range old {
		if s.en != nil {
			sh.insert(s.en)
		}
	}
}

// del removes en, which must be held, and shifts the entries after it
// back so that every entry stays reachable from its home without a
// tombstone.
func (sh *syncShard[D]) del(en *entry[D]) {
	mask := uint64(len(sh.slots) - 1)
	i := home(en.hash, mask)
	for sh.slots[i].en != en {
		i = (i + 1) & mask
	}
	for k := (i + 1) & mask; sh.slots[k].en != nil; k = (k + 1) & mask {
		// The entry at k may fill the hole at i when its home is not in
		// (i, k] cyclically: it probed past i to reach k.
		if (k-home(sh.slots[k].hash, mask))&mask >= (k-i)&mask {
			sh.slots[i] = sh.slots[k]
			i = k
		}
	}
	sh.slots[i] = destSlot[D]{}
	sh.n.Add(-1)
	en.ec.unpublish()
}

// each calls f for every entry of the shard.
func (sh *syncShard[D]) each(f func(*entry[D])) {
	for _, s := range sh.slots {
		if s.en != nil {
			f(s.en)
		}
	}
}

// clockState is an immutable epoch with its bounds in ms.
type clockState struct {
	epoch, start, end int64
}

// NewSync returns an empty SyncTracker, or Config.Validate's error.
func NewSync[D comparable](c Config) (*SyncTracker[D], error) {
	s, err := newSettings(c)
	if err != nil {
		return nil, err
	}
	return &SyncTracker[D]{s: s, seed: maphash.MakeSeed(), sseed: rand.Uint64()}, nil
}

// advance returns max(current epoch, epoch of now) and makes it current.
func (t *SyncTracker[D]) advance(now time.Time) int64 {
	ms := now.UnixMilli()
	cur := t.clock.Load()
	if cur != nil && ms >= cur.start && ms < cur.end {
		return cur.epoch
	}
	e := floorDiv(ms, t.s.subMs)
	for {
		if cur != nil && e <= cur.epoch {
			return cur.epoch
		}
		start, end := epochBounds(e, t.s.subMs)
		if t.clock.CompareAndSwap(cur, &clockState{epoch: e, start: start, end: end}) {
			return e
		}
		cur = t.clock.Load()
	}
}

// shard returns dest's hash and shard. A string key (the node's) is hashed
// by strHash; any other by maphash.Comparable.
func (t *SyncTracker[D]) shard(dest D) (uint64, *syncShard[D]) {
	h := t.hash(dest)
	return h, &t.shards[h&(numShards-1)]
}

// hash is dest's hash, as shard chooses by it.
func (t *SyncTracker[D]) hash(dest D) uint64 {
	if s, ok := any(dest).(string); ok {
		return strHash(t.sseed, s)
	}
	return maphash.Comparable(t.seed, dest)
}

// strHash is a seeded hash of s: wyhash's mixing (pubMix) over its bytes
// (wyhash), the seed in both halves of the last product so that no choice
// of name fixes it. It stands in for maphash.String, whose chain of calls
// (String, rthashString, memhash, aeshashbody) was a fifth of a record's
// instructions for a short name. Only the shard and the slot are chosen by
// it, never an answer: a weaker hash would cost probes.
func strHash(seed uint64, s string) uint64 {
	if len(s) <= 16 {
		return shortHash(seed, s)
	}
	return wyhash(seed, s, seed).hash
}

// shortHash is wyhash(seed, s, seed).hash for s of at most 16 bytes (its
// loop does not run; TestShortHashIsWyhash), the body recordMillis writes
// out so that it calls nothing to hash a typical name.
func shortHash(seed uint64, s string) uint64 {
	a, b := shortWords(s)
	return pubMix(a^seed^wyK1, b^seed^uint64(len(s))*wyK0^wyK2)
}

// shortWords returns the two words wyhash reads of s, of at most 16
// bytes: its first and last 8 bytes, or 4, or for 1–3 bytes the first,
// middle and last one. With len(s) they are s (pubKey's digest).
func shortWords(s string) (a, b uint64) {
	switch n := len(s); {
	case n >= 8:
		a, b = le64(s), le64(s[n-8:])
	case n >= 4:
		a, b = uint64(le32(s)), uint64(le32(s[n-4:]))
	case n > 0:
		a = uint64(s[0])<<16 | uint64(s[n>>1])<<8 | uint64(s[n-1])
	}
	return a, b
}

// Record is Tracker.Record, safe for concurrent use.
func (t *SyncTracker[D]) Record(dest D, latency time.Duration, now time.Time) {
	t.RecordMillis(dest, durationMillis(latency), now)
}

// RecordMillis is Tracker.RecordMillis, safe for concurrent use. Two calls
// that create the same destination at once both count.
func (t *SyncTracker[D]) RecordMillis(dest D, ms uint64, now time.Time) {
	t.recordMillis(dest, ms, now, false, true)
}

// RecordMillisTag is RecordMillis, also returning dest's tag (SetTag) as
// it was when the sample was recorded: 0 when this call created dest. A
// caller that keeps its own state for some destinations tags those it
// checked so that a record tells it, with the lookup the record does
// anyway, whether it must look (timeout.Decider does so for its failure
// detector).
func (t *SyncTracker[D]) RecordMillisTag(dest D, ms uint64, now time.Time) uint64 {
	tag, _ := t.recordMillis(dest, ms, now, false, true)
	return tag
}

// RecordHeldMillis is RecordMillisTag for a destination the tracker holds:
// when it holds no dest it records nothing and reports false. A caller that
// checks names before recording them need check a name only when this
// reports false (the tracker holds only what it was given).
func (t *SyncTracker[D]) RecordHeldMillis(dest D, ms uint64, now time.Time) (tag uint64, held bool) {
	return t.recordMillis(dest, ms, now, false, false)
}

// recordMillis is the one body of every record (RecordMillis,
// RecordMillisTag, RecordHeldMillis, RecordTimeoutMillis), each of which
// inlines its call: one sample of ms into dest, timed out or not, creating
// dest when it is not held and create is set. It returns dest's tag as it
// was when the sample was recorded (0 for a destination it created) and
// whether the sample was recorded. A public record calling another, as
// RecordMillis once called RecordMillisTag and it RecordHeldMillis, costs
// every record a frame per call: the shaped methods of a generic type do
// not inline into each other once their bodies are this long.
//
// The common record, a completed sample in the current epoch of a held
// destination with a short name (at most 16 bytes) whose window needs no
// rotation, is done here and calls nothing but its shard's uncontended
// lock (and, for a destination with cached views, their upkeep after the
// sample): every other case goes to recordAny before anything is changed,
// and recordAny records it the same way, with every case handled. A
// function with calls on its common path had every argument kept on the
// stack for all records, and reloaded after each call (the compiler spills
// a value live across any call where it is defined). advance's and index's
// common cases, shard's hash of a short name (shortHash) and get's probe
// (comparing words, isKey) are written out by hand for the same reason.
func (t *SyncTracker[D]) recordMillis(dest D, ms uint64, now time.Time, timedOut, create bool) (tag uint64, held bool) {
	s, ok := any(dest).(string)
	cur := t.clock.Load()
	if !ok || len(s) > 16 || timedOut || ms >= uint64(len(t.s.small)) || cur == nil {
		return t.recordAny(dest, ms, now, timedOut, create)
	}
	if at := now.UnixMilli(); at < cur.start || at >= cur.end {
		return t.recordAny(dest, ms, now, timedOut, create)
	}
	i := int(t.s.small[ms])
	var a, b uint64
	switch n := len(s); {
	case n >= 8:
		a, b = le64(s), le64(s[n-8:])
	case n >= 4:
		a, b = uint64(le32(s)), uint64(le32(s[n-4:]))
	case n > 0:
		a = uint64(s[0])<<16 | uint64(s[n>>1])<<8 | uint64(s[n-1])
	}
	seed := t.sseed
	h := pubMix(a^seed^wyK1, b^seed^uint64(len(s))*wyK0^wyK2)
	sh := &t.shards[h&(numShards-1)]
	if !sh.mu.TryLock() {
		return t.recordAny(dest, ms, now, timedOut, create)
	}
	var en *entry[D]
	slots, want := sh.slots, slotHashLen(h, len(s))
	mask := uint64(len(slots)) - 1 // (all ones for no slots: the loop does not run)
	for j := home(h, mask); j < uint64(len(slots)); j = (j + 1) & mask {
		sl := &slots[j]
		if sl.en == nil {
			break
		}
		if sl.isKey(want, a, b) {
			en = sl.en
			break
		}
	}
	if en == nil || en.epoch < cur.epoch {
		// Not held, or its window rotates first.
		sh.mu.Unlock()
		return t.recordAny(dest, ms, now, timedOut, create)
	}
	if t.s.cfg.MaxDestinations > 0 && en.stamp != t.seq.Load() {
		// Restamp, as in recordAny.
		en.stamp = t.seq.Add(1)
	}
	sh.recs++
	v := en.ver
	en.record(i)
	if en.ec != nil && en.ver != v {
		en.ec.recorded(i, false, v, en.ver)
	}
	tag = en.tag
	sh.mu.Unlock()
	return tag, true
}

// recordAny is recordMillis for any record: any key, any sample, any
// clock; it creates dest when asked to.
func (t *SyncTracker[D]) recordAny(dest D, ms uint64, now time.Time, timedOut, create bool) (tag uint64, held bool) {
	e := t.advance(now)
	i := t.s.index(ms)
	h, sh := t.shard(dest)
	sh.mu.Lock()
	sh.anyRecs++
	en := sh.get(h, dest)
	created := false
	switch {
	case en != nil:
		en.rotate(e)
		if t.s.cfg.MaxDestinations > 0 && en.stamp != t.seq.Load() {
			// Restamp: en becomes the most recently recorded destination
			// (its place in sh.order follows lazily, at an eviction).
			// When it already is (its stamp is the last sequence number
			// taken: no record elsewhere since), the shared sequence is
			// left unwritten.
			en.stamp = t.seq.Add(1)
		}
	case create:
		en, created = t.create(sh, h, dest, e), true
	default:
		sh.mu.Unlock()
		return 0, false
	}
	sh.recs++
	v := en.ver
	if timedOut {
		en.recordTimeout(i)
	} else {
		en.record(i)
	}
	if en.ec != nil && en.ver != v {
		// Keep en's cached views that the sample leaves valid.
		en.ec.recorded(i, timedOut, v, en.ver)
	}
	tag = en.tag
	sh.mu.Unlock()
	if created {
		t.created(en, e)
	}
	return tag, true
}

// SetTag sets dest's tag to tag if dest is held; it creates nothing and
// does not refresh dest's place in the eviction order. A destination is
// created with tag 0 and loses its tag when evicted or cleared.
func (t *SyncTracker[D]) SetTag(dest D, tag uint64) {
	h, sh := t.shard(dest)
	sh.mu.Lock()
	if en := sh.get(h, dest); en != nil {
		en.tag = tag
	}
	sh.mu.Unlock()
}

// RecordTimeout is Tracker.RecordTimeout, safe for concurrent use.
func (t *SyncTracker[D]) RecordTimeout(dest D, timeout time.Duration, now time.Time) {
	t.RecordTimeoutMillis(dest, durationMillis(timeout), now)
}

// RecordTimeoutMillis is Tracker.RecordTimeoutMillis, safe for concurrent
// use.
func (t *SyncTracker[D]) RecordTimeoutMillis(dest D, ms uint64, now time.Time) {
	t.recordMillis(dest, ms, now, true, true)
}

// create adds dest (of hash h) to sh, whose lock is held, at epoch e.
func (t *SyncTracker[D]) create(sh *syncShard[D], h uint64, dest D, e int64) *entry[D] {
	en := newEntry(&t.s.geo, t.s.n, e, dest)
	en.hash = h
	if s, ok := any(dest).(string); ok && len(s) <= 16 {
		en.words[0], en.words[1] = shortWords(s)
	}
	sh.put(en)
	if t.s.cfg.MaxDestinations > 0 {
		en.stamp = t.seq.Add(1)
		sh.order.push(en)
		t.count.Add(1)
	}
	return en
}

// created evicts destinations other than en, just created, while more
// than MaxDestinations are held.
func (t *SyncTracker[D]) created(en *entry[D], e int64) {
	if m := t.s.cfg.MaxDestinations; m > 0 && t.count.Load() > int64(m) {
		t.evict(en, e)
	}
}

// evictRef is an element of a shard's order that the evictor reads: the
// shard, its index there, and its placed stamp when read, which only it
// had (a destination's stamps are its own).
type evictRef struct {
	stamp      uint64
	shard, idx int
}

// evictCand is a candidate for eviction: a destination read, and its
// samples.
type evictCand[D comparable] struct {
	evictRef
	en    *entry[D]
	total uint64
}

// evict removes destinations other than keep until at most MaxDestinations
// remain, by the rule of Tracker.victim over all shards: the global
// evictionCandidates least recently recorded, of those the one with the
// fewest samples at epoch e, and the candidates with more samples move to
// the front with new stamps (their places in the orders follow lazily).
//
// The least recently recorded are read in stamp order from all shards'
// heaps at once: t.refs is a min-heap by placed stamp of elements of the
// shards' orders whose subtrees hold every destination not yet read,
// first every shard's root. A placed stamp bounds every current stamp in
// its subtree from below, so the least element, when fresh, is the least
// recently recorded of all not yet read: it is read and its children take
// its place. A stale one is re-placed (fix) and its index looked at again.
// Only read entries are dereferenced, and the refs hold no pointer (a
// pointer's write barrier made their moves a tenth of an eviction under
// GC). Calls running concurrently may change the shards between the
// locks: an element moved or removed meanwhile is skipped (with its
// subtree, for the round), so the result is then approximate, never
// unsafe.
func (t *SyncTracker[D]) evict(keep *entry[D], e int64) {
	t.evictMu.Lock()
	defer t.evictMu.Unlock()
	for t.count.Load() > int64(t.s.cfg.MaxDestinations) {
		refs := t.refs[:0]
		for k := range t.shards {
			sh := &t.shards[k]
			if sh.n.Load() == 0 {
				continue // (a destination created there meanwhile is no candidate for this round)
			}
			sh.mu.Lock()
			if len(sh.order.h) > 0 {
				refs = append(refs, evictRef{stamp: sh.order.h[0].stamp, shard: k})
			}
			sh.mu.Unlock()
		}
		for i := len(refs)/2 - 1; i >= 0; i-- {
			refDown(refs, i)
		}
		cands := t.cands[:0]
		for len(cands) < evictionCandidates && len(refs) > 0 {
			r := refs[0]
			refs[0] = refs[len(refs)-1]
			refs = refs[:len(refs)-1]
			refDown(refs, 0)
			sh := &t.shards[r.shard]
			sh.mu.Lock()
			o := &sh.order
			if r.idx >= len(o.h) || o.h[r.idx].stamp != r.stamp {
				sh.mu.Unlock()
				continue
			}
			if en := o.h[r.idx].en; en.stamp != r.stamp { // stale: look at the index again
				o.fix(r.idx)
				refs = pushRef(refs, evictRef{stamp: o.h[r.idx].stamp, shard: r.shard, idx: r.idx})
			} else {
				if en != keep {
					en.rotate(e)
					cands = append(cands, evictCand[D]{evictRef: r, en: en, total: en.sum.total})
				}
				from, to := o.children(r.idx)
				for i := from; i < to; i++ {
					refs = pushRef(refs, evictRef{stamp: o.h[i].stamp, shard: r.shard, idx: i})
				}
			}
			sh.mu.Unlock()
		}
		t.refs, t.cands = refs, cands
		if len(cands) == 0 {
			return
		}
		v := 0
		for x := range cands {
			if cands[x].total < cands[v].total {
				v = x
			}
		}
		moved := false
		for x, c := range cands {
			sh := &t.shards[c.shard]
			sh.mu.Lock()
			if sh.get(c.en.hash, c.en.key) == c.en && c.en.stamp == c.stamp {
				switch o := &sh.order; {
				case x == v && c.idx < len(o.h) && o.h[c.idx].en == c.en:
					o.removeAt(c.idx)
					sh.del(c.en)
					t.count.Add(-1)
					t.evicted.Add(1)
				case c.total > cands[v].total:
					c.en.stamp = t.seq.Add(1)
					moved = true
				}
			}
			sh.mu.Unlock()
		}
		if moved {
			// The new destination stays the most recent, as in Tracker,
			// which evicts before it creates.
			sh := &t.shards[keep.hash&(numShards-1)]
			sh.mu.Lock()
			if sh.get(keep.hash, keep.key) == keep {
				keep.stamp = t.seq.Add(1)
			}
			sh.mu.Unlock()
		}
	}
}

// pushRef adds r to the min-heap of refs h.
func pushRef(h []evictRef, r evictRef) []evictRef {
	h = append(h, r)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if h[p].stamp <= h[i].stamp {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	return h
}

// refDown moves h[i] down the min-heap of refs h.
func refDown(h []evictRef, i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1].stamp < h[c].stamp {
			c++
		}
		if h[i].stamp <= h[c].stamp {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// RecordSince is Tracker.RecordSince, safe for concurrent use.
func (t *SyncTracker[D]) RecordSince(dest D, start, now time.Time) time.Duration {
	d := sinceNonNegative(start, now)
	t.Record(dest, d, now)
	return d
}

// withEntry rotates to now and calls f with dest's rotated entry under its
// shard's lock; f is not called when dest is unknown. It never creates a
// destination nor refreshes its place in the eviction order.
func (t *SyncTracker[D]) withEntry(dest D, now time.Time, f func(*entry[D])) {
	e := t.advance(now)
	h, sh := t.shard(dest)
	sh.mu.Lock()
	if en := sh.get(h, dest); en != nil {
		en.rotate(e)
		f(en)
	}
	sh.mu.Unlock()
}

// Quantile is Tracker.Quantile, safe for concurrent use.
func (t *SyncTracker[D]) Quantile(dest D, q float64, now time.Time) (time.Duration, bool) {
	ms, ok := t.QuantileMillis(dest, q, now)
	return millisDuration(ms), ok
}

// QuantileMillis is Tracker.QuantileMillis, safe for concurrent use.
func (t *SyncTracker[D]) QuantileMillis(dest D, q float64, now time.Time) (uint64, bool) {
	// advance's common case and settings.quantile's body, by hand: the
	// query then calls no frame of ours but shard and quantileIndex.
	var e int64
	if cur, ms := t.clock.Load(), now.UnixMilli(); cur != nil && ms >= cur.start && ms < cur.end {
		e = cur.epoch
	} else {
		e = t.advance(now)
	}
	h, sh := t.shard(dest)
	sh.mu.Lock()
	en := sh.get(h, dest)
	if en == nil {
		sh.mu.Unlock()
		return 0, false
	}
	en.rotate(e)
	if en.sum.total < t.s.minSamples {
		sh.mu.Unlock()
		return 0, false
	}
	i, _ := en.sum.quantileIndex(q)
	sh.mu.Unlock()
	return t.s.geo.quantileValue(i, q), true
}

// Samples is Tracker.Samples, safe for concurrent use.
func (t *SyncTracker[D]) Samples(dest D, now time.Time) uint64 {
	var n uint64
	t.withEntry(dest, now, func(en *entry[D]) { n = en.sum.total })
	return n
}

// Clear forgets every destination, as Tracker.Clear does. Calls running
// concurrently with it may or may not have their effect kept.
func (t *SyncTracker[D]) Clear() {
	for k := range t.shards {
		t.shards[k].mu.Lock()
	}
	for k := range t.shards {
		sh := &t.shards[k]
		sh.each(func(en *entry[D]) {
			en.ec.unpublish()
		})
		sh.slots = nil
		sh.n.Store(0)
		sh.order = recency[D]{}
	}
	t.count.Store(0)
	for k := range t.shards {
		t.shards[k].mu.Unlock()
	}
}

// Config returns the tracker's configuration.
func (t *SyncTracker[D]) Config() Config {
	return t.s.cfg
}

func (t *SyncTracker[D]) trackerStats() TrackerStats {
	return TrackerStats{Destinations: t.destinations(), DestinationsEvicted: t.evicted.Load()}
}

// localView is Tracker.localView, safe for concurrent use.
func (t *SyncTracker[D]) localView(dest D, q float64, now time.Time, v *viewFacts) {
	e := t.advance(now)
	h, sh := t.shard(dest)
	sh.mu.Lock()
	if en := sh.get(h, dest); en != nil {
		en.rotate(e)
		t.s.view(&en.window, q, v)
	} else {
		*v = viewFacts{}
	}
	sh.mu.Unlock()
}

// Recorded returns how many samples were recorded (Record, RecordMillis,
// RecordTimeout, RecordTimeoutMillis and RecordSince calls, timed-out ones
// included) since the tracker was made; Clear does not reset it. Counted per
// shard under its lock, so recording takes no shared counter; Recorded
// locks each shard in turn.
func (t *SyncTracker[D]) Recorded() uint64 {
	return t.sumShards(func(sh *syncShard[D]) uint64 { return sh.recs })
}

// destinations returns the number of destinations held.
func (t *SyncTracker[D]) destinations() int {
	return int(t.sumShards(func(sh *syncShard[D]) uint64 { return uint64(sh.n.Load()) }))
}

// sumShards returns the sum of f over the shards, each read under its
// lock in turn.
func (t *SyncTracker[D]) sumShards(f func(*syncShard[D]) uint64) uint64 {
	var n uint64
	for k := range t.shards {
		sh := &t.shards[k]
		sh.mu.Lock()
		n += f(sh)
		sh.mu.Unlock()
	}
	return n
}
