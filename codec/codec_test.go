package codec

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

func TestBatchRoundTripRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	dec := newDecoder(t, tracker.Layout{})
	var buf []byte
	for i := range 500 {
		b := randomBatch(rng)
		var err error
		buf, err = AppendBatch(buf[:0], b)
		require.NoError(t, err, "batch %d", i)
		got, err := dec.DecodeBatch(buf)
		require.NoError(t, err, "batch %d", i)
		requireSameBatch(t, b, got)
		again, err := AppendBatch(nil, got)
		require.NoError(t, err)
		require.Equal(t, buf, again, "re-encoding is byte-identical")
	}
}

// refBatch encodes b with msgpack/v5's own Encoder (compact ints), the
// reference the hand-written encoder must match byte for byte.
func refBatch(t *testing.T, b tracker.Batch) []byte {
	var out bytes.Buffer
	e := msgpack.NewEncoder(&out)
	e.UseCompactInts(true)
	must := func(err error) { require.NoError(t, err) }
	must(e.EncodeArrayLen(5))
	must(e.EncodeUint(Version))
	must(e.EncodeUint(uint64(TypeBatch)))
	must(e.EncodeArrayLen(3))
	must(e.EncodeInt(b.Layout.Lowest))
	must(e.EncodeInt(b.Layout.Highest))
	must(e.EncodeInt(int64(b.Layout.SignificantDigits)))
	must(e.EncodeArrayLen(4))
	must(e.EncodeString(b.Key.Origin))
	must(e.EncodeUint(b.Key.Boot))
	must(e.EncodeInt(b.Key.Epoch))
	must(e.EncodeUint(uint64(b.Key.Part)))
	must(e.EncodeArrayLen(len(b.Dests)))
	pairs := func(bs []tracker.Bucket) {
		must(e.EncodeArrayLen(2 * len(bs)))
		prev := uint16(0)
		for _, bk := range bs {
			must(e.EncodeUint(uint64(bk.Index - prev)))
			must(e.EncodeUint(uint64(bk.Count)))
			prev = bk.Index
		}
	}
	for _, d := range b.Dests {
		if d.CensoringUnknown {
			must(e.EncodeArrayLen(3))
		} else {
			must(e.EncodeArrayLen(4))
		}
		must(e.EncodeString(d.Dest))
		must(e.EncodeUint(d.Total))
		pairs(d.Buckets)
		if !d.CensoringUnknown {
			pairs(d.TimedOut)
		}
	}
	return out.Bytes()
}

func TestEncoderMatchesMsgpack(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 200 {
		b := randomBatch(rng)
		got, err := AppendBatch(nil, b)
		require.NoError(t, err)
		require.Equal(t, refBatch(t, b), got, "batch %d", i)
	}
	// Integer boundaries, both signs.
	for _, v := range []int64{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
		-1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64} {
		var out bytes.Buffer
		e := msgpack.NewEncoder(&out)
		e.UseCompactInts(true)
		require.NoError(t, e.EncodeInt(v))
		require.Equal(t, out.Bytes(), appendInt(nil, v), "%d", v)
	}
	for _, n := range []int{0, 15, 16, 65535, 65536} {
		var out bytes.Buffer
		require.NoError(t, msgpack.NewEncoder(&out).EncodeArrayLen(n))
		require.Equal(t, out.Bytes(), appendArrayLen(nil, n), "%d", n)
	}
	for _, n := range []int{0, 31, 32, 255, 256} {
		s := strings.Repeat("x", n)
		var out bytes.Buffer
		require.NoError(t, msgpack.NewEncoder(&out).EncodeString(s))
		require.Equal(t, out.Bytes(), appendStr(nil, s), "%d", n)
	}
}

func TestBatchParts(t *testing.T) {
	big := typicalBatch(5, 300, 3000)
	many := tracker.Batch{Key: tracker.BatchKey{Origin: "o"}, Layout: defaultLayout}
	for i := range 2*MaxDests + 5 {
		many.Dests = append(many.Dests, tracker.DestCounts{Dest: strings.Repeat("d", 1+i%7) + string(rune('a'+i%26)) + string(rune(0x4e00+i)), Total: 1, Buckets: []tracker.Bucket{{Index: uint16(i % 1280), Count: 1}}})
	}
	tests := []struct {
		name      string
		b         tracker.Batch
		maxBytes  int
		wantParts int // 0: just check
	}{
		{"fits one", big, 0, 1},
		{"by bytes", big, 8 << 10, 0},
		{"small parts under 16 destinations", big, 1400, 0},
		{"by destination count", many, 0, 3},
		{"empty batch", tracker.Batch{Key: tracker.BatchKey{Origin: "o"}, Layout: defaultLayout}, 0, 1},
	}
	var enc Encoder
	dec := newDecoder(t, defaultLayout)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parts, err := enc.BatchParts(tc.b, tc.maxBytes)
			require.NoError(t, err)
			if tc.wantParts > 0 {
				require.Equal(t, tc.wantParts, len(parts))
			}
			limit := tc.maxBytes
			if limit == 0 {
				limit = MaxMessageBytes
			}
			var dests []tracker.DestCounts
			for i, p := range parts {
				require.LessOrEqual(t, len(p), limit)
				got, err := dec.DecodeBatch(p)
				require.NoError(t, err, "part %d", i)
				require.Equal(t, uint16(i), got.Key.Part)
				require.Equal(t, tc.b.Key.Origin, got.Key.Origin)
				require.LessOrEqual(t, len(got.Dests), MaxDests)
				if len(tc.b.Dests) > 0 {
					require.NotEmpty(t, got.Dests)
				}
				dests = append(dests, CloneBatch(got).Dests...)
			}
			want := tc.b
			want.Dests = dests
			requireSameBatch(t, tc.b, want)
			// Deterministic: the same call gives the same bytes.
			first := make([][]byte, len(parts))
			for i, p := range parts {
				first[i] = bytes.Clone(p)
			}
			again, err := enc.BatchParts(tc.b, tc.maxBytes)
			require.NoError(t, err)
			require.True(t, slices.EqualFunc(first, again, bytes.Equal))
			if tc.maxBytes > 0 && tc.maxBytes < 10<<10 {
				require.Greater(t, len(parts), 1)
			}
		})
	}

	t.Run("one destination too large", func(t *testing.T) {
		_, err := enc.BatchParts(big, 100)
		require.ErrorIs(t, err, ErrTooLarge)
	})
	t.Run("invalid destination", func(t *testing.T) {
		b := typicalBatch(6, 3, 100)
		b.Dests[2].Total++
		_, err := enc.BatchParts(b, 0)
		require.ErrorIs(t, err, ErrMalformed)
	})
	t.Run("duplicate destination", func(t *testing.T) {
		b := typicalBatch(6, 3, 100)
		b.Dests[2].Dest = b.Dests[0].Dest
		_, err := enc.BatchParts(b, 0)
		require.ErrorIs(t, err, ErrMalformed)
	})
}

