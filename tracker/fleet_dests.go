package tracker

// relevel moves d to the list of its level after its view's peers changed.
func (f *Fleet) relevel(d *destState) {
	l := int8(min(len(d.contrib), 2))
	if l == d.level {
		return
	}
	f.unlist(d)
	d.level = l
	if l < 2 {
		f.lists[l].pushBack(&d.cand)
	}
}

// destFor returns the state of dest, or nil when dest has none and none can
// be made. A new destination beyond MaxDestinations evicts the least
// recently inserted destination with no peer in view, else the least
// recently inserted with one peer in view; when every destination has two
// or more, dest is refused. So one peer's junk destinations never evict a
// destination several peers report.
func (f *Fleet) destFor(dest string) *destState {
	if d := f.dests[dest]; d != nil {
		if d.level < 2 {
			f.lists[d.level].moveToBack(&d.cand)
		}
		return d
	}
	if len(f.dests) >= f.cfg.MaxDestinations {
		n := f.lists[0].head
		if n == nil {
			n = f.lists[1].head
		}
		if n == nil {
			f.stats.DestinationsRefused++
			return nil
		}
		v := n.v
		f.unlist(v)
		delete(f.dests, v.name)
		v.evicted = true
		v.h, v.c, v.epochN, v.contrib, v.sum = hist{}, sparseSum{}, nil, nil, destSummary{}
		f.stats.DestinationsEvicted++
	}
	d := &destState{
		name:    dest,
		h:       newHist(&f.geo),
		epochN:  make([]uint64, f.ring),
		contrib: make(map[*fleetPeer]uint64),
	}
	d.cand.v = d
	f.dests[dest] = d
	f.lists[0].pushBack(&d.cand)
	return d
}

// unlist takes d out of its level's list, if it is in one.
func (f *Fleet) unlist(d *destState) {
	if d.level < 2 {
		f.lists[d.level].remove(&d.cand)
	}
}
