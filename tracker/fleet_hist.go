package tracker

import "math"

// fleetBlockShift sets the width of the block sums of fleetHist: 64 counts.
const fleetBlockShift = 6

// fleetHist is a dense histogram in a geometry's layout, like hist, plus the
// sum of each block of 64 counts, so a quantile walks at most countsLen/64
// block sums and then 64 counts, whatever the distribution (a plain walk from
// the top of a 1280-count layout down to a 100 ms tail touches ~1200 counts).
// It answers exactly as hist.quantileIndex does; a test checks that on random
// histograms. It is its own type so the fleet's hot loops do not depend on
// hist's internals.
type fleetHist struct {
	counts []uint64
	blocks []uint64
	total  uint64
}

func newFleetHist(g *geometry) fleetHist {
	return fleetHist{
		counts: make([]uint64, g.countsLen),
		blocks: make([]uint64, (int(g.countsLen)+(1<<fleetBlockShift)-1)>>fleetBlockShift),
	}
}

func (h *fleetHist) add(i int, n uint64) {
	h.counts[i] += n
	h.blocks[i>>fleetBlockShift] += n
	h.total += n
}

func (h *fleetHist) sub(i int, n uint64) {
	h.counts[i] -= n
	h.blocks[i>>fleetBlockShift] -= n
	h.total -= n
}

// addBuckets adds a sparse histogram; its indices must be in range.
func (h *fleetHist) addBuckets(bs []Bucket) {
	counts, blocks := h.counts, h.blocks
	var t uint64
	for _, b := range bs {
		c := uint64(b.Count)
		counts[b.Index] += c
		blocks[b.Index>>fleetBlockShift] += c
		t += c
	}
	h.total += t
}

// subBuckets subtracts a sparse histogram that was added.
func (h *fleetHist) subBuckets(bs []Bucket) {
	counts, blocks := h.counts, h.blocks
	var t uint64
	for _, b := range bs {
		c := uint64(b.Count)
		counts[b.Index] -= c
		blocks[b.Index>>fleetBlockShift] -= c
		t += c
	}
	h.total -= t
}

// copyFrom makes h an exact copy of o, reusing h's arrays.
func (h *fleetHist) copyFrom(o *fleetHist) {
	copy(h.counts, o.counts)
	copy(h.blocks, o.blocks)
	h.total = o.total
}

// fleetRank is the 1-based rank of quantile q among total samples, the rule of
// DESIGN.md section 3 (q > 1 is 1, ceil(q·total), at least 1); the same rule
// as hist.quantileIndex, restated here so the fleet's fast path does not
// depend on hist's internals.
func fleetRank(q float64, total uint64) uint64 {
	if q > 1 {
		q = 1
	}
	r := math.Ceil(q * float64(total))
	if !(r >= 1) {
		return 1
	}
	if r >= float64(total) {
		return total
	}
	return uint64(r)
}

// quantileIndex returns the smallest index whose cumulative count reaches the
// rank of q, and whether h holds any sample.
func (h *fleetHist) quantileIndex(q float64) (int, bool) {
	if h.total == 0 {
		return 0, false
	}
	r := fleetRank(q, h.total)
	if r > h.total/2 {
		above := h.total - r // samples allowed strictly above the answer
		var seen uint64
		for b := len(h.blocks) - 1; b >= 0; b-- {
			if seen+h.blocks[b] <= above {
				seen += h.blocks[b]
				continue
			}
			hi := min((b+1)<<fleetBlockShift, len(h.counts)) - 1
			for i := hi; i >= b<<fleetBlockShift; i-- {
				seen += h.counts[i]
				if seen > above {
					return i, true
				}
			}
		}
		return 0, true
	}
	var cum uint64
	for b, s := range h.blocks {
		if cum+s < r {
			cum += s
			continue
		}
		hi := min((b+1)<<fleetBlockShift, len(h.counts))
		for i := b << fleetBlockShift; i < hi; i++ {
			cum += h.counts[i]
			if cum >= r {
				return i, true
			}
		}
	}
	return len(h.counts) - 1, true
}

// quantileValue is hist.quantileValue on the block-indexed walk.
func (h *fleetHist) quantileValue(g *geometry, q float64) (int64, bool) {
	i, ok := h.quantileIndex(q)
	if !ok {
		return 0, false
	}
	if q == 0 {
		return g.lowestEquivalent(i), true
	}
	return g.highestEquivalent(i), true
}