func TestAppendBatchRefuses(t *testing.T) {
	ok := func() tracker.Batch { return typicalBatch(7, 40, 500) }
	tests := []struct {
		name   string
		mutate func(*tracker.Batch)
		want   error
	}{
		{"unsupported layout", func(b *tracker.Batch) { b.Layout.SignificantDigits = 6 }, ErrLayout},
		{"empty origin", func(b *tracker.Batch) { b.Key.Origin = "" }, ErrMalformed},
		{"long origin", func(b *tracker.Batch) { b.Key.Origin = strings.Repeat("o", MaxNameBytes+1) }, ErrTooLarge},
		{"invalid UTF-8 name", func(b *tracker.Batch) { b.Dests[3].Dest = "a\xffb" }, ErrMalformed},
		{"no buckets", func(b *tracker.Batch) { b.Dests[0].Buckets, b.Dests[0].Total = nil, 0 }, ErrMalformed},
		{"descending", func(b *tracker.Batch) {
			bk := b.Dests[0].Buckets
			bk[0], bk[1] = bk[1], bk[0]
		}, ErrMalformed},
		{"index out of range", func(b *tracker.Batch) {
			bk := b.Dests[0].Buckets
			bk[len(bk)-1].Index = 1280
		}, ErrMalformed},
		{"zero count", func(b *tracker.Batch) {
			b.Dests[0].Total -= uint64(b.Dests[0].Buckets[0].Count)
			b.Dests[0].Buckets[0].Count = 0
		}, ErrMalformed},
		{"wrong total", func(b *tracker.Batch) { b.Dests[5].Total-- }, ErrMalformed},
		{"timed out, not a bucket", func(b *tracker.Batch) {
			bk := b.Dests[2].Buckets
			gap := bk[0].Index + 1
			for i := 1; i < len(bk) && bk[i].Index == gap; i++ {
				gap++
			}
			require.Less(t, gap, bk[len(bk)-1].Index)
			b.Dests[2].TimedOut = []tracker.Bucket{{Index: gap, Count: 1}}
		}, ErrMalformed},
		{"timed out, beyond the buckets", func(b *tracker.Batch) { b.Dests[2].TimedOut = []tracker.Bucket{{Index: 1279, Count: 1}} }, ErrMalformed},
		{"timed out, above the bucket's count", func(b *tracker.Batch) {
			bk := b.Dests[2].Buckets[1]
			b.Dests[2].TimedOut = []tracker.Bucket{{Index: bk.Index, Count: bk.Count + 1}}
		}, ErrMalformed},
		{"timed out, zero count", func(b *tracker.Batch) {
			b.Dests[2].TimedOut = []tracker.Bucket{{Index: b.Dests[2].Buckets[1].Index, Count: 0}}
		}, ErrMalformed},
		{"timed out, descending", func(b *tracker.Batch) {
			bk := b.Dests[2].Buckets
			b.Dests[2].TimedOut = []tracker.Bucket{{Index: bk[1].Index, Count: 1}, {Index: bk[0].Index, Count: 1}}
		}, ErrMalformed},
		{"timed out, repeated", func(b *tracker.Batch) {
			bk := b.Dests[2].Buckets[1]
			b.Dests[2].TimedOut = []tracker.Bucket{{Index: bk.Index, Count: 1}, {Index: bk.Index, Count: 1}}
		}, ErrMalformed},
		{"timed out with censoring unknown", func(b *tracker.Batch) {
			b.Dests[2].TimedOut = []tracker.Bucket{{Index: b.Dests[2].Buckets[1].Index, Count: 1}}
			b.Dests[2].CensoringUnknown = true
		}, ErrMalformed},
		{"duplicate names, map path", func(b *tracker.Batch) { b.Dests[39].Dest = b.Dests[1].Dest }, ErrMalformed},
		{"duplicate names, scan path", func(b *tracker.Batch) { b.Dests = b.Dests[:5]; b.Dests[4].Dest = b.Dests[1].Dest }, ErrMalformed},
		{"duplicate names and a later wrong total", func(b *tracker.Batch) {
			b.Dests[3].Dest = b.Dests[1].Dest
			b.Dests[30].Total++
		}, ErrMalformed},
		{"out of range and descending after", func(b *tracker.Batch) {
			bk := b.Dests[4].Buckets
			bk[1].Index, bk[2].Index = 1300, 1290
		}, ErrMalformed},
		{"too many destinations", func(b *tracker.Batch) {
			for len(b.Dests) <= MaxDests {
				b.Dests = append(b.Dests, b.Dests[0])
			}
		}, ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := ok()
			tc.mutate(&b)
			dst := []byte("prefix")
			out, err := AppendBatch(dst, b)
			require.ErrorIs(t, err, tc.want)
			require.Equal(t, dst, out)
			require.EqualError(t, err, checkBatch(b).Error(), "the error of the checks in their order")
		})
	}
}

