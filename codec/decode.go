package codec

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// How msgpack/v5 (v5.4.1) primitives behave on hostile input, and the guard
// for each (read in its source):
//   - DecodeArrayLen and DecodeBytesLen return a declared length up to
//     2^32−1 without allocating; nil gives −1. Every length is checked
//     against a cap and against the bytes left before it is used.
//   - DecodeString, Skip of a str/bin/ext and the reflection decoder
//     allocate from the declared length before reading (DecodeString
//     min(n, 1 MiB), reflection into []byte all n). Names are therefore
//     read with DecodeBytesLen, a length check and ReadFull into a fixed
//     256-byte buffer; unknown str/bin/ext values are skipped by seeking
//     the bytes.Reader past them.
//   - Skip recurses into arrays and maps without a depth limit; skipValue
//     bounds the depth and the declared element counts.
//   - DecodeUint64 returns 0 for nil and wraps negative ints to huge
//     values; DecodeInt64 wraps a uint64 above MaxInt64 to a negative value.
//     readUint and readInt peek at the code and refuse both.
//   - Reading from a bytes.Reader, the msgpack Decoder does not buffer (the
//     reader is its own io.ByteScanner), so d.rd.Len() is exactly the
//     number of bytes not yet decoded.

// maxInterned bounds the Decoder's table of interned names.
const maxInterned = 1 << 14

// Decoder decodes messages from peers, strictly and within bounded memory,
// reusing its buffers between calls. Its results alias those buffers: a
// Batch, Digest or Pull returned is valid until the Decoder's next call
// (CloneBatch, slices.Clone to keep one). Names are interned in a bounded
// table, so decoding batches from the same peers allocates nothing in the
// steady state. Not safe for concurrent use: use one Decoder per goroutine.
type Decoder struct {
	rd bytes.Reader
	md *msgpack.Decoder

	expect    tracker.Layout // zero: any supported layout
	last      tracker.Layout // last layout validated, and its counts
	lastCount int

	name     [MaxNameBytes]byte
	intern   map[string]string
	seen     map[string]struct{}
	dests    []tracker.DestCounts
	spans    []destSpan
	buckets  []tracker.Bucket
	timedOut []tracker.Bucket
	keys     []tracker.BatchKey
	sentAt   int64 // sent_at of the message being or last decoded; 0 for none

	// protocol v2 results
	manifests []EpochManifest
	aggs      []tracker.Aggregate
	aggSpans  []int // per aggregate: where its buckets, censored counts end in buckets
	digests   []tracker.AggregateDigest
	entries   []tracker.AggregateEntry
	epochs    []int64
}

// destSpan is where a decoded destination's buckets and timed-out buckets
// end in the Decoder's buffers (they grow while a batch is decoded, so the
// slices are cut once it is done).
type destSpan struct{ buckets, timedOut int }

// NewDecoder returns a Decoder. When expect is not the zero Layout, batches
// in any other layout are refused with ErrLayout; with the zero Layout any
// layout tracker supports is accepted. It fails when expect is neither zero
// nor supported.
func NewDecoder(expect tracker.Layout) (*Decoder, error) {
	d := &Decoder{expect: expect}
	if expect != (tracker.Layout{}) {
		if err := expect.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrLayout, err)
		}
		d.last, d.lastCount = expect, expect.CountsLen()
	}
	d.Reset()
	return d, nil
}

// Reset drops the Decoder's buffers and interned names (to return memory
// after an unusually large message); it keeps the expected layout.
func (d *Decoder) Reset() {
	d.rd.Reset(nil)
	d.md = msgpack.NewDecoder(&d.rd)
	d.intern = make(map[string]string)
	d.seen = make(map[string]struct{})
	d.dests, d.spans, d.buckets, d.timedOut, d.keys = nil, nil, nil, nil, nil
	d.manifests, d.aggs, d.aggSpans, d.digests, d.entries, d.epochs = nil, nil, nil, nil, nil, nil
}

