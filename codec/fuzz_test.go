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

func fuzzKeys(f *testing.F, golden string, decode func(*Decoder, []byte) (string, []tracker.BatchKey, int64, error),
	encode func(string, []tracker.BatchKey, int64) ([]byte, error)) {
	f.Add(goldenMessages(f)[golden])
	f.Add(goldenMessages(f)[golden+"-sent-at"])
	dec := newDecoder(f, tracker.Layout{})
	check := newDecoder(f, tracker.Layout{})
	f.Fuzz(func(t *testing.T, msg []byte) {
		sender, keys, sentAt, err := decode(dec, msg)
		if err != nil {
			requireTyped(t, err)
			return
		}
		enc, err := encode(sender, keys, sentAt)
		require.NoError(t, err)
		s2, k2, sentAt2, err := decode(check, enc)
		require.NoError(t, err)
		require.Equal(t, sender, s2)
		require.Equal(t, sentAt, sentAt2)
		require.Equal(t, len(keys), len(k2))
		for i := range keys {
			require.Equal(t, keys[i], k2[i])
		}
	})
}

func FuzzDecodeDigest(f *testing.F) {
	fuzzKeys(f, "v1-digest",
		func(d *Decoder, m []byte) (string, []tracker.BatchKey, int64, error) {
			g, err := d.DecodeDigest(m)
			return g.Sender, g.Keys, g.SentAtMillis, err
		},
		func(s string, k []tracker.BatchKey, at int64) ([]byte, error) {
			return AppendDigest(nil, Digest{Sender: s, Keys: k, SentAtMillis: at})
		})
}

func FuzzDecodePull(f *testing.F) {
	fuzzKeys(f, "v1-pull",
		func(d *Decoder, m []byte) (string, []tracker.BatchKey, int64, error) {
			p, err := d.DecodePull(m)
			return p.Sender, p.Keys, p.SentAtMillis, err
		},
		func(s string, k []tracker.BatchKey, at int64) ([]byte, error) {
			return AppendPull(nil, Pull{Sender: s, Keys: k, SentAtMillis: at})
		})
}