// checkBatch is AppendBatch's validation as separate passes, in the order
// of its errors: the head, the number of destinations, each destination's
// own rules, then duplicate names.
func checkBatch(b tracker.Batch) error {
	countsLen, err := checkBatchHead(&b)
	if err != nil {
		return err
	}
	if len(b.Dests) > MaxDests {
		return tooLarge("%d destinations, more than %d", len(b.Dests), MaxDests)
	}
	for i := range b.Dests {
		if err := checkDest(&b.Dests[i], countsLen); err != nil {
			return err
		}
	}
	return checkDistinct(b.Dests)
}

func TestDecodeBatchRefuses(t *testing.T) {
	huge32 := raw{0xce, 0xff, 0xff, 0xff, 0xff} // uint32 max
	tests := []struct {
		name string
		msg  []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"too large", make([]byte, MaxMessageBytes+1), ErrTooLarge},
		{"not an array", build(raw{0x81, 0x01, 0x01}), ErrMalformed},
		{"nil message", build(raw{0xc0}), ErrMalformed},
		{"one element", build(arr{1}), ErrMalformed},
		{"version 0", build(with(goodBatch(), 0, 0)), ErrVersion},
		{"version 2", build(with(goodBatch(), 0, 2)), ErrVersion},
		{"version huge", build(with(goodBatch(), 0, uint64(math.MaxUint64))), ErrVersion},
		{"version negative", build(with(goodBatch(), 0, -1)), ErrMalformed},
		{"version string", build(with(goodBatch(), 0, "1")), ErrMalformed},
		{"version nil", build(with(goodBatch(), 0, raw{0xc0})), ErrMalformed},
		{"unknown type", build(with(goodBatch(), 1, 9)), ErrType},
		{"type 256", build(with(goodBatch(), 1, 256)), ErrType},
		{"digest type", build(with(goodBatch(), 1, 2)), ErrType},
		{"missing field", build(goodBatch()[:4]), ErrMalformed},
		{"trailing byte", append(build(goodBatch()), 0), ErrMalformed},
		{"truncated", build(goodBatch())[:20], ErrMalformed},
		{"array declares 4G elements", build(raw{0xdd, 0xff, 0xff, 0xff, 0xff, 1, 1, 0x90}), ErrMalformed},
		{"layout sig 6", build(with(goodBatch(), 2, arr{1, 60000, 6})), ErrLayout},
		{"layout lowest 0", build(with(goodBatch(), 2, arr{0, 60000, 2})), ErrLayout},
		{"layout too many counts", build(with(goodBatch(), 2, arr{1, math.MaxInt64, 5})), ErrLayout},
		{"layout short", build(with(goodBatch(), 2, arr{1, 60000})), ErrMalformed},
		{"layout float", build(with(goodBatch(), 2, arr{1, raw{0xcb, 0x40, 0xed, 0x4c, 0, 0, 0, 0, 0}, 2})), ErrMalformed},
		{"layout uint64 above int64", build(with(goodBatch(), 2, arr{1, raw{0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 2})), ErrMalformed},
		{"origin empty", build(with(goodBatch(), 3, arr{"", uint64(1), 1, 0})), ErrMalformed},
		{"origin bin", build(with(goodBatch(), 3, arr{raw{0xc4, 1, 'a'}, uint64(1), 1, 0})), ErrMalformed},
		{"origin 257 bytes", build(with(goodBatch(), 3, arr{strings.Repeat("o", 257), uint64(1), 1, 0})), ErrTooLarge},
		{"origin declares 4 GiB", build(with(goodBatch(), 3, arr{raw{0xdb, 0xff, 0xff, 0xff, 0xff}, uint64(1), 1, 0})), ErrTooLarge},
		{"origin longer than the message", build(with(goodBatch(), 3, arr{raw{0xd9, 200, 'a'}, uint64(1), 1, 0})), ErrMalformed},
		{"origin invalid UTF-8", build(with(goodBatch(), 3, arr{"a\xc3", uint64(1), 1, 0})), ErrMalformed},
		{"boot negative", build(with(goodBatch(), 3, arr{"n", -1, 1, 0})), ErrMalformed},
		{"boot nil", build(with(goodBatch(), 3, arr{"n", raw{0xc0}, 1, 0})), ErrMalformed},
		{"epoch above int64", build(with(goodBatch(), 3, arr{"n", 1, raw{0xcf, 0x80, 0, 0, 0, 0, 0, 0, 0}, 0})), ErrMalformed},
		{"part 65536", build(with(goodBatch(), 3, arr{"n", 1, 1, 65536})), ErrMalformed},
		{"destinations declare 4G", build(with(goodBatch(), 4, raw{0xdd, 0xff, 0xff, 0xff, 0xff})), ErrTooLarge},
		{"destinations declare more than present", build(with(goodBatch(), 4, raw{0xdc, 0x00, 0x05})), ErrMalformed},
		{"4097 destinations", build(with(goodBatch(), 4, raw{0xdc, 0x10, 0x01})), ErrTooLarge},
		{"destinations nil", build(with(goodBatch(), 4, raw{0xc0})), ErrMalformed},
		{"destination short", build(batchWithDest(arr{"d", 1})), ErrMalformed},
		{"duplicate destination", build(with(goodBatch(), 4, arr{goodDest(), goodDest()})), ErrMalformed},
		{"destination empty name", build(batchWithDest(with(goodDest(), 0, ""))), ErrMalformed},
		{"no buckets", build(batchWithDest(arr{"d", 0, arr{}})), ErrMalformed},
		{"odd bucket array", build(batchWithDest(arr{"d", 2, arr{3, 2, 1}})), ErrMalformed},
		{"buckets declare 4G", build(batchWithDest(arr{"d", 2, raw{0xdd, 0xff, 0xff, 0xff, 0xfe}})), ErrMalformed},
		{"more buckets than the layout", build(batchWithDest(arr{"d", 2, raw{0xdc, 0x0a, 0x02}})), ErrMalformed},
		{"first index out of range", build(batchWithDest(arr{"d", 1, arr{1280, 1}})), ErrMalformed},
		{"first index negative", build(batchWithDest(arr{"d", 1, arr{-1, 1}})), ErrMalformed},
		{"first index nil", build(batchWithDest(arr{"d", 1, arr{raw{0xc0}, 1}})), ErrMalformed},
		{"repeated index (delta 0)", build(batchWithDest(arr{"d", 2, arr{3, 1, 0, 1}})), ErrMalformed},
		{"descending index (negative delta)", build(batchWithDest(arr{"d", 2, arr{3, 1, -1, 1}})), ErrMalformed},
		{"delta nil", build(batchWithDest(arr{"d", 2, arr{3, 1, raw{0xc0}, 1}})), ErrMalformed},
		{"index beyond the layout", build(batchWithDest(arr{"d", 2, arr{1000, 1, 280, 1}})), ErrMalformed},
		{"delta overflowing", build(batchWithDest(arr{"d", 2, arr{1000, 1, raw{0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfc, 0x18}, 1}})), ErrMalformed},
		{"count 0", build(batchWithDest(arr{"d", 0, arr{3, 0}})), ErrMalformed},
		{"count nil", build(batchWithDest(arr{"d", 0, arr{3, raw{0xc0}}})), ErrMalformed},
		{"count negative", build(batchWithDest(arr{"d", 1, arr{3, -1}})), ErrMalformed},
		{"count above uint32", build(batchWithDest(arr{"d", uint64(1 << 32), arr{3, uint64(1 << 32)}})), ErrMalformed},
		{"count float", build(batchWithDest(arr{"d", 1, arr{3, raw{0xca, 0x3f, 0x80, 0, 0}}})), ErrMalformed},
		{"total too small", build(batchWithDest(arr{"d", 6, arr{3, 2, 1, 4, 100, 1}})), ErrMalformed},
		{"total overflowing", build(batchWithDest(arr{"d", uint64(math.MaxUint64), arr{3, huge32, 1, huge32}})), ErrMalformed},
		{"total wraps to the sum", build(batchWithDest(arr{"d", 1, arr{3, huge32, 1, 2}})), ErrMalformed},
		{"timed out nil", build(batchWithDest(destWithTimedOut(raw{0xc0}))), ErrMalformed},
		{"timed out not an array", build(batchWithDest(destWithTimedOut(4))), ErrMalformed},
		{"timed out odd", build(batchWithDest(destWithTimedOut(arr{4}))), ErrMalformed},
		{"timed out declares 4G", build(batchWithDest(destWithTimedOut(raw{0xdd, 0xff, 0xff, 0xff, 0xfe}))), ErrMalformed},
		{"more timed out than buckets", build(batchWithDest(destWithTimedOut(arr{3, 1, 1, 1, 100, 1, 1, 1}))), ErrMalformed},
		{"timed out, not a bucket", build(batchWithDest(destWithTimedOut(arr{5, 1}))), ErrMalformed},
		{"timed out, below the first bucket", build(batchWithDest(destWithTimedOut(arr{2, 1}))), ErrMalformed},
		{"timed out, beyond the last bucket", build(batchWithDest(destWithTimedOut(arr{105, 1}))), ErrMalformed},
		{"timed out, beyond the layout", build(batchWithDest(destWithTimedOut(arr{1280, 1}))), ErrMalformed},
		{"timed out, first index negative", build(batchWithDest(destWithTimedOut(arr{-1, 1}))), ErrMalformed},
		{"timed out, repeated (delta 0)", build(batchWithDest(destWithTimedOut(arr{4, 1, 0, 1}))), ErrMalformed},
		{"timed out, descending (negative delta)", build(batchWithDest(destWithTimedOut(arr{4, 1, -1, 1}))), ErrMalformed},
		{"timed out, delta overflowing", build(batchWithDest(destWithTimedOut(arr{4, 1, raw{0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x9c}, 1}))), ErrMalformed},
		{"timed out, delta nil", build(batchWithDest(destWithTimedOut(arr{3, 1, raw{0xc0}, 1}))), ErrMalformed},
		{"timed out, count 0", build(batchWithDest(destWithTimedOut(arr{4, 0}))), ErrMalformed},
		{"timed out, count above the bucket's", build(batchWithDest(destWithTimedOut(arr{4, 5}))), ErrMalformed},
		{"timed out, count above uint32", build(batchWithDest(destWithTimedOut(arr{4, uint64(1 << 32)}))), ErrMalformed},
		{"timed out, count negative", build(batchWithDest(destWithTimedOut(arr{4, -1}))), ErrMalformed},
		{"timed out, count nil", build(batchWithDest(destWithTimedOut(arr{4, raw{0xc0}}))), ErrMalformed},
		{"timed out, count float", build(batchWithDest(destWithTimedOut(arr{4, raw{0xca, 0x3f, 0x80, 0, 0}}))), ErrMalformed},
		{"timed out, count string", build(batchWithDest(destWithTimedOut(arr{4, "1"}))), ErrMalformed},
		{"extra field declares 4 GiB", build(append(goodBatch(), 1, raw{0xc6, 0xff, 0xff, 0xff, 0xff})), ErrMalformed},
		{"extra field nested too deep", build(append(goodBatch(), 1, raw(bytes.Repeat([]byte{0x91}, 100)))), ErrMalformed},
		{"extra field reserved code", build(append(goodBatch(), 1, raw{0xc1})), ErrMalformed},
		{"extra map declares 4G", build(append(goodBatch(), 1, raw{0xdf, 0xff, 0xff, 0xff, 0xff})), ErrMalformed},
		{"too many extra fields", build(append(append(goodBatch(), 1), make(arr, MaxExtraFields+1)...)), ErrMalformed},
		{"sent_at negative", build(append(goodBatch(), -1)), ErrMalformed},
		{"sent_at above int64", build(append(goodBatch(), uint64(math.MaxInt64)+1)), ErrMalformed},
		{"sent_at nil", build(append(goodBatch(), nil)), ErrMalformed},
		{"sent_at string", build(append(goodBatch(), "1764480000123")), ErrMalformed},
		{"sent_at float", build(append(goodBatch(), raw{0xca, 0x3f, 0x80, 0, 0})), ErrMalformed},
		{"unknown field in place of sent_at", build(append(goodBatch(), raw{0xc4, 1, 0})), ErrMalformed},
	}
	dec := newDecoder(t, tracker.Layout{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := dec.DecodeBatch(tc.msg)
			require.ErrorIs(t, err, tc.want, "%v", err)
			require.Equal(t, tracker.Batch{}, b)
			// Exactly one sentinel.
			n := 0
			for _, s := range sentinels {
				if errors.Is(err, s) {
					n++
				}
			}
			require.Equal(t, 1, n, "%v", err)
		})
	}
	// The decoder still works after all that.
	got, err := dec.DecodeBatch(build(goodBatch()))
	require.NoError(t, err)
	require.Equal(t, []tracker.Bucket{{Index: 3, Count: 2}, {Index: 4, Count: 4}, {Index: 104, Count: 1}}, got.Dests[0].Buckets)
	require.Equal(t, goodTimedOut, got.Dests[0].TimedOut)
}

