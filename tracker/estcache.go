package tracker

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// estCaches are one destination's cached estimates, kept in its entry of
// the Fleet's local *SyncTracker[string] (one lookup finds both the local
// window and the cache) under the entry's shard lock, one per quantile
// asked for, up to estSlots (a decision's quantile, and hedging's median
// and hedge quantile): about 400 bytes each, allocated at the first
// estimate of the destination at that quantile; further quantiles replace
// the slots in turn.
type estCaches struct {
	slots []estCache
	next  int // the slot a further quantile replaces
	// cell is the decision input of one quantile published for readers
	// without the shard lock (pubCell), nil until the first is.
	cell *pubCell
	// pub is 1 + the index of the slot whose view the published input
	// is, 0 while none is published.
	pub int
}

// estSlots is how many quantiles a destination's cache holds.
const estSlots = 3

// slot returns the cache of quantile q, nil when there is none.
func (cs *estCaches) slot(q float64) *estCache {
	for i := range cs.slots {
		if cs.slots[i].q == q {
			return &cs.slots[i]
		}
	}
	return nil
}

// claim returns the cache of quantile q, making one (or replacing one)
// when there is none.
func (cs *estCaches) claim(q float64) *estCache {
	if c := cs.slot(q); c != nil {
		return c
	}
	if len(cs.slots) < estSlots {
		cs.slots = append(cs.slots, estCache{q: q})
		return &cs.slots[len(cs.slots)-1]
	}
	if cs.pub == cs.next+1 {
		cs.unpublish() // its view goes
	}
	c := &cs.slots[cs.next]
	cs.next = (cs.next + 1) % estSlots
	*c = estCache{q: q}
	return c
}

// estCache is the cache of one quantile q: the fleet's facts, valid while
// the Fleet's version is fver and now's epoch is at most fepoch (the Fleet
// would not slide); the local view, valid while the window's version is
// lver (a record that cannot change it but its counts moves lver along:
// viewPos.shift); and the estimate assembled from both.
type estCache struct {
	q      float64
	fver   uint64
	fepoch int64
	ff     fleetFacts
	lver   uint64
	lv     viewFacts
	lp     viewPos
	est    Estimate      // assembled from ff and lv (but for its staleness), when eok
	in     DecisionInput // est.Input(), when eok
	fok    bool
	lok    bool
	eok    bool
}

// viewPos is where the local view's answers sit in the window it was
// computed from: Q's bucket qi with the samples below it and in it, M's
// bucket mi (-1 when there is no M), and the trust threshold minSamples
// the estimate was assembled with; and room, how many more completed
// samples below low (Q's bucket and at or below M's) the view takes
// without shift's checks (estCaches.recorded).
type viewPos struct {
	qi, mi     int
	below, at  uint64
	minSamples uint64
	low        int
	room       uint64
}

// set records where lv's answers sit in w (qi, mi from settings.viewAt)
// for quantile q, and the room that leaves.
func (p *viewPos) set(w *window, qi, mi int, minSamples uint64, q float64) {
	*p = viewPos{qi: qi, mi: mi, minSamples: minSamples, low: min(qi, mi+1)}
	if qi >= 0 {
		p.at = w.sum.counts[qi]
		p.below = w.sum.total - w.sum.countFrom(qi)
		p.fit(q, w.sum.total)
	}
}

// roomMax bounds the room fit computes: a bound only costs a fit when
// it is used up.
const roomMax = 1 << 32

// fit sets room for the view of n samples at quantile q: the largest k it
// finds (not always the largest there is; 0 is always safe) such that k
// more completed samples below low, one by one, each pass shift's checks.
// Those leave M, the failing state and the trust threshold as they are
// once n is at least minSamples (below that room stays 0), and keep Q's
// rank among n+j samples, which grows by 0 or 1 a sample, at most below+j
// + at for every j; it must also stay above below+j, and rank(q, n+j) − j
// never grows with j, so rank(q, n+k) > below+k is the check for all of
// them at once. The guess solves q·(n+k) > below+k in float64, and the
// check in rank's own arithmetic corrects it.
func (p *viewPos) fit(q float64, n uint64) {
	p.room = 0
	if p.qi < 0 || p.low <= 0 || n == 0 || n < p.minSamples || rank(q, n) > p.below+p.at {
		return
	}
	k := uint64(roomMax)
	if q < 1 {
		x := (q*float64(n) - float64(p.below)) / (1 - q)
		if !(x >= 1) {
			return
		}
		k = uint64(min(x, roomMax))
	}
	for k > 0 && rank(q, n+k) <= p.below+k {
		k /= 2
	}
	p.room = k
}

