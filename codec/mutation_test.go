package codec

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// requireOneSentinel checks that err wraps want and no other sentinel.
func requireOneSentinel(t *testing.T, err, want error) {
	t.Helper()
	require.ErrorIs(t, err, want, "%v", err)
	n := 0
	for _, s := range sentinels {
		if errors.Is(err, s) {
			n++
		}
	}
	require.Equal(t, 1, n, "%v", err)
}

// TestTypeRefusesShortOrWideHeaders pins what Type reads of a header: a
// message array needs version and type (a second element that only
// follows the array is not one), and the type is a byte: 257 is not
// batch (1) cut to eight bits.
func TestTypeRefusesShortOrWideHeaders(t *testing.T) {
	dec := newDecoder(t, tracker.Layout{})
	tests := []struct {
		name string
		msg  []byte
		want error
	}{
		{"one element, type after the array", raw{0x91, 0x01, 0x01}, ErrMalformed},
		{"type 257", build(arr{1, 257}), ErrType},
		{"type 65537", build(arr{1, 65537}), ErrType},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := dec.Type(tc.msg)
			requireOneSentinel(t, err, tc.want)
		})
	}
	// A batch whose type is 257 is not decoded as a batch either.
	_, err := dec.DecodeBatch(build(with(goodBatch(), 1, 257)))
	requireOneSentinel(t, err, ErrType)
}

// TestDecodeRangeAndEncodingEdges pins refusals the main table leaves to
// chance: integers coded wider than needed, bounds at their exact edge,
// lengths one past the bytes present, and the zero layout.
func TestDecodeRangeAndEncodingEdges(t *testing.T) {
	int64Minus1 := raw{0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	belowInt32 := raw{0xd3, 0xff, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff} // math.MinInt32 − 1
	nested := func(depth int) raw { return append(bytes.Repeat([]byte{0x91}, depth), 0x00) }
	tests := []struct {
		name string
		msg  []byte
		want error // nil: decodes
	}{
		// A negative value in an int64 code is negative, whatever the
		// field's upper bound (boot takes all of uint64).
		{"boot -1 as int64", build(with(goodBatch(), 3, arr{"n", int64Minus1, 1, 0})), ErrMalformed},
		{"sent_at -1 as int64", build(append(goodBatch(), int64Minus1)), ErrMalformed},
		// Significant digits below int32 are malformed, not a layout
		// to judge.
		{"layout sig below int32", build(with(goodBatch(), 2, arr{1, 60000, belowInt32})), ErrMalformed},
		{"layout sig above int32", build(with(goodBatch(), 2, arr{1, 60000, uint64(math.MaxInt32) + 1})), ErrMalformed},
		// An unknown field nests at most maxSkipDepth deep.
		{"extra field nested 8 deep", build(append(goodBatch(), 1, nested(maxSkipDepth))), nil},
		{"extra field nested 9 deep", build(append(goodBatch(), 1, nested(maxSkipDepth+1))), ErrMalformed},
		// A str skipped in an unknown field declares no more bytes than
		// are left: one past the end is truncation, not the end.
		{"extra str one byte short", build(append(goodBatch(), 1, raw{0xa3, 'a', 'b'})), ErrMalformed},
		{"extra bin one byte short", build(append(goodBatch(), 1, raw{0xc4, 0x03, 'a', 'b'})), ErrMalformed},
		{"extra str exact", build(append(goodBatch(), 1, raw{0xa3, 'a', 'b', 'c'})), nil},
		// A timed-out index delta may reach the last bucket, not one past
		// it (goodDest's buckets are at 3, 4 and 104).
		{"timed out, delta to the last bucket", build(batchWithDest(destWithTimedOut(arr{4, 3, 100, 1}))), nil},
		{"timed out, delta one past the last bucket", build(batchWithDest(destWithTimedOut(arr{4, 3, 101, 1}))), ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dec := newDecoder(t, tracker.Layout{})
			_, err := dec.DecodeBatch(tc.msg)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			requireOneSentinel(t, err, tc.want)
		})
	}
}

