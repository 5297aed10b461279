package codec

import (
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

var update = flag.Bool("update", false, "rewrite testdata/golden and the seed corpora under testdata/fuzz")

// goldenBatch exercises every integer width, both name encodings, and
// timed-out counts: some of a destination's buckets, all of one, none.
func goldenBatch() tracker.Batch {
	b := legacyBatch()
	b.Dests[0].TimedOut = []tracker.Bucket{{Index: 1100, Count: 300}, {Index: 1279, Count: 1}}
	b.Dests[0].CensoringUnknown = false
	b.Dests[1].TimedOut = []tracker.Bucket{{Index: 42, Count: math.MaxUint32}}
	b.Dests[1].CensoringUnknown = false
	b.Dests = append(b.Dests, tracker.DestCounts{Dest: "db-2", Total: 3, Buckets: []tracker.Bucket{{Index: 7, Count: 3}}})
	return b
}

// legacyBatch is the batch of v1-batch.hex, written before destinations
// carried timed-out counts: decoded, its censoring is unknown.
func legacyBatch() tracker.Batch {
	return tracker.Batch{
		Key:    tracker.BatchKey{Origin: "node-a", Boot: 0x0123456789abcdef, Epoch: 291_234_567, Part: 2},
		Layout: defaultLayout,
		Dests: []tracker.DestCounts{
			{Dest: "db-1:7000", Total: 1 + 127 + 128 + 70000 + 1, CensoringUnknown: true, Buckets: []tracker.Bucket{
				{Index: 0, Count: 1}, {Index: 5, Count: 127}, {Index: 133, Count: 128}, {Index: 1100, Count: 70000}, {Index: 1279, Count: 1},
			}},
			{Dest: "cache-é日本-and-a-longer-name-over-31-bytes", Total: math.MaxUint32, CensoringUnknown: true, Buckets: []tracker.Bucket{{Index: 42, Count: math.MaxUint32}}},
		},
	}
}

func goldenKeys() []tracker.BatchKey {
	return []tracker.BatchKey{
		{Origin: "node-a", Boot: 7, Epoch: 291_234_560, Part: 0},
		{Origin: "node-a", Boot: 7, Epoch: 291_234_560, Part: 1},
		{Origin: "node-a", Boot: 7, Epoch: 291_234_562, Part: 0},
		{Origin: "node-a", Boot: 0xfedcba9876543210, Epoch: 291_234_567, Part: 0},
		{Origin: "node-b", Boot: 1, Epoch: -5, Part: 300},
	}
}

// goldenMessages are the messages pinned under testdata/golden.
func goldenMessages(t testing.TB) map[string][]byte {
	b, err := AppendBatch(nil, goldenBatch())
	require.NoError(t, err)
	d, err := AppendDigest(nil, Digest{Sender: "node-c", Keys: goldenKeys()})
	require.NoError(t, err)
	p, err := AppendPull(nil, Pull{Sender: "node-c", Keys: goldenKeys()[1:3]})
	require.NoError(t, err)
	bs, err := AppendBatchAt(nil, goldenBatch(), goldenSentAt)
	require.NoError(t, err)
	ds, err := AppendDigest(nil, Digest{Sender: "node-c", Keys: goldenKeys(), SentAtMillis: goldenSentAt})
	require.NoError(t, err)
	ps, err := AppendPull(nil, Pull{Sender: "node-c", Keys: goldenKeys()[1:3], SentAtMillis: goldenSentAt})
	require.NoError(t, err)
	return map[string][]byte{
		"v1-batch-timed-out": b, "v1-digest": d, "v1-pull": p,
		"v1-batch-timed-out-sent-at": bs, "v1-digest-sent-at": ds, "v1-pull-sent-at": ps,
	}
}

// legacyGolden are the golden files of earlier revisions of version 1,
// which the encoders no longer write for new data: decode-only fixtures,
// never rewritten, each with the batch and sent_at it decodes to.
var legacyGolden = map[string]struct {
	batch  func() tracker.Batch
	sentAt int64
}{
	"v1-batch":         {legacyBatch, 0},            // before timed-out counts and sent_at
	"v1-batch-sent-at": {legacyBatch, goldenSentAt}, // with sent_at, before timed-out counts
}

// readGolden returns the bytes of testdata/golden/<name>.hex.
func readGolden(t testing.TB, name string) []byte {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("testdata", "golden", name+".hex"))
	require.NoError(t, err)
	msg, err := hex.DecodeString(strings.ReplaceAll(string(text), "\n", ""))
	require.NoError(t, err)
	return msg
}