// shift updates the cached view lv (and the estimate e assembled from it,
// when eok) for one more sample at index i (timedOut: a censored one)
// recorded into the window it describes, without a rotation, and reports
// whether that was possible: the sample leaves Q in its bucket (its rank
// among samples+1 still falls in it), leaves M where it is (a timed-out
// sample adds to H and C of its bucket alike, so never moves M; a completed
// one does not when at or below M's bucket), and neither creates the
// local value nor crosses the trust threshold, which fixes the local view's
// failing state too (with M unchanged). Then only the sample counts
// change, and the view and estimate are exactly what recomputing would
// give. Otherwise it changes nothing: the caller lets the cache go stale.
// A sample below Q's bucket uses a unit of room, as recorded's do; others
// leave room as valid as it was (they add to the rank as much as they
// add samples, or less). The last unit fits the room again.
func (p *viewPos) shift(lv *viewFacts, e *Estimate, eok bool, q float64, i int, timedOut bool) bool {
	n := lv.samples
	if n == 0 || p.qi < 0 || n+1 == p.minSamples {
		return false
	}
	if !timedOut && (p.mi < 0 || i > p.mi) {
		return false
	}
	below, at := p.below, p.at
	switch {
	case i < p.qi:
		below++
	case i == p.qi:
		at++
	}
	if r := rank(q, n+1); r <= below || r > below+at {
		return false
	}
	p.below, p.at = below, at
	lv.samples++
	if eok {
		e.LocalSamples++
	}
	if timedOut {
		lv.censored++
		if eok {
			e.LocalCensored++
		}
	}
	if i < p.qi && p.room > 0 {
		if p.room--; p.room == 0 {
			p.fit(q, lv.samples)
		}
	}
	return true
}

// recorded keeps the cached local views valid across one sample at index i
// (timedOut: a censored one) that moved the window from version from to to
// without a rotation, where viewPos.shift can. A completed sample below a
// view's low while its room lasts needs none of shift's checks: only the
// counts change (the last unit of room goes through shift, which fits the
// room again).
func (cs *estCaches) recorded(i int, timedOut bool, from, to uint64) {
	for k := range cs.slots {
		c := &cs.slots[k]
		if c.lok && c.lver == from {
			if p := &c.lp; !timedOut && i < p.low && p.room > 1 {
				p.room--
				p.below++
				c.lv.samples++
				if c.eok {
					c.est.LocalSamples++
				}
				c.lver = to
				continue
			}
			if c.lp.shift(&c.lv, &c.est, c.eok, c.q, i, timedOut) {
				c.lver = to
				continue
			}
		}
		if k+1 == cs.pub {
			// The published input holds while its quantile's cached
			// view does: its value, quantile, source and failing state
			// are the view's, which viewPos.shift keeps only when none
			// changes. (A fill needs nothing: it follows a change of
			// the Fleet's version or epoch, which the cell's fver and
			// clk already refuse, or replaces the facts with equal
			// ones; a claim that replaces the view withdraws it.)
			cs.unpublish()
		}
	}
}

// cached sets *e to dest's estimate (its Dest set to name) at now for q from the cache and
// reports whether the cache held valid fleet facts: fver is the Fleet's
// version now, its grid is the tracker's, and minSamples is max(MinSamples,
// 1). The local view, and the estimate assembled from both, are recomputed
// (and cached) when the window changed; the staleness is recomputed at
// each call.
func (t *SyncTracker[D]) cached(e *Estimate, dest D, name string, q float64, now time.Time, fver uint64, minSamples uint64) bool {
	h, sh := t.shard(dest)
	_, c, _ := t.current(h, sh, dest, name, q, now, fver, minSamples)
	if c == nil {
		return false
	}
	*e = c.est
	if c.ff.hasNewest {
		e.Staleness = sinceMillis(now, c.ff.newestEnd)
	}
	sh.mu.Unlock()
	return true
}