// TestZeroLayoutRefused pins that a Decoder taking any layout still
// validates the zero layout: it is not supported, even in a batch with no
// destinations.
func TestZeroLayoutRefused(t *testing.T) {
	dec := newDecoder(t, tracker.Layout{})
	msg := build(arr{1, 1, arr{0, 0, 0}, goodKey(), arr{}})
	_, err := dec.DecodeBatch(msg)
	requireOneSentinel(t, err, ErrLayout)
	// And after a valid one, too.
	_, err = dec.DecodeBatch(build(goodBatch()))
	require.NoError(t, err)
	_, err = dec.DecodeBatch(msg)
	requireOneSentinel(t, err, ErrLayout)
}

// TestSentAtForgottenAfterLateError pins that an error found after
// sent_at was read (trailing bytes, a bad unknown field) resets
// SentAtMillis, for batches, digests and pulls.
func TestSentAtForgottenAfterLateError(t *testing.T) {
	const at = int64(1764480000123)
	dec := newDecoder(t, tracker.Layout{})
	b := typicalBatch(3, 2, 50)
	bm, err := AppendBatchAt(nil, b, at)
	require.NoError(t, err)
	dm, err := AppendDigest(nil, Digest{Sender: "s", Keys: goldenKeys(), SentAtMillis: at})
	require.NoError(t, err)
	pm, err := AppendPull(nil, Pull{Sender: "s", Keys: goldenKeys(), SentAtMillis: at})
	require.NoError(t, err)
	decoders := map[string]func([]byte) error{
		"batch":  func(m []byte) error { _, err := dec.DecodeBatch(m); return err },
		"digest": func(m []byte) error { _, err := dec.DecodeDigest(m); return err },
		"pull":   func(m []byte) error { _, err := dec.DecodePull(m); return err },
	}
	msgs := map[string][]byte{"batch": bm, "digest": dm, "pull": pm}
	for name, decode := range decoders {
		t.Run(name, func(t *testing.T) {
			msg := msgs[name]
			require.NoError(t, decode(msg))
			require.Equal(t, at, dec.SentAtMillis())
			requireOneSentinel(t, decode(append(bytes.Clone(msg), 0)), ErrMalformed)
			require.Zero(t, dec.SentAtMillis(), "sent_at of a refused message")
		})
	}
}

// TestInternTableBounded pins the cap on the Decoder's interned names:
// batches naming ever new destinations do not grow it past maxInterned.
func TestInternTableBounded(t *testing.T) {
	dec := newDecoder(t, tracker.Layout{})
	n := 0
	for round := range maxInterned/MaxDests + 2 {
		b := tracker.Batch{Key: tracker.BatchKey{Origin: "o", Boot: 1, Epoch: int64(round)}, Layout: defaultLayout}
		for range MaxDests {
			b.Dests = append(b.Dests, tracker.DestCounts{
				Dest: fmt.Sprintf("d-%d", n), Total: 1, Buckets: []tracker.Bucket{{Index: 1, Count: 1}},
			})
			n++
		}
		msg, err := AppendBatch(nil, b)
		require.NoError(t, err)
		_, err = dec.DecodeBatch(msg)
		require.NoError(t, err)
		require.LessOrEqual(t, len(dec.intern), maxInterned, "after %d names", n)
	}
	require.Greater(t, n, maxInterned)
}

