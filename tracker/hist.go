package tracker

import "math"

// blockShift sets the block size of hist's block sums: 1<<blockShift counts.
const (
	blockShift = 5
	blockSize  = 1 << blockShift
	blockMask  = blockSize - 1
)

// hist is a dense histogram in a geometry's layout: one count per index and
// their total. It is the merged form shared by the local window and the fleet
// view: counts are added and subtracted incrementally, never rebuilt per query.
//
// Besides the counts it keeps the sum of every block of 32 counts and the
// highest non-empty index, so a high quantile scans from the top and skips
// whole blocks: P99.99 of a full window touches a few dozen words.
//
// The zero value is not usable; make one with newHist.
type hist struct {
	counts []uint64
	blocks []uint64 // blocks[b] = sum of counts[b*blockSize : (b+1)*blockSize]
	total  uint64
	hi     int // highest index with a non-zero count; -1 when empty
}

func newHist(g *geometry) hist {
	n := int(g.countsLen)
	return hist{
		counts: make([]uint64, n),
		blocks: make([]uint64, (n+blockMask)>>blockShift),
		hi:     -1,
	}
}

// add adds n to index i.
func (h *hist) add(i int, n uint64) {
	if n == 0 {
		return
	}
	h.counts[i] += n
	h.blocks[i>>blockShift] += n
	h.total += n
	if i > h.hi {
		h.hi = i
	}
}

// inc adds one to index i: add(i, 1) for the record path, cheap enough to
// inline there.
func (h *hist) inc(i int) {
	h.counts[i]++
	h.blocks[i>>blockShift]++
	h.total++
	if i > h.hi {
		h.hi = i
	}
}

// sub subtracts n from index i; n must not exceed the count there.
func (h *hist) sub(i int, n uint64) {
	if n == 0 {
		return
	}
	h.counts[i] -= n
	h.blocks[i>>blockShift] -= n
	h.total -= n
	if i == h.hi && h.counts[i] == 0 {
		h.hi = h.highestBelow(i)
	}
}

// highestBelow returns the highest non-empty index below i, or -1.
func (h *hist) highestBelow(i int) int {
	for j := i - 1; j >= 0; {
		if j&blockMask == blockMask && h.blocks[j>>blockShift] == 0 {
			j -= blockSize
			continue
		}
		if h.counts[j] != 0 {
			return j
		}
		j--
	}
	return -1
}

// countFrom returns the sum of the counts at index i and above, skipping
// whole blocks at a time from the top.
func (h *hist) countFrom(i int) uint64 {
	var n uint64
	for j := h.hi; j >= i; {
		if j&blockMask == blockMask && j-blockMask >= i {
			n += h.blocks[j>>blockShift]
			j -= blockSize
			continue
		}
		n += h.counts[j]
		j--
	}
	return n
}

// reset sets every count to zero.
func (h *hist) reset() {
	clear(h.counts)
	clear(h.blocks)
	h.total = 0
	h.hi = -1
}

// rank returns the 1-based rank of quantile q among total samples, by the
// quantile rule of Tracker.QuantileMillis: q > 1 is 1, rank = ceil(q·total)
// and at least 1. A NaN or negative q gives rank 1.
//
// Below 2^63 samples, the common case, total converts to a float64 as a
// signed integer, once: an unsigned conversion is a branch and twice the
// instructions, and the compiler made it twice. The value is the same.
func rank(q float64, total uint64) uint64 {
	if q > 1 {
		q = 1
	}
	if total>>63 != 0 {
		return rankHuge(q, total)
	}
	t := float64(int64(total))
	r := math.Ceil(q * t)
	if !(r >= 1) { // also catches NaN
		return 1
	}
	if r >= t {
		return total
	}
	return uint64(int64(r)) // 1 <= r < t < 2^63
}

// rankHuge is rank for a total of 2^63 samples or more, q <= 1.
func rankHuge(q float64, total uint64) uint64 {
	r := math.Ceil(q * float64(total))
	if !(r >= 1) {
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
// High quantiles scan down from the block of the highest non-empty index,
// low ones up from the bottom, both skipping whole blocks that cannot hold
// the answer.
func (h *hist) quantileIndex(q float64) (int, bool) {
	if h.total == 0 {
		return 0, false
	}
	r := rank(q, h.total)
	if r > h.total/2 {
		// Walk down: the answer is the first index at which the count seen
		// from the top exceeds the samples allowed strictly above it.
		// The highest bucket alone often holds it (a full window's
		// P99.99). Otherwise: counts above hi are 0, so hi's block sum is
		// the sum up to hi, and whole blocks are skipped from the top one
		// down, hi's included, before one block is scanned; the slices
		// are held in locals so the loops reload no field.
		above := h.total - r
		counts, blocks := h.counts, h.blocks
		i := h.hi
		if counts[i] > above {
			return i, true
		}
		var seen uint64
		b := i >> blockShift
		for b > 0 {
			s := seen + blocks[b]
			if s > above {
				break
			}
			seen = s
			b--
		}
		if b != i>>blockShift {
			i = b<<blockShift | blockMask
		}
		for ; i >= 0; i-- {
			seen += counts[i]
			if seen > above {
				return i, true
			}
		}
		return 0, true // unreachable while the sums are consistent
	}
	var cum uint64
	n := len(h.counts)
	for i := 0; i < n; {
		if i&blockMask == 0 {
			if s := h.blocks[i>>blockShift]; cum+s < r {
				cum += s
				i += blockSize
				continue
			}
		}
		cum += h.counts[i]
		if cum >= r {
			return i, true
		}
		i++
	}
	return max(h.hi, 0), true // unreachable while the sums are consistent
}

// quantileValue returns the value of quantile q under the bucket rule of
// Tracker.QuantileMillis: the highest equivalent value of the bucket at which the
// cumulative count reaches the rank, or the lowest equivalent value when q is
// exactly 0.
func (h *hist) quantileValue(g *geometry, q float64) (int64, bool) {
	i, ok := h.quantileIndex(q)
	if !ok {
		return 0, false
	}
	return int64(g.quantileValue(i, q)), true
}

// addBuckets adds a sparse histogram; its indices must be in range and
// ascending, as DestCounts' are.
func (h *hist) addBuckets(bs []Bucket) {
	counts, blocks := h.counts, h.blocks
	var t uint64
	top := -1
	for _, b := range bs {
		c := uint64(b.Count)
		counts[b.Index] += c
		blocks[b.Index>>blockShift] += c
		t += c
		if c != 0 {
			top = int(b.Index)
		}
	}
	h.total += t
	h.hi = max(h.hi, top)
}

// subBuckets subtracts a sparse histogram that was added, then moves the
// highest non-empty index down once rather than per bucket.
func (h *hist) subBuckets(bs []Bucket) {
	if len(bs) == 0 {
		return
	}
	counts, blocks := h.counts, h.blocks
	var t uint64
	for _, b := range bs {
		c := uint64(b.Count)
		counts[b.Index] -= c
		blocks[b.Index>>blockShift] -= c
		t += c
	}
	h.total -= t
	if h.hi >= 0 && counts[h.hi] == 0 {
		h.hi = h.highestBelow(h.hi)
	}
}

// copyFrom makes h an exact copy of o, reusing h's arrays.
func (h *hist) copyFrom(o *hist) {
	copy(h.counts, o.counts)
	copy(h.blocks, o.blocks)
	h.total, h.hi = o.total, o.hi
}
