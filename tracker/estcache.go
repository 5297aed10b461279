package tracker

import "time"

// estCache is one destination's cached estimate input, kept in its entry of
// the Fleet's local *SyncTracker[string] (one lookup finds both the local
// window and the cache) under the entry's shard lock: the fleet's facts for
// quantile q, valid while the Fleet's version is fver and now's epoch is at
// most fepoch (the Fleet would not slide); and the local view for q, valid
// while the window's version is lver; and the estimate assembled from both.
// About 400 bytes per destination
// estimated, allocated at its first estimate.
type estCache struct {
	q      float64
	fver   uint64
	fepoch int64
	ff     fleetFacts
	lver   uint64
	lv     viewFacts
	est    Estimate // assembled from ff and lv (but for its staleness), when eok
	fok    bool
	lok    bool
	eok    bool
}

// cached sets *e to dest's estimate (its Dest set to name) at now for q from the cache and
// reports whether the cache held valid fleet facts: fver is the Fleet's
// version now, its grid is the tracker's, and minSamples is max(MinSamples,
// 1). The local view, and the estimate assembled from both, are recomputed
// (and cached) when the window changed; the staleness is recomputed at
// each call.
func (t *SyncTracker[D]) cached(e *Estimate, dest D, name string, q float64, now time.Time, fver uint64, minSamples uint64) bool {
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
		return false
	}
	c := en.ec
	if !c.fok || c.q != q || c.fver != fver || fepoch > c.fepoch {
		sh.mu.Unlock()
		return false
	}
	en.rotate(te)
	if !c.lok || c.lver != en.ver {
		t.s.view(&en.window, q, &c.lv)
		c.lver, c.lok, c.eok = en.ver, true, false
	}
	if !c.eok {
		assemble(&c.est, name, q, now, &c.ff, &c.lv, true, minSamples)
		c.eok = true
	}
	*e = c.est
	if c.ff.hasNewest {
		e.Staleness = sinceMillis(now, c.ff.newestEnd)
	}
	sh.mu.Unlock()
	return true
}

// fill caches ff, the fleet's facts of dest for q read at the Fleet's
// version fver and epoch fepoch, when the tracker holds dest.
func (t *SyncTracker[D]) fill(dest D, q float64, fver uint64, fepoch int64, ff *fleetFacts) {
	h, sh := t.shard(dest)
	sh.mu.Lock()
	if en := sh.get(h, dest); en != nil {
		c := en.ec
		if c == nil {
			c = new(estCache)
			en.ec = c
		}
		if c.q != q {
			c.lok = false
		}
		c.q, c.fver, c.fepoch, c.ff, c.fok, c.eok = q, fver, fepoch, *ff, true, false
	}
	sh.mu.Unlock()
}