var sentinels = []error{ErrVersion, ErrType, ErrLayout, ErrTooLarge, ErrMalformed}

func TestExpectedLayout(t *testing.T) {
	dec := newDecoder(t, defaultLayout)
	_, err := dec.DecodeBatch(build(goodBatch()))
	require.NoError(t, err)
	_, err = dec.DecodeBatch(build(with(goodBatch(), 2, arr{1, 120000, 2})))
	require.ErrorIs(t, err, ErrLayout)
	_, err = dec.DecodeBatch(build(with(goodBatch(), 2, arr{1, 60000, 3})))
	require.ErrorIs(t, err, ErrLayout)

	_, err = NewDecoder(tracker.Layout{Lowest: 1, Highest: 1, SignificantDigits: 2})
	require.ErrorIs(t, err, ErrLayout)
	require.ErrorIs(t, err, tracker.ErrLayout)

	// Unsupported layouts also wrap tracker.ErrLayout.
	_, err = newDecoder(t, tracker.Layout{}).DecodeBatch(build(with(goodBatch(), 2, arr{1, 60000, 9})))
	require.ErrorIs(t, err, ErrLayout)
	require.ErrorIs(t, err, tracker.ErrLayout)
}

// TestExtensionPolicy: a newer minor revision may append fields to any
// record; this version skips them. A new version is refused.
func TestExtensionPolicy(t *testing.T) {
	extra := []any{7, "new", arr{1, arr{2, "x"}}, raw{0xc4, 3, 1, 2, 3}, raw{0x81, 1, 2}, raw{0xd6, 5, 1, 2, 3, 4}, raw{0xcb, 0, 0, 0, 0, 0, 0, 0, 0}, raw{0xc0}}
	ext := func(a arr) arr { return append(append(arr(nil), a...), extra...) }
	want := newDecoder(t, tracker.Layout{})
	base, err := want.DecodeBatch(build(goodBatch()))
	require.NoError(t, err)
	base = CloneBatch(base)

	dest := ext(goodDest())
	tests := map[string]arr{
		"message":     ext(goodBatch()),
		"layout":      with(goodBatch(), 2, ext(goodLayout())),
		"key":         with(goodBatch(), 3, ext(goodKey())),
		"destination": batchWithDest(dest),
		"all":         ext(arr{1, 1, ext(goodLayout()), ext(goodKey()), arr{dest}}),
	}
	dec := newDecoder(t, defaultLayout)
	for name, m := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := dec.DecodeBatch(build(m))
			require.NoError(t, err)
			requireSameBatch(t, base, got)
		})
	}
	t.Run("digest group and message", func(t *testing.T) {
		// The first field after the known ones is sent_at (7 here).
		m := ext(arr{1, 2, "me", arr{ext(arr{"a", uint64(1), 10, arr{0, 0, 1, 0}})}})
		got, err := dec.DecodeDigest(build(m))
		require.NoError(t, err)
		require.Equal(t, Digest{Sender: "me", Keys: []tracker.BatchKey{{Origin: "a", Boot: 1, Epoch: 10}, {Origin: "a", Boot: 1, Epoch: 11}}, SentAtMillis: 7}, got)
	})
	t.Run("sent_at and the most unknown fields after it", func(t *testing.T) {
		m := append(append(goodBatch(), 1764480000123), make(arr, MaxExtraFields)...)
		_, err := dec.DecodeBatch(build(m))
		require.NoError(t, err)
		require.Equal(t, int64(1764480000123), dec.SentAtMillis())
	})
	t.Run("a new version is refused", func(t *testing.T) {
		_, err := dec.DecodeBatch(build(with(ext(goodBatch()), 0, 2)))
		require.ErrorIs(t, err, ErrVersion)
	})
}

