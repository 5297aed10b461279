package tracker

import (
	"encoding/binary"
	"math"
	"math/bits"
)

// sealedSub is one finished sub-window of a destination: the counts recorded
// in epoch, in one of two forms. A narrow one (at most one byte of []Bucket
// per count of the layout: 8·buckets <= countsLen, 160 buckets at defaults,
// which covers typical traffic) is kept as the sparse buckets, ascending by
// index, and handed out without copying. A wider one is packed (see pack),
// about one byte per non-empty bucket, so even a sub-window that fills every
// bucket costs ~1.4 KiB at defaults rather than 10 KiB of []Bucket; it is
// decoded when handed out.
//
// Neither slice is modified after it is built, so they can be shared; an
// expired slot is replaced, never rewritten. Both are nil when the slot is
// empty. The sub-window's censored counts are kept beside the ring
// (censoring.ring), so a window without timeouts keeps 64-byte slots.
type sealedSub struct {
	epoch   int64
	total   uint64
	buckets []Bucket
	packed  []byte
}

// empty reports whether the slot holds no sub-window.
func (s *sealedSub) empty() bool { return s.buckets == nil && s.packed == nil }

// each calls f with every non-empty bucket of s in ascending index order.
func (s *sealedSub) each(f func(i int, c uint32)) {
	for _, b := range s.buckets {
		f(int(b.Index), b.Count)
	}
	if s.packed != nil {
		unpack(s.packed, f)
	}
}

// sparse returns s's buckets as []Bucket: the shared slice, capacity clipped
// so an append cannot write into it, or a new slice decoded from the packed
// form.
func (s *sealedSub) sparse() []Bucket {
	if s.packed == nil {
		return s.buckets[:len(s.buckets):len(s.buckets)]
	}
	return unpackSparse(s.packed)
}

// pack encodes the non-zero counts of cur, whose indices are the set bits of
// touched, as: len(touched) as a little-endian uint16 (maxCountsLen/64 words
// at most), the touched words little-endian, then each non-zero count as a
// uvarint in ascending index order. A count below 128 takes one byte, below
// 16384 two. At defaults the header and bitmap are 162 bytes.
func pack(cur []uint32, touched []uint64) []byte {
	n := 2 + 8*len(touched)
	for k, word := range touched {
		for word != 0 {
			n += uvarintLen(cur[k<<6+bits.TrailingZeros64(word)])
			word &= word - 1
		}
	}
	p := make([]byte, 0, n)
	p = binary.LittleEndian.AppendUint16(p, uint16(len(touched)))
	for _, word := range touched {
		p = binary.LittleEndian.AppendUint64(p, word)
	}
	for k, word := range touched {
		for word != 0 {
			p = binary.AppendUvarint(p, uint64(cur[k<<6+bits.TrailingZeros64(word)]))
			word &= word - 1
		}
	}
	return p
}

// unpack calls f with every bucket of a packed sub-window in ascending index
// order.
func unpack(p []byte, f func(i int, c uint32)) {
	words := int(binary.LittleEndian.Uint16(p))
	off := 2 + 8*words
	for k := range words {
		word := binary.LittleEndian.Uint64(p[2+8*k:])
		for word != 0 {
			var c uint64
			if b := p[off]; b < 0x80 { // the common one-byte count
				c = uint64(b)
				off++
			} else {
				var n int
				c, n = binary.Uvarint(p[off:])
				off += n
			}
			f(k<<6+bits.TrailingZeros64(word), uint32(c))
			word &= word - 1
		}
	}
}

// uvarintLen returns the length of c as a uvarint.
func uvarintLen(c uint32) int {
	return (bits.Len32(c|1) + 6) / 7
}

