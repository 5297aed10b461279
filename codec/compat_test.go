package codec

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// oldReader decodes batches by the grammar of version 1 before
// destinations carried timed-out counts, dest = [name, total, [pairs…]]:
// a node of that revision. What changed since is its own, as that
// revision had it: the message's fields (no sent_at: extras after the
// destinations are skipped) and a destination record read as three fields,
// so whatever follows its buckets is an unknown field, skipped. What has not
// changed is the Decoder's own: the primitives, which accept and refuse
// what they did then (a shortcut for fixints since, with the same
// results), the layout, the key and a destination's name, total and
// buckets. So what it accepts is what a node of that revision accepts, as
// long as those shared readers keep the grammar they had, which the
// golden files pin.
type oldReader struct {
	*Decoder
	spans []int
}

func (d *oldReader) decodeBatch(msg []byte) (tracker.Batch, error) {
	extra, err := d.open(msg, TypeBatch, 3)
	if err != nil {
		return tracker.Batch{}, err
	}
	b, countsLen, err := d.readBatchHead()
	if err != nil {
		return b, err
	}

	// Destinations: [[name, total, [index, count, Δindex, count, …]], …].
	n, err := d.readArrayLen("destinations", MaxDests)
	if err != nil {
		return b, err
	}
	d.dests, d.spans, d.buckets = d.dests[:0], d.spans[:0], d.buckets[:0]
	clear(d.seen)
	for range n {
		if err := d.readDest(countsLen); err != nil {
			return b, err
		}
	}
	if err := d.end(extra); err != nil {
		return b, err
	}
	start := 0
	for i, end := range d.spans {
		d.dests[i].Buckets = d.buckets[start:end:end]
		start = end
	}
	b.Dests = d.dests
	return b, nil
}

func (d *oldReader) readDest(countsLen int) error {
	x, err := d.readRecord("destination", 3)
	if err != nil {
		return err
	}
	name, total, _, err := d.readDestBuckets(countsLen)
	if err != nil {
		return err
	}
	d.dests = append(d.dests, tracker.DestCounts{Dest: name, Total: total})
	d.spans = append(d.spans, len(d.buckets))
	return d.finish(x)
}

// withoutCensoring is b as a decoder without timed-out counts sees it.
func withoutCensoring(b tracker.Batch) tracker.Batch {
	b = CloneBatch(b)
	for i := range b.Dests {
		b.Dests[i].TimedOut, b.Dests[i].CensoringUnknown = nil, false
	}
	return b
}

// TestOldDecoderSkipsTimedOut: the bytes new encoders write decode by the
// old grammar to the same batch without its timed-out counts (the field
// is an unknown one there, skipped), so a node that predates them keeps
// working beside one that sends them.
func TestOldDecoderSkipsTimedOut(t *testing.T) {
	old := &oldReader{Decoder: newDecoder(t, tracker.Layout{})}
	cur := newDecoder(t, tracker.Layout{})
	check := func(t *testing.T, b tracker.Batch) {
		t.Helper()
		msg, err := AppendBatch(nil, b)
		require.NoError(t, err)
		got, err := old.decodeBatch(msg)
		require.NoError(t, err)
		requireSameBatch(t, withoutCensoring(b), got)
		got, err = cur.DecodeBatch(msg)
		require.NoError(t, err)
		requireSameBatch(t, b, got)
	}
	t.Run("golden", func(t *testing.T) {
		got, err := old.decodeBatch(readGolden(t, "v1-batch-timed-out"))
		require.NoError(t, err)
		requireSameBatch(t, withoutCensoring(goldenBatch()), got)
		check(t, goldenBatch())
	})
	t.Run("typical, timed out", func(t *testing.T) { check(t, censoredBatch(3, 100, 3000)) })
	t.Run("typical, nothing timed out", func(t *testing.T) { check(t, typicalBatch(4, 100, 3000)) })
	t.Run("random", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		for range 300 {
			check(t, randomBatch(rng))
		}
	})
	t.Run("parts", func(t *testing.T) {
		var enc Encoder
		b := censoredBatch(7, 300, 3000)
		parts, err := enc.BatchParts(b, 8<<10)
		require.NoError(t, err)
		var dests []tracker.DestCounts
		for _, p := range parts {
			got, err := old.decodeBatch(p)
			require.NoError(t, err)
			dests = append(dests, CloneBatch(got).Dests...)
		}
		b.Dests = dests
		requireSameBatch(t, withoutCensoring(censoredBatch(7, 300, 3000)), b)
	})
}

