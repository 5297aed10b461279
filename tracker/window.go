package tracker

import (
	"math"
	"math/bits"
)

// sealedSub is one finished sub-window of a destination: the sparse counts
// recorded in epoch, ascending by index. buckets is never modified after it
// is built, so it can be handed out without copying; an expired slot is
// replaced, never rewritten.
type sealedSub struct {
	epoch   int64
	total   uint64
	buckets []Bucket
}

// window is one destination's sliding window: the current sub-window dense
// (for a cheap record), the sealed ones sparse (for compact storage), and the
// dense sum of all of them, kept incrementally.
//
// Memory at defaults (1280 counts): cur 5 KiB + sum 10 KiB + small
// bookkeeping, plus 8 bytes per non-empty bucket of each sealed sub-window.
type window struct {
	epoch   int64       // the epoch cur belongs to
	cur     []uint32    // counts recorded in epoch
	touched []uint64    // bitmap of the non-zero indices of cur
	curN    uint64      // sum of cur
	sum     hist        // cur plus every sealed sub-window in the ring
	ring    []sealedSub // sealed sub-windows by epoch mod N; buckets nil if empty
}

// init makes w an empty window of n sub-windows at epoch.
func (w *window) init(g *geometry, n int, epoch int64) {
	cl := int(g.countsLen)
	*w = window{
		epoch:   epoch,
		cur:     make([]uint32, cl),
		touched: make([]uint64, (cl+63)/64),
		sum:     newHist(g),
		ring:    make([]sealedSub, n),
	}
}

// record adds one sample at index i to the current sub-window. A bucket of
// one sub-window holds at most 2^32−1 samples (the wire format's Bucket
// count); further samples there are dropped.
func (w *window) record(i int) {
	c := w.cur[i]
	if c == math.MaxUint32 {
		return
	}
	if c == 0 {
		w.touched[i>>6] |= 1 << (uint(i) & 63)
	}
	w.cur[i] = c + 1
	w.curN++
	w.sum.add(i, 1)
}

// rotate moves the window to epoch e. It does nothing when e is not after
// w.epoch (the clock went backwards, or no time passed). Otherwise it seals
// the current sub-window into the ring, drops the sub-windows that fall out of
// [e−N+1, e] from the sum, and starts an empty current sub-window; a gap of N
// epochs or more clears everything.
func (w *window) rotate(e int64) {
	if e > w.epoch {
		w.rotateTo(e)
	}
}

func (w *window) rotateTo(e int64) {
	n := uint64(len(w.ring))
	if uint64(e)-uint64(w.epoch) >= n { // exact even if e−w.epoch overflows int64
		w.clear(e)
		return
	}
	w.seal()
	for k := range w.ring {
		s := &w.ring[k]
		if s.buckets == nil || uint64(e)-uint64(s.epoch) < n {
			continue
		}
		for _, b := range s.buckets {
			w.sum.sub(int(b.Index), uint64(b.Count))
		}
		*s = sealedSub{}
	}
	w.epoch = e
}

// seal turns the current sub-window into a sparse sealed one in its ring
// slot and empties cur, visiting only the indices it touched.
func (w *window) seal() {
	slot := &w.ring[w.slot(w.epoch)]
	*slot = sealedSub{}
	if w.curN == 0 {
		return
	}
	nz := 0
	for _, word := range w.touched {
		nz += bits.OnesCount64(word)
	}
	buckets := make([]Bucket, 0, nz)
	for k, word := range w.touched {
		for word != 0 {
			i := k<<6 + bits.TrailingZeros64(word)
			word &= word - 1
			buckets = append(buckets, Bucket{Index: uint16(i), Count: w.cur[i]})
			w.cur[i] = 0
		}
		w.touched[k] = 0
	}
	*slot = sealedSub{epoch: w.epoch, total: w.curN, buckets: buckets}
	w.curN = 0
}

// clear empties the window and moves it to epoch e.
func (w *window) clear(e int64) {
	if w.curN != 0 {
		for k, word := range w.touched {
			for word != 0 {
				w.cur[k<<6+bits.TrailingZeros64(word)] = 0
				word &= word - 1
			}
			w.touched[k] = 0
		}
		w.curN = 0
	}
	if w.sum.total != 0 {
		w.sum.reset()
	}
	clear(w.ring)
	w.epoch = e
}

// sealedAt returns the sealed sub-window of epoch e if the ring still holds it.
func (w *window) sealedAt(e int64) (sealedSub, bool) {
	if e >= w.epoch {
		return sealedSub{}, false
	}
	s := w.ring[w.slot(e)]
	if s.buckets == nil || s.epoch != e {
		return sealedSub{}, false
	}
	return s, true
}

// slot returns the ring slot of epoch e: e mod N, rounded toward negative
// infinity, so consecutive epochs take consecutive slots across zero too.
func (w *window) slot(e int64) int {
	n := int64(len(w.ring))
	m := e % n
	if m < 0 {
		m += n
	}
	return int(m)
}
