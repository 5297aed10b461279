package codec

import (
	"fmt"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// The typical batch: 100 destinations, each a sealed sub-window of 3000
// lognormal latencies (median 2..50 ms) in the default layout.
const (
	benchDests   = 100
	benchSamples = 3000
)

// perDest reports wall-clock and CPU nanoseconds per destination; call
// it with the result of cpuNanos taken before the loop.
func perDest(b *testing.B, cpu0 int64, dests int) {
	n := float64(b.N) * float64(dests)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/dest")
	b.ReportMetric(float64(cpuNanos()-cpu0)/n, "cpu-ns/dest")
}

func BenchmarkEncodeBatch(b *testing.B) {
	benchEncode(b, typicalBatch(1, benchDests, benchSamples), AppendBatch)
}

// BenchmarkEncodeBatchTimedOut is the typical batch with its tail timed
// out: two timed-out buckets per destination (censoredBatch).
func BenchmarkEncodeBatchTimedOut(b *testing.B) {
	benchEncode(b, censoredBatch(1, benchDests, benchSamples), AppendBatch)
}

// benchEncode measures encode(buf[:0], bt) (AppendBatch, or the naive
// encoder) and reports the message's bytes per destination of bt, which
// holds benchDests destinations.
func benchEncode(b *testing.B, bt tracker.Batch, encode func([]byte, tracker.Batch) ([]byte, error)) {
	buf, err := encode(nil, bt)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	cpu0 := cpuNanos()
	for b.Loop() {
		buf, _ = encode(buf[:0], bt)
	}
	perDest(b, cpu0, benchDests)
	b.ReportMetric(float64(len(buf))/benchDests, "B/dest")
}

// BenchmarkEncodeBatchParts splits the typical batch into messages of at
// most 8 KiB (as for memberlist's reliable channel).
func BenchmarkEncodeBatchParts(b *testing.B) {
	bt := typicalBatch(1, benchDests, benchSamples)
	var enc Encoder
	parts, err := enc.BatchParts(bt, 8<<10)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0 := cpuNanos()
	for b.Loop() {
		parts, _ = enc.BatchParts(bt, 8<<10)
	}
	perDest(b, cpu0, benchDests)
	b.ReportMetric(float64(len(parts)), "parts")
}

// BenchmarkEncodeBatchNaive is msgpack/v5's reflection encoder on the same
// struct (field names as map keys, no delta encoding).
func BenchmarkEncodeBatchNaive(b *testing.B) {
	benchEncode(b, typicalBatch(1, benchDests, benchSamples), func(_ []byte, bt tracker.Batch) ([]byte, error) {
		return msgpack.Marshal(&bt)
	})
}

func BenchmarkDecodeBatch(b *testing.B) {
	benchDecodeBatch(b, typicalBatch(1, benchDests, benchSamples))
}

// BenchmarkDecodeBatchTimedOut decodes the batch of
// BenchmarkEncodeBatchTimedOut.
func BenchmarkDecodeBatchTimedOut(b *testing.B) {
	benchDecodeBatch(b, censoredBatch(1, benchDests, benchSamples))
}

// benchDecodeBatch measures a reused Decoder's DecodeBatch of bt's message.
func benchDecodeBatch(b *testing.B, bt tracker.Batch) {
	msg, err := AppendBatch(nil, bt)
	if err != nil {
		b.Fatal(err)
	}
	dec, err := NewDecoder(defaultLayout)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := dec.DecodeBatch(msg); err != nil { // warm: grow the reused buffers once
		b.Fatal(err)
	}
	benchDecode(b, msg, func(msg []byte) error {
		_, err := dec.DecodeBatch(msg)
		return err
	})
}

// benchDecode measures decode(msg) of a message of benchDests destinations.
func benchDecode(b *testing.B, msg []byte, decode func([]byte) error) {
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	cpu0 := cpuNanos()
	for b.Loop() {
		if err := decode(msg); err != nil {
			b.Fatal(err)
		}
	}
	perDest(b, cpu0, benchDests)
}

// naiveValidate is the validation a reflection decoder would still need.
func naiveValidate(bt *tracker.Batch) error {
	if bt.Layout != defaultLayout {
		return ErrLayout
	}
	n := bt.Layout.CountsLen()
	for _, d := range bt.Dests {
		var sum uint64
		prev := -1
		for _, bk := range d.Buckets {
			if int(bk.Index) <= prev || int(bk.Index) >= n || bk.Count == 0 {
				return ErrMalformed
			}
			prev = int(bk.Index)
			sum += uint64(bk.Count)
		}
		if sum != d.Total {
			return ErrMalformed
		}
	}
	return nil
}

// BenchmarkDecodeBatchNaive is msgpack.Unmarshal into the struct (unsafe
// on peer bytes, see TestNaiveDecodingAllocatesDeclaredLength) plus the
// same validation.
func BenchmarkDecodeBatchNaive(b *testing.B) {
	bt := typicalBatch(1, benchDests, benchSamples)
	msg, err := msgpack.Marshal(&bt)
	if err != nil {
		b.Fatal(err)
	}
	benchDecode(b, msg, func(msg []byte) error {
		var got tracker.Batch
		if err := msgpack.Unmarshal(msg, &got); err != nil {
			return err
		}
		return naiveValidate(&got)
	})
}

// BenchmarkEncodedSize reports the encoded bytes per destination of a
// sealed sub-window holding 100, 10 000 and 100 000 samples per
// destination (100 destinations, lognormal latencies).
func BenchmarkEncodedSize(b *testing.B) {
	for _, samples := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprintf("samples=%d", samples), func(b *testing.B) {
			bt := typicalBatch(2, benchDests, samples)
			buckets := 0
			for _, d := range bt.Dests {
				buckets += len(d.Buckets)
			}
			buf, err := AppendBatch(nil, bt)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu0 := cpuNanos()
			for b.Loop() {
				buf, _ = AppendBatch(buf[:0], bt)
			}
			b.ReportMetric(float64(len(buf))/benchDests, "B/dest")
			b.ReportMetric(float64(buckets)/benchDests, "buckets/dest")
			perDest(b, cpu0, benchDests)
		})
	}
}

func BenchmarkDecodeDigest(b *testing.B) {
	// 100 origins × 9 sealed sub-windows.
	var keys []tracker.BatchKey
	for o := range 100 {
		for e := range 9 {
			keys = append(keys, tracker.BatchKey{Origin: fmt.Sprintf("node-%03d", o), Boot: uint64(o) * 0x9e3779b97f4a7c15, Epoch: 291_234_560 + int64(e)})
		}
	}
	msg, err := AppendDigest(nil, Digest{Sender: "node-000", Keys: SortKeys(keys)})
	if err != nil {
		b.Fatal(err)
	}
	dec, _ := NewDecoder(tracker.Layout{})
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if _, err := dec.DecodeDigest(msg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(msg))/float64(len(keys)), "B/key")
}
