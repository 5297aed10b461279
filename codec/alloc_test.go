package codec

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// bytesPerRun is the heap allocated per call of f, averaged over runs.
func bytesPerRun(runs int, f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}

// TestHostileInputAllocatesLittle: tiny messages declaring gigantic
// lengths cost a few small allocations (the error), never the declared size.
func TestHostileInputAllocatesLittle(t *testing.T) {
	huge := raw{0xdb, 0xff, 0xff, 0xff, 0xff}
	tests := []struct {
		name string
		msg  []byte
		dec  func(*Decoder, []byte) error
	}{
		{"message array32 4G", []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0x01, 0x01, 0x90}, decBatch},
		{"origin str32 4GiB in 8 bytes", []byte{0x95, 0x01, 0x01, 0x93, 0x01, 0xdb, 0xff, 0xff}, decBatch},
		{"origin str32 4GiB", build(with(goodBatch(), 3, arr{huge, 1, 1, 0})), decBatch},
		{"destinations array32 4G", build(with(goodBatch(), 4, raw{0xdd, 0xff, 0xff, 0xff, 0xff})), decBatch},
		{"buckets array32 4G", build(batchWithDest(arr{"d", 1, raw{0xdd, 0xff, 0xff, 0xff, 0xfe}})), decBatch},
		{"timed-out array32 4G", build(batchWithDest(destWithTimedOut(raw{0xdd, 0xff, 0xff, 0xff, 0xfe}))), decBatch},
		{"extra bin32 4GiB", build(append(goodBatch(), raw{0xc6, 0xff, 0xff, 0xff, 0xff})), decBatch},
		{"extra str32 4GiB", build(append(goodBatch(), huge)), decBatch},
		{"extra ext32 4GiB", build(append(goodBatch(), raw{0xc9, 0xff, 0xff, 0xff, 0xff, 0x01})), decBatch},
		{"extra map32 4G", build(append(goodBatch(), raw{0xdf, 0xff, 0xff, 0xff, 0xff})), decBatch},
		{"extra nested 1000 deep", build(append(goodBatch(), raw(bytes.Repeat([]byte{0x91}, 1000)))), decBatch},
		{"digest groups array32 4G", build(arr{1, 2, "s", raw{0xdd, 0xff, 0xff, 0xff, 0xff}}), decDigest},
		{"digest keys array32 4G", build(arr{1, 2, "s", arr{arr{"o", 1, 0, raw{0xdd, 0xff, 0xff, 0xff, 0xfe}}}}), decDigest},
		{"pull sender str32 4GiB", build(arr{1, 3, huge}), decPull},
	}
	dec := newDecoder(t, tracker.Layout{})
	_, err := dec.DecodeBatch(build(goodBatch())) // warm up: msgpack's 64-byte scratch, intern table
	require.NoError(t, err)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Error(t, tc.dec(dec, tc.msg))
			allocs := testing.AllocsPerRun(50, func() { _ = tc.dec(dec, tc.msg) })
			require.LessOrEqual(t, allocs, 16.0) // the error and its detail; more under -race
			require.LessOrEqual(t, bytesPerRun(50, func() { _ = tc.dec(dec, tc.msg) }), uint64(1024))
		})
	}
}

func decBatch(d *Decoder, m []byte) error  { _, err := d.DecodeBatch(m); return err }
func decDigest(d *Decoder, m []byte) error { _, err := d.DecodeDigest(m); return err }
func decPull(d *Decoder, m []byte) error   { _, err := d.DecodePull(m); return err }

// TestNaiveDecodingAllocatesDeclaredLength documents why reflection
// decoding is not used on peer bytes: 6 bytes declaring a 32 MiB []byte
// make msgpack.Unmarshal allocate 32 MiB before it notices the truncation.
func TestNaiveDecodingAllocatesDeclaredLength(t *testing.T) {
	msg := []byte{0x91, 0xc6, 0x02, 0x00, 0x00, 0x00} // [bin32 of 32 MiB], truncated
	var v struct {
		_msgpack struct{} `msgpack:",as_array"`
		B        []byte
	}
	n := bytesPerRun(1, func() { require.Error(t, msgpack.Unmarshal(msg, &v)) })
	require.GreaterOrEqual(t, n, uint64(32<<20))
}

// TestSteadyStateZeroAllocs: with reused buffers, encoding and decoding a
// typical batch allocate nothing, with or without timed-out counts.
func TestSteadyStateZeroAllocs(t *testing.T) {
	dec := newDecoder(t, defaultLayout)
	for _, b := range []tracker.Batch{typicalBatch(11, 100, 3000), censoredBatch(11, 100, 3000)} {
		buf, err := AppendBatch(nil, b)
		require.NoError(t, err)
		require.Zero(t, testing.AllocsPerRun(20, func() { buf, _ = AppendBatch(buf[:0], b) }))

		_, err = dec.DecodeBatch(buf)
		require.NoError(t, err)
		require.Zero(t, testing.AllocsPerRun(20, func() {
			if _, err := dec.DecodeBatch(buf); err != nil {
				panic(err)
			}
		}))

		var enc Encoder
		_, err = enc.BatchParts(b, 8<<10)
		require.NoError(t, err)
		require.Zero(t, testing.AllocsPerRun(20, func() { _, _ = enc.BatchParts(b, 8<<10) }))
	}

	keys := SortKeys(append([]tracker.BatchKey(nil), goldenKeys()...))
	dmsg, err := AppendDigest(nil, Digest{Sender: "s", Keys: keys})
	require.NoError(t, err)
	_, err = dec.DecodeDigest(dmsg)
	require.NoError(t, err)
	require.Zero(t, testing.AllocsPerRun(20, func() { _, _ = dec.DecodeDigest(dmsg) }))
}