// TestV2DecodersRefuse pins the refusals of the protocol v2 decoders, each
// with its sentinel: the fuzz seeds hold most of these messages, but a
// fuzz run only checks that a refusal is typed, not that there is one.
func TestV2DecodersRefuse(t *testing.T) {
	layout := arr{1, 60000, 2}
	key := arr{"o", 1, 5, 0}
	agg := func(mod func(a arr)) []byte {
		a := arr{"d", 5, 2, arr{3, 1, 1, 1}, arr{}, 0, 1, 0, 4, 0, 1, 9}
		mod(a)
		return build(arr{1, 5, layout, "s", arr{a}})
	}
	packed := func(mod func(a arr)) []byte {
		a := arr{"d", 5, 2, bin8(3, 1, 1), bin8(), 0, 1, 0, 4, 0, 1, 9}
		mod(a)
		return build(arr{1, 10, layout, "s", arr{a}})
	}
	set := func(i int, v any) func(arr) { return func(a arr) { a[i] = v } }
	set2 := func(i int, v any, j int, w any) func(arr) { return func(a arr) { a[i], a[j] = v, w } }
	ones := make(arr, 32)
	for i := range ones {
		ones[i] = 1
	}
	// 32 values after an array header of 30: the header decides.
	slices30 := append(raw{0x9e}, bytes.Repeat([]byte{1}, 32)...)
	recordPull := build(arr{1, 9, "s", arr{5}})

	records := func(d *Decoder, m []byte) error { _, err := d.DecodeRecords(m); return err }
	aggregates := func(d *Decoder, m []byte) error { _, err := d.DecodeAggregates(m); return err }
	packedAggs := func(d *Decoder, m []byte) error { _, err := d.DecodePackedAggregates(m); return err }
	digest := func(d *Decoder, m []byte) error { _, err := d.DecodeAggDigest(m); return err }
	entries := func(ty MessageType) func(d *Decoder, m []byte) error {
		return func(d *Decoder, m []byte) error { _, err := d.DecodeAggEntries(m, ty); return err }
	}
	rpull := func(d *Decoder, m []byte) error { _, err := d.DecodeRecordPull(m); return err }

	tests := []struct {
		name   string
		decode func(*Decoder, []byte) error
		msg    []byte
		want   error // nil: decodes
	}{
		{"records, valid", records, build(arr{1, 4, layout, key, arr{}, arr{arr{4, 1, 1}, arr{5, 1, 1}}}), nil},
		{"records, manifest epochs repeated", records, build(arr{1, 4, layout, key, arr{}, arr{arr{5, 1, 1}, arr{5, 1, 1}}}), ErrMalformed},
		{"records, 257 manifests", records, build(arr{1, 4, layout, key, arr{}, raw{0xdc, 0x01, 0x01}}), ErrTooLarge},

		{"aggregates, valid", aggregates, agg(func(arr) {}), nil},
		{"aggregates, total below the buckets' sum", aggregates, agg(set(2, 1)), ErrMalformed},
		{"aggregates, flags 2", aggregates, agg(set(5, 2)), ErrMalformed},
		{"aggregates, newest 2^32−1 epochs old", aggregates, agg(set(9, uint64(math.MaxUint32))), nil},
		{"aggregates, newest 2^32 epochs old", aggregates, agg(set(9, uint64(1<<32))), ErrMalformed},
		{"aggregates, 4097", aggregates, build(arr{1, 5, layout, "s", raw{0xdc, 0x10, 0x01}}), ErrTooLarge},

		{"packed, valid", packedAggs, packed(func(arr) {}), nil},
		{"packed, a uvarint running past its bin", packedAggs, packed(set2(2, 1, 3, raw{0xc4, 0x02, 3, 0x81, 0x00})), ErrMalformed},
		{"packed, empty run of 0 indexes", packedAggs, packed(set(3, bin8(3, 1, 0, 0, 1))), ErrMalformed},
		{"packed, last index of the layout", packedAggs, packed(set2(2, 1, 3, bin8(0xff, 0x09, 1))), nil},
		{"packed, count past the layout's last index", packedAggs, packed(set(3, bin8(0xff, 0x09, 1, 1))), ErrMalformed},
		{"packed, count 2^32−1", packedAggs, packed(set2(2, uint64(math.MaxUint32), 3, bin8(3, 0xff, 0xff, 0xff, 0xff, 0x0f))), nil},
		{"packed, count 2^32", packedAggs, packed(set2(2, uint64(1<<32), 3, bin8(3, 0x80, 0x80, 0x80, 0x80, 0x10))), ErrMalformed},
		{"packed, ends with a run", packedAggs, packed(set(3, bin8(3, 1, 1, 0, 2))), ErrMalformed},

		{"agg digest, valid", digest, build(arr{1, 6, "s", arr{arr{4, ones}, arr{5, ones}}}), nil},
		{"agg digest, epochs repeated", digest, build(arr{1, 6, "s", arr{arr{5, ones}, arr{5, ones}}}), ErrMalformed},
		{"agg digest, 30 slice values", digest, build(arr{1, 6, "s", arr{arr{5, slices30}}}), ErrMalformed},
		{"agg digest, 17 epochs", digest, build(arr{1, 6, "s", raw{0xdc, 0x00, 0x11}}), ErrTooLarge},

		{"agg list, 16385 entries", entries(TypeAggList), build(arr{1, 7, "s", raw{0xdd, 0x00, 0x00, 0x40, 0x01}}), ErrTooLarge},
		{"agg pull, 16385 entries", entries(TypeAggPull), build(arr{1, 8, "s", raw{0xdd, 0x00, 0x00, 0x40, 0x01}}), ErrTooLarge},
		{"agg entries of another type", entries(TypeRecordPull), recordPull, ErrType},

		{"record pull, valid", rpull, recordPull, nil},
		{"record pull, 257 epochs", rpull, build(arr{1, 9, "s", raw{0xdc, 0x01, 0x01}}), ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.decode(newDecoder(t, tracker.Layout{}), tc.msg)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			requireOneSentinel(t, err, tc.want)
		})
	}
}

