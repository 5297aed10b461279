package codec

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// TestAppendAggregatesRefusesNewestTooOld: an aggregate's newest epoch is
// written as its distance from the aggregate's epoch, which a decoder
// takes up to 2^32−1; the encoders refuse a larger distance rather than
// write what every peer drops.
func TestAppendAggregatesRefusesNewestTooOld(t *testing.T) {
	for _, age := range []uint64{math.MaxUint32, 1 << 32, math.MaxInt64} {
		m := goldenAggregates()
		a := &m.Aggregates[0]
		a.Newest = int64(uint64(a.Epoch) - age)
		for name, enc := range map[string]func([]byte, Aggregates) ([]byte, error){
			"plain": AppendAggregates, "packed": AppendPackedAggregates,
		} {
			msg, err := enc(nil, m)
			if age <= math.MaxUint32 {
				require.NoError(t, err, name)
				dec := newDecoder(t, tracker.Layout{})
				got, err := dec.DecodeAggregates(msg)
				if name == "packed" {
					got, err = dec.DecodePackedAggregates(msg)
				}
				require.NoError(t, err, name)
				require.Equal(t, m, got, name)
				continue
			}
			requireOneSentinel(t, err, ErrMalformed)
			require.Nil(t, msg, name)
		}
	}
}

// TestRecordsPartsWithinMaxBytes: every records message RecordsParts
// makes is at most maxBytes (MaxMessageBytes for 0), manifests and
// sent_at included, whatever their values; manifests that leave no room
// for a destination are refused.
func TestRecordsPartsWithinMaxBytes(t *testing.T) {
	b := tracker.Batch{Key: tracker.BatchKey{Origin: "o", Epoch: 5}, Layout: defaultLayout}
	for i := range 3 * MaxDests {
		b.Dests = append(b.Dests, tracker.DestCounts{
			Dest: fmt.Sprintf("d-%05d", i), Total: 1000, Buckets: []tracker.Bucket{{Index: 1, Count: 1000}},
		})
	}
	// The largest manifests: 24 bytes each.
	var wide []EpochManifest
	for i := range MaxManifests {
		wide = append(wide, EpochManifest{Epoch: math.MaxInt64 - int64(MaxManifests-i), Manifest: tracker.Manifest{Records: math.MaxUint32, Hash: math.MaxUint64}})
	}
	var e Encoder
	dec := newDecoder(t, tracker.Layout{})
	for _, ms := range [][]EpochManifest{nil, wide[:3], wide} {
		for _, sentAt := range []int64{0, math.MaxInt64} {
			for _, maxBytes := range []int{8 << 10, 64 << 10, MaxMessageBytes, 0} {
				r := Records{Batch: b, Manifests: ms, SentAtMillis: sentAt}
				parts, err := e.RecordsParts(r, maxBytes)
				require.NoError(t, err)
				limit := maxBytes
				if limit == 0 {
					limit = MaxMessageBytes
				}
				n := 0
				for i, p := range parts {
					require.LessOrEqual(t, len(p), limit, "%d manifests, sent_at %d, maxBytes %d: part %d of %d", len(ms), sentAt, maxBytes, i, len(parts))
					got, err := dec.DecodeRecords(p)
					require.NoError(t, err)
					n += len(got.Batch.Dests)
					require.Equal(t, sentAt, got.SentAtMillis)
				}
				require.Equal(t, len(b.Dests), n)
			}
		}
	}
	_, err := e.RecordsParts(Records{Batch: b, Manifests: wide}, 4096)
	requireOneSentinel(t, err, ErrTooLarge)
	_, err = e.RecordsParts(Records{Batch: b, Manifests: append(wide, EpochManifest{Epoch: math.MaxInt64})}, 0)
	requireOneSentinel(t, err, ErrTooLarge)
}
