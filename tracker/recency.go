package tracker

// placed is an element of a shard's recency heap: a destination and the
// stamp it had when it was last placed there.
type placed[D comparable] struct {
	stamp uint64
	en    *entry[D]
}

// recency is a shard's eviction order, kept lazily so that a record writes
// only its entry's stamp: a 4-ary min-heap of the shard's destinations by
// the stamp each had when it was placed, never more than its current one.
// An element is fresh when the two are equal. fix re-places a stale
// element at its current stamp, within its subtree, until the element at
// its index is fresh; that one then has the least current stamp of the
// subtree (every other's current stamp is at least its placed one, at
// least the fresh one's). A re-place costs O(log n) at an eviction, at most
// one per record since the last, where moving a destination to the front
// of a list at every record wrote three other destinations' lines. The
// heap is 4-ary, half as deep as a binary one: a re-placed stamp is recent
// and sinks to the bottom, a level per step.
//
// Only push (a stamp newer than every placed one: it stays at the end),
// fix and removeAt move elements, so an evictor, alone in fixing and
// removing, can keep indices across the shard's lock being released.
//
// The zero value is empty. It is guarded by the shard's lock.
type recency[D comparable] struct {
	h []placed[D]
}

// push places en at its current stamp.
func (r *recency[D]) push(en *entry[D]) {
	r.h = append(r.h, placed[D]{})
	r.up(len(r.h)-1, placed[D]{stamp: en.stamp, en: en})
}

// fix makes the element at index i, which must exist, fresh, and returns
// it: the destination of least current stamp in i's subtree.
func (r *recency[D]) fix(i int) *entry[D] {
	h := r.h
	for h[i].stamp != h[i].en.stamp {
		r.down(i, placed[D]{stamp: h[i].en.stamp, en: h[i].en})
	}
	return h[i].en
}

// removeAt removes the element at index i, which must exist.
func (r *recency[D]) removeAt(i int) {
	last := len(r.h) - 1
	x := r.h[last]
	r.h[last] = placed[D]{}
	r.h = r.h[:last]
	if i == last {
		return
	}
	if i > 0 && x.stamp < r.h[(i-1)/4].stamp {
		r.up(i, x)
	} else {
		r.down(i, x)
	}
}

// up puts x in the hole at index i and moves it up to its place.
func (r *recency[D]) up(i int, x placed[D]) {
	h := r.h
	for i > 0 {
		p := (i - 1) / 4
		if h[p].stamp <= x.stamp {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = x
}

// down puts x in the hole at index i and moves it down to its place: the
// least child moves up into the hole until x fits there.
func (r *recency[D]) down(i int, x placed[D]) {
	h := r.h
	for {
		c := 4*i + 1
		if c >= len(h) {
			break
		}
		m, ms := c, h[c].stamp
		if c+3 < len(h) { // four children, the common case, unrolled
			q := h[c : c+4 : c+4]
			if s := q[1].stamp; s < ms {
				m, ms = c+1, s
			}
			if s := q[2].stamp; s < ms {
				m, ms = c+2, s
			}
			if s := q[3].stamp; s < ms {
				m, ms = c+3, s
			}
		} else {
			for k := c + 1; k < len(h); k++ {
				if s := h[k].stamp; s < ms {
					m, ms = k, s
				}
			}
		}
		if x.stamp <= ms {
			break
		}
		h[i] = h[m]
		i = m
	}
	h[i] = x
}

// children returns the range of i's children's indices, empty when it has
// none.
func (r *recency[D]) children(i int) (from, to int) {
	from = 4*i + 1
	return min(from, len(r.h)), min(from+4, len(r.h))
}