// TestV2EncodersRefuse pins the v2 encoders' checks: they refuse what the
// decoders refuse, so a node never sends what its peers drop.
func TestV2EncodersRefuse(t *testing.T) {
	aggWith := func(mod func(a *tracker.Aggregate)) Aggregates {
		m := goldenAggregates()
		mod(&m.Aggregates[0])
		return m
	}
	tests := []struct {
		name string
		m    Aggregates
		want error
	}{
		{"bucket index repeated", aggWith(func(a *tracker.Aggregate) {
			a.Buckets = []tracker.Bucket{{Index: 3, Count: 1}, {Index: 3, Count: 1}}
			a.Total, a.TimedOut = 2, nil
		}), ErrMalformed},
		{"total without buckets", aggWith(func(a *tracker.Aggregate) { a.Buckets, a.TimedOut, a.Total = nil, nil, 5 }), ErrMalformed},
		{"peers negative", aggWith(func(a *tracker.Aggregate) { a.Peers = -1 }), ErrMalformed},
		{"newest after the epoch", aggWith(func(a *tracker.Aggregate) { a.Newest = a.Epoch + 1 }), ErrMalformed},
		{"censored index repeated", aggWith(func(a *tracker.Aggregate) {
			a.TimedOut = []tracker.Bucket{{Index: 1279, Count: 1}, {Index: 1279, Count: 1}}
		}), ErrMalformed},
		{"censored count above the bucket's", aggWith(func(a *tracker.Aggregate) {
			a.TimedOut = []tracker.Bucket{{Index: 1279, Count: 70001}}
		}), ErrMalformed},
		{"4097 aggregates", func() Aggregates {
			m := goldenAggregates()
			for len(m.Aggregates) <= MaxAggregates {
				m.Aggregates = append(m.Aggregates, m.Aggregates[1])
			}
			return m
		}(), ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for name, enc := range map[string]func([]byte, Aggregates) ([]byte, error){
				"plain": AppendAggregates, "packed": AppendPackedAggregates,
			} {
				dst := []byte("prefix")
				out, err := enc(dst, tc.m)
				requireOneSentinel(t, err, tc.want)
				require.Equal(t, dst, out, name)
			}
		})
	}

	t.Run("257 manifests", func(t *testing.T) {
		r := goldenRecords()
		r.Manifests = nil
		for i := range MaxManifests {
			r.Manifests = append(r.Manifests, EpochManifest{Epoch: int64(i), Manifest: tracker.Manifest{Records: 1}})
		}
		_, err := AppendRecords(nil, r)
		require.NoError(t, err)
		r.Manifests = append(r.Manifests, EpochManifest{Epoch: MaxManifests})
		_, err = AppendRecords(nil, r)
		requireOneSentinel(t, err, ErrTooLarge)
	})
}

