package tracker

// count adds hb (of an included member) to the states of its destinations.
func (f *Fleet) count(m *fleetMember, hb *heldBatch, ep int64, inView bool) {
	s := f.slot(ep)
	for i := range hb.dests {
		dc := hb.dest(i)
		if dc.Total == 0 {
			continue
		}
		d := f.destFor(dc.Dest)
		if d == nil {
			continue // refused: not counted while this batch is held
		}
		hb.ds[i] = d
		d.refs++
		d.epochN[s] += dc.Total
		if inView {
			f.viewAdd(d, m.peer, &dc)
		}
		d.gen++
	}
}

// uncount reverses count.
func (f *Fleet) uncount(m *fleetMember, hb *heldBatch, ep int64, inView bool) {
	s := f.slot(ep)
	for i, d := range hb.ds {
		if d == nil {
			continue
		}
		hb.ds[i] = nil
		d.refs--
		if d.evicted {
			continue
		}
		dc := hb.dest(i)
		d.epochN[s] -= dc.Total
		if inView {
			f.viewSub(d, m.peer, &dc)
		}
		d.gen++
		if d.refs == 0 {
			f.unlist(d)
			delete(f.dests, d.name)
		}
	}
}

// moveView moves a counted batch into or out of the view.
func (f *Fleet) moveView(m *fleetMember, hb *heldBatch, in bool) {
	for i, d := range hb.ds {
		if d == nil || d.evicted {
			continue
		}
		dc := hb.dest(i)
		if in {
			f.viewAdd(d, m.peer, &dc)
		} else {
			f.viewSub(d, m.peer, &dc)
		}
		d.gen++
	}
}

func (f *Fleet) viewAdd(d *destState, p *fleetPeer, dc *DestCounts) {
	d.h.addBuckets(dc.Buckets)
	d.c.addBuckets(dc.TimedOut)
	if dc.CensoringUnknown {
		d.unknown++
	}
	d.contrib[p] += dc.Total
	f.relevel(d)
}

func (f *Fleet) viewSub(d *destState, p *fleetPeer, dc *DestCounts) {
	d.h.subBuckets(dc.Buckets)
	d.c.subBuckets(dc.TimedOut)
	if dc.CensoringUnknown {
		d.unknown--
	}
	if n := d.contrib[p] - dc.Total; n == 0 {
		delete(d.contrib, p)
	} else {
		d.contrib[p] = n
	}
	f.relevel(d)
}
