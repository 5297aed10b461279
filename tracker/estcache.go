package tracker

import "time"

// estCache is one destination's cached estimate input, kept in its entry of
// the Fleet's local *SyncTracker[string] (one lookup finds both the local
// window and the cache) under the entry's shard lock: the fleet's facts for
// quantile q, valid while the Fleet's version is fver and now's epoch is at
// most fepoch (the Fleet would not slide); and the local view for q, valid
// while the window's version is lver. About 200 bytes per destination
// estimated, allocated at its first estimate.
type estCache struct {
	q      float64
	fver   uint64
	fepoch int64
	ff     fleetFacts
	lver   uint64
	lv     viewFacts
	fok    bool
	lok    bool
}

// cached sets ff and lv to dest's cached fleet facts and its local view at
// now for q, and reports whether the cache held valid facts: fver is the
// Fleet's version now and fepoch the epoch of now on the Fleet's grid. The
// local view is recomputed (and cached) when the window changed.
func (t *SyncTracker[D]) cached(dest D, q float64, now time.Time, fver uint64, fepoch int64, ff *fleetFacts, lv *viewFacts) bool {
	e := t.advance(now)
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
	en.rotate(e)
	if !c.lok || c.lver != en.ver {
		t.s.view(&en.window, q, &c.lv)
		c.lver, c.lok = en.ver, true
	}
	*ff, *lv = c.ff, c.lv
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
		c.q, c.fver, c.fepoch, c.ff, c.fok = q, fver, fepoch, *ff, true
	}
	sh.mu.Unlock()
}
