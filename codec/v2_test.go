package codec

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// The protocol v2 messages: golden files, round trips and fuzz targets.

func goldenRecords() Records {
	b := goldenBatch()
	b.Key.Part = 0
	return Records{Batch: b, Manifests: []EpochManifest{
		{Epoch: 291_234_566, Manifest: tracker.Manifest{Records: 3, Hash: 0xfedcba9876543210}},
		{Epoch: 291_234_567, Manifest: tracker.Manifest{Records: 2, Hash: 7}},
	}, SentAtMillis: 1_747_407_402_123}
}

func goldenAggregates() Aggregates {
	return Aggregates{Sender: "node-b-0000000a", Layout: defaultLayout, Aggregates: []tracker.Aggregate{
		{
			Dest: "db-1:7000", Epoch: 291_234_567, Layout: defaultLayout, Total: 1 + 200 + 70000,
			Buckets:  []tracker.Bucket{{Index: 3, Count: 1}, {Index: 140, Count: 200}, {Index: 1279, Count: 70000}},
			TimedOut: []tracker.Bucket{{Index: 1279, Count: 5}},
			Peers:    3, SquareSum: [2]uint64{0, 4_900_000_000}, Newest: 291_234_566,
			Coverage: tracker.Coverage{Records: 27, Hash: 0x0123456789abcdef},
		},
		{
			Dest: "cache-é日本", Epoch: 291_234_567, Layout: defaultLayout, Total: 1,
			Buckets: []tracker.Bucket{{Index: 42, Count: 1}}, CensoringUnknown: true,
			Peers: 1, SquareSum: [2]uint64{1, 2}, Newest: 291_234_567,
			Coverage: tracker.Coverage{Records: 1, Hash: 1},
		},
	}, SentAtMillis: 1_747_407_402_123}
}

func goldenAggDigest() AggDigest {
	d := AggDigest{Sender: "node-c-00000001", SentAtMillis: 1_747_407_402_123}
	for e := range int64(2) {
		g := tracker.AggregateDigest{Epoch: 291_234_566 + e}
		for k := range g.Slices {
			g.Slices[k] = tracker.SliceSum{Count: uint32(k) * uint32(e+1) * 20, Hash: uint64(k) << (4 * uint(k))}
		}
		d.Epochs = append(d.Epochs, g)
	}
	return d
}

func goldenEntries() AggEntries {
	return AggEntries{Sender: "node-c-00000001", Entries: []tracker.AggregateEntry{
		{Dest: "db-1:7000", Epoch: 291_234_567, Coverage: tracker.Coverage{Records: 27, Hash: 0x0123456789abcdef}},
		{Dest: "db-2", Epoch: -3, Coverage: tracker.Coverage{}},
	}, SentAtMillis: 1_747_407_402_123}
}

func goldenRecordPull() RecordPull {
	return RecordPull{Sender: "node-c-00000001", Epochs: []int64{291_234_566, 291_234_567, -1}} // no sent_at: an older sender's bytes
}

func goldenV2Messages(t testing.TB) map[string][]byte {
	must := func(b []byte, err error) []byte {
		require.NoError(t, err)
		return b
	}
	return map[string][]byte{
		"v1-records":           must(AppendRecords(nil, goldenRecords())),
		"v1-aggregates":        must(AppendAggregates(nil, goldenAggregates())),
		"v1-packed-aggregates": must(AppendPackedAggregates(nil, goldenAggregates())),
		"v1-agg-digest":        must(AppendAggDigest(nil, goldenAggDigest())),
		"v1-agg-list":          must(AppendAggEntries(nil, TypeAggList, goldenEntries())),
		"v1-agg-pull":          must(AppendAggEntries(nil, TypeAggPull, goldenEntries())),
		"v1-record-pull":       must(AppendRecordPull(nil, goldenRecordPull())),
	}
}

