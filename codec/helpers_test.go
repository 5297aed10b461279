package codec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// defaultLayout is the tracker's layout at default settings.
var defaultLayout = tracker.Layout{Lowest: 1, Highest: 60000, SignificantDigits: 2}

// sparse turns hdrhistogram-go's dense counts (the same layout as tracker's)
// into a DestCounts.
func sparse(name string, h *hdrhistogram.Histogram) tracker.DestCounts {
	d := tracker.DestCounts{Dest: name}
	for i, c := range h.Export().Counts {
		if c > 0 {
			d.Buckets = append(d.Buckets, tracker.Bucket{Index: uint16(i), Count: uint32(c)})
			d.Total += uint64(c)
		}
	}
	return d
}

// lognormalDest draws samples latencies, lognormal around a median of
// 2..50 ms (σ 0.4..0.9), clamped to the layout, as a sealed sub-window
// of one destination would hold them.
func lognormalDest(rng *rand.Rand, name string, l tracker.Layout, samples int) tracker.DestCounts {
	h := hdrhistogram.New(l.Lowest, l.Highest, l.SignificantDigits)
	median := 2 + rng.Float64()*48
	sigma := 0.4 + rng.Float64()*0.5
	for range samples {
		v := int64(median * math.Exp(sigma*rng.NormFloat64()))
		v = min(max(v, 0), l.Highest)
		if err := h.RecordValue(v); err != nil {
			panic(err)
		}
	}
	return sparse(name, h)
}

// typicalBatch is the benchmark's batch: dests destinations with samples
// latencies each, in the default layout.
func typicalBatch(seed uint64, dests, samples int) tracker.Batch {
	rng := rand.New(rand.NewPCG(seed, 1))
	b := tracker.Batch{
		Key:    tracker.BatchKey{Origin: "node-07.storage.example", Boot: rng.Uint64(), Epoch: 291_234_567, Part: 0},
		Layout: defaultLayout,
	}
	for i := range dests {
		b.Dests = append(b.Dests, lognormalDest(rng, fmt.Sprintf("db-%03d.storage.example:7000", i), defaultLayout, samples))
	}
	return b
}

// randomBatch draws a batch exercising the whole value space: extreme
// boots, epochs and parts, counts up to 2^32−1, bucket indices anywhere in
// a random supported layout, multi-byte UTF-8 names up to MaxNameBytes.
func randomBatch(rng *rand.Rand) tracker.Batch {
	layouts := []tracker.Layout{
		defaultLayout,
		{Lowest: 1, Highest: 2, SignificantDigits: 1},
		{Lowest: 1, Highest: 3_600_000, SignificantDigits: 3},
		{Lowest: 1000, Highest: math.MaxInt64 / 4, SignificantDigits: 1},
	}
	b := tracker.Batch{
		Key: tracker.BatchKey{
			Origin: randomName(rng),
			Boot:   pick(rng, []uint64{0, 1, 127, 128, math.MaxUint32, math.MaxUint64, rng.Uint64()}),
			Epoch:  pick(rng, []int64{0, -1, -33, math.MinInt64, math.MaxInt64, rng.Int64() - rng.Int64()}),
			Part:   pick(rng, []uint16{0, 1, 127, 128, math.MaxUint16, uint16(rng.Uint32())}),
		},
		Layout: layouts[rng.IntN(len(layouts))],
	}
	countsLen := b.Layout.CountsLen()
	seen := map[string]bool{}
	for range rng.IntN(40) {
		name := randomName(rng)
		if seen[name] {
			continue
		}
		seen[name] = true
		d := tracker.DestCounts{Dest: name}
		idx := rng.IntN(countsLen)
		for idx < countsLen && len(d.Buckets) < 300 {
			c := pick(rng, []uint32{1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, rng.Uint32N(1000) + 1})
			d.Buckets = append(d.Buckets, tracker.Bucket{Index: uint16(idx), Count: c})
			d.Total += uint64(c)
			idx += 1 + pick(rng, []int{0, 0, 1, 5, 126, 127, 128, countsLen / 3})
		}
		switch rng.IntN(8) {
		case 0: // from a sender that does not send timed-out counts
			d.CensoringUnknown = true
		case 1, 2, 3: // nothing timed out
		default:
			d.TimedOut = randomTimedOut(rng, d.Buckets)
		}
		b.Dests = append(b.Dests, d)
	}
	return b
}

// randomTimedOut draws timed-out counts for buckets: a random subset (nil
// when empty), each count 1, the bucket's count, or in between.
func randomTimedOut(rng *rand.Rand, buckets []tracker.Bucket) []tracker.Bucket {
	var out []tracker.Bucket
	for _, bk := range buckets {
		if rng.IntN(3) != 0 {
			continue
		}
		c := pick(rng, []uint32{1, bk.Count, 1 + rng.Uint32N(bk.Count)})
		out = append(out, tracker.Bucket{Index: bk.Index, Count: c})
	}
	return out
}

// censoredBatch is typicalBatch where timeouts cut each destination's
// tail, as at a timeout just below its slowest samples: its last bucket
// timed out entirely and half of the one before it.
func censoredBatch(seed uint64, dests, samples int) tracker.Batch {
	b := typicalBatch(seed, dests, samples)
	for i := range b.Dests {
		d := &b.Dests[i]
		n := len(d.Buckets)
		if n >= 2 {
			prev := d.Buckets[n-2]
			d.TimedOut = append(d.TimedOut, tracker.Bucket{Index: prev.Index, Count: (prev.Count + 1) / 2})
		}
		d.TimedOut = append(d.TimedOut, d.Buckets[n-1])
	}
	return b
}

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

func randomName(rng *rand.Rand) string {
	alphabet := []rune("abcxyz-.:0189é日本語🙂")
	n := pick(rng, []int{1, 5, 31, 32, 60, 100})
	var s []byte
	for len(s) < n {
		s = fmt.Appendf(s, "%c", alphabet[rng.IntN(len(alphabet))])
	}
	if rng.IntN(8) == 0 { // exactly at the cap
		for len(s) < MaxNameBytes {
			s = append(s, 'z')
		}
	}
	return string(s[:min(len(s), MaxNameBytes)])
}

// requireSameBatch compares batches, treating nil and empty Dests alike.
func requireSameBatch(t testing.TB, want, got tracker.Batch) {
	t.Helper()
	require.Equal(t, want.Key, got.Key)
	require.Equal(t, want.Layout, got.Layout)
	require.Len(t, got.Dests, len(want.Dests))
	for i := range want.Dests {
		require.Equal(t, want.Dests[i], got.Dests[i], "destination %d", i)
	}
}

func newDecoder(t testing.TB, expect tracker.Layout) *Decoder {
	t.Helper()
	d, err := NewDecoder(expect)
	require.NoError(t, err)
	return d
}