// Type returns the type of msg after checking its size, array header and
// version, so a receiver can dispatch to DecodeBatch, DecodeDigest or
// DecodePull. An unknown type is returned with an error wrapping ErrType.
func (d *Decoder) Type(msg []byte) (MessageType, error) {
	t, _, err := d.begin(msg)
	if err == nil && (t < TypeBatch || t > lastType) {
		err = fmt.Errorf("%w: %s", ErrType, t)
	}
	return t, err
}

// begin checks the size and the header of msg and returns its type and its
// number of elements after version and type.
func (d *Decoder) begin(msg []byte) (MessageType, int, error) {
	d.sentAt = 0 // until closeMessage ends the message without error
	if len(msg) > MaxMessageBytes {
		return 0, 0, tooLarge("message of %d bytes, more than %d", len(msg), MaxMessageBytes)
	}
	d.rd.Reset(msg)
	d.md.Reset(&d.rd)
	n, err := d.readArrayLen("message", math.MaxInt)
	if err != nil {
		return 0, 0, err
	}
	if n < 2 {
		return 0, 0, malformed("message array of %d elements, want version and type", n)
	}
	v, err := d.readUint("version", math.MaxUint64)
	if err != nil {
		return 0, 0, err
	}
	if v != Version {
		return 0, 0, fmt.Errorf("%w: version %d, want %d", ErrVersion, v, Version)
	}
	t, err := d.readUint("message type", math.MaxUint64)
	if err != nil {
		return 0, 0, err
	}
	if t > math.MaxUint8 {
		return 0, 0, fmt.Errorf("%w: type(%d)", ErrType, t)
	}
	return MessageType(t), n - 2, nil
}

// open starts decoding msg as a message of type want with known fields
// after version and type, and returns the number of fields after them:
// the optional sent_at (readSentAt), then at most MaxExtraFields unknown
// ones.
func (d *Decoder) open(msg []byte, want MessageType, known int) (int, error) {
	t, n, err := d.begin(msg)
	if err != nil {
		return 0, err
	}
	if t != want {
		return 0, fmt.Errorf("%w: %s, want %s", ErrType, t, want)
	}
	if n > known { // sent_at is known, not one of the unknown fields
		x, err := d.extras(want.String(), n-1, known)
		return x + 1, err
	}
	return d.extras(want.String(), n, known)
}

// readSentAt reads sent_at, the first field after a message's known ones,
// when there is one, and returns it (0 when there is none) with the number
// of unknown fields left. It is an integer in [0, 2^63−1]: the sender's
// clock in Unix milliseconds, 0 for none.
func (d *Decoder) readSentAt(extras int) (int64, int, error) {
	if extras == 0 {
		return 0, 0, nil
	}
	v, err := d.readUint("sent_at", math.MaxInt64)
	if err != nil {
		return 0, 0, err
	}
	return int64(v), extras - 1, nil
}

// SentAtMillis returns the sent_at of the message the Decoder last decoded
// without error (by any of its Decode methods): the sender's wall
// clock when it encoded the message, in Unix milliseconds, or 0 when the
// message carried none (a sender older than sent_at, or a batch forwarded
// by a member other than its origin). Type and a decoding error reset it
// to 0.
func (d *Decoder) SentAtMillis() int64 { return d.sentAt }

// extras checks that a record of n elements holds its known fields and at
// most MaxExtraFields more, and returns how many more.
func (d *Decoder) extras(what string, n, known int) (int, error) {
	if n < known {
		return 0, malformed("%s has %d fields, want at least %d", what, n, known)
	}
	if n-known > MaxExtraFields {
		return 0, malformed("%s has %d unknown fields, more than %d", what, n-known, MaxExtraFields)
	}
	return n - known, nil
}