// cachedInput is cached for the decision input alone: it sets *in to the
// cached estimate's Input, which needs no staleness, and copies nothing
// else. It reads the published input first (pubCell: no shard lock), and
// publishes the one it finds under the lock for the next call.
func (t *SyncTracker[D]) cachedInput(in *DecisionInput, dest D, name string, q float64, now time.Time, fver uint64, minSamples uint64) bool {
	if t.published(in, name, q, now, fver, minSamples) {
		return true
	}
	return t.lockedInput(in, dest, name, q, now, fver, minSamples)
}

// lockedInput is cachedInput's path under the shard lock, which publishes
// the input it finds.
func (t *SyncTracker[D]) lockedInput(in *DecisionInput, dest D, name string, q float64, now time.Time, fver uint64, minSamples uint64) bool {
	h, sh := t.shard(dest)
	en, c, clk := t.current(h, sh, dest, name, q, now, fver, minSamples)
	if c == nil {
		return false
	}
	*in = c.in
	if clk != nil {
		t.publish(en.ec, c, name, clk, fver, minSamples)
	}
	sh.mu.Unlock()
	return true
}

// DecisionInputs sets in[i] to dests[i]'s decision input at quantile q and
// now, as DecisionInput does for each (in must be at least as long as
// dests), and returns DecisionInput's error for a quantile outside (0, 1]
// (every input zero then). It is the read of a decision over several
// destinations: what holds for all of them (the Fleet's version, the trust
// threshold, the tracker's epoch with now in it) is read once, and each
// destination's published input is then one hash, one table lookup and a
// few atomic loads; a destination without one takes DecisionInput's path.
func (f *Fleet) DecisionInputs(in []DecisionInput, dests []string, q float64, now time.Time) error {
	in = in[:len(dests)]
	t := f.localSync
	if !(q > 0 && q <= 1) || t == nil || t.s.subMs != f.swMs {
		for i, dest := range dests {
			if err := f.DecisionInput(&in[i], dest, q, now); err != nil {
				clear(in)
				return err
			}
		}
		return nil
	}
	var r pubReader
	t.reader(&r, q, now, f.ver.Load(), f.minSamples())
	for i, dest := range dests {
		if !r.read(&in[i], dest) && !t.lockedInput(&in[i], dest, dest, q, now, r.fver, r.minSamples) {
			f.decisionInput(&in[i], dest, q, now)
		}
	}
	return nil
}

// current returns dest's cache for q with valid fleet facts (as cached
// says) and its estimate assembled for the window as it is now, with the
// shard sh (dest's, of hash h) locked for the caller to read it and unlock;
// nil (and no lock held) when the cache holds no valid fleet facts. clk is
// the tracker's epoch when the cache may be published for calls at times
// within it (now is in it, and the fleet's facts hold through it), else
// nil.
func (t *SyncTracker[D]) current(h uint64, sh *syncShard[D], dest D, name string, q float64, now time.Time, fver uint64, minSamples uint64) (*entry[D], *estCache, *clockState) {
	te := t.advance(now)
	// The epoch of now: the tracker's current one when now is in it.
	fepoch := te
	ms, clk := now.UnixMilli(), t.clock.Load()
	if ms < clk.start || ms >= clk.end {
		fepoch = floorDiv(ms, t.s.subMs)
	}
	sh.mu.Lock()
	en := sh.get(h, dest)
	if en == nil || en.ec == nil {
		sh.mu.Unlock()
		return nil, nil, nil
	}
	c := en.ec.slot(q)
	if c == nil || !c.fok || c.fver != fver || fepoch > c.fepoch {
		sh.mu.Unlock()
		return nil, nil, nil
	}
	en.rotate(te)
	if !c.lok || c.lver != en.ver || c.lp.minSamples != minSamples {
		qi, mi := t.s.viewAt(&en.window, q, &c.lv)
		c.lp.set(&en.window, qi, mi, minSamples, q)
		c.lver, c.lok, c.eok = en.ver, true, false
	}
	if !c.eok {
		assemble(&c.est, name, q, now, &c.ff, &c.lv, true, minSamples)
		c.in = c.est.Input()
		c.eok = true
	}
	if clk.epoch != te || ms < clk.start || ms >= clk.end {
		clk = nil
	}
	return en, c, clk
}