// TestTimedOut: timed-out counts round-trip; a destination record without
// them (an older sender's) decodes as censoring unknown and re-encodes in
// the same old form; an empty list is "none timed out", censoring known.
func TestTimedOut(t *testing.T) {
	dec := newDecoder(t, defaultLayout)
	decode := func(t *testing.T, m arr) tracker.DestCounts {
		t.Helper()
		got, err := dec.DecodeBatch(build(m))
		require.NoError(t, err)
		require.Len(t, got.Dests, 1)
		return got.Dests[0]
	}
	buckets := []tracker.Bucket{{Index: 3, Count: 2}, {Index: 4, Count: 4}, {Index: 104, Count: 1}}
	tests := []struct {
		name      string
		dest      arr
		want      tracker.DestCounts
		canonical arr // how the encoder writes want, when not as dest
	}{
		{"some", goodDest(), tracker.DestCounts{Dest: "db-1", Total: 7, Buckets: buckets, TimedOut: goodTimedOut}, nil},
		{"all", destWithTimedOut(arr{3, 2, 1, 4, 100, 1}), tracker.DestCounts{Dest: "db-1", Total: 7, Buckets: buckets, TimedOut: buckets}, nil},
		{"the last bucket only", destWithTimedOut(arr{104, 1}), tracker.DestCounts{Dest: "db-1", Total: 7, Buckets: buckets, TimedOut: buckets[2:]}, nil},
		{"none", destWithTimedOut(arr{}), tracker.DestCounts{Dest: "db-1", Total: 7, Buckets: buckets}, nil},
		{"no field: censoring unknown", oldDest(), tracker.DestCounts{Dest: "db-1", Total: 7, Buckets: buckets, CensoringUnknown: true}, nil},
		{"non-compact integers", destWithTimedOut(arr{raw{0xcd, 0, 4}, raw{0xce, 0, 0, 0, 3}}), tracker.DestCounts{Dest: "db-1", Total: 7, Buckets: buckets, TimedOut: []tracker.Bucket{{Index: 4, Count: 3}}}, destWithTimedOut(arr{4, 3})},
		{"then an unknown field", append(goodDest(), "later"), tracker.DestCounts{Dest: "db-1", Total: 7, Buckets: buckets, TimedOut: goodTimedOut}, goodDest()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := decode(t, batchWithDest(tc.dest))
			require.Equal(t, tc.want, got)
			// The canonical encoding: old records stay old.
			msg, err := AppendBatch(nil, tracker.Batch{Key: tracker.BatchKey{Origin: "node-a", Boot: 42, Epoch: 1000}, Layout: defaultLayout, Dests: []tracker.DestCounts{tc.want}})
			require.NoError(t, err)
			canonical := tc.dest
			if tc.canonical != nil {
				canonical = tc.canonical
			}
			require.Equal(t, build(batchWithDest(canonical)), msg)
		})
	}

	t.Run("mixed records in one batch", func(t *testing.T) {
		got, err := dec.DecodeBatch(build(with(goodBatch(), 4, arr{oldDest(), with(goodDest(), 0, "db-2")})))
		require.NoError(t, err)
		require.True(t, got.Dests[0].CensoringUnknown)
		require.Nil(t, got.Dests[0].TimedOut)
		require.False(t, got.Dests[1].CensoringUnknown)
		require.Equal(t, goodTimedOut, got.Dests[1].TimedOut)
	})

	t.Run("the largest counts", func(t *testing.T) {
		b := tracker.Batch{Key: tracker.BatchKey{Origin: "o"}, Layout: defaultLayout, Dests: []tracker.DestCounts{{
			Dest: "d", Total: 2 * math.MaxUint32,
			Buckets:  []tracker.Bucket{{Index: 0, Count: math.MaxUint32}, {Index: 1279, Count: math.MaxUint32}},
			TimedOut: []tracker.Bucket{{Index: 0, Count: math.MaxUint32}, {Index: 1279, Count: math.MaxUint32}},
		}}}
		msg, err := AppendBatch(nil, b)
		require.NoError(t, err)
		got, err := dec.DecodeBatch(msg)
		require.NoError(t, err)
		requireSameBatch(t, b, got)
	})
}