// readRecord reads the array header of a record with known fields and
// returns the number of extra fields to skip after them.
func (d *Decoder) readRecord(what string, known int) (int, error) {
	n, err := d.readArrayLen(what, math.MaxInt)
	if err != nil {
		return 0, err
	}
	return d.extras(what, n, known)
}

// finish skips a record's extra fields.
func (d *Decoder) finish(extras int) error {
	for range extras {
		if err := d.skipValue(0); err != nil {
			return err
		}
	}
	return nil
}

// closeMessage reads what follows a message's known fields: its sent_at
// when there is one (readSentAt), then its unknown fields (end).
//
// It is the last step of every message's decoding, and the one that sets
// the sent_at SentAtMillis reports: a message refused anywhere leaves it at
// the 0 begin set.
func (d *Decoder) closeMessage(extras int) error {
	at, extras, err := d.readSentAt(extras)
	if err != nil {
		return err
	}
	if err := d.end(extras); err != nil {
		return err
	}
	d.sentAt = at
	return nil
}

// end skips the message's extra fields and refuses trailing bytes.
func (d *Decoder) end(extras int) error {
	if err := d.finish(extras); err != nil {
		return err
	}
	if n := d.rd.Len(); n != 0 {
		return malformed("%d trailing bytes", n)
	}
	return nil
}

// readCountHash reads a count in [0, 2^32−1] and a 64-bit hash, named
// countWhat and hashWhat in errors: the two fields of a manifest, a
// coverage and a digest slice.
func (d *Decoder) readCountHash(countWhat, hashWhat string) (uint32, uint64, error) {
	c, err := d.readUint(countWhat, math.MaxUint32)
	if err != nil {
		return 0, 0, err
	}
	h, err := d.readUint(hashWhat, math.MaxUint64)
	return uint32(c), h, err
}

func (d *Decoder) fail(what string, err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return malformed("%s: truncated", what)
	}
	return malformed("%s: %v", what, err)
}

// unreadByte steps back over the byte just read from the message. The
// hot readers (readArrayLen, readUint, readCount) read the first byte of a
// value straight from the bytes.Reader, which the msgpack Decoder reads
// itself (no buffer of its own, so the two stay in step): they take the
// fixints and fixarrays that make up most of a message without a call
// through the msgpack Decoder's interfaces, and step back over any other
// byte for msgpack to read.
func (d *Decoder) unreadByte() {
	_ = d.rd.UnreadByte() // after a successful ReadByte: cannot fail
}

// readArrayLen reads an array header: not nil, declaring at most limit
// elements (else ErrTooLarge) and no more elements than bytes left (every
// element takes at least one byte).
func (d *Decoder) readArrayLen(what string, limit int) (int, error) {
	c, err := d.rd.ReadByte() // see unreadByte
	if err != nil {
		return 0, d.fail(what, err)
	}
	var n int
	switch {
	case msgpcode.IsFixedArray(c): // the common case: read here
		n = int(c & 0x0f)
	case c == msgpcode.Array16 || c == msgpcode.Array32:
		d.unreadByte()
		if n, err = d.md.DecodeArrayLen(); err != nil {
			return 0, d.fail(what, err)
		}
	default:
		return 0, malformed("%s: code %#x, want an array", what, c)
	}
	if n > limit {
		return 0, tooLarge("%s: %d elements, more than %d", what, n, limit)
	}
	if n > d.rd.Len() {
		return 0, malformed("%s: array of %d elements, only %d bytes left", what, n, d.rd.Len())
	}
	return n, nil
}

// isSigned reports whether c encodes a signed integer, possibly negative.
func isSigned(c byte) bool {
	return c >= msgpcode.NegFixedNumLow || (c >= msgpcode.Int8 && c <= msgpcode.Int64)
}