// TestPackedPairsBytes pins details of the packed pair lists that round
// trips of typical aggregates miss: a gap of a single index is a run, and
// a list of exactly 255 bytes is a bin8.
func TestPackedPairsBytes(t *testing.T) {
	dec := newDecoder(t, defaultLayout)
	m := goldenAggregates()
	a := &m.Aggregates[1]
	a.Buckets = []tracker.Bucket{{Index: 3, Count: 1}, {Index: 5, Count: 1}}
	a.Total = 2
	msg, err := AppendPackedAggregates(nil, m)
	require.NoError(t, err)
	got, err := dec.DecodePackedAggregates(msg)
	require.NoError(t, err)
	require.Equal(t, m, got)
	require.True(t, bytes.Contains(msg, []byte{0xc4, 0x05, 3, 1, 0, 1, 1}), "index 3, count 1, a run of 1, count 1")

	// Index 0, then 254 adjacent counts of 1: 255 bytes.
	a.Buckets, a.Total = nil, 254
	for i := range 254 {
		a.Buckets = append(a.Buckets, tracker.Bucket{Index: uint16(i), Count: 1})
	}
	msg, err = AppendPackedAggregates(nil, m)
	require.NoError(t, err)
	require.True(t, bytes.Contains(msg, []byte{0xc4, 0xff, 0x00, 0x01}), "bin8 of 255 bytes")
	got, err = dec.DecodePackedAggregates(msg)
	require.NoError(t, err)
	require.Equal(t, m, got)
}

// TestAppendBatchRefusesRepeatedIndex pins that the batch encoder refuses
// a bucket index given twice, as the decoder refuses a delta of 0.
func TestAppendBatchRefusesRepeatedIndex(t *testing.T) {
	b := typicalBatch(7, 3, 100)
	d := &b.Dests[1]
	d.Buckets = []tracker.Bucket{{Index: 3, Count: 1}, {Index: 3, Count: 2}}
	d.Total, d.TimedOut = 3, nil
	dst := []byte("prefix")
	out, err := AppendBatch(dst, b)
	requireOneSentinel(t, err, ErrMalformed)
	require.Equal(t, dst, out)
	var enc Encoder
	_, err = enc.BatchParts(b, 0)
	requireOneSentinel(t, err, ErrMalformed)
}

// TestEncoderCapsAtTheirEdge pins the encoders' size caps at the exact
// byte and count: MaxMessageBytes is 1 MiB (a digest of exactly that is
// written, one byte more is refused), BatchParts never makes a part over
// 1 MiB whatever maxBytes asks, and a batch needing more than 65536 parts
// is refused rather than numbering a part 0 again.
func TestEncoderCapsAtTheirEdge(t *testing.T) {
	t.Run("digest of 1 MiB", func(t *testing.T) {
		// A digest of groups of one key each: 8 bytes of header, then
		// per group 8 bytes plus its origin's length (32..255).
		const size = 1 << 20
		digest := func(extra int) Digest {
			var keys []tracker.BatchKey
			left := size - 8 + extra
			for i := 0; left > 0; i++ {
				l := min(255, left-8)
				if r := left - (l + 8); r > 0 && r < 40 { // keep the last one long enough
					l -= 40
				}
				keys = append(keys, tracker.BatchKey{Origin: fmt.Sprintf("%05d", i) + string(bytes.Repeat([]byte{'o'}, l-5))})
				left -= l + 8
			}
			return Digest{Sender: "s", Keys: keys}
		}
		msg, err := AppendDigest(nil, digest(0))
		require.NoError(t, err)
		require.Len(t, msg, size)
		_, err = newDecoder(t, tracker.Layout{}).DecodeDigest(msg)
		require.NoError(t, err)
		dst := []byte("prefix")
		out, err := AppendDigest(dst, digest(1))
		requireOneSentinel(t, err, ErrTooLarge)
		require.Equal(t, dst, out)
		_, err = newDecoder(t, tracker.Layout{}).DecodeDigest(append(msg, 0))
		requireOneSentinel(t, err, ErrTooLarge)
	})

	t.Run("parts of at most 1 MiB", func(t *testing.T) {
		b := tracker.Batch{Key: tracker.BatchKey{Origin: "o"}, Layout: defaultLayout}
		for i := range 2 * MaxDests {
			b.Dests = append(b.Dests, tracker.DestCounts{
				Dest:  fmt.Sprintf("%05d", i) + string(bytes.Repeat([]byte{'d'}, 250)),
				Total: 1, Buckets: []tracker.Bucket{{Index: 1, Count: 1}},
			})
		}
		var enc Encoder
		parts, err := enc.BatchParts(b, 3<<19) // 1.5 MiB asked
		require.NoError(t, err)
		n := 0
		for i, p := range parts {
			require.LessOrEqual(t, len(p), 1<<20, "part %d", i)
			got, err := newDecoder(t, tracker.Layout{}).DecodeBatch(p)
			require.NoError(t, err)
			n += len(got.Dests)
		}
		require.Equal(t, len(b.Dests), n)
	})

	t.Run("at most 65536 parts", func(t *testing.T) {
		b := tracker.Batch{Key: tracker.BatchKey{Origin: "o"}, Layout: defaultLayout}
		for i := range 1<<16 + 1 {
			b.Dests = append(b.Dests, tracker.DestCounts{
				Dest: fmt.Sprintf("%06d-%s", i, bytes.Repeat([]byte{'d'}, 40)), Total: 1, Buckets: []tracker.Bucket{{Index: 1, Count: 1}},
			})
		}
		var enc Encoder
		parts, err := enc.BatchParts(b, 100) // one destination a part
		requireOneSentinel(t, err, ErrTooLarge)
		require.Nil(t, parts)
		parts, err = enc.BatchParts(tracker.Batch{Key: b.Key, Layout: b.Layout, Dests: b.Dests[:1<<16]}, 100)
		require.NoError(t, err)
		require.Len(t, parts, 1<<16)
	})
}

