package tracker

import (
	"encoding/binary"
	"math/bits"
	"slices"
)

// Censored counts. A timed-out attempt is recorded as a sample at its
// timeout (so quantiles are what they always were) and also counted as
// censored in its bucket: its latency was at least that, not that. Per
// bucket the censored count C never exceeds the count H. Timeouts land in
// few buckets (a timeout value, doubled per attempt), so C is kept sparse
// everywhere: a sorted list for the current sub-window, a sparse or packed
// form per sealed sub-window, and a sparse sum over the window.

// sparseSum is a sparse histogram kept incrementally: ascending indices
// with their counts and the total. Entries whose count falls to zero are
// removed. The zero value is empty and ready to use.
type sparseSum struct {
	idx   []uint16
	n     []uint64
	total uint64
}

// find returns the position of index i, or where it would be inserted, and
// whether it is there.
func (s *sparseSum) find(i int) (int, bool) {
	return slices.BinarySearch(s.idx, uint16(i))
}

// get returns the count at index i.
func (s *sparseSum) get(i int) uint64 {
	if k, ok := s.find(i); ok {
		return s.n[k]
	}
	return 0
}

// add adds c at index i.
func (s *sparseSum) add(i int, c uint64) {
	if c == 0 {
		return
	}
	k, ok := s.find(i)
	if !ok {
		s.idx = slices.Insert(s.idx, k, uint16(i))
		s.n = slices.Insert(s.n, k, 0)
	}
	s.n[k] += c
	s.total += c
}

// sub subtracts c at index i; the count there must be at least c.
func (s *sparseSum) sub(i int, c uint64) {
	if c == 0 {
		return
	}
	k, _ := s.find(i)
	s.n[k] -= c
	s.total -= c
	if s.n[k] == 0 {
		s.idx = slices.Delete(s.idx, k, k+1)
		s.n = slices.Delete(s.n, k, k+1)
	}
}

// addBuckets adds an ascending sparse histogram, merging in one pass.
func (s *sparseSum) addBuckets(bs []Bucket) {
	if len(bs) == 0 {
		return
	}
	if len(bs) <= 2 || len(s.idx) == 0 {
		for _, b := range bs {
			s.add(int(b.Index), uint64(b.Count))
		}
		return
	}
	if s.holds(bs) {
		k := 0
		for _, b := range bs {
			for s.idx[k] < b.Index {
				k++
			}
			s.n[k] += uint64(b.Count)
			s.total += uint64(b.Count)
		}
		return
	}
	idx := make([]uint16, 0, len(s.idx)+len(bs))
	n := make([]uint64, 0, cap(idx))
	k := 0
	for _, b := range bs {
		for k < len(s.idx) && s.idx[k] < b.Index {
			idx, n = append(idx, s.idx[k]), append(n, s.n[k])
			k++
		}
		c := uint64(b.Count)
		if k < len(s.idx) && s.idx[k] == b.Index {
			c += s.n[k]
			k++
		}
		idx, n = append(idx, b.Index), append(n, c)
		s.total += uint64(b.Count)
	}
	s.idx, s.n = append(idx, s.idx[k:]...), append(n, s.n[k:]...)
}

// holds reports whether every index of the ascending bs has an entry.
func (s *sparseSum) holds(bs []Bucket) bool {
	k := 0
	for _, b := range bs {
		for k < len(s.idx) && s.idx[k] < b.Index {
			k++
		}
		if k == len(s.idx) || s.idx[k] != b.Index {
			return false
		}
	}
	return true
}

// subBuckets subtracts an ascending sparse histogram that was added, in
// one pass, then drops the entries left at zero.
func (s *sparseSum) subBuckets(bs []Bucket) {
	if len(bs) == 0 {
		return
	}
	k := 0
	zeros := false
	for _, b := range bs {
		for s.idx[k] < b.Index {
			k++
		}
		c := uint64(b.Count)
		s.n[k] -= c
		s.total -= c
		zeros = zeros || s.n[k] == 0
	}
	if !zeros {
		return
	}
	w := 0
	for r := range s.idx {
		if s.n[r] != 0 {
			s.idx[w], s.n[w] = s.idx[r], s.n[r]
			w++
		}
	}
	s.idx, s.n = s.idx[:w], s.n[:w]
}