// window is one destination's sliding window: the current sub-window dense
// (for a cheap record), the sealed ones sparse or packed (for compact
// storage), and the dense sum of all of them, kept incrementally; and, once
// a sample timed out, the censored counts in the same shapes but sparse.
//
// Memory at defaults (1280 counts): cur 5 KiB + sum 10 KiB + small
// bookkeeping, plus per sealed sub-window (9 at most) 8 bytes per non-empty
// bucket up to 160 buckets, and beyond that 162 bytes plus about one byte per
// non-empty bucket (two where its count is 128 or more, three from 16384).
// Censored counts add about 200 bytes (a slot per sub-window included)
// plus 8 bytes per censored bucket of each sub-window (packed like the
// counts beyond 160) and 10 bytes per censored bucket of the window: under
// 1 KiB for timeouts at a few values
// (TestMemoryPerDestination: 18.2 → 19.3 KiB at 200 samples per
// sub-window, 1 in 20 timed out), and about 67 KiB in all for the hostile
// worst case of every bucket censored in every sub-window.
type window struct {
	// The fields a record of a sample in a bucket already non-empty in
	// cur reads or writes come first, together (see entry).
	epoch int64  // the epoch cur belongs to
	curN  uint64 // sum of cur
	// ver counts the changes of the window (records, rotations, clears):
	// a view computed at one ver holds while ver stays (estCache).
	ver     uint64
	cur     []uint32    // counts recorded in epoch
	sum     hist        // cur plus every sealed sub-window in the ring
	touched []uint64    // bitmap of the non-zero indices of cur
	ring    []sealedSub // sealed sub-windows by epoch mod N; empty slots hold neither form
	cens    *censoring  // nil while no sample in the window timed out
}

// censoring is a window's censored counts: the current sub-window's, each
// sealed sub-window's (by ring slot) and their sum over the window (C <=
// the count in sum, bucket by bucket); and, for finding M quickly, the
// bitmap of the indices non-empty in some sealed sub-window of the ring
// (with cur's touched bitmap, exactly the non-empty buckets of sum). The
// bitmap is rebuilt at each rotation, so only destinations with timeouts
// in their window pay for it.
type censoring struct {
	cur    []Bucket      // censored counts recorded in epoch, ascending
	ring   []*sparseForm // by the slot of w.ring; nil where none timed out
	sum    sparseSum
	sealed []uint64
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
	w.cur[i] = c + 1 // (before touched's write, which could alias cur: one bounds check)
	if c == 0 {
		w.touched[i>>6] |= 1 << (uint(i) & 63)
	}
	w.curN++
	w.ver++
	w.sum.inc(i)
}

// recordTimeout adds one timed-out sample at index i: a sample as record
// adds, also counted as censored. A bucket already full in the current
// sub-window drops it, so C stays <= H.
func (w *window) recordTimeout(i int) {
	if w.cur[i] == math.MaxUint32 {
		return
	}
	w.record(i)
	if w.cens == nil {
		w.cens = &censoring{ring: make([]*sparseForm, len(w.ring)), sealed: make([]uint64, len(w.touched))}
		w.markSealed()
	}
	w.cens.cur = addOne(w.cens.cur, i)
	w.cens.sum.add(i, 1)
}

// censored returns the window's censored counts, nil when there are none.
func (w *window) censored() *sparseSum {
	if w.cens == nil {
		return nil
	}
	return &w.cens.sum
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
	d := uint64(e) - uint64(w.epoch) // exact even if e−w.epoch overflows int64
	if d >= n {
		w.clear(e)
		return
	}
	w.ver++
	k := w.slot(w.epoch)
	w.seal(k)
	// The ring now holds epochs of [w.epoch−N+1, w.epoch]; those that fall
	// out of [e−N+1, e], w.epoch−N+1 … e−N, are in the d slots after k
	// (where e's sub-windows go), so only those are visited.
	for range d {
		if k++; k == len(w.ring) {
			k = 0
		}
		s := &w.ring[k]
		if s.empty() {
			continue
		}
		for _, b := range s.buckets {
			w.sum.sub(int(b.Index), uint64(b.Count))
		}
		if s.packed != nil {
			unpack(s.packed, func(i int, c uint32) { w.sum.sub(i, uint64(c)) })
		}
		if w.cens != nil && w.cens.ring[k] != nil {
			w.cens.sum.subBuckets(w.cens.ring[k].sparse())
			w.cens.ring[k] = nil
		}
		*s = sealedSub{}
	}
	w.epoch = e
	if w.cens != nil {
		if w.cens.sum.total == 0 {
			w.cens = nil // nothing censored left in the window
		} else {
			clear(w.cens.sealed)
			w.markSealed()
		}
	}
}

// markSealed sets in w.cens.sealed the non-empty indices of every sealed
// sub-window of the ring.
func (w *window) markSealed() {
	bm := w.cens.sealed
	for k := range w.ring {
		s := &w.ring[k]
		for _, b := range s.buckets {
			bm[b.Index>>6] |= 1 << (b.Index & 63)
		}
		if s.packed != nil {
			words := int(binary.LittleEndian.Uint16(s.packed))
			for j := range words {
				bm[j] |= binary.LittleEndian.Uint64(s.packed[2+8*j:])
			}
		}
	}
}