// TestBatchPartsMatchAppendBatch pins that a batch fitting one part is
// written by BatchParts byte for byte as AppendBatch writes it, for every
// count of destinations around the fixarray/array16 edge.
func TestBatchPartsMatchAppendBatch(t *testing.T) {
	var enc Encoder
	for n := range 20 {
		b := typicalBatch(uint64(n), n, 20)
		b.Key.Part = 0
		want, err := AppendBatch(nil, b)
		require.NoError(t, err)
		parts, err := enc.BatchParts(b, 0)
		require.NoError(t, err)
		require.Len(t, parts, 1)
		require.Equal(t, want, parts[0], "%d destinations", n)
	}
}

// TestCapsAreTheDesigned pins the caps the protocol documents by value
// (a change is a protocol change, not a tuning): messages of at most 1
// MiB, at most 4096 destinations, names of at most 256 bytes, 4096 key
// origins and 65536 keys, 16 unknown fields nested at most 8 deep.
func TestCapsAreTheDesigned(t *testing.T) {
	require.Equal(t, 1<<20, MaxMessageBytes)
	require.Equal(t, 4096, MaxDests)
	require.Equal(t, 256, MaxNameBytes)
	require.Equal(t, 4096, MaxKeyOrigins)
	require.Equal(t, 65536, MaxKeys)

	dec := newDecoder(t, tracker.Layout{})
	_, err := dec.DecodeBatch(make([]byte, 1<<20+1))
	requireOneSentinel(t, err, ErrTooLarge)
	extras := func(n int) []byte { return build(append(append(goodBatch(), 1), make(arr, n)...)) }
	_, err = dec.DecodeBatch(extras(16))
	require.NoError(t, err)
	_, err = dec.DecodeBatch(extras(17))
	requireOneSentinel(t, err, ErrMalformed)
	nested := func(depth int) []byte {
		return build(append(goodBatch(), 1, append(raw(bytes.Repeat([]byte{0x91}, depth)), 0)))
	}
	_, err = dec.DecodeBatch(nested(8))
	require.NoError(t, err)
	_, err = dec.DecodeBatch(nested(9))
	requireOneSentinel(t, err, ErrMalformed)
}

// TestMessageTypeNames pins the names of the message types: they label
// the gossip metrics and the errors.
func TestMessageTypeNames(t *testing.T) {
	want := map[MessageType]string{
		TypeBatch: "batch", TypeDigest: "digest", TypePull: "pull",
		TypeRecords: "records", TypeAggregates: "aggregates", TypeAggDigest: "agg_digest", TypeAggList: "agg_list",
		TypeAggPull: "agg_pull", TypeRecordPull: "record_pull", TypePackedAggregates: "packed_aggregates",
		0: "type(0)", 11: "type(11)", 255: "type(255)",
	}
	for ty, name := range want {
		require.Equal(t, name, ty.String(), "type %d", uint8(ty))
	}
}
