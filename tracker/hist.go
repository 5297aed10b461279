package tracker

import "math"

// hist is a dense histogram in a geometry's layout: one count per index and
// their total. It is the merged form shared by the local window and the fleet
// view: counts are added and subtracted incrementally, never rebuilt per query.
//
// The zero value is not usable; make one with newHist.
type hist struct {
	counts []uint64
	total  uint64
}

func newHist(g *geometry) hist {
	return hist{counts: make([]uint64, g.countsLen)}
}

// add adds n to index i.
func (h *hist) add(i int, n uint64) {
	h.counts[i] += n
	h.total += n
}

// sub subtracts n from index i; n must not exceed the count there.
func (h *hist) sub(i int, n uint64) {
	h.counts[i] -= n
	h.total -= n
}

// reset sets every count to zero.
func (h *hist) reset() {
	clear(h.counts)
	h.total = 0
}

// rank returns the 1-based rank of quantile q among total samples, following
// DESIGN.md section 3: q > 1 is 1, rank = ceil(q·total) and at least 1. A NaN
// or negative q gives rank 1.
func rank(q float64, total uint64) uint64 {
	if q > 1 {
		q = 1
	}
	r := math.Ceil(q * float64(total))
	if !(r >= 1) { // also catches NaN
		return 1
	}
	if r >= float64(total) {
		return total
	}
	return uint64(r)
}

// quantileIndex returns the index of the bucket that holds quantile q, and
// whether the histogram holds any sample. q == 0 is the first non-empty
// bucket; callers report its lowest equivalent value then, and the highest
// equivalent value otherwise.
//
// High quantiles scan from the top, low ones from the bottom, so P99.99 of a
// full window touches only the few buckets of the tail.
func (h *hist) quantileIndex(q float64) (int, bool) {
	if h.total == 0 {
		return 0, false
	}
	r := rank(q, h.total)
	if r > h.total/2 {
		// Walk down: the bucket at which the count above it drops below
		// total-r+1 is the one where the cumulative count first reaches r.
		above := h.total - r // samples allowed strictly above the answer
		var seen uint64
		for i := len(h.counts) - 1; i >= 0; i-- {
			seen += h.counts[i]
			if seen > above {
				return i, true
			}
		}
		return 0, true
	}
	var cum uint64
	for i, c := range h.counts {
		cum += c
		if cum >= r {
			return i, true
		}
	}
	return len(h.counts) - 1, true
}

// quantileValue returns the value of quantile q under the bucket rule of
// DESIGN.md section 3: the highest equivalent value of the bucket at which the
// cumulative count reaches the rank, or the lowest equivalent value when q is
// exactly 0.
func (h *hist) quantileValue(g *geometry, q float64) (int64, bool) {
	i, ok := h.quantileIndex(q)
	if !ok {
		return 0, false
	}
	if q == 0 {
		return g.lowestEquivalent(i), true
	}
	return g.highestEquivalent(i), true
}