// goldenSentAt is the sent_at of the golden messages that carry one:
// 2025-11-30T05:20:00.123Z in Unix milliseconds (a uint64 on the wire).
const goldenSentAt = 1764480000123

// Golden files hold the bytes as hex, 32 bytes a line: text diffs, no binaries.
func toHex(b []byte) string {
	var s strings.Builder
	for len(b) > 0 {
		n := min(len(b), 32)
		s.WriteString(hex.EncodeToString(b[:n]) + "\n")
		b = b[n:]
	}
	return s.String()
}

// pinGolden checks that msg, the bytes the encoder writes now, are those of
// testdata/golden/<name>.hex (after writing them there under -update), and
// returns the pinned bytes.
func pinGolden(t *testing.T, name string, msg []byte) []byte {
	t.Helper()
	if *update {
		path := filepath.Join("testdata", "golden", name+".hex")
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(toHex(msg)), 0o644))
	}
	want := readGolden(t, name)
	require.Equal(t, toHex(want), toHex(msg), "encoding changed: a format change needs a new version (see doc.go); regenerate with -update only if it is intended")
	return want
}

func TestGolden(t *testing.T) {
	dec := newDecoder(t, defaultLayout)
	for name, msg := range goldenMessages(t) {
		t.Run(name, func(t *testing.T) {
			want := pinGolden(t, name, msg)

			// The pinned bytes decode to the pinned values; the old bytes
			// (no sent_at) to an unknown clock.
			var sentAt int64
			if strings.HasSuffix(name, "-sent-at") {
				sentAt = goldenSentAt
			}
			switch strings.TrimSuffix(name, "-sent-at") {
			case "v1-batch-timed-out":
				got, err := dec.DecodeBatch(want)
				require.NoError(t, err)
				requireSameBatch(t, goldenBatch(), got)
			case "v1-digest":
				got, err := dec.DecodeDigest(want)
				require.NoError(t, err)
				require.Equal(t, Digest{Sender: "node-c", Keys: goldenKeys(), SentAtMillis: sentAt}, got)
			case "v1-pull":
				got, err := dec.DecodePull(want)
				require.NoError(t, err)
				require.Equal(t, Pull{Sender: "node-c", Keys: goldenKeys()[1:3], SentAtMillis: sentAt}, got)
			default:
				t.Fatalf("no check for %s", name)
			}
			require.Equal(t, sentAt, dec.SentAtMillis())
		})
	}
}

// TestGoldenLegacy: the bytes of earlier revisions still decode, to the
// values they were written from, with censoring unknown; re-encoded (as a
// node forwarding them to a peer does) they come out byte for byte the same,
// so a forwarded copy never conflicts with the origin's.
func TestGoldenLegacy(t *testing.T) {
	dec := newDecoder(t, defaultLayout)
	for name, want := range legacyGolden {
		t.Run(name, func(t *testing.T) {
			msg := readGolden(t, name)
			got, err := dec.DecodeBatch(msg)
			require.NoError(t, err)
			requireSameBatch(t, want.batch(), got)
			require.Equal(t, want.sentAt, dec.SentAtMillis())
			again, err := AppendBatchAt(nil, got, want.sentAt)
			require.NoError(t, err)
			require.Equal(t, toHex(msg), toHex(again))
		})
	}
}

