package codec

import (
	"fmt"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// A tiny msgpack builder for hand-made (often hostile) messages:
// int → compact int, uint64 → compact uint, string → str, arr → array
// header plus elements, raw → the bytes as they are.
type (
	arr []any
	raw []byte
)

func build(v any) []byte { return appendAny(nil, v) }

func appendAny(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, 0xc0)
	case int:
		return appendInt(b, int64(v))
	case int64:
		return appendInt(b, v)
	case uint64:
		return appendUint(b, v)
	case string:
		return appendStr(b, v)
	case raw:
		return append(b, v...)
	case arr:
		b = appendArrayLen(b, len(v))
		for _, e := range v {
			b = appendAny(b, e)
		}
		return b
	}
	panic(fmt.Sprintf("build: %T", v))
}

// A valid small batch, as builder values, for mutation in tests.
func goodLayout() arr { return arr{1, 60000, 2} }
func goodKey() arr    { return arr{"node-a", uint64(42), 1000, 0} }
func goodDest() arr   { return arr{"db-1", 7, arr{3, 2, 1, 4, 100, 1}, arr{4, 3, 100, 1}} } // indices 3, 4, 104; timed out: 3 at 4, 1 at 104
func goodBatch() arr  { return arr{1, 1, goodLayout(), goodKey(), arr{goodDest()}} }

// oldDest is goodDest as a sender older than timed-out counts writes it:
// three fields, censoring unknown.
func oldDest() arr { return goodDest()[:3] }

// goodTimedOut is goodDest's timed-out buckets, decoded.
var goodTimedOut = []tracker.Bucket{{Index: 4, Count: 3}, {Index: 104, Count: 1}}

// destWithTimedOut is goodDest with other timed-out pairs.
func destWithTimedOut(pairs any) arr { return with(goodDest(), 3, pairs) }

// with returns a copy of a with element i replaced by v.
func with(a arr, i int, v any) arr {
	c := append(arr(nil), a...)
	c[i] = v
	return c
}

// batchWithDest is goodBatch with one destination replaced.
func batchWithDest(d any) arr { return with(goodBatch(), 4, arr{d}) }
