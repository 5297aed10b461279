package tracker

import "time"

// Advance slides the window to the epoch of now. Every method that takes a
// time does it first; Advance lets the node expire batches when idle.
func (f *Fleet) Advance(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slide(now)
}

// slide moves to the epoch of now, never back. Within the current epoch,
// the common case, it costs the clock's two comparisons.
func (f *Fleet) slide(now time.Time) {
	if e := f.clock.advanceMillis(now.UnixMilli(), f.swMs); e != f.epoch || !f.started {
		f.advance(e)
	}
}

func (f *Fleet) inView(ep int64) bool { return ep >= f.epoch-f.n+1 && ep <= f.epoch-1 }

func (f *Fleet) slot(ep int64) int64 { return floorMod(ep, f.ring) }

// advance slides to epoch e: batches whose epoch leaves the view are
// subtracted, those entering it added, those older than e−N−1 dropped.
func (f *Fleet) advance(e int64) {
	if !f.started {
		f.started, f.epoch = true, e
		f.changed()
		return
	}
	if e <= f.epoch {
		return
	}
	defer f.changed()
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
	if len(f.aggs) > 0 {
		f.slideAggregates()
	}
}
