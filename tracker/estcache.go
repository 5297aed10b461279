package tracker

import "time"

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
// the estimate was assembled with.
type viewPos struct {
	qi, mi     int
	below, at  uint64
	minSamples uint64
}

// set records where lv's answers sit in w (qi, mi from settings.viewAt).
func (p *viewPos) set(w *window, qi, mi int, minSamples uint64) {
	*p = viewPos{qi: qi, mi: mi, minSamples: minSamples}
	if qi >= 0 {
		p.at = w.sum.counts[qi]
		p.below = w.sum.total - w.sum.countFrom(qi)
	}
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
	return true
}

// recorded keeps the cached local views valid across one sample at index i
// (timedOut: a censored one) that moved the window from version from to to
// without a rotation, where viewPos.shift can.
func (cs *estCaches) recorded(i int, timedOut bool, from, to uint64) {
	for k := range cs.slots {
		c := &cs.slots[k]
		if c.lok && c.lver == from && c.lp.shift(&c.lv, &c.est, c.eok, c.q, i, timedOut) {
			c.lver = to
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
	c, sh := t.current(dest, name, q, now, fver, minSamples)
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
// else.
func (t *SyncTracker[D]) cachedInput(in *DecisionInput, dest D, name string, q float64, now time.Time, fver uint64, minSamples uint64) bool {
	c, sh := t.current(dest, name, q, now, fver, minSamples)
	if c == nil {
		return false
	}
	*in = c.in
	sh.mu.Unlock()
	return true
}

// current returns dest's cache for q with valid fleet facts (as cached
// says) and its estimate assembled for the window as it is now, with the
// shard sh locked for the caller to read it and unlock; nil (and no lock
// held) when the cache holds no valid fleet facts.
func (t *SyncTracker[D]) current(dest D, name string, q float64, now time.Time, fver uint64, minSamples uint64) (*estCache, *syncShard[D]) {
	te := t.advance(now)
	// The epoch of now: the tracker's current one when now is in it.
	fepoch := te
	if ms, c := now.UnixMilli(), t.clock.Load(); ms < c.start || ms >= c.end {
		fepoch = floorDiv(ms, t.s.subMs)
	}
	h, sh := t.shard(dest)
	sh.mu.Lock()
	en := sh.get(h, dest)
	if en == nil || en.ec == nil {
		sh.mu.Unlock()
		return nil, nil
	}
	c := en.ec.slot(q)
	if c == nil || !c.fok || c.fver != fver || fepoch > c.fepoch {
		sh.mu.Unlock()
		return nil, nil
	}
	en.rotate(te)
	if !c.lok || c.lver != en.ver || c.lp.minSamples != minSamples {
		qi, mi := t.s.viewAt(&en.window, q, &c.lv)
		c.lp.set(&en.window, qi, mi, minSamples)
		c.lver, c.lok, c.eok = en.ver, true, false
	}
	if !c.eok {
		assemble(&c.est, name, q, now, &c.ff, &c.lv, true, minSamples)
		c.in = c.est.Input()
		c.eok = true
	}
	return c, sh
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