// fill caches ff, the fleet's facts of dest for q read at the Fleet's
// version fver and epoch fepoch, when the tracker holds dest.
func (t *SyncTracker[D]) fill(dest D, q float64, fver uint64, fepoch int64, ff *fleetFacts) {
	h, sh := t.shard(dest)
	sh.mu.Lock()
	if en := sh.get(h, dest); en != nil {
		if en.ec == nil {
			en.ec = new(estCaches)
		}
		c := en.ec.claim(q)
		c.fver, c.fepoch, c.ff, c.fok, c.eok = fver, fepoch, *ff, true, false
	}
	sh.mu.Unlock()
}

// pubCell is one destination's decision input at one quantile, published
// by the SyncTracker's decision-input path for readers that take no lock
// (pubReader), with what it holds for: the Fleet's version, the trust
// threshold, and the tracker's epoch (a clockState: while it is the
// current one and now falls in it, no rotation has moved the window and
// the fleet's facts hold, as estCache's fepoch says). Writers, under the
// entry's shard lock, publish it when the locked path has assembled the
// input, and withdraw it (flags = 0) whenever the window changes what the
// input says or the cache that backs it went (estCaches.recorded, claim), or the
// destination goes (eviction, Clear). Its fields are a sequence lock: seq
// is odd while a publisher writes them, and a reader that sees seq
// change, or odd, falls back to the locked path.
//
// Cells are reached through the tracker's pubTable by a hash of the
// destination's name; key names the destination a cell is of, so a slot
// another destination took over is only a miss.
type pubCell struct {
	seq        atomic.Uint64
	flags      atomic.Uint64 // pubValid | Source<<8 | pubGuarded | pubFailing; 0 when withdrawn
	value      atomic.Uint64 // DecisionInput.ValueMillis
	quant      atomic.Uint64 // DecisionInput.QuantileMillis
	q          atomic.Uint64 // the quantile's float64 bits
	minSamples atomic.Uint64
	fver       atomic.Uint64
	clk        atomic.Pointer[clockState]
	// memoBy is the Memoizer registration the memos were derived with
	// (nil: none), memo the Memo of each slot.
	memoBy atomic.Pointer[MemoReg]
	memo   [MemoSlots][2]atomic.Uint64
	key    string // immutable
	id     pubKey // key's digest, immutable
}

// The bits of pubCell.flags.
const (
	pubValid   = 1
	pubGuarded = 2
	pubFailing = 4
)

// unpublish withdraws the published input, if any (cs may be nil); the
// shard lock is held.
func (cs *estCaches) unpublish() {
	if cs != nil && cs.cell != nil {
		cs.cell.flags.Store(0)
		cs.pub = 0
	}
}

// pubTable is where readers find the published cells: a two-way
// set-associative table indexed by a seeded hash of the destination's name
// (pubHash; a slot holds the cell last published there, and a collision
// costs a miss, never a wrong answer).
type pubTable struct {
	slots []atomic.Pointer[pubCell]
	mask  uint64
	seed  uint64
	memo  atomic.Pointer[MemoReg] // the Fleet's Memoizer, nil when none
}

// pubTableSize is the number of slots of a tracker's pubTable: twice
// MaxDestinations (or 4096 when unbounded) rounded up to a power of two,
// at most 1<<16.
func pubTableSize(maxDests int) int {
	n := 4096
	if maxDests > 0 {
		n = 64
		for n < 2*maxDests && n < 1<<16 {
			n <<= 1
		}
	}
	return n
}

// table returns the tracker's pubTable, making it on first use.
func (t *SyncTracker[D]) table() *pubTable {
	if tb := t.pubs.Load(); tb != nil {
		return tb
	}
	n := pubTableSize(t.s.cfg.MaxDestinations)
	tb := &pubTable{slots: make([]atomic.Pointer[pubCell], n), mask: uint64(n - 1), seed: rand.Uint64()}
	if t.pubs.CompareAndSwap(nil, tb) {
		return tb
	}
	return t.pubs.Load()
}