// framingSeeds are the seeds every decoder's corpus starts from: valid, that
// message cut short, extended, or followed by hostile extra fields, and
// framing no message type accepts (empty, huge declared lengths, nil).
func framingSeeds(valid []byte) map[string][]byte {
	return map[string][]byte{
		"valid":                 valid,
		"truncated-half":        valid[:len(valid)/2],
		"truncated-last-byte":   valid[:len(valid)-1],
		"trailing-byte":         append(append([]byte(nil), valid...), 0),
		"empty":                 {},
		"array32-4G":            {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01, 0x01, 0x90},
		"str32-4GiB-in-8-bytes": {0x92, 0x01, 0xdb, 0xff, 0xff, 0xff, 0xff, 0x00},
		"bin32-4GiB-extra":      withExtra(valid, 0xc6, 0xff, 0xff, 0xff, 0xff),
		"nested-deep-extra":     withExtra(valid, bytes.Repeat([]byte{0x91}, 100)...),
		"valid-with-extra":      withExtra(valid, 0xc4, 0x02, 0x01, 0x02),
		"nil-everywhere":        build(arr{nil, nil, nil, nil, nil}),
	}
}

// fuzzSeeds are the hostile and valid inputs committed under
// testdata/fuzz/<target>/ (rewritten with -update).
func fuzzSeeds(t testing.TB) map[string]map[string][]byte {
	g := goldenMessages(t)
	huge := raw{0xdb, 0xff, 0xff, 0xff, 0xff}
	common := func(valid []byte) map[string][]byte {
		m := framingSeeds(valid)
		maps.Copy(m, map[string][]byte{
			"version-2":                 build(arr{2, 1}),
			"version-string":            build(arr{"1", 1}),
			"type-unknown":              build(arr{1, 77}),
			"map32-4G-extra":            withExtra(valid, 0xdf, 0xff, 0xff, 0xff, 0xff),
			"name-str32-4GiB":           build(arr{1, 2, huge}),
			"reserved-code":             {0x92, 0x01, 0xc1},
			"float-version":             build(arr{raw{0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0}, 1}),
			"negative-fixint-type":      build(arr{1, -1}),
			"uint64-max-version":        build(arr{uint64(math.MaxUint64), 1}),
			"extra-fields-on-all-known": build(arr{1, 2, "s", arr{arr{"o", 1, 0, arr{0, 0}, "x", arr{}}}, 9, raw{0xc4, 1, 0}}),
		})
		return m
	}
	sentAt := func(valid []byte) map[string][]byte {
		msg := func(v ...any) []byte { return appendSentAtRaw(valid, v...) }
		return map[string][]byte{
			"sent-at-valid":           msg(int64(goldenSentAt)),
			"sent-at-zero":            msg(0),
			"sent-at-int64-max":       msg(int64(math.MaxInt64)),
			"sent-at-uint64-max":      msg(uint64(math.MaxUint64)),
			"sent-at-negative":        msg(-1),
			"sent-at-nil":             msg(nil),
			"sent-at-string":          msg("1764480000123"),
			"sent-at-float":           msg(raw{0xcb, 0x42, 0x79, 0xad, 0x8c, 0xe1, 0x00, 0x07, 0xb0}),
			"sent-at-then-extra":      msg(int64(goldenSentAt), arr{1, "x"}),
			"sent-at-then-16-extras":  msg(append(arr{int64(goldenSentAt)}, make(arr, MaxExtraFields)...)...),
			"sent-at-then-17-extras":  msg(append(arr{int64(goldenSentAt)}, make(arr, MaxExtraFields+1)...)...),
			"sent-at-then-bin32-4GiB": msg(int64(goldenSentAt), raw{0xc6, 0xff, 0xff, 0xff, 0xff}),
		}
	}
	batch := common(g["v1-batch-timed-out"])
	maps.Copy(batch, sentAt(g["v1-batch-timed-out"]))
	batch["valid-without-timed-out"] = readGolden(t, "v1-batch")
	batch["valid-sent-at-without-timed-out"] = readGolden(t, "v1-batch-sent-at")
	for name, m := range map[string]arr{
		"old-dest":                    batchWithDest(oldDest()),
		"old-and-new-dests":           with(goodBatch(), 4, arr{oldDest(), with(goodDest(), 0, "db-2")}),
		"timed-out-empty":             batchWithDest(destWithTimedOut(arr{})),
		"timed-out-all":               batchWithDest(destWithTimedOut(arr{3, 2, 1, 4, 100, 1})),
		"timed-out-not-a-bucket":      batchWithDest(destWithTimedOut(arr{5, 1})),
		"timed-out-beyond-buckets":    batchWithDest(destWithTimedOut(arr{105, 1})),
		"timed-out-above-count":       batchWithDest(destWithTimedOut(arr{4, 5})),
		"timed-out-count-zero":        batchWithDest(destWithTimedOut(arr{4, 0})),
		"timed-out-repeated":          batchWithDest(destWithTimedOut(arr{4, 1, 0, 1})),
		"timed-out-descending":        batchWithDest(destWithTimedOut(arr{100, 1, -96, 1})),
		"timed-out-more-than-dest":    batchWithDest(destWithTimedOut(arr{3, 1, 1, 1, 100, 1, 1, 1})),
		"timed-out-odd":               batchWithDest(destWithTimedOut(arr{4})),
		"timed-out-nil":               batchWithDest(destWithTimedOut(nil)),
		"timed-out-array32-4G":        batchWithDest(destWithTimedOut(raw{0xdd, 0xff, 0xff, 0xff, 0xff})),
		"timed-out-delta-overflow":    batchWithDest(destWithTimedOut(arr{4, 1, uint64(math.MaxUint64), 1})),
		"timed-out-count-over-uint32": batchWithDest(destWithTimedOut(arr{4, uint64(1 << 32)})),
		"timed-out-then-extra":        batchWithDest(append(goodDest(), "x", arr{1})),
		"index-out-of-range":          batchWithDest(arr{"d", 1, arr{1280, 1}}),
		"index-descending":            batchWithDest(arr{"d", 2, arr{5, 1, -1, 1}}),
		"index-repeated":              batchWithDest(arr{"d", 2, arr{5, 1, 0, 1}}),
		"index-delta-overflow":        batchWithDest(arr{"d", 2, arr{5, 1, uint64(math.MaxUint64), 1}}),
		"count-zero":                  batchWithDest(arr{"d", 0, arr{5, 0}}),
		"count-over-uint32":           batchWithDest(arr{"d", uint64(1 << 32), arr{5, uint64(1 << 32)}}),
		"count-negative":              batchWithDest(arr{"d", 1, arr{5, -1}}),
		"total-overflow":              batchWithDest(arr{"d", uint64(math.MaxUint64), arr{5, uint64(math.MaxUint32), 1, uint64(math.MaxUint32)}}),
		"total-mismatch":              batchWithDest(arr{"d", 3, arr{5, 1}}),
		"buckets-array32-4G":          batchWithDest(arr{"d", 1, raw{0xdd, 0xff, 0xff, 0xff, 0xff}}),
		"buckets-odd":                 batchWithDest(arr{"d", 1, arr{5}}),
		"dests-array32-4G":            with(goodBatch(), 4, raw{0xdd, 0xff, 0xff, 0xff, 0xff}),
		"dests-4097":                  with(goodBatch(), 4, raw{0xdc, 0x10, 0x01}),
		"dest-duplicate":              with(goodBatch(), 4, arr{goodDest(), goodDest()}),
		"dest-name-str32-4GiB":        batchWithDest(arr{huge, 1, arr{5, 1}}),
		"dest-name-257":               batchWithDest(arr{strings.Repeat("n", 257), 1, arr{5, 1}}),
		"dest-name-invalid-utf8":      batchWithDest(arr{"\xff", 1, arr{5, 1}}),
		"layout-unsupported":          with(goodBatch(), 2, arr{1, 60000, 6}),
		"layout-huge":                 with(goodBatch(), 2, arr{1, math.MaxInt64, 5}),
		"layout-other":                with(goodBatch(), 2, arr{1, 3_600_000, 3}),
		"layout-map":                  with(goodBatch(), 2, raw{0x81, 1, 2}),
		"key-part-65536":              with(goodBatch(), 3, arr{"n", 1, 1, 65536}),
		"key-epoch-uint64":            with(goodBatch(), 3, arr{"n", 1, uint64(math.MaxUint64), 0}),
		"key-boot-negative":           with(goodBatch(), 3, arr{"n", -5, 1, 0}),
		"extras-everywhere":           append(arr{1, 1, append(goodLayout(), 0), append(goodKey(), "k"), arr{append(goodDest(), arr{})}}, 1, 2),
		"wrong-type-count-string":     batchWithDest(arr{"d", 1, arr{5, "1"}}),
		"wrong-type-dests-string":     with(goodBatch(), 4, "dests"),
		"dest-map-instead-of-record":  with(goodBatch(), 4, arr{raw{0x81, 0xa1, 'd', 1}}),
	} {
		batch[name] = build(m)
	}
	digest := common(g["v1-digest"])
	maps.Copy(digest, sentAt(g["v1-digest"]))
	pull := common(g["v1-pull"])
	maps.Copy(pull, sentAt(g["v1-pull"]))
	g4 := func(origin string, boot any, base any, pairs any) arr { return arr{origin, boot, base, pairs} }
	for name, groups := range map[string]arr{
		"groups-unsorted":   {g4("b", 1, 0, arr{0, 0}), g4("a", 1, 0, arr{0, 0})},
		"groups-repeated":   {g4("a", 1, 0, arr{0, 0}), g4("a", 1, 0, arr{1, 0})},
		"keys-repeated":     {g4("a", 1, 0, arr{0, 3, 0, 3})},
		"keys-descending":   {g4("a", 1, 0, arr{0, 3, -1, 3})},
		"epoch-overflow":    {g4("a", 1, math.MaxInt64, arr{0, 0, 1, 0})},
		"epoch-min":         {g4("a", 1, math.MinInt64, arr{0, 0, uint64(math.MaxUint64), 0})},
		"keys-array32-4G":   {g4("a", 1, 0, raw{0xdd, 0xff, 0xff, 0xff, 0xff})},
		"keys-empty":        {g4("a", 1, 0, arr{})},
		"part-too-large":    {g4("a", 1, 0, arr{0, 65536})},
		"origin-str32-4GiB": {g4("a", 1, 0, arr{0, 0}), arr{huge}},
		"boot-nil":          {g4("a", nil, 0, arr{0, 0})},
		"groups-4097":       nil,
	} {
		groupsV := any(groups)
		if name == "groups-4097" {
			groupsV = raw{0xdc, 0x10, 0x01}
		}
		digest[name] = build(arr{1, 2, "s", groupsV})
		pull[name] = build(arr{1, 3, "s", groupsV})
	}
	return map[string]map[string][]byte{"FuzzDecodeBatch": batch, "FuzzDecodeDigest": digest, "FuzzDecodePull": pull}
}