func TestType(t *testing.T) {
	dec := newDecoder(t, tracker.Layout{})
	digest, err := AppendDigest(nil, Digest{Sender: "s"})
	require.NoError(t, err)
	pull, err := AppendPull(nil, Pull{Sender: "s"})
	require.NoError(t, err)
	tests := []struct {
		msg  []byte
		want MessageType
		err  error
	}{
		{build(goodBatch()), TypeBatch, nil},
		{digest, TypeDigest, nil},
		{pull, TypePull, nil},
		{build(arr{1, 11}), 11, ErrType}, // 4..10 are the protocol v2 types
		{build(arr{1, 0}), 0, ErrType},
		{build(arr{3, 1}), 0, ErrVersion},
		{build(arr{1}), 0, ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.want.String(), func(t *testing.T) {
			got, err := dec.Type(tc.msg)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.want, got)
		})
	}
	_, err = dec.DecodeDigest(pull)
	require.ErrorIs(t, err, ErrType)
	_, err = dec.DecodePull(digest)
	require.ErrorIs(t, err, ErrType)
	require.Equal(t, "type(11)", MessageType(11).String())
}

func randomKeys(rng *rand.Rand) []tracker.BatchKey {
	var keys []tracker.BatchKey
	for range rng.IntN(20) {
		origin := randomName(rng)
		boot := pick(rng, []uint64{0, 1, math.MaxUint64, rng.Uint64()})
		epoch := pick(rng, []int64{0, -40, math.MinInt64, math.MaxInt64 - 30, 291_234_567})
		for range 1 + rng.IntN(12) {
			keys = append(keys, tracker.BatchKey{Origin: origin, Boot: boot, Epoch: epoch, Part: pick(rng, []uint16{0, 0, 1, 2, 200, math.MaxUint16})})
			if rng.IntN(2) == 0 && epoch < math.MaxInt64-30 {
				epoch += int64(rng.IntN(3))
			}
		}
	}
	if rng.IntN(10) == 0 { // the two ends of int64 in one group
		keys = append(keys, tracker.BatchKey{Origin: "wide", Epoch: math.MinInt64}, tracker.BatchKey{Origin: "wide", Epoch: math.MaxInt64})
	}
	return SortKeys(keys)
}

func TestKeysRoundTripRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	dec := newDecoder(t, tracker.Layout{})
	for i := range 300 {
		keys := randomKeys(rng)
		msg, err := AppendDigest(nil, Digest{Sender: "node-1", Keys: keys})
		require.NoError(t, err)
		d, err := dec.DecodeDigest(msg)
		require.NoError(t, err, "digest %d", i)
		require.Equal(t, "node-1", d.Sender)
		require.Equal(t, len(keys), len(d.Keys))
		if len(keys) > 0 {
			require.Equal(t, keys, d.Keys)
		}
		msg, err = AppendPull(nil, Pull{Sender: "node-2", Keys: keys})
		require.NoError(t, err)
		p, err := dec.DecodePull(msg)
		require.NoError(t, err, "pull %d", i)
		require.Equal(t, len(keys), len(p.Keys))
		again, err := AppendPull(nil, p)
		require.NoError(t, err)
		require.Equal(t, msg, again)
	}
}

func TestKeysRefused(t *testing.T) {
	k := func(o string, boot uint64, e int64, p uint16) tracker.BatchKey {
		return tracker.BatchKey{Origin: o, Boot: boot, Epoch: e, Part: p}
	}
	encTests := []struct {
		name string
		d    Digest
		want error
	}{
		{"unsorted", Digest{Sender: "s", Keys: []tracker.BatchKey{k("b", 0, 0, 0), k("a", 0, 0, 0)}}, ErrMalformed},
		{"duplicate", Digest{Sender: "s", Keys: []tracker.BatchKey{k("a", 0, 0, 0), k("a", 0, 0, 0)}}, ErrMalformed},
		{"empty sender", Digest{Keys: nil}, ErrMalformed},
		{"empty origin", Digest{Sender: "s", Keys: []tracker.BatchKey{k("", 0, 0, 0)}}, ErrMalformed},
		{"too many keys", Digest{Sender: "s", Keys: make([]tracker.BatchKey, MaxKeys+1)}, ErrTooLarge},
	}
	for _, tc := range encTests {
		t.Run("encode "+tc.name, func(t *testing.T) {
			_, err := AppendDigest(nil, tc.d)
			require.ErrorIs(t, err, tc.want)
		})
	}
	many := make([]tracker.BatchKey, 0, MaxKeyOrigins+1)
	for i := range MaxKeyOrigins + 1 {
		many = append(many, k("o", uint64(i), 0, 0))
	}
	_, err := AppendDigest(nil, Digest{Sender: "s", Keys: many})
	require.ErrorIs(t, err, ErrTooLarge)

	g := func(origin string, boot uint64, base int, pairs ...any) arr {
		return arr{origin, boot, base, arr(pairs)}
	}
	digest := func(groups ...any) []byte { return build(arr{1, 2, "s", arr(groups)}) }
	decTests := []struct {
		name string
		msg  []byte
		want error
	}{
		{"groups unsorted by origin", digest(g("b", 0, 0, 0, 0), g("a", 0, 0, 0, 0)), ErrMalformed},
		{"groups unsorted by boot", digest(g("a", 2, 0, 0, 0), g("a", 1, 0, 0, 0)), ErrMalformed},
		{"repeated group", digest(g("a", 1, 0, 0, 0), g("a", 1, 5, 0, 0)), ErrMalformed},
		{"empty group", digest(g("a", 1, 0)), ErrMalformed},
		{"odd pairs", digest(g("a", 1, 0, 0)), ErrMalformed},
		{"repeated key", digest(g("a", 1, 0, 0, 1, 0, 1)), ErrMalformed},
		{"part descending", digest(g("a", 1, 0, 0, 2, 0, 1)), ErrMalformed},
		{"negative epoch delta", digest(g("a", 1, 0, 0, 0, -1, 0)), ErrMalformed},
		{"epoch overflow", digest(g("a", 1, math.MaxInt64, 0, 0, 1, 0)), ErrMalformed},
		{"part too large", digest(g("a", 1, 0, 0, 65536)), ErrMalformed},
		{"sender nil", build(arr{1, 2, raw{0xc0}, arr{}}), ErrMalformed},
		{"too many groups", build(arr{1, 2, "s", raw{0xdc, 0x10, 0x01}}), ErrTooLarge},
		{"groups declare 4G", build(arr{1, 2, "s", raw{0xdd, 0xff, 0xff, 0xff, 0xff}}), ErrTooLarge},
		{"groups declare more than present", build(arr{1, 2, "s", raw{0x93}}), ErrMalformed},
		{"trailing", append(digest(), 0xc0), ErrMalformed},
		{"version 2", build(arr{2, 2, "s", arr{}}), ErrVersion},
	}
	dec := newDecoder(t, tracker.Layout{})
	for _, tc := range decTests {
		t.Run("decode "+tc.name, func(t *testing.T) {
			_, err := dec.DecodeDigest(tc.msg)
			require.ErrorIs(t, err, tc.want, "%v", err)
		})
	}
	t.Run("decode too many keys", func(t *testing.T) {
		// 16 groups of 4096 keys each is the cap; one key more is refused.
		var groups arr
		for i := range 17 {
			pairs := make(arr, 0, 2*4096)
			for range 4096 {
				pairs = append(pairs, 1, 0)
			}
			groups = append(groups, arr{"o", uint64(i), 0, pairs})
		}
		_, err := dec.DecodeDigest(build(arr{1, 2, "s", groups[:16]}))
		require.NoError(t, err)
		_, err = dec.DecodeDigest(build(arr{1, 2, "s", groups}))
		require.ErrorIs(t, err, ErrTooLarge)
	})
}