// decodesTo checks that decode turns the pinned bytes into want.
func decodesTo[M any](want M, decode func(*Decoder, []byte) (M, error)) func(*testing.T, *Decoder, []byte) {
	return func(t *testing.T, d *Decoder, msg []byte) {
		t.Helper()
		got, err := decode(d, msg)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
}

// goldenDecoded is the type of a golden message's pinned bytes and the
// check that they decode to the pinned value.
type goldenDecoded struct {
	typ   MessageType
	check func(*testing.T, *Decoder, []byte)
}

// goldenV2Decoded is the goldenDecoded of each of goldenV2Messages.
func goldenV2Decoded() map[string]goldenDecoded {
	entries := func(t MessageType) func(*Decoder, []byte) (AggEntries, error) {
		return func(d *Decoder, msg []byte) (AggEntries, error) { return d.DecodeAggEntries(msg, t) }
	}
	return map[string]goldenDecoded{
		"v1-records": {TypeRecords, func(t *testing.T, d *Decoder, msg []byte) {
			got, err := d.DecodeRecords(msg)
			require.NoError(t, err)
			requireSameBatch(t, goldenRecords().Batch, got.Batch)
			require.Equal(t, goldenRecords().Manifests, got.Manifests)
		}},
		"v1-aggregates":        {TypeAggregates, decodesTo(goldenAggregates(), (*Decoder).DecodeAggregates)},
		"v1-packed-aggregates": {TypePackedAggregates, decodesTo(goldenAggregates(), (*Decoder).DecodePackedAggregates)},
		"v1-agg-digest":        {TypeAggDigest, decodesTo(goldenAggDigest(), (*Decoder).DecodeAggDigest)},
		"v1-agg-list":          {TypeAggList, decodesTo(goldenEntries(), entries(TypeAggList))},
		"v1-agg-pull":          {TypeAggPull, decodesTo(goldenEntries(), entries(TypeAggPull))},
		"v1-record-pull":       {TypeRecordPull, decodesTo(goldenRecordPull(), (*Decoder).DecodeRecordPull)},
	}
}

// TestGoldenV2 pins the bytes of the protocol v2 message types and checks
// that they decode to the pinned values.
func TestGoldenV2(t *testing.T) {
	dec := newDecoder(t, defaultLayout)
	decoded := goldenV2Decoded()
	for name, msg := range goldenV2Messages(t) {
		t.Run(name, func(t *testing.T) {
			want := pinGolden(t, name, msg)
			d, ok := decoded[name]
			require.True(t, ok, "no check for %s", name)
			typ, err := dec.Type(want)
			require.NoError(t, err)
			require.Equal(t, d.typ, typ)
			d.check(t, dec, want)
		})
	}
}

// TestRecordsParts checks that a records message split into parts decodes
// to the batch's destinations, the manifests on the first part only.
func TestRecordsParts(t *testing.T) {
	b := typicalBatch(1, 60, 400)
	var e Encoder
	r := Records{Batch: b, Manifests: goldenRecords().Manifests}
	parts, err := e.RecordsParts(r, 4096)
	require.NoError(t, err)
	require.Greater(t, len(parts), 1)
	dec := newDecoder(t, defaultLayout)
	var dests []string
	for i, p := range parts {
		require.LessOrEqual(t, len(p), 4096)
		got, err := dec.DecodeRecords(p)
		require.NoError(t, err)
		require.Equal(t, uint16(i), got.Batch.Key.Part)
		if i == 0 {
			require.Equal(t, r.Manifests, got.Manifests)
		} else {
			require.Empty(t, got.Manifests)
		}
		for _, d := range got.Batch.Dests {
			dests = append(dests, d.Dest)
		}
	}
	require.Len(t, dests, 60)
	empty, err := e.RecordsParts(Records{Batch: tracker.Batch{Key: b.Key, Layout: b.Layout}, Manifests: r.Manifests}, 4096)
	require.NoError(t, err)
	got, err := dec.DecodeRecords(empty[0])
	require.NoError(t, err)
	require.Empty(t, got.Batch.Dests)
	require.Equal(t, r.Manifests, got.Manifests)
}

// TestV2Refusals checks the encoders' refusals (a node never sends what
// its peers refuse) and that a v1 node's type check knows every v2 type.
func TestV2Refusals(t *testing.T) {
	a := goldenAggregates()
	a.Aggregates[0].Total++
	_, err := AppendAggregates(nil, a)
	require.ErrorIs(t, err, ErrMalformed)
	a = goldenAggregates()
	a.Aggregates[0].TimedOut = []tracker.Bucket{{Index: 4, Count: 1}}
	_, err = AppendAggregates(nil, a)
	require.ErrorIs(t, err, ErrMalformed)
	a = goldenAggregates()
	a.Aggregates[1].Layout.SignificantDigits = 3
	_, err = AppendAggregates(nil, a)
	require.ErrorIs(t, err, ErrLayout)
	d := goldenAggDigest()
	d.Epochs[1].Epoch = d.Epochs[0].Epoch
	_, err = AppendAggDigest(nil, d)
	require.ErrorIs(t, err, ErrMalformed)
	_, err = AppendAggEntries(nil, TypeBatch, goldenEntries())
	require.ErrorIs(t, err, ErrType)
	_, err = AppendRecordPull(nil, RecordPull{Sender: "s", Epochs: make([]int64, MaxPullEpochs+1)})
	require.ErrorIs(t, err, ErrTooLarge)
	for ty := TypeRecords; ty <= lastType; ty++ {
		require.NotContains(t, ty.String(), "type(")
	}
}

// TestPackedAggregates checks that a packed aggregates message carries the
// same aggregates as the plain one in fewer bytes, and that a decoder of
// the plain type (an older release's) refuses it as ErrType, so an old
// node drops it without misreading it.
func TestPackedAggregates(t *testing.T) {
	dec := newDecoder(t, defaultLayout)
	m := goldenAggregates()
	// A typical aggregate: 200 buckets with counts in the hundreds.
	big := tracker.Aggregate{Dest: "d042", Epoch: 291_234_567, Layout: defaultLayout, Peers: 1000, Newest: 291_234_567,
		Coverage: tracker.Coverage{Records: 1000, Hash: 0xfedcba9876543210}, SquareSum: [2]uint64{0, 1 << 40}}
	for i := range 200 {
		c := uint32(100 + 7*i%900)
		big.Buckets = append(big.Buckets, tracker.Bucket{Index: uint16(300 + i), Count: c})
		big.Total += uint64(c)
	}
	big.TimedOut = []tracker.Bucket{{Index: 499, Count: 3}}
	m.Aggregates = append(m.Aggregates, big)
	plain, err := AppendAggregates(nil, m)
	require.NoError(t, err)
	packed, err := AppendPackedAggregates(nil, m)
	require.NoError(t, err)
	got, err := dec.DecodePackedAggregates(packed)
	require.NoError(t, err)
	require.Equal(t, m, got)
	require.Less(t, float64(len(packed)), 0.85*float64(len(plain)), "packed %d B, plain %d B", len(packed), len(plain))
	t.Logf("packed %d B, plain %d B", len(packed), len(plain))
	_, err = dec.DecodeAggregates(packed)
	require.ErrorIs(t, err, ErrType)
	_, err = dec.DecodePackedAggregates(plain)
	require.ErrorIs(t, err, ErrType)
	typ, err := dec.Type(packed)
	require.NoError(t, err)
	require.Equal(t, "packed_aggregates", typ.String())
}

// fuzzSeedsV2 are the seed corpora of the v2 decoders.
func fuzzSeedsV2(t testing.TB) map[string]map[string][]byte {
	g := goldenV2Messages(t)
	huge := raw{0xdb, 0xff, 0xff, 0xff, 0xff}
	common := framingSeeds
	layout := arr{1, 60000, 2}
	records := common(g["v1-records"])
	key := arr{"o", 1, 5, 0}
	for name, m := range map[string]arr{
		"manifests-array32-4G":  {1, 4, layout, key, arr{}, raw{0xdd, 0xff, 0xff, 0xff, 0xff}},
		"manifests-257":         {1, 4, layout, key, arr{}, raw{0xdc, 0x01, 0x01}},
		"manifests-descending":  {1, 4, layout, key, arr{}, arr{arr{5, 1, 1}, arr{4, 1, 1}}},
		"manifest-records-huge": {1, 4, layout, key, arr{}, arr{arr{5, uint64(1 << 32), 1}}},
		"manifest-short":        {1, 4, layout, key, arr{}, arr{arr{5, 1}}},
		"no-manifests-field":    {1, 4, layout, key, arr{}},
	} {
		records[name] = build(m)
	}
	aggs := common(g["v1-aggregates"])
	agg := func(mod func(a arr) arr) arr {
		a := arr{"d", 5, 2, arr{3, 1, 1, 1}, arr{}, 0, 1, 0, 4, 0, 1, 9}
		return arr{1, 5, layout, "s", arr{mod(a)}}
	}
	set := func(i int, v any) func(arr) arr { return func(a arr) arr { a[i] = v; return a } }
	for name, m := range map[string]arr{
		"total-mismatch":       agg(set(2, 3)),
		"index-out-of-range":   agg(set(3, arr{1280, 1})),
		"index-repeated":       agg(set(3, arr{3, 1, 0, 1})),
		"censored-outside":     agg(set(4, arr{7, 1})),
		"censored-over-count":  agg(set(4, arr{3, 2})),
		"flags-unknown":        agg(set(5, 2)),
		"peers-huge":           agg(set(6, uint64(1<<33))),
		"newest-wraps":         agg(set(9, uint64(math.MaxUint32))),
		"dest-str32-4GiB":      agg(set(0, huge)),
		"aggregates-4097":      {1, 5, layout, "s", raw{0xdc, 0x10, 0x01}},
		"aggregate-short":      {1, 5, layout, "s", arr{arr{"d", 5, 0}}},
		"layout-unsupported":   {1, 5, arr{1, 60000, 9}, "s", arr{}},
		"buckets-array32-4G":   agg(set(3, raw{0xdd, 0xff, 0xff, 0xff, 0xff})),
		"count-negative":       agg(set(3, arr{3, -1})),
		"epoch-min-newest-big": agg(func(a arr) arr { a[1] = int64(math.MinInt64); a[9] = 5; return a }),
	} {
		aggs[name] = build(m)
	}
	packed := common(g["v1-packed-aggregates"])
	pagg := func(mod func(a arr) arr) arr {
		a := arr{"d", 5, 2, bin8(3, 1, 1), bin8(), 0, 1, 0, 4, 0, 1, 9}
		return arr{1, 10, layout, "s", arr{mod(a)}}
	}
	for name, m := range map[string]arr{
		"total-mismatch":      pagg(set(2, 3)),
		"index-out-of-range":  pagg(set(3, bin8(0x80, 0x0a, 1))),
		"run-past-the-end":    pagg(set(3, bin8(3, 1, 0, 0x80, 0x0a, 1))),
		"run-of-zero":         pagg(set(3, bin8(3, 1, 0, 0, 1))),
		"run-wraps":           pagg(set(3, bin8(3, 1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 1))),
		"run-at-the-end":      pagg(set(3, bin8(3, 1, 1, 0, 2))),
		"index-only":          pagg(set(3, bin8(3))),
		"count-huge":          pagg(set(3, bin8(3, 0xff, 0xff, 0xff, 0xff, 0x7f))),
		"uvarint-cut":         pagg(set(3, bin8(3, 0x81))),
		"uvarint-overflow":    pagg(set(3, bin8(3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01))),
		"buckets-an-array":    pagg(set(3, arr{3, 1})),
		"censored-outside":    pagg(set(4, bin8(7, 1))),
		"censored-over-count": pagg(set(4, bin8(3, 2))),
		"bin32-4GiB-buckets":  pagg(set(3, raw{0xc6, 0xff, 0xff, 0xff, 0xff})),
	} {
		packed[name] = build(m)
	}
	digest := common(g["v1-agg-digest"])
	slices16 := make(arr, 32)
	for i := range slices16 {
		slices16[i] = 1
	}
	for name, m := range map[string]arr{
		"slices-short":      {1, 6, "s", arr{arr{5, arr{1, 2}}}},
		"slices-long":       {1, 6, "s", arr{arr{5, append(slices16, 1, 1)}}},
		"epochs-descending": {1, 6, "s", arr{arr{5, slices16}, arr{4, slices16}}},
		"epochs-17":         {1, 6, "s", raw{0xdc, 0x00, 0x11}},
		"slice-count-huge":  {1, 6, "s", arr{arr{5, append(arr{uint64(1 << 32)}, slices16[1:]...)}}},
	} {
		digest[name] = build(m)
	}
	list := common(g["v1-agg-list"])
	pull := common(g["v1-agg-pull"])
	for name, es := range map[string]any{
		"entries-16385":    raw{0xdd, 0x00, 0x00, 0x40, 0x01},
		"entry-short":      arr{arr{"d", 5, 1}},
		"entry-name-empty": arr{arr{"", 5, 1, 1}},
		"entry-records":    arr{arr{"d", 5, uint64(1 << 32), 1}},
	} {
		list[name] = build(arr{1, 7, "s", es})
		pull[name] = build(arr{1, 8, "s", es})
	}
	rpull := common(g["v1-record-pull"])
	for name, m := range map[string]arr{
		"epochs-257":   {1, 9, "s", raw{0xdc, 0x01, 0x01}},
		"epoch-string": {1, 9, "s", arr{"5"}},
		"epoch-uint64": {1, 9, "s", arr{uint64(math.MaxUint64)}},
	} {
		rpull[name] = build(m)
	}
	return map[string]map[string][]byte{
		"FuzzDecodeRecords": records, "FuzzDecodeAggregates": aggs, "FuzzDecodePackedAggregates": packed, "FuzzDecodeAggDigest": digest,
		"FuzzDecodeAggList": list, "FuzzDecodeAggPull": pull, "FuzzDecodeRecordPull": rpull,
	}
}

// bin8 is a msgpack bin of b (at most 255 bytes).
func bin8(b ...byte) raw { return append(raw{0xc4, byte(len(b))}, b...) }

// TestFuzzCorpusV2 keeps the v2 seed corpora in sync with fuzzSeedsV2.
func TestFuzzCorpusV2(t *testing.T) {
	syncFuzzCorpus(t, fuzzSeedsV2(t), "TestFuzzCorpusV2")
}

// fuzzRoundTrip fuzzes decode from seeds: no panic, every refusal typed,
// and every accepted message re-encodes to one that decodes to the same
// value; with noLonger, to one no longer than the message (not so for a v1
// digest: a sender may pack its keys in fewer bytes than the canonical
// groups take).
func fuzzRoundTrip[T any](f *testing.F, noLonger bool, decode func(*Decoder, []byte) (T, error), encode func(T) ([]byte, error), seeds ...[]byte) {
	for _, s := range seeds {
		f.Add(s)
	}
	dec := newDecoder(f, tracker.Layout{})
	check := newDecoder(f, tracker.Layout{})
	f.Fuzz(func(t *testing.T, msg []byte) {
		v, err := decode(dec, msg)
		if err != nil {
			requireTyped(t, err)
			return
		}
		enc, err := encode(v)
		require.NoError(t, err)
		if noLonger {
			require.LessOrEqual(t, len(enc), len(msg), "the canonical encoding is never longer")
		}
		again, err := decode(check, enc)
		require.NoError(t, err)
		require.Equal(t, v, again)
	})
}

// fuzzV2 is fuzzRoundTrip of a v2 decoder from its golden message.
func fuzzV2[T any](f *testing.F, golden string, decode func(*Decoder, []byte) (T, error), encode func(T) ([]byte, error)) {
	fuzzRoundTrip(f, true, decode, encode, goldenV2Messages(f)[golden])
}

func FuzzDecodeRecords(f *testing.F) {
	fuzzV2(f, "v1-records", (*Decoder).DecodeRecords, func(r Records) ([]byte, error) { return AppendRecords(nil, r) })
}

func FuzzDecodeAggregates(f *testing.F) {
	fuzzV2(f, "v1-aggregates", (*Decoder).DecodeAggregates, func(a Aggregates) ([]byte, error) { return AppendAggregates(nil, a) })
}

func FuzzDecodePackedAggregates(f *testing.F) {
	fuzzV2(f, "v1-packed-aggregates", (*Decoder).DecodePackedAggregates, func(a Aggregates) ([]byte, error) { return AppendPackedAggregates(nil, a) })
}

func FuzzDecodeAggDigest(f *testing.F) {
	fuzzV2(f, "v1-agg-digest", (*Decoder).DecodeAggDigest, func(d AggDigest) ([]byte, error) { return AppendAggDigest(nil, d) })
}

func FuzzDecodeAggList(f *testing.F) {
	fuzzV2(f, "v1-agg-list",
		func(d *Decoder, m []byte) (AggEntries, error) { return d.DecodeAggEntries(m, TypeAggList) },
		func(e AggEntries) ([]byte, error) { return AppendAggEntries(nil, TypeAggList, e) })
}

func FuzzDecodeAggPull(f *testing.F) {
	fuzzV2(f, "v1-agg-pull",
		func(d *Decoder, m []byte) (AggEntries, error) { return d.DecodeAggEntries(m, TypeAggPull) },
		func(e AggEntries) ([]byte, error) { return AppendAggEntries(nil, TypeAggPull, e) })
}

func FuzzDecodeRecordPull(f *testing.F) {
	fuzzV2(f, "v1-record-pull", (*Decoder).DecodeRecordPull, func(p RecordPull) ([]byte, error) { return AppendRecordPull(nil, p) })
}

// TestDecodeIndependentOfHistory: a Decoder reuses its buffers, but the
// same bytes decode to the same value whatever it decoded before: a list
// that holds nothing is nil, not an empty buffer kept from a fuller
// message (a fuzz round trip through a second Decoder found Dests [] on
// one and nil on the other).
func TestDecodeIndependentOfHistory(t *testing.T) {
	must := func(b []byte, err error) []byte {
		t.Helper()
		require.NoError(t, err)
		return b
	}
	emptyBatch := goldenBatch()
	emptyBatch.Key.Part, emptyBatch.Dests = 0, nil
	for _, tc := range []struct {
		name        string
		full, empty []byte
		decode      func(*Decoder, []byte) (any, error)
	}{
		{"batch", must(AppendBatch(nil, goldenBatch())), must(AppendBatch(nil, emptyBatch)),
			func(d *Decoder, m []byte) (any, error) { return d.DecodeBatch(m) }},
		{"digest", must(AppendDigest(nil, Digest{Sender: "node-c", Keys: goldenKeys()})), must(AppendDigest(nil, Digest{Sender: "node-c"})),
			func(d *Decoder, m []byte) (any, error) { return d.DecodeDigest(m) }},
		{"records", must(AppendRecords(nil, goldenRecords())), must(AppendRecords(nil, Records{Batch: emptyBatch})),
			func(d *Decoder, m []byte) (any, error) { return d.DecodeRecords(m) }},
		{"aggregates", must(AppendAggregates(nil, goldenAggregates())), must(AppendAggregates(nil, Aggregates{Sender: "node-b", Layout: defaultLayout})),
			func(d *Decoder, m []byte) (any, error) { return d.DecodeAggregates(m) }},
		{"packed aggregates", must(AppendPackedAggregates(nil, goldenAggregates())), must(AppendPackedAggregates(nil, Aggregates{Sender: "node-b", Layout: defaultLayout})),
			func(d *Decoder, m []byte) (any, error) { return d.DecodePackedAggregates(m) }},
		{"agg digest", must(AppendAggDigest(nil, goldenAggDigest())), must(AppendAggDigest(nil, AggDigest{Sender: "node-c"})),
			func(d *Decoder, m []byte) (any, error) { return d.DecodeAggDigest(m) }},
		{"agg list", must(AppendAggEntries(nil, TypeAggList, goldenEntries())), must(AppendAggEntries(nil, TypeAggList, AggEntries{Sender: "node-c"})),
			func(d *Decoder, m []byte) (any, error) { return d.DecodeAggEntries(m, TypeAggList) }},
		{"record pull", must(AppendRecordPull(nil, goldenRecordPull())), must(AppendRecordPull(nil, RecordPull{Sender: "node-c"})),
			func(d *Decoder, m []byte) (any, error) { return d.DecodeRecordPull(m) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			used := newDecoder(t, tracker.Layout{})
			_, err := tc.decode(used, tc.full)
			require.NoError(t, err)
			after, err := tc.decode(used, tc.empty)
			require.NoError(t, err)
			fresh, err := tc.decode(newDecoder(t, tracker.Layout{}), tc.empty)
			require.NoError(t, err)
			require.Equal(t, fresh, after)
		})
	}
}

// TestSentAtResetByError checks that a message refused after its sent_at
// was read (here: for a trailing byte) leaves SentAtMillis at 0, as for
// the v1 types, whatever the message decoded before it carried.
func TestSentAtResetByError(t *testing.T) {
	const at = 1_747_407_402_123
	pull := goldenRecordPull()
	pull.SentAtMillis = at
	msgs := goldenV2Messages(t)
	var err error
	msgs["v1-record-pull"], err = AppendRecordPull(nil, pull)
	require.NoError(t, err)
	entries := func(t MessageType) func(*Decoder, []byte) error {
		return func(d *Decoder, msg []byte) error { _, err := d.DecodeAggEntries(msg, t); return err }
	}
	decode := map[string]func(*Decoder, []byte) error{
		"v1-records":           func(d *Decoder, msg []byte) error { _, err := d.DecodeRecords(msg); return err },
		"v1-aggregates":        func(d *Decoder, msg []byte) error { _, err := d.DecodeAggregates(msg); return err },
		"v1-packed-aggregates": func(d *Decoder, msg []byte) error { _, err := d.DecodePackedAggregates(msg); return err },
		"v1-agg-digest":        func(d *Decoder, msg []byte) error { _, err := d.DecodeAggDigest(msg); return err },
		"v1-agg-list":          entries(TypeAggList),
		"v1-agg-pull":          entries(TypeAggPull),
		"v1-record-pull":       func(d *Decoder, msg []byte) error { _, err := d.DecodeRecordPull(msg); return err },
	}
	require.Len(t, decode, len(msgs))
	for name, msg := range msgs {
		t.Run(name, func(t *testing.T) {
			d, err := NewDecoder(defaultLayout)
			require.NoError(t, err)
			require.NoError(t, decode[name](d, msg))
			require.Equal(t, int64(at), d.SentAtMillis())
			err = decode[name](d, append(slices.Clip(msg), 0xc0))
			require.ErrorIs(t, err, ErrMalformed)
			require.Zero(t, d.SentAtMillis(), "after a refused message")
		})
	}
}
