package codec

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// requireTyped fails unless err wraps exactly one of the package's sentinels.
func requireTyped(t *testing.T, err error) {
	t.Helper()
	n := 0
	for _, s := range sentinels {
		if errors.Is(err, s) {
			n++
		}
	}
	require.Equal(t, 1, n, "untyped or ambiguous error: %v", err)
}

// The fuzz targets assert: no panic; every refusal is typed; every accepted
// message re-encodes (so it obeys the encoder's rules too) and the
// re-encoding decodes to an equal value. Seeds: f.Add of the golden
// messages, plus testdata/fuzz/<target>/.

func FuzzDecodeBatch(f *testing.F) {
	f.Add(goldenMessages(f)["v1-batch-timed-out"])
	f.Add(goldenMessages(f)["v1-batch-timed-out-sent-at"])
	f.Add(readGolden(f, "v1-batch"))
	f.Add(readGolden(f, "v1-batch-sent-at"))
	dec := newDecoder(f, tracker.Layout{})
	check := newDecoder(f, tracker.Layout{})
	f.Fuzz(func(t *testing.T, msg []byte) {
		b, err := dec.DecodeBatch(msg)
		if err != nil {
			requireTyped(t, err)
			return
		}
		enc, err := AppendBatchAt(nil, b, dec.SentAtMillis())
		require.NoError(t, err)
		require.LessOrEqual(t, len(enc), len(msg), "the canonical encoding is never longer")
		again, err := check.DecodeBatch(enc)
		require.NoError(t, err)
		requireSameBatch(t, b, again)
		require.Equal(t, dec.SentAtMillis(), check.SentAtMillis())
	})
}

// fuzzKeys is fuzzRoundTrip of the decoder of the digest or pull (typ, the
// same fields) from golden's seeds.
func fuzzKeys(f *testing.F, golden string, typ MessageType) {
	decode := func(d *Decoder, m []byte) (Digest, error) {
		if typ == TypePull {
			p, err := d.DecodePull(m)
			return Digest(p), err
		}
		return d.DecodeDigest(m)
	}
	encode := func(g Digest) ([]byte, error) {
		if typ == TypePull {
			return AppendPull(nil, Pull(g))
		}
		return AppendDigest(nil, g)
	}
	fuzzRoundTrip(f, false, decode, encode, goldenMessages(f)[golden], goldenMessages(f)[golden+"-sent-at"])
}

func FuzzDecodeDigest(f *testing.F) { fuzzKeys(f, "v1-digest", TypeDigest) }

func FuzzDecodePull(f *testing.F) { fuzzKeys(f, "v1-pull", TypePull) }