func TestCloneBatch(t *testing.T) {
	dec := newDecoder(t, tracker.Layout{})
	want := censoredBatch(10, 5, 100)
	want.Dests[1].TimedOut = nil
	want.Dests[3].TimedOut, want.Dests[3].CensoringUnknown = nil, true
	msg, err := AppendBatch(nil, want)
	require.NoError(t, err)
	got, err := dec.DecodeBatch(msg)
	require.NoError(t, err)
	kept := CloneBatch(got)
	requireSameBatch(t, got, kept)
	_, err = dec.DecodeBatch(build(goodBatch())) // overwrites the decoder's buffers
	require.NoError(t, err)
	requireSameBatch(t, want, kept)
	require.Equal(t, 1, cap(kept.Dests[0].TimedOut)-len(kept.Dests[0].TimedOut)+1, "capped: appending to one copy cannot reach the next")
}

func TestSortKeys(t *testing.T) {
	keys := []tracker.BatchKey{{Origin: "b"}, {Origin: "a", Epoch: 2}, {Origin: "a", Epoch: 1, Part: 1}, {Origin: "a", Epoch: 1}, {Origin: "b"}, {Origin: "a", Boot: 1}}
	require.Equal(t, []tracker.BatchKey{{Origin: "a", Epoch: 1}, {Origin: "a", Epoch: 1, Part: 1}, {Origin: "a", Epoch: 2}, {Origin: "a", Boot: 1}, {Origin: "b"}}, SortKeys(keys))
}

