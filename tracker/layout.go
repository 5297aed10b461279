package tracker

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// Layout names an HdrHistogram bucket layout: the lowest discernible value,
// the highest trackable value and the number of significant decimal digits,
// all as hdrhistogram-go's New takes them. Values are whole milliseconds.
//
// A tracker at default settings uses {1, 60000, 2}, which has 1280 counts.
// Nodes exchange counts by index into this layout, so a batch whose layout
// differs from the receiver's cannot be merged and is refused.
type Layout struct {
	Lowest            int64
	Highest           int64
	SignificantDigits int
}

// ErrLayout reports a Layout that hdrhistogram-go could not build, or one that
// does not match the receiver's.
var ErrLayout = errors.New("tracker: unsupported histogram layout")

// maxCountsLen bounds the layouts this package accepts, so a layout taken
// from a peer can never make it allocate much: 1 << 16 counts fit the uint16
// bucket index of the wire format.
const maxCountsLen = 1 << 16

// geometry is the precomputed arithmetic of a Layout, exactly as
// hdrhistogram-go computes it. It is a small value type, cheap to copy.
type geometry struct {
	layout        Layout
	unitMagnitude uint8
	halfMagnitude uint8 // log2(subBucketHalfCount)
	subBucketHalf int32 // subBucketHalfCount
	subBucketMask int64
	bucketCount   int32
	countsLen     int32
	highestIndex  int32 // index of Highest
}

// newGeometry returns the geometry of l, or an error wrapping ErrLayout when l
// is outside what this package supports: Lowest >= 1, Highest >= 2·Lowest,
// 1..5 significant digits and at most 65536 counts.
func newGeometry(l Layout) (geometry, error) {
	if l.Lowest < 1 || l.Highest < 2*l.Lowest || l.SignificantDigits < 1 || l.SignificantDigits > 5 {
		return geometry{}, fmt.Errorf("%w: %+v", ErrLayout, l)
	}
	largestSingleUnit := 2 * math.Pow10(l.SignificantDigits)
	subBucketCountMagnitude := int32(math.Ceil(math.Log2(largestSingleUnit)))
	halfMag := subBucketCountMagnitude
	if halfMag < 1 {
		halfMag = 1
	}
	halfMag--
	unitMag := int32(math.Floor(math.Log2(float64(l.Lowest))))
	if unitMag+halfMag > 61 {
		return geometry{}, fmt.Errorf("%w: %+v", ErrLayout, l)
	}
	subBucketCount := int32(1) << (halfMag + 1)
	half := subBucketCount / 2
	smallestUntrackable := int64(subBucketCount) << unitMag
	buckets := int32(1)
	for smallestUntrackable <= l.Highest {
		if smallestUntrackable > math.MaxInt64/2 {
			buckets++
			break
		}
		smallestUntrackable <<= 1
		buckets++
	}
	countsLen := (buckets + 1) * half
	if countsLen > maxCountsLen {
		return geometry{}, fmt.Errorf("%w: %+v has %d counts, more than %d", ErrLayout, l, countsLen, maxCountsLen)
	}
	g := geometry{
		layout:        l,
		unitMagnitude: uint8(unitMag),
		halfMagnitude: uint8(halfMag),
		subBucketHalf: half,
		subBucketMask: int64(subBucketCount-1) << unitMag,
		bucketCount:   buckets,
		countsLen:     countsLen,
	}
	g.highestIndex = int32(g.index(l.Highest))
	return g, nil
}

// index returns the counts index of value v, which must be in [0, Highest].
func (g *geometry) index(v int64) int {
	bucket := int32(64-bits.LeadingZeros64(uint64(v|g.subBucketMask))) - int32(g.unitMagnitude) - int32(g.halfMagnitude) - 1
	sub := int32(v >> (uint(bucket) + uint(g.unitMagnitude)))
	return int((bucket+1)<<g.halfMagnitude + sub - g.subBucketHalf)
}

// lowestEquivalent returns the smallest value that falls in counts index i.
func (g *geometry) lowestEquivalent(i int) int64 {
	bucket := int32(i>>g.halfMagnitude) - 1
	sub := int32(i)&(g.subBucketHalf-1) + g.subBucketHalf
	if bucket < 0 {
		sub -= g.subBucketHalf
		bucket = 0
	}
	return int64(sub) << (uint(bucket) + uint(g.unitMagnitude))
}

// highestEquivalent returns the largest value that falls in counts index i.
func (g *geometry) highestEquivalent(i int) int64 {
	bucket := int32(i>>g.halfMagnitude) - 1
	if bucket < 0 {
		bucket = 0
	}
	return g.lowestEquivalent(i) + int64(1)<<(uint(bucket)+uint(g.unitMagnitude)) - 1
}

// quantileValue is the value the bucket rule reports for quantile q at
// counts index i: lowestEquivalent(i) when q is exactly 0, else
// highestEquivalent(i). It is one computation of both, small enough to
// inline into the trackers' queries, and without a branch on the bucket:
// index i is in bucket max(i>>halfMagnitude − 1, 0) (the first two
// half-buckets are bucket 0), at sub-bucket i − bucket·subBucketHalf,
// which is lowestEquivalent's sub-bucket in both of its cases.
//
// Every shift is below 64 (newGeometry bounds unitMagnitude+halfMagnitude
// and the buckets), so the counts are masked to 6 bits: the compiler then
// emits the bare shift, without the fix-up Go's semantics need for counts
// of 64 and more.
func (g *geometry) quantileValue(i int, q float64) uint64 {
	hm := uint(g.halfMagnitude) & 63
	bucket := max(uint(i)>>hm, 1) - 1
	sub := uint64(uint(i) - bucket<<hm)
	shift := (bucket + uint(g.unitMagnitude)) & 63
	if q != 0 {
		return (sub+1)<<shift - 1
	}
	return sub << shift
}

// CountsLen returns the number of counts of the layout: 1280 at defaults. It
// returns 0 for a layout that newGeometry refuses.
func (l Layout) CountsLen() int {
	g, err := newGeometry(l)
	if err != nil {
		return 0
	}
	return int(g.countsLen)
}

// Validate reports whether this package supports the layout.
func (l Layout) Validate() error {
	_, err := newGeometry(l)
	return err
}
