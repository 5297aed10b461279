package node

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
)

// hostileBody is the 1 MiB body of empty objects that issue 20 measured:
// 349 520 samples of {}, each missing every field.
func hostileBody() []byte {
	const n = 349_520
	b := []byte(`{"samples":[` + strings.Repeat("{},", n-1) + `{}]}`)
	if len(b) > maxRecordBody {
		panic(fmt.Sprintf("hostile body is %d bytes", len(b)))
	}
	return b
}

func benchDecode(b *testing.B, body []byte, wantErr bool) {
	benchDecoder(b, decodeRecord, body, wantErr)
}

func benchDecoder(b *testing.B, decode func(io.Reader) ([]Sample, error), body []byte, wantErr bool) {
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	rd := bytes.NewReader(body)
	for b.Loop() {
		rd.Reset(body)
		_, err := decode(rd)
		if (err != nil) != wantErr {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeRecord1 is the stream decoder on one sample.
func BenchmarkDecodeRecord1(b *testing.B) { benchDecode(b, testutil.RecordBody(1), false) }

// BenchmarkDecodeRecord1000 is decodeRecord on 1000 samples.
func BenchmarkDecodeRecord1000(b *testing.B) { benchDecode(b, testutil.RecordBody(1000), false) }

// BenchmarkDecodeRecordHostile is decodeRecord on the 1 MiB body of empty
// objects: what one hostile request costs.
func BenchmarkDecodeRecordHostile(b *testing.B) { benchDecode(b, hostileBody(), true) }

// BenchmarkDecodeRecordNaive1 is the naive decoder (read whole, then
// encoding/json) on one sample.
func BenchmarkDecodeRecordNaive1(b *testing.B) {
	benchDecoder(b, decodeRecordNaive, testutil.RecordBody(1), false)
}

// BenchmarkDecodeRecordNaive1000 is the naive decoder on 1000 samples.
func BenchmarkDecodeRecordNaive1000(b *testing.B) {
	benchDecoder(b, decodeRecordNaive, testutil.RecordBody(1000), false)
}

// BenchmarkDecodeRecordNaiveHostile is the naive decoder on the 1 MiB
// body of empty objects.
func BenchmarkDecodeRecordNaiveHostile(b *testing.B) {
	benchDecoder(b, decodeRecordNaive, hostileBody(), true)
}