// pubKey is a digest of a destination's name for the pubTable: its
// length, two words of its bytes, and a seeded hash of all of them. A name
// of at most 16 bytes is all in its words (a and b read its first and last
// 8 bytes, or 4, or for 1–3 bytes the first, middle and last one), so two
// such names with equal digests are equal: a reader compares three words
// instead of calling the runtime's memequal (which, with the spills a call
// costs, was a fifth of the lock-free read). Longer names are compared too.
type pubKey struct {
	n, a, b, hash uint64
}

// key returns name's digest under tb's seed: wyhash's mixing (a
// 64×64→128-bit product folded by xor) over its bytes (wyhash). It stands
// in for maphash.String, whose calls cost the lock-free read as much as the
// rest of it for a short name; a weaker hash would cost only misses (the
// locked path), never a wrong answer.
func (tb *pubTable) key(name string) pubKey {
	return wyhash(tb.seed, name, 0)
}

// wyK0, wyK1 and wyK2 are wyhash's constants.
const wyK0, wyK1, wyK2 = 0xa0761d6478bd642f, 0xe7037ed1a0b428db, 0x8ebc6af09c88c6e3

// wyhash is wyhash over s under seed, read eight bytes at a time, with
// fold mixed into the last product, as a digest (pubKey: the hash, the
// length, and the last 1–16 bytes as two words). One body
// for the record's hash (strHash) and the published cells' digest
// (pubTable.key), each of which inlines its call.
func wyhash(seed uint64, s string, fold uint64) pubKey {
	n0 := uint64(len(s))
	h := seed ^ n0*wyK0
	for len(s) > 16 {
		h = pubMix(le64(s)^wyK1, le64(s[8:])^h)
		s = s[16:]
	}
	var a, b uint64
	switch n := len(s); {
	case n >= 8:
		a, b = le64(s), le64(s[n-8:])
	case n >= 4:
		a, b = uint64(le32(s)), uint64(le32(s[n-4:]))
	case n > 0:
		a = uint64(s[0])<<16 | uint64(s[n>>1])<<8 | uint64(s[n-1])
	}
	return pubKey{n: n0, a: a, b: b, hash: pubMix(a^fold^wyK1, b^h^wyK2)}
}

// of reports whether c is the cell of the name with digest k.
func (c *pubCell) of(k *pubKey, name string) bool {
	return c.id == *k && (k.n <= 16 || c.key == name)
}

