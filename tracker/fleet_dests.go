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
		f.lists[l].pushBack(d)
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
			f.lists[d.level].unlink(d)
			f.lists[d.level].pushBack(d)
		}
		return d
	}
	if len(f.dests) >= f.cfg.MaxDestinations {
		v := f.lists[0].head
		if v == nil {
			v = f.lists[1].head
		}
		if v == nil {
			f.stats.DestinationsRefused++
			return nil
		}
		f.unlist(v)
		delete(f.dests, v.name)
		v.evicted = true
		v.h, v.epochN, v.contrib, v.sum = hist{}, nil, nil, destSummary{}
		f.stats.DestinationsEvicted++
	}
	d := &destState{
		name:    dest,
		h:       newHist(&f.geo),
		epochN:  make([]uint64, f.ring),
		contrib: make(map[*fleetPeer]uint64),
	}
	f.dests[dest] = d
	f.lists[0].pushBack(d)
	return d
}

// unlist takes d out of its level's list, if it is in one.
func (f *Fleet) unlist(d *destState) {
	if d.level < 2 {
		f.lists[d.level].unlink(d)
	}
}

// destList is a doubly linked list of destinations, head first.
type destList struct{ head, tail *destState }

func (l *destList) pushBack(d *destState) {
	d.prev, d.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = d
	} else {
		l.head = d
	}
	l.tail = d
}

func (l *destList) unlink(d *destState) {
	if d.prev != nil {
		d.prev.next = d.next
	} else {
		l.head = d.next
	}
	if d.next != nil {
		d.next.prev = d.prev
	} else {
		l.tail = d.prev
	}
	d.prev, d.next = nil, nil
}
