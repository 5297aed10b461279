package tracker

import (
	"math/bits"
	"slices"
	"strings"
)

type peerCount struct {
	p *fleetPeer
	n uint64
}

// comparePeerCounts orders by count descending, then name.
func comparePeerCounts(a, b peerCount) int {
	if a.n != b.n {
		if a.n > b.n {
			return -1
		}
		return 1
	}
	return strings.Compare(a.p.name, b.p.name)
}

// shareCap decides the share cap for peers' sample counts pcs, sorted by
// count descending: whether it bites, how many of the largest peers it caps
// (k) and the count each is capped to (t). With share s and R_k the sum of
// the counts after the first k, the level is L = s·R_k/(1−k·s), the first k
// for which the next peer's count is within it; each capped peer then holds
// share s of the capped total (before rounding down). With one peer above s
// (always the case for s >= 0.5) this is the single-peer rule (that peer
// scaled to hold share s of the capped total). When no k works (s below 1/peers), all peers are capped to the
// smallest count.
func shareCap(pcs []peerCount, s float64) (k int, t uint64, ok bool) {
	if s <= 0 || len(pcs) < 4 {
		return 0, 0, false
	}
	var total uint64
	for _, pc := range pcs {
		total += pc.n
	}
	if !(float64(pcs[0].n) > s*float64(total)) {
		return 0, 0, false
	}
	rest := total
	for k = 1; k < len(pcs); k++ {
		rest -= pcs[k-1].n
		if float64(k)*s >= 1 {
			break
		}
		l := s * float64(rest) / (1 - float64(k)*s)
		if float64(pcs[k].n) <= l {
			// In exact arithmetic l < pcs[k-1].n (the previous k failed);
			// clamp so float rounding can never make t exceed a capped
			// peer's count, nor overflow the conversion.
			n := pcs[k-1].n
			if !(l < float64(n)) {
				return k, n, true
			}
			return k, min(uint64(l), n), true
		}
	}
	last := len(pcs) - 1
	return last, pcs[last].n, true
}

// capPeer scales peer p's counts in view ch of d by t/n, and its censored
// counts in cc alike, and returns p's capped sample count, floor(n·t/n) = t.
//
// The scaling rounds the peer's cumulative counts down, not each bucket:
// bucket i keeps floor(S_i·t/n) − floor(S_{i−1}·t/n) where S_i is the
// peer's count at indices <= i. Every bucket is multiplied by the same
// factor and the total is rounded down once, so the peer ends at its share
// exactly. Rounding each bucket down instead loses up to one sample per
// non-empty bucket, and a tail is mostly buckets holding one sample: with
// four peers near a quarter each, a cap of 0.4 % erased the tail and the
// fleet's P99.99 of a destination alternated between 150 ms and 800 ms from
// one second to the next in the demo.
//
// Censored counts are scaled by the same factor on the same cumulative
// sequence, taking a bucket's censored samples as its last ones: bucket i
// with C_i of its samples censored keeps floor(S_i·t/n) −
// floor((S_i−C_i)·t/n) of them. That is at most the bucket's kept count
// (S_i−C_i >= S_{i−1}) and at most C_i, so the capped view keeps C <= H
// bucket by bucket, and a bucket entirely censored stays so.
func (f *Fleet) capPeer(d *destState, ch *hist, cc *sparseSum, p *fleetPeer, n, t uint64) uint64 {
	t = min(t, n) // shareCap guarantees it; c−(k−kept) below relies on it
	f.touched = f.touched[:0]
	censored := false
	for _, m := range p.members {
		for hb := range f.viewParts(m) {
			i, found := findDest(hb.dests, d.name)
			if !found || hb.ds[i] != d {
				continue
			}
			for _, b := range hb.dests[i].buckets {
				if f.scratch[b.Index] == 0 {
					f.touched = append(f.touched, int(b.Index))
				}
				f.scratch[b.Index] += uint64(b.Count)
			}
			if to := hb.dest(i).TimedOut; len(to) > 0 {
				if f.scratchC == nil {
					f.scratchC = make([]uint64, f.geo.countsLen)
				}
				for _, b := range to {
					f.scratchC[b.Index] += uint64(b.Count)
				}
				censored = true
			}
		}
	}
	slices.Sort(f.touched)
	var cum, kept uint64
	for _, i := range f.touched {
		c := f.scratch[i]
		f.scratch[i] = 0
		cum += c
		k := mulDiv(cum, t, n)
		ch.sub(i, c-(k-kept)) // k−kept <= c: see the doc comment
		kept = k
		if censored {
			if ci := f.scratchC[i]; ci > 0 {
				f.scratchC[i] = 0
				cc.sub(i, ci-(k-mulDiv(cum-ci, t, n)))
			}
		}
	}
	return kept
}

// mulDiv returns floor(a·b/n) for a, b <= n, exact in 128 bits.
func mulDiv(a, b, n uint64) uint64 {
	hi, lo := bits.Mul64(a, b) // a, b <= n, so hi < n
	q, _ := bits.Div64(hi, lo, n)
	return q
}

// effectivePeers returns (Σn)²/Σn², with the sums exact in 128 bits (so
// the result does not depend on the order of the peers).
func effectivePeers(pcs []peerCount) float64 {
	var a peerSums
	for _, pc := range pcs {
		a.add(pc.n)
	}
	return a.effective()
}

func effectivePeersMap(m map[*fleetPeer]uint64) float64 {
	var a peerSums
	for _, n := range m {
		a.add(n)
	}
	return a.effective()
}

type peerSums struct{ sum, sqHi, sqLo uint64 }

func (a *peerSums) add(n uint64) {
	a.sum += n
	hi, lo := bits.Mul64(n, n)
	var c uint64
	a.sqLo, c = bits.Add64(a.sqLo, lo, 0)
	a.sqHi += hi + c
}

func (a *peerSums) effective() float64 {
	sum, sqHi, sqLo := a.sum, a.sqHi, a.sqLo
	if sum == 0 {
		return 0
	}
	hi, lo := bits.Mul64(sum, sum)
	return u128(hi, lo) / u128(sqHi, sqLo)
}

func u128(hi, lo uint64) float64 { return float64(hi)*0x1p64 + float64(lo) }