// pubMix folds the 128-bit product of a and b.
func pubMix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// le64 and le32 read the first 8 and 4 bytes of s, little-endian (s is
// long enough).
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func le32(s string) uint32 {
	_ = s[3]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

// publish publishes c's decision input (cs's cache of quantile c.q, of the
// destination name) for calls at times in clk's epoch, at the Fleet's
// version fver and trust threshold minSamples. The shard lock is held.
func (t *SyncTracker[D]) publish(cs *estCaches, c *estCache, name string, clk *clockState, fver, minSamples uint64) {
	tb := t.table()
	k := tb.key(name)
	cell := cs.cell
	if cell == nil {
		cell = &pubCell{key: name, id: k}
		cs.cell = cell
	}
	fl := uint64(pubValid) | uint64(c.in.Source)<<8
	if c.in.Guarded {
		fl |= pubGuarded
	}
	if c.in.Failing {
		fl |= pubFailing
	}
	cell.seq.Add(1)
	cell.value.Store(c.in.ValueMillis)
	cell.quant.Store(c.in.QuantileMillis)
	cell.q.Store(math.Float64bits(c.q))
	cell.minSamples.Store(minSamples)
	cell.fver.Store(fver)
	cell.clk.Store(clk)
	reg := tb.memo.Load()
	if reg != nil && (reg.q != math.Float64bits(c.q) || reg.minSamples != minSamples) {
		reg = nil // memos only of the inputs Memos is asked for
	}
	if reg != nil {
		for k := range cell.memo {
			m := reg.mz.Memo(&c.in, k)
			cell.memo[k][0].Store(m.A)
			cell.memo[k][1].Store(m.B)
		}
	}
	cell.memoBy.Store(reg)
	cell.flags.Store(fl)
	cell.seq.Add(1)
	for k := range cs.slots {
		if &cs.slots[k] == c {
			cs.pub = k + 1
		}
	}
	i := k.hash & tb.mask
	a, b := &tb.slots[i], &tb.slots[i^1]
	switch pa, pb := a.Load(), b.Load(); {
	case pa == cell || pb == cell:
	case pa == nil || pa.flags.Load() == 0:
		a.Store(cell)
	case pb == nil || pb.flags.Load() == 0:
		b.Store(cell)
	default:
		a.Store(cell)
	}
}

// pubReader reads published inputs for one decision: what every one read
// is checked against (the quantile, the Fleet's version, the trust
// threshold, and the tracker's epoch, which now must fall in), read once.
type pubReader struct {
	tb               *pubTable // nil when nothing can be read
	clk              *clockState
	memo             *MemoReg // the memos a cell must hold, nil when none
	q                uint64   // float64 bits
	fver, minSamples uint64
}

// reader sets *r to the reader of the inputs published for quantile q at
// now, the Fleet's version fver and the trust threshold minSamples. It
// fills r in place: returned by value, the reader's fields were stored one
// by one and read back with wider loads, which stalled the read.
func (t *SyncTracker[D]) reader(r *pubReader, q float64, now time.Time, fver, minSamples uint64) {
	*r = pubReader{q: math.Float64bits(q), fver: fver, minSamples: minSamples}
	tb, clk := t.pubs.Load(), t.clock.Load()
	if tb == nil || clk == nil {
		return
	}
	if ms := now.UnixMilli(); ms < clk.start || ms >= clk.end {
		return
	}
	r.tb, r.clk = tb, clk
	if reg := tb.memo.Load(); reg != nil && reg.q == r.q && reg.minSamples == minSamples {
		r.memo = reg
	}
}

// read sets *in to the decision input published for name and reports
// whether it holds for r: the lock-free path of cachedInput, the same
// answer as the locked one (TestPublishedInputConcurrent). A cell made
// for r's epoch holds even when the tracker has since moved on: the read
// is then ordered before the call that moved it, within the decision's
// call. At the Memoizer's quantile and trust threshold, a cell without
// its memos is a miss, so that the locked path publishes them.
func (r *pubReader) read(in *DecisionInput, name string) bool {
	cell := r.cell(name)
	if cell == nil {
		return false
	}
	s := cell.seq.Load()
	fl := cell.flags.Load()
	value, quant := cell.value.Load(), cell.quant.Load()
	if !cell.holds(s, fl, r.q, r.minSamples, r.fver, r.clk, r.memo) {
		return false
	}
	*in = DecisionInput{ValueMillis: value, QuantileMillis: quant, Source: Source(fl >> 8),
		Guarded: fl&pubGuarded != 0, Failing: fl&pubFailing != 0}
	return true
}

// holds reports whether c, read at sequence s with flags fl, is a
// published input for quantile bits q, trust threshold minSamples, Fleet
// version fver, clock clk and memo registration reg, unchanged since s
// (the seqlock's recheck, last).
func (c *pubCell) holds(s, fl, q, minSamples, fver uint64, clk *clockState, reg *MemoReg) bool {
	return fl != 0 && s&1 == 0 && c.q.Load() == q && c.minSamples.Load() == minSamples &&
		c.fver.Load() == fver && c.clk.Load() == clk && c.memoBy.Load() == reg && c.seq.Load() == s
}

// published sets *in to the decision input published for name at
// quantile q and reports whether it holds at now for the Fleet's version
// fver and trust threshold minSamples: one pubReader's read.
func (t *SyncTracker[D]) published(in *DecisionInput, name string, q float64, now time.Time, fver, minSamples uint64) bool {
	var r pubReader
	t.reader(&r, q, now, fver, minSamples)
	return r.read(in, name)
}

// cell returns the cell published for name in r's table, nil when there
// is none (or nothing can be read).
func (r *pubReader) cell(name string) *pubCell {
	if r.tb == nil {
		return nil
	}
	return r.tb.cell(name)
}

// cell returns the cell published for name in tb, nil when there is none.
func (tb *pubTable) cell(name string) *pubCell {
	k := tb.key(name)
	return tb.find(&k, name)
}

// find is cell for the name with digest k, inlined into the hot reads (a
// call of its own cost Memo a tenth).
func (tb *pubTable) find(k *pubKey, name string) *pubCell {
	for i := range uint64(2) {
		if c := tb.slots[(k.hash&tb.mask)^i].Load(); c != nil && c.of(k, name) {
			return c
		}
	}
	return nil
}

// isShort reports whether c is the cell of the name of at most 16 bytes
// of length n and words a and b (pubKey's): those three determine the
// name, and its hash follows from them, so they are all a cell's digest is
// compared by (a cell of a longer name has a longer length). Memo and
// Memos look a short name up with it, in find's two probes written out.
func (c *pubCell) isShort(n, a, b uint64) bool { return c.id.a == a && c.id.b == b && c.id.n == n }

// MemoSlots is how many memos (Memoizer.Memo's slots) a published
// decision input carries.
const MemoSlots = 4

// A Memo is what a decision rule derives from one destination's decision
// input for one slot (a timeout.Decider: one attempt's verdict on the
// destination alone), kept with the input in the lock-free published cell
// (Fleet.Memos). The tracker does not interpret it.
type Memo struct{ A, B uint64 }

// A Memoizer derives a Memo from a decision input for each slot in
// 0..MemoSlots-1. Memo must be a pure function of its arguments (a memo
// is kept for as long as the input it was derived from holds) and safe
// for concurrent use; it is called under a lock of the local tracker, so
// it must not call the Fleet or the tracker.
type Memoizer interface {
	Memo(in *DecisionInput, slot int) Memo
}

// A MemoReg is a Memoizer's registration with a Fleet (SetMemoizer), for
// the decision inputs of one quantile: cells carry the one their memos
// were derived with, a registration replaced makes them all misses, and
// Memo and Memos are asked for one. It holds what every read checks
// against, fixed when it is made: the Fleet's local tracker and its
// table, the quantile and the trust threshold.
type MemoReg struct {
	mz         Memoizer
	f          *Fleet
	tb         *pubTable
	q          uint64 // the quantile's float64 bits
	minSamples uint64
}

// SetMemoizer makes the Fleet derive mz's memos of every decision input at
// quantile q it publishes from now on, replacing the Memoizer set before,
// and returns the registration to ask Memo and Memos for; inputs published
// before are published again, with mz's memos, by their next read at q. It
// returns nil (and registers nothing) unless the Fleet's local view is a
// *SyncTracker[string] on the Fleet's grid (the estimate cache's
// condition), mz is not nil and q is in (0, 1].
func (f *Fleet) SetMemoizer(mz Memoizer, q float64) *MemoReg {
	t := f.localSync
	if t == nil || t.s.subMs != f.swMs || mz == nil || !(q > 0 && q <= 1) {
		return nil
	}
	tb := t.table()
	reg := &MemoReg{mz: mz, f: f, tb: tb, q: math.Float64bits(q), minSamples: f.minSamples()}
	tb.memo.Store(reg)
	return reg
}

// Memo returns the memo of slot of dest's decision input at reg's
// quantile and now, and true when it was published with reg's memos (reg
// the Fleet's current registration) and holds: Memos for one
// destination, with nothing to loop over.
func (f *Fleet) Memo(dest string, slot int, now time.Time, reg *MemoReg) (Memo, bool) {
	if reg == nil || reg.f != f || uint(slot) >= MemoSlots {
		return Memo{}, false
	}
	tb, clk := reg.tb, f.localSync.clock.Load()
	if clk == nil || tb.memo.Load() != reg {
		return Memo{}, false
	}
	if ms := now.UnixMilli(); ms < clk.start || ms >= clk.end {
		return Memo{}, false
	}
	fver := f.ver.Load()
	var cell *pubCell
	if n := len(dest); n <= 16 {
		// pubTable.key's short case written out (wyhash, too long to
		// inline, was a call costing a fifth of Memo), found by the words
		// alone (isShort) in find's probes, also written out (its loop
		// cost Memo a tenth). A hash other than key's would miss:
		// TestMemoOfEveryNameLength.
		var a, b uint64
		switch {
		case n >= 8:
			a, b = le64(dest), le64(dest[n-8:])
		case n >= 4:
			a, b = uint64(le32(dest)), uint64(le32(dest[n-4:]))
		case n > 0:
			a = uint64(dest[0])<<16 | uint64(dest[n>>1])<<8 | uint64(dest[n-1])
		}
		j := pubMix(a^wyK1, b^tb.seed^uint64(n)*wyK0^wyK2) & tb.mask
		if cell = tb.slots[j].Load(); cell == nil || !cell.isShort(uint64(n), a, b) {
			if cell = tb.slots[j^1].Load(); cell == nil || !cell.isShort(uint64(n), a, b) {
				return Memo{}, false
			}
		}
	} else {
		k := tb.key(dest)
		if cell = tb.find(&k, dest); cell == nil {
			return Memo{}, false
		}
	}
	s := cell.seq.Load()
	fl := cell.flags.Load()
	w := &cell.memo[slot]
	a, b := w[0].Load(), w[1].Load()
	// The cell holds reg's memos for now: published (and not being
	// written), at the Fleet's version, in the clock's epoch, with reg
	// (which implies reg's quantile and trust threshold: publish), and
	// unchanged since s (the seqlock's recheck, last). Written out as
	// ifs: as a bool function inlined, each condition was tested twice.
	if fl == 0 || s&1 != 0 || cell.fver.Load() != fver || cell.clk.Load() != clk || cell.memoBy.Load() != reg || cell.seq.Load() != s {
		return Memo{}, false
	}
	return Memo{A: a, B: b}, true
}

// Memos sets m[i] to the memo of slot of dests[i]'s decision input at
// reg's quantile and now, for each of the first len(m) destinations, and
// reports whether all were published with reg's memos (reg the Fleet's
// current registration) and hold: one hash, one table lookup and a few
// atomic loads each, the reads of DecisionInputs' lock-free path. False
// says nothing of any destination (m is then unspecified): the caller
// decides through DecisionInputs, which publishes what it finds.
func (f *Fleet) Memos(m []Memo, dests []string, slot int, now time.Time, reg *MemoReg) bool {
	if reg == nil || reg.f != f || uint(slot) >= MemoSlots || len(dests) < len(m) {
		return false
	}
	// What every cell is checked against, read once.
	tb, clk := reg.tb, f.localSync.clock.Load()
	if clk == nil || tb.memo.Load() != reg {
		return false
	}
	if ms := now.UnixMilli(); ms < clk.start || ms >= clk.end {
		return false
	}
	fver := f.ver.Load()
	for i := range m {
		// Memo's body: a short name hashed by hand and its probes written
		// out, the conditions tested once each.
		var cell *pubCell
		if dest := dests[i]; len(dest) <= 16 {
			n := len(dest)
			var a, b uint64
			switch {
			case n >= 8:
				a, b = le64(dest), le64(dest[n-8:])
			case n >= 4:
				a, b = uint64(le32(dest)), uint64(le32(dest[n-4:]))
			case n > 0:
				a = uint64(dest[0])<<16 | uint64(dest[n>>1])<<8 | uint64(dest[n-1])
			}
			j := pubMix(a^wyK1, b^tb.seed^uint64(n)*wyK0^wyK2) & tb.mask
			if cell = tb.slots[j].Load(); cell == nil || !cell.isShort(uint64(n), a, b) {
				if cell = tb.slots[j^1].Load(); cell == nil || !cell.isShort(uint64(n), a, b) {
					return false
				}
			}
		} else {
			k := tb.key(dest)
			if cell = tb.find(&k, dest); cell == nil {
				return false
			}
		}
		s := cell.seq.Load()
		fl := cell.flags.Load()
		w := &cell.memo[slot]
		a, b := w[0].Load(), w[1].Load()
		if fl == 0 || s&1 != 0 || cell.fver.Load() != fver || cell.clk.Load() != clk || cell.memoBy.Load() != reg || cell.seq.Load() != s {
			return false
		}
		m[i] = Memo{A: a, B: b}
	}
	return true
}