// readUint reads a non-negative integer of at most limit, in any msgpack
// integer encoding; nil, negative values and other types are refused.
func (d *Decoder) readUint(what string, limit uint64) (uint64, error) {
	c, err := d.rd.ReadByte() // see unreadByte
	if err != nil {
		return 0, d.fail(what, err)
	}
	var v uint64
	switch {
	case c <= msgpcode.PosFixedNumHigh: // the common case: read here
		v = uint64(c)
	case c == msgpcode.Nil:
		return 0, malformed("%s: nil, want an integer", what)
	case isSigned(c):
		d.unreadByte()
		s, err := d.md.DecodeInt64()
		if err != nil {
			return 0, d.fail(what, err)
		}
		if s < 0 {
			return 0, malformed("%s: %d is negative", what, s)
		}
		v = uint64(s)
	default:
		d.unreadByte()
		if v, err = d.md.DecodeUint64(); err != nil {
			return 0, d.fail(what, err)
		}
	}
	if v > limit {
		return 0, malformed("%s: %d out of range [0, %d]", what, v, limit)
	}
	return v, nil
}

// readCount is readUint for the hot loop of bucket pairs: a value in
// [1, limit] with limit < 2^63. It skips the code peek: DecodeUint64 maps
// nil to 0 and a negative value to one above 2^63, both out of range.
func (d *Decoder) readCount(what string, limit uint64) (uint64, error) {
	c, err := d.rd.ReadByte() // see unreadByte
	if err != nil {
		return 0, d.fail(what, err)
	}
	v := uint64(c)
	if c > msgpcode.PosFixedNumHigh {
		d.unreadByte()
		if v, err = d.md.DecodeUint64(); err != nil {
			return 0, d.fail(what, err)
		}
	}
	if v == 0 || v > limit {
		return 0, malformed("%s: %d out of range [1, %d]", what, int64(v), limit)
	}
	return v, nil
}

// readInt reads an integer in [lo, hi], in any msgpack integer encoding.
func (d *Decoder) readInt(what string, lo, hi int64) (int64, error) {
	c, err := d.md.PeekCode()
	if err != nil {
		return 0, d.fail(what, err)
	}
	var v int64
	switch c {
	case msgpcode.Nil:
		return 0, malformed("%s: nil, want an integer", what)
	case msgpcode.Uint64:
		u, err := d.md.DecodeUint64()
		if err != nil {
			return 0, d.fail(what, err)
		}
		if u > math.MaxInt64 {
			return 0, malformed("%s: %d out of range [%d, %d]", what, u, lo, hi)
		}
		v = int64(u)
	default:
		if v, err = d.md.DecodeInt64(); err != nil {
			return 0, d.fail(what, err)
		}
	}
	if v < lo || v > hi {
		return 0, malformed("%s: %d out of range [%d, %d]", what, v, lo, hi)
	}
	return v, nil
}

// readName reads a non-empty UTF-8 str of at most MaxNameBytes into the
// fixed name buffer and returns it interned.
func (d *Decoder) readName(what string) (string, error) {
	c, err := d.md.PeekCode()
	if err != nil {
		return "", d.fail(what, err)
	}
	if !msgpcode.IsString(c) {
		return "", malformed("%s: code %#x, want a string", what, c)
	}
	n, err := d.md.DecodeBytesLen()
	if err != nil {
		return "", d.fail(what, err)
	}
	switch {
	case n == 0:
		return "", malformed("%s: empty name", what)
	case n > MaxNameBytes:
		return "", tooLarge("%s: name of %d bytes, more than %d", what, n, MaxNameBytes)
	case n > d.rd.Len():
		return "", malformed("%s: name of %d bytes, only %d left", what, n, d.rd.Len())
	}
	b := d.name[:n]
	if err := d.md.ReadFull(b); err != nil {
		return "", d.fail(what, err)
	}
	if !utf8.Valid(b) {
		return "", malformed("%s: name %q is not valid UTF-8", what, b)
	}
	if s, ok := d.intern[string(b)]; ok { // no allocation: the compiler special-cases map[string(b)]
		return s, nil
	}
	if len(d.intern) >= maxInterned {
		clear(d.intern)
	}
	s := string(b)
	d.intern[s] = s
	return s, nil
}