// maxCompleted is the package's maxCompleted for this window, stepping
// from one non-empty bucket to the next through the bitmaps instead of the
// counts; w.cens must not be nil.
func (w *window) maxCompleted() (int, bool) {
	h, c := &w.sum, &w.cens.sum
	k := len(c.idx) - 1
	for i := h.hi; i >= 0; i = highestSetBelow(w.cens.sealed, w.touched, i) {
		for k >= 0 && int(c.idx[k]) > i {
			k--
		}
		if k < 0 || int(c.idx[k]) < i || c.n[k] < h.counts[i] {
			return i, true
		}
	}
	return 0, false
}

// highestSetBelow returns the highest index below i set in a or b (of the
// same length), or -1.
func highestSetBelow(a, b []uint64, i int) int {
	if i <= 0 {
		return -1
	}
	i--
	k := i >> 6
	word := (a[k] | b[k]) & (^uint64(0) >> (63 - uint(i&63)))
	for word == 0 {
		if k--; k < 0 {
			return -1
		}
		word = a[k] | b[k]
	}
	return k<<6 + bits.Len64(word) - 1
}

// seal turns the current sub-window into a sealed one in its ring slot k,
// sparse or packed (see sealedSub), and empties cur, visiting only the
// indices it touched: the words of touched between the first and the last
// non-zero one (one word for a sub-window of one sample).
func (w *window) seal(k int) {
	slot := &w.ring[k]
	*slot = sealedSub{}
	if w.cens != nil {
		w.cens.ring[k] = nil
		if len(w.cens.cur) > 0 {
			w.cens.ring[k] = newSparseForm(w.cens.cur, len(w.cur))
			w.cens.cur = nil
		}
	}
	if w.curN == 0 {
		return
	}
	// The non-zero words of touched lie in [lo, hi): the sum's highest
	// index bounds cur's from above (the sum includes cur).
	touched := w.touched
	lo, hi := 0, min(w.sum.hi>>6+1, len(touched))
	for lo < hi && touched[lo] == 0 {
		lo++
	}
	for hi > lo && touched[hi-1] == 0 {
		hi--
	}
	nz := 0
	for _, word := range touched[lo:hi] {
		nz += bits.OnesCount64(word)
	}
	if 8*nz > len(w.cur) {
		*slot = sealedSub{epoch: w.epoch, total: w.curN, packed: pack(w.cur, touched)}
		w.emptyCur()
		return
	}
	buckets := make([]Bucket, 0, nz)
	cur := w.cur
	for j := lo; j < hi; j++ {
		for word := touched[j]; word != 0; word &= word - 1 {
			i := j<<6 + bits.TrailingZeros64(word)
			buckets = append(buckets, Bucket{Index: uint16(i), Count: cur[i]})
			cur[i] = 0
		}
		touched[j] = 0
	}
	*slot = sealedSub{epoch: w.epoch, total: w.curN, buckets: buckets}
	w.curN = 0
}

// emptyCur zeroes cur, visiting only the indices it touched.
func (w *window) emptyCur() {
	for k, word := range w.touched {
		for word != 0 {
			w.cur[k<<6+bits.TrailingZeros64(word)] = 0
			word &= word - 1
		}
		w.touched[k] = 0
	}
	w.curN = 0
}

// clear empties the window and moves it to epoch e.
func (w *window) clear(e int64) {
	w.ver++
	if w.curN != 0 {
		w.emptyCur()
	}
	if w.sum.total != 0 {
		w.sum.reset()
	}
	clear(w.ring)
	w.cens = nil
	w.epoch = e
}

// sealedAt returns the sealed sub-window of epoch e if the ring still holds
// it, and its censored counts (nil when none of its samples timed out).
func (w *window) sealedAt(e int64) (s sealedSub, timedOut *sparseForm, ok bool) {
	if e >= w.epoch {
		return sealedSub{}, nil, false
	}
	k := w.slot(e)
	s = w.ring[k]
	if s.empty() || s.epoch != e {
		return sealedSub{}, nil, false
	}
	if w.cens != nil {
		timedOut = w.cens.ring[k]
	}
	return s, timedOut, true
}

// slot returns the ring slot of epoch e: e mod N, rounded toward negative
// infinity, so consecutive epochs take consecutive slots across zero too.
func (w *window) slot(e int64) int { return int(floorMod(e, int64(len(w.ring)))) }