// TestSentAt: sent_at round-trips in every message type, parts carry it
// within their byte limit, old bytes decode to an unknown clock, and a
// negative clock is refused by the encoders.
func TestSentAt(t *testing.T) {
	const at = int64(1764480000123)
	dec := newDecoder(t, defaultLayout)
	b := typicalBatch(9, 3, 100)

	for _, sentAt := range []int64{0, 1, 127, 128, at, math.MaxInt64} {
		msg, err := AppendBatchAt(nil, b, sentAt)
		require.NoError(t, err)
		got, err := dec.DecodeBatch(msg)
		require.NoError(t, err)
		requireSameBatch(t, b, got)
		require.Equal(t, sentAt, dec.SentAtMillis(), "batch %d", sentAt)

		keys := goldenKeys()
		dm, err := AppendDigest(nil, Digest{Sender: "s", Keys: keys, SentAtMillis: sentAt})
		require.NoError(t, err)
		d, err := dec.DecodeDigest(dm)
		require.NoError(t, err)
		require.Equal(t, sentAt, d.SentAtMillis)
		require.Equal(t, sentAt, dec.SentAtMillis())
		pm, err := AppendPull(nil, Pull{Sender: "s", Keys: keys, SentAtMillis: sentAt})
		require.NoError(t, err)
		p, err := dec.DecodePull(pm)
		require.NoError(t, err)
		require.Equal(t, sentAt, p.SentAtMillis)
	}

	t.Run("without sent_at the bytes are the old ones", func(t *testing.T) {
		old, err := AppendBatch(nil, b)
		require.NoError(t, err)
		zero, err := AppendBatchAt(nil, b, 0)
		require.NoError(t, err)
		require.Equal(t, old, zero)
		withClock, err := AppendBatchAt(nil, b, at)
		require.NoError(t, err)
		require.Equal(t, old[0]+1, withClock[0], "one more element in the message array")
		require.Equal(t, old[1:], withClock[1:len(old)], "then the same bytes, and sent_at at the end")
	})

	t.Run("a decoding error or Type forgets it", func(t *testing.T) {
		msg, err := AppendBatchAt(nil, b, at)
		require.NoError(t, err)
		_, err = dec.DecodeBatch(msg)
		require.NoError(t, err)
		_, err = dec.DecodeBatch(msg[:len(msg)-1])
		require.Error(t, err)
		require.Zero(t, dec.SentAtMillis())
		_, err = dec.DecodeBatch(msg)
		require.NoError(t, err)
		_, err = dec.Type(msg)
		require.NoError(t, err)
		require.Zero(t, dec.SentAtMillis())
	})

	t.Run("parts carry it within maxBytes", func(t *testing.T) {
		big := typicalBatch(5, 300, 3000)
		var enc, plain Encoder
		for _, maxBytes := range []int{1400, 8 << 10, 0} {
			parts, err := enc.BatchPartsAt(big, maxBytes, at)
			require.NoError(t, err)
			old, err := plain.BatchParts(big, maxBytes)
			require.NoError(t, err)
			require.GreaterOrEqual(t, len(parts), len(old))
			limit := maxBytes
			if limit == 0 {
				limit = MaxMessageBytes
			}
			var n int
			for i, p := range parts {
				require.LessOrEqual(t, len(p), limit, "part %d", i)
				got, err := dec.DecodeBatch(p)
				require.NoError(t, err)
				require.Equal(t, at, dec.SentAtMillis(), "part %d", i)
				n += len(got.Dests)
			}
			require.Equal(t, len(big.Dests), n)
		}
		// The smallest limit one destination fits without sent_at is too
		// small with it: sent_at counts in maxBytes.
		one := typicalBatch(7, 1, 500)
		exact, err := plain.BatchParts(one, 0)
		require.NoError(t, err)
		least := len(exact[0])
		for ; least < len(exact[0])+8; least++ {
			if _, err := plain.BatchParts(one, least); err == nil {
				break
			}
		}
		_, err = plain.BatchParts(one, least)
		require.NoError(t, err)
		_, err = enc.BatchPartsAt(one, least, at)
		require.ErrorIs(t, err, ErrTooLarge)
		_, err = enc.BatchPartsAt(one, least+sentAtLen(at), at)
		require.NoError(t, err)
	})

	t.Run("negative is refused", func(t *testing.T) {
		_, err := AppendBatchAt(nil, b, -1)
		require.ErrorIs(t, err, ErrMalformed)
		var enc Encoder
		_, err = enc.BatchPartsAt(b, 0, -1)
		require.ErrorIs(t, err, ErrMalformed)
		_, err = AppendDigest(nil, Digest{Sender: "s", SentAtMillis: -1})
		require.ErrorIs(t, err, ErrMalformed)
		_, err = AppendPull(nil, Pull{Sender: "s", SentAtMillis: -1})
		require.ErrorIs(t, err, ErrMalformed)
	})
}