// skipValue skips one value of any type, seeking past str, bin and ext
// payloads instead of reading them, checking every declared length against
// the bytes left and the nesting against maxSkipDepth.
func (d *Decoder) skipValue(depth int) error {
	const what = "unknown field"
	if depth > maxSkipDepth {
		return malformed("%s nested deeper than %d", what, maxSkipDepth)
	}
	c, err := d.md.PeekCode()
	if err != nil {
		return d.fail(what, err)
	}
	n := 0
	switch {
	case msgpcode.IsFixedNum(c), c == msgpcode.Nil, c == msgpcode.False, c == msgpcode.True,
		c >= msgpcode.Float && c <= msgpcode.Int64: // float, double, (u)int8..64: 1..9 bytes
		if err := d.md.Skip(); err != nil {
			return d.fail(what, err)
		}
		return nil
	case msgpcode.IsString(c), msgpcode.IsBin(c):
		if n, err = d.md.DecodeBytesLen(); err != nil {
			return d.fail(what, err)
		}
	case msgpcode.IsExt(c):
		if _, n, err = d.md.DecodeExtHeader(); err != nil {
			return d.fail(what, err)
		}
	case msgpcode.IsFixedArray(c), c == msgpcode.Array16, c == msgpcode.Array32:
		if n, err = d.readArrayLen(what, math.MaxInt); err != nil {
			return err
		}
		for range n {
			if err := d.skipValue(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case msgpcode.IsFixedMap(c), c == msgpcode.Map16, c == msgpcode.Map32:
		if n, err = d.md.DecodeMapLen(); err != nil {
			return d.fail(what, err)
		}
		if 2*n > d.rd.Len() {
			return malformed("%s: map of %d entries, only %d bytes left", what, n, d.rd.Len())
		}
		for range 2 * n {
			if err := d.skipValue(depth + 1); err != nil {
				return err
			}
		}
		return nil
	default:
		return malformed("%s: reserved code %#x", what, c)
	}
	if n > d.rd.Len() {
		return malformed("%s: %d bytes declared, only %d left", what, n, d.rd.Len())
	}
	_, _ = d.rd.Seek(int64(n), io.SeekCurrent) // cannot fail: 0 <= n <= Len
	return nil
}

// countsLen validates l (cached for the last layout seen) and returns its
// number of counts.
func (d *Decoder) countsLen(l tracker.Layout) (int, error) {
	if d.expect != (tracker.Layout{}) && l != d.expect {
		return 0, fmt.Errorf("%w: %+v, want %+v", ErrLayout, l, d.expect)
	}
	if l == d.last && d.lastCount > 0 {
		return d.lastCount, nil
	}
	if err := l.Validate(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrLayout, err)
	}
	d.last, d.lastCount = l, l.CountsLen()
	return d.lastCount, nil
}

// DecodeBatch decodes and validates a batch message. The result aliases
// the Decoder's buffers (see Decoder). A destination's TimedOut is nil when
// nothing timed out; a destination record without timed-out pairs (from a
// sender older than them) has CensoringUnknown set. Errors wrap
// ErrTooLarge, ErrVersion, ErrType, ErrLayout or ErrMalformed (timed-out
// pairs that are not a subset of the buckets among them).
func (d *Decoder) DecodeBatch(msg []byte) (tracker.Batch, error) {
	extra, err := d.open(msg, TypeBatch, 3)
	if err != nil {
		return tracker.Batch{}, err
	}
	b, err := d.decodeBatch()
	if err == nil {
		err = d.closeMessage(extra)
	}
	if err != nil {
		return tracker.Batch{}, err
	}
	return b, nil
}

// readLayout reads a layout, [lowest, highest, significant digits], and
// returns it with its number of counts (countsLen).
func (d *Decoder) readLayout() (tracker.Layout, int, error) {
	var l tracker.Layout
	x, err := d.readRecord("layout", 3)
	if err != nil {
		return l, 0, err
	}
	if l.Lowest, err = d.readInt("layout lowest", math.MinInt64, math.MaxInt64); err != nil {
		return l, 0, err
	}
	if l.Highest, err = d.readInt("layout highest", math.MinInt64, math.MaxInt64); err != nil {
		return l, 0, err
	}
	sig, err := d.readInt("layout significant digits", math.MinInt32, math.MaxInt32)
	if err != nil {
		return l, 0, err
	}
	l.SignificantDigits = int(sig)
	if err := d.finish(x); err != nil {
		return l, 0, err
	}
	n, err := d.countsLen(l)
	return l, n, err
}

// readBatchKey reads a batch's key, [origin, boot, epoch, part].
func (d *Decoder) readBatchKey() (tracker.BatchKey, error) {
	var k tracker.BatchKey
	x, err := d.readRecord("key", 4)
	if err != nil {
		return k, err
	}
	if k.Origin, err = d.readName("origin"); err != nil {
		return k, err
	}
	if k.Boot, err = d.readUint("boot", math.MaxUint64); err != nil {
		return k, err
	}
	if k.Epoch, err = d.readInt("epoch", math.MinInt64, math.MaxInt64); err != nil {
		return k, err
	}
	part, err := d.readUint("part", math.MaxUint16)
	if err != nil {
		return k, err
	}
	k.Part = uint16(part)
	return k, d.finish(x)
}

// readBatchHead reads what precedes a batch's destinations, its layout and
// key, and returns them with the layout's number of counts.
func (d *Decoder) readBatchHead() (tracker.Batch, int, error) {
	var b tracker.Batch
	var countsLen int
	var err error
	if b.Layout, countsLen, err = d.readLayout(); err != nil {
		return b, 0, err
	}
	b.Key, err = d.readBatchKey()
	return b, countsLen, err
}

// decodeBatch reads a batch's layout, key and destinations.
func (d *Decoder) decodeBatch() (tracker.Batch, error) {
	b, countsLen, err := d.readBatchHead()
	if err != nil {
		return b, err
	}

	// Destinations: [[name, total, [index, count, Δindex, count, …],
	// [timed-out pairs…]], …].
	n, err := d.readArrayLen("destinations", MaxDests)
	if err != nil {
		return b, err
	}
	d.dests, d.spans, d.buckets, d.timedOut = d.dests[:0], d.spans[:0], d.buckets[:0], d.timedOut[:0]
	clear(d.seen)
	for range n {
		if err := d.readDest(countsLen); err != nil {
			return b, err
		}
	}
	var prev destSpan
	for i, end := range d.spans {
		d.dests[i].Buckets = d.buckets[prev.buckets:end.buckets:end.buckets]
		if end.timedOut > prev.timedOut {
			d.dests[i].TimedOut = d.timedOut[prev.timedOut:end.timedOut:end.timedOut]
		}
		prev = end
	}
	b.Dests = orNil(d.dests)
	return b, nil
}

// orNil returns s, or nil when s is empty: a decoded list that holds
// nothing is nil, whatever the Decoder's buffer held before (an empty
// buffer kept for reuse is not nil once it has grown), so that decoding
// the same bytes always gives the same value.
func orNil[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

// readDest reads one destination record, [name, total, buckets,
// timed-out buckets, …], into d.dests, d.buckets, d.timedOut and d.spans.
func (d *Decoder) readDest(countsLen int) error {
	x, err := d.readRecord("destination", 3)
	if err != nil {
		return err
	}
	name, total, buckets, err := d.readDestBuckets(countsLen)
	if err != nil {
		return err
	}
	// The timed-out buckets, appended to the record by a minor revision: a
	// record without them is from a sender that does not send them.
	unknown := x == 0
	if !unknown {
		if err := d.readTimedOut(name, buckets); err != nil {
			return err
		}
		x--
	}
	d.dests = append(d.dests, tracker.DestCounts{Dest: name, Total: total, CensoringUnknown: unknown})
	d.spans = append(d.spans, destSpan{len(d.buckets), len(d.timedOut)})
	return d.finish(x)
}

// readDestBuckets reads the fields a destination record has had since the
// first version, name, total and [index, count, Δindex, count, …], and
// appends the buckets to d.buckets: a name not seen before in the batch,
// 1..countsLen buckets of strictly ascending indexes below countsLen with
// counts in [1, 2^32−1], summing to total. buckets is what it appended,
// valid until d.buckets grows again.
func (d *Decoder) readDestBuckets(countsLen int) (name string, total uint64, buckets []tracker.Bucket, err error) {
	if name, err = d.readName("destination name"); err != nil {
		return "", 0, nil, err
	}
	if _, dup := d.seen[name]; dup {
		return "", 0, nil, malformed("destination %q appears twice", name)
	}
	d.seen[name] = struct{}{}
	if total, err = d.readUint("destination total", math.MaxUint64); err != nil {
		return "", 0, nil, err
	}
	m, err := d.readArrayLen("buckets", math.MaxInt)
	if err != nil {
		return "", 0, nil, err
	}
	switch {
	case m == 0:
		return "", 0, nil, malformed("destination %q: no buckets", name)
	case m%2 != 0:
		return "", 0, nil, malformed("destination %q: odd bucket array of %d elements", name, m)
	case m/2 > countsLen:
		return "", 0, nil, malformed("destination %q: %d buckets, layout has %d", name, m/2, countsLen)
	}
	last := uint64(countsLen - 1)
	idx, err := d.readUint("bucket index", last)
	if err != nil {
		return "", 0, nil, err
	}
	start := len(d.buckets)
	var sum uint64
	for j := range m / 2 {
		if j > 0 {
			delta, err := d.readCount("bucket index delta", last-idx)
			if err != nil {
				return "", 0, nil, malformed("destination %q: bucket %d: index not ascending or beyond %d: %w", name, j, last, err)
			}
			idx += delta
		}
		c, err := d.readCount("bucket count", math.MaxUint32)
		if err != nil {
			return "", 0, nil, err
		}
		sum += c // at most 65536 · (2^32−1): cannot overflow
		d.buckets = append(d.buckets, tracker.Bucket{Index: uint16(idx), Count: uint32(c)})
	}
	if sum != total {
		return "", 0, nil, malformed("destination %q: total %d, buckets sum to %d", name, total, sum)
	}
	return name, total, d.buckets[start:], nil
}

// readTimedOut reads a destination's timed-out (index, count) pairs, coded
// as its buckets are, into d.timedOut: each index one of buckets' (so
// strictly ascending and in range), each count in [1, that bucket's count].
func (d *Decoder) readTimedOut(name string, buckets []tracker.Bucket) error {
	m, err := d.readArrayLen("timed-out buckets", math.MaxInt)
	if err != nil {
		return err
	}
	switch {
	case m%2 != 0:
		return malformed("destination %q: odd timed-out array of %d elements", name, m)
	case m/2 > len(buckets):
		return malformed("destination %q: %d timed-out buckets, %d buckets", name, m/2, len(buckets))
	case m == 0:
		return nil
	}
	last := uint64(buckets[len(buckets)-1].Index)
	idx, err := d.readUint("timed-out index", last)
	if err != nil {
		return err
	}
	for j := range m / 2 {
		if j > 0 {
			delta, err := d.readCount("timed-out index delta", last-idx)
			if err != nil {
				return malformed("destination %q: timed-out bucket %d: index not ascending or beyond its buckets: %w", name, j, err)
			}
			idx += delta
		}
		k := searchBucket(buckets, uint16(idx)) // < len(buckets): idx <= the last bucket's index
		if buckets[k].Index != uint16(idx) {
			return malformed("destination %q: timed-out index %d is not one of its buckets", name, idx)
		}
		buckets = buckets[k:] // the next index is above: search only the rest
		c, err := d.readCount("timed-out count", uint64(buckets[0].Count))
		if err != nil {
			return malformed("destination %q: timed-out bucket %d: more than the bucket's count or 0: %w", name, idx, err)
		}
		d.timedOut = append(d.timedOut, tracker.Bucket{Index: uint16(idx), Count: uint32(c)})
	}
	return nil
}

// readKeys reads the key groups of a digest or pull into d.keys.
func (d *Decoder) readKeys() ([]tracker.BatchKey, error) {
	n, err := d.readArrayLen("key groups", MaxKeyOrigins)
	if err != nil {
		return nil, err
	}
	keys := d.keys[:0]
	for g := range n {
		x, err := d.readRecord("key group", 4)
		if err != nil {
			return nil, err
		}
		var k tracker.BatchKey
		if k.Origin, err = d.readName("origin"); err != nil {
			return nil, err
		}
		if k.Boot, err = d.readUint("boot", math.MaxUint64); err != nil {
			return nil, err
		}
		if g > 0 {
			p := keys[len(keys)-1]
			if k.Origin < p.Origin || (k.Origin == p.Origin && k.Boot <= p.Boot) {
				return nil, malformed("key group %d (%q, %d) not after (%q, %d)", g, k.Origin, k.Boot, p.Origin, p.Boot)
			}
		}
		if k.Epoch, err = d.readInt("base epoch", math.MinInt64, math.MaxInt64); err != nil {
			return nil, err
		}
		m, err := d.readArrayLen("keys", math.MaxInt)
		if err != nil {
			return nil, err
		}
		switch {
		case m == 0:
			return nil, malformed("key group %d: no keys", g)
		case m%2 != 0:
			return nil, malformed("key group %d: odd key array of %d elements", g, m)
		case len(keys)+m/2 > MaxKeys:
			return nil, tooLarge("more than %d keys", MaxKeys)
		}
		for j := range m / 2 {
			delta, err := d.readUint("epoch delta", uint64(math.MaxInt64)-uint64(k.Epoch))
			if err != nil {
				return nil, err
			}
			part, err := d.readUint("part", math.MaxUint16)
			if err != nil {
				return nil, err
			}
			if j > 0 && delta == 0 && uint16(part) <= k.Part {
				return nil, malformed("key group %d: key %d not after the previous key", g, j)
			}
			k.Epoch = int64(uint64(k.Epoch) + delta)
			k.Part = uint16(part)
			keys = append(keys, k)
		}
		if err := d.finish(x); err != nil {
			return nil, err
		}
	}
	d.keys = keys
	return orNil(keys), nil
}

// decodeKeys decodes a digest or pull (of type t, the same fields).
func (d *Decoder) decodeKeys(msg []byte, t MessageType) (Digest, error) {
	extra, err := d.open(msg, t, 2)
	if err != nil {
		return Digest{}, err
	}
	sender, err := d.readName("sender")
	if err != nil {
		return Digest{}, err
	}
	keys, err := d.readKeys()
	if err != nil {
		return Digest{}, err
	}
	if err := d.closeMessage(extra); err != nil {
		return Digest{}, err
	}
	return Digest{Sender: sender, Keys: keys, SentAtMillis: d.sentAt}, nil
}

// DecodeDigest decodes and validates a digest message. Keys come out in
// canonical order and alias the Decoder's buffer (see Decoder). Errors
// wrap ErrTooLarge, ErrVersion, ErrType or ErrMalformed.
func (d *Decoder) DecodeDigest(msg []byte) (Digest, error) { return d.decodeKeys(msg, TypeDigest) }

// DecodePull decodes and validates a pull message, like DecodeDigest.
func (d *Decoder) DecodePull(msg []byte) (Pull, error) {
	p, err := d.decodeKeys(msg, TypePull)
	return Pull(p), err
}
