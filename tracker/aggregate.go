package tracker

import (
	"cmp"
	"math/bits"
)

// AggregateSlices is the number of slices the aggregates of one epoch are
// split into for anti-entropy (AggregateSlice): a digest carries one
// (count, hash) pair per slice, so two nodes find the few destinations they
// disagree on without listing all of them.
const AggregateSlices = 16

// Coverage says which origins' records an aggregate merged: how many
// (origin member, epoch) records (Records) and a hash of which (Hash, the
// exclusive or of RecordHash of each). Two aggregates of one destination and
// epoch with the same coverage merged the same records. Coverages are
// ordered by Records, then Hash (Compare): a reader keeps the aggregate with
// the largest, never a sum of several, so a record is counted at most once
// whichever owner published.
type Coverage struct {
	Records uint32
	Hash    uint64
}

// Compare orders coverages by Records, then Hash: -1, 0 or +1.
func (c Coverage) Compare(o Coverage) int {
	return cmp.Or(cmp.Compare(c.Records, o.Records), cmp.Compare(c.Hash, o.Hash))
}

// RecordHash is the coverage hash of one record: origin name, boot and
// epoch, hashed the same way by every process (FNV-1a, then a 64-bit
// finalizer).
func RecordHash(origin string, boot uint64, epoch int64) uint64 {
	h := NameHash(origin)
	return mix64(h ^ mix64(boot^mix64(uint64(epoch)+0x9e3779b97f4a7c15)))
}

// NameHash is a hash of s that every process computes alike: FNV-1a 64,
// then a finalizer. The protocol uses it for ownership, slices and
// manifests; it is not a defence against chosen names.
func NameHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return mix64(h)
}

// mix64 is splitmix64's finalizer.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// AggregateSlice returns the anti-entropy slice of dest, in
// [0, AggregateSlices).
func AggregateSlice(dest string) int { return int(NameHash(dest) % AggregateSlices) }

// Aggregate is one destination's fleet view as its owner merged it: the
// sum of every included origin's records of Dest over the window that ends
// with epoch Epoch ([Epoch−N+2, Epoch], the fleet view at epoch Epoch+1),
// after the share cap, with what the estimate reads beside the counts. It
// is what destination-owned aggregation (protocol v2) sends to every
// member instead of every origin's batch: a reader's fleet view of Dest at
// epoch E is the aggregate of (Dest, E−1) with the largest Coverage.
//
// Buckets ascend by Index with Total their sum; TimedOut are the censored
// counts after the cap (a subset of Buckets, as in DestCounts);
// CensoringUnknown is set when a merged record came from a peer that does
// not send censored counts. Peers is the number of distinct peer names
// with samples in the window (before the cap), SquareSum the sum of the
// squares of their sample counts after the cap (hi, lo of 128 bits), so
// EffectivePeers is (Total)²/SquareSum exactly as the Fleet computes it.
// Newest is the newest epoch of the window holding data (HasNewest),
// for staleness.
type Aggregate struct {
	Dest             string
	Epoch            int64
	Layout           Layout
	Total            uint64
	Buckets          []Bucket
	TimedOut         []Bucket
	CensoringUnknown bool
	Peers            int
	SquareSum        [2]uint64
	Newest           int64
	Coverage         Coverage
}

// EffectivePeers returns (Σn)²/Σn² over the peers' capped sample counts
// (0 when there are none), as Estimate.EffectivePeers.
func (a *Aggregate) EffectivePeers() float64 {
	s := peerSums{sum: a.Total, sqHi: a.SquareSum[0], sqLo: a.SquareSum[1]}
	return s.effective()
}

// DigestHash is the aggregate's contribution to its slice's anti-entropy
// hash: its destination and coverage.
func (a *Aggregate) DigestHash() uint64 { return AggregateDigestHash(a.Dest, a.Coverage) }

// AggregateDigestHash is the anti-entropy hash of an aggregate of dest
// with coverage c (Aggregate.DigestHash without the aggregate).
func AggregateDigestHash(dest string, c Coverage) uint64 {
	return mix64(NameHash(dest) ^ mix64(c.Hash^uint64(c.Records)<<1|1))
}

// equalAggregate reports whether a and b carry the same view.
func equalAggregate(a, b *Aggregate) bool {
	if a.Dest != b.Dest || a.Epoch != b.Epoch || a.Layout != b.Layout || a.Total != b.Total ||
		a.CensoringUnknown != b.CensoringUnknown || a.Peers != b.Peers || a.SquareSum != b.SquareSum ||
		a.Newest != b.Newest || a.Coverage != b.Coverage || len(a.Buckets) != len(b.Buckets) || len(a.TimedOut) != len(b.TimedOut) {
		return false
	}
	for i := range a.Buckets {
		if a.Buckets[i] != b.Buckets[i] {
			return false
		}
	}
	for i := range a.TimedOut {
		if a.TimedOut[i] != b.TimedOut[i] {
			return false
		}
	}
	return true
}

// addSquare adds n² to a 128-bit sum.
func addSquare(s *[2]uint64, n uint64) {
	hi, lo := bits.Mul64(n, n)
	var c uint64
	s[1], c = bits.Add64(s[1], lo, 0)
	s[0] += hi + c
}