// withExtra appends a sent_at and then one unknown field to valid, a
// message without sent_at whose fixarray header it rewrites as an array32
// two elements longer: the unknown field is skipped, as an older decoder
// skips sent_at.
func withExtra(valid []byte, extra ...byte) []byte {
	n := valid[0]&0x0f + 2
	out := append([]byte{0xdd, 0, 0, 0, n}, valid[1:]...)
	out = appendInt(out, goldenSentAt)
	return append(out, extra...)
}

// appendSentAtRaw appends the values to valid, a message without sent_at
// whose fixarray header it rewrites as an array32 that many elements longer:
// the first value is where sent_at goes.
func appendSentAtRaw(valid []byte, values ...any) []byte {
	n := int(valid[0]&0x0f) + len(values)
	out := append([]byte{0xdd, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, valid[1:]...)
	for _, v := range values {
		out = appendAny(out, v)
	}
	return out
}

// TestFuzzCorpus keeps the committed seed corpora in sync with fuzzSeeds.
func TestFuzzCorpus(t *testing.T) {
	syncFuzzCorpus(t, fuzzSeeds(t), "TestFuzzCorpus")
}

// syncFuzzCorpus checks that each fuzz target's committed seed corpus under
// testdata/fuzz holds one file per seed of seeds, and with -update writes
// the corpus afresh; test names the test that runs it, for the hint.
func syncFuzzCorpus(t *testing.T, seeds map[string]map[string][]byte, test string) {
	for target, seeds := range seeds {
		dir := filepath.Join("testdata", "fuzz", target)
		if *update {
			require.NoError(t, os.RemoveAll(dir))
			require.NoError(t, os.MkdirAll(dir, 0o755))
			for name, msg := range seeds {
				body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(msg)))
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
			}
		}
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, entries, len(seeds), "%s: run go test -run %s -update", dir, test)
	}
}