// copyFrom makes s an exact copy of o, reusing s's arrays.
func (s *sparseSum) copyFrom(o *sparseSum) {
	s.idx = append(s.idx[:0], o.idx...)
	s.n = append(s.n[:0], o.n...)
	s.total = o.total
}

// reset empties s, keeping its arrays.
func (s *sparseSum) reset() {
	s.idx, s.n, s.total = s.idx[:0], s.n[:0], 0
}

// maxCompleted returns the index of the highest bucket of h whose count
// exceeds its censored count in c (the highest bucket holding a completed
// sample), and false when every non-empty bucket is entirely censored or h
// is empty. It walks down from h's highest non-empty bucket, skipping
// empty blocks, and stops at the first bucket not entirely censored, so it
// visits at most one bucket more than c has entries.
func maxCompleted(h *hist, c *sparseSum) (int, bool) {
	k := len(c.idx) - 1
	for i := h.hi; i >= 0; i = h.highestBelow(i) {
		for k >= 0 && int(c.idx[k]) > i {
			k--
		}
		if k < 0 || int(c.idx[k]) < i || c.n[k] < h.counts[i] {
			return i, true
		}
	}
	return 0, false
}

// addOne adds one at index i to the ascending sparse histogram bs and
// returns it.
func addOne(bs []Bucket, i int) []Bucket {
	lo, hi := 0, len(bs) // binary search by hand: no closure on this path
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if int(bs[m].Index) < i {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(bs) && int(bs[lo].Index) == i {
		bs[lo].Count++
		return bs
	}
	return slices.Insert(bs, lo, Bucket{Index: uint16(i), Count: 1})
}

// sparseForm is a sealed sparse histogram in one of two forms, like a
// sealed sub-window's counts (see sealedSub): the ascending buckets when
// narrow (8·buckets <= countsLen), else packed at about a byte per bucket.
// Neither is modified once built.
type sparseForm struct {
	buckets []Bucket
	packed  []byte
}

// newSparseForm seals bs, which the form then owns.
func newSparseForm(bs []Bucket, countsLen int) *sparseForm {
	if 8*len(bs) <= countsLen {
		return &sparseForm{buckets: bs}
	}
	return &sparseForm{packed: packBuckets(bs)}
}

// sparse returns the form's buckets: the shared slice, capacity clipped, or
// a new slice decoded from the packed form.
func (f *sparseForm) sparse() []Bucket {
	if f.packed == nil {
		return f.buckets[:len(f.buckets):len(f.buckets)]
	}
	return unpackSparse(f.packed)
}

// packBuckets encodes an ascending sparse histogram in pack's format.
func packBuckets(bs []Bucket) []byte {
	words := 0
	if len(bs) > 0 {
		words = int(bs[len(bs)-1].Index)>>6 + 1
	}
	n := 2 + 8*words
	for _, b := range bs {
		n += uvarintLen(b.Count)
	}
	p := make([]byte, 2+8*words, n)
	binary.LittleEndian.PutUint16(p, uint16(words))
	for _, b := range bs {
		w := p[2+8*(int(b.Index)>>6):]
		binary.LittleEndian.PutUint64(w, binary.LittleEndian.Uint64(w)|1<<(b.Index&63))
	}
	for _, b := range bs {
		p = binary.AppendUvarint(p, uint64(b.Count))
	}
	return p
}

// unpackSparse decodes a packed sub-window into a new ascending slice.
func unpackSparse(p []byte) []Bucket {
	words := int(binary.LittleEndian.Uint16(p))
	nz := 0
	for k := range words {
		nz += bits.OnesCount64(binary.LittleEndian.Uint64(p[2+8*k:]))
	}
	out := make([]Bucket, 0, nz)
	unpack(p, func(i int, c uint32) { out = append(out, Bucket{Index: uint16(i), Count: c}) })
	return out
}
