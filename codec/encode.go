package codec

import (
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"unicode/utf8"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// The encoder writes msgpack by hand with append, byte for byte what
// msgpack/v5's Encoder writes with UseCompactInts(true) (a test checks),
// because it is several times faster and never allocates into a reused
// buffer. Only decoding must go through msgpack/v5's streaming primitives.

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= math.MaxInt8:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return append(b, 0xcd, byte(v>>8), byte(v))
	case v <= math.MaxUint32:
		return append(b, 0xce, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return append(b, 0xcf, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32),
		byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

func appendInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(v))
	case v >= math.MinInt16:
		return append(b, 0xd1, byte(v>>8), byte(v))
	case v >= math.MinInt32:
		return append(b, 0xd2, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return append(b, 0xd3, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32),
		byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// appendStr writes s as a msgpack str; callers have checked len(s) <= MaxNameBytes.
func appendStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	default:
		b = append(b, 0xda, byte(n>>8), byte(n))
	}
	return append(b, s...)
}

func appendArrayLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return append(b, 0xdc, byte(n>>8), byte(n))
	}
	return append(b, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

func checkName(what, s string) error {
	switch {
	case s == "":
		return malformed("%s: empty name", what)
	case len(s) > MaxNameBytes:
		return tooLarge("%s: name of %d bytes, more than %d", what, len(s), MaxNameBytes)
	case !utf8.ValidString(s):
		return malformed("%s: name %q is not valid UTF-8", what, s)
	}
	return nil
}

// checkDest reports whether d obeys the decoder's rules for a layout with
// countsLen counts (appendDest checks the same while it writes d).
func checkDest(d *tracker.DestCounts, countsLen int) error {
	if err := checkDestHead(d); err != nil {
		return err
	}
	var sum uint64
	prev := -1
	for _, bk := range d.Buckets {
		if int(bk.Index) <= prev || bk.Count == 0 {
			return bucketError(d, countsLen)
		}
		prev = int(bk.Index)
		sum += uint64(bk.Count) // at most 65536 · (2^32−1): cannot overflow
	}
	return checkDestTail(d, countsLen, prev, sum)
}

// checkDestHead checks d's name and that it has buckets.
func checkDestHead(d *tracker.DestCounts) error {
	if err := checkName("destination", d.Dest); err != nil {
		return err
	}
	if len(d.Buckets) == 0 {
		return malformed("destination %q: no buckets", d.Dest)
	}
	return nil
}

// checkDestTail finishes the checks of d once a loop over its buckets
// found their indices ascending and their counts above 0: the last (the
// largest) index in range, the counts summing to Total, and the timed-out
// buckets.
func checkDestTail(d *tracker.DestCounts, countsLen, last int, sum uint64) error {
	if last >= countsLen {
		return bucketError(d, countsLen)
	}
	if sum != d.Total {
		return malformed("destination %q: total %d, buckets sum to %d", d.Dest, d.Total, sum)
	}
	return checkTimedOut(d)
}

// bucketError returns the error of the first of d's buckets that breaks a
// rule: not ascending, out of range, or a count of 0. The checking loops
// test the cheaper conditions and call it once they know one failed.
func bucketError(d *tracker.DestCounts, countsLen int) error {
	prev := -1
	for _, bk := range d.Buckets {
		switch {
		case int(bk.Index) <= prev:
			return malformed("destination %q: bucket index %d after %d, not ascending", d.Dest, bk.Index, prev)
		case int(bk.Index) >= countsLen:
			return malformed("destination %q: bucket index %d out of range [0, %d)", d.Dest, bk.Index, countsLen)
		case bk.Count == 0:
			return malformed("destination %q: bucket %d has count 0", d.Dest, bk.Index)
		}
		prev = int(bk.Index)
	}
	panic("codec: bucketError of valid buckets")
}

// checkTimedOut reports whether d's timed-out buckets obey the decoder's
// rules: none when censoring is unknown, else strictly ascending, each at
// the index of one of d's buckets with a count in [1, that bucket's].
func checkTimedOut(d *tracker.DestCounts) error {
	if len(d.TimedOut) == 0 {
		return nil
	}
	if d.CensoringUnknown {
		return malformed("destination %q: %d timed-out buckets with censoring unknown", d.Dest, len(d.TimedOut))
	}
	bs, prev := d.Buckets, -1
	for _, c := range d.TimedOut {
		if int(c.Index) <= prev {
			return malformed("destination %q: timed-out index %d after %d, not ascending", d.Dest, c.Index, prev)
		}
		prev = int(c.Index)
		k := searchBucket(bs, c.Index)
		switch {
		case k == len(bs) || bs[k].Index != c.Index:
			return malformed("destination %q: timed-out index %d is not one of its buckets", d.Dest, c.Index)
		case c.Count == 0 || c.Count > bs[k].Count:
			return malformed("destination %q: timed-out bucket %d has count %d, want [1, %d]", d.Dest, c.Index, c.Count, bs[k].Count)
		}
		bs = bs[k+1:] // the next timed-out index is above this one
	}
	return nil
}

// searchBucket returns the position of the first of bs (ascending by
// Index) whose Index is at least i, len(bs) when there is none: a binary
// search, because timed-out buckets are few and sit in the tail of a
// destination's.
func searchBucket(bs []tracker.Bucket, i uint16) int {
	lo, hi := 0, len(bs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if bs[m].Index < i {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// checkBatchHead validates b's layout and origin and returns the layout's
// number of counts.
func checkBatchHead(b *tracker.Batch) (int, error) {
	if err := b.Layout.Validate(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrLayout, err)
	}
	if err := checkName("origin", b.Key.Origin); err != nil {
		return 0, err
	}
	return b.Layout.CountsLen(), nil
}

// messageHead is the array header of a message of n known fields (version
// and type included), one more when it carries sent_at.
func messageHead(n int, sentAtMillis int64) byte {
	if sentAtMillis > 0 {
		n++
	}
	return 0x90 | byte(n)
}

// appendSentAt writes the sent_at field when there is one.
func appendSentAt(b []byte, sentAtMillis int64) []byte {
	if sentAtMillis > 0 {
		return appendInt(b, sentAtMillis)
	}
	return b
}

// sentAtLen is the number of bytes appendSentAt writes.
func sentAtLen(sentAtMillis int64) int {
	var tmp [9]byte
	return len(appendSentAt(tmp[:0], sentAtMillis))
}

// endMessage ends the message out, begun at the end of dst, with sent_at
// (appendSentAt) and returns it, or dst and ErrTooLarge when it exceeds
// MaxMessageBytes; what names the message in the error.
func endMessage(dst, out []byte, sentAtMillis int64, what any) ([]byte, error) {
	out = appendSentAt(out, sentAtMillis)
	if n := len(out) - len(dst); n > MaxMessageBytes {
		return dst, tooLarge("%s of %d bytes, more than %d", what, n, MaxMessageBytes)
	}
	return out, nil
}

func checkSentAt(sentAtMillis int64) error {
	if sentAtMillis < 0 {
		return malformed("sent_at %d is negative", sentAtMillis)
	}
	return nil
}

func appendBatchHead(b []byte, bt *tracker.Batch, part uint16, sentAtMillis int64) []byte {
	b = append(b, messageHead(5, sentAtMillis), Version, byte(TypeBatch), 0x93)
	b = appendInt(b, bt.Layout.Lowest)
	b = appendInt(b, bt.Layout.Highest)
	b = appendInt(b, int64(bt.Layout.SignificantDigits))
	b = append(b, 0x94)
	b = appendStr(b, bt.Key.Origin)
	b = appendUint(b, bt.Key.Boot)
	b = appendInt(b, bt.Key.Epoch)
	return appendUint(b, uint64(part))
}

// appendDest checks d as checkDest does and writes its record in the
// same pass over its buckets: [name, total, [pairs…], [timed-out
// pairs…]], or without the timed-out pairs when d's censoring is unknown
// (a record decoded from an older sender, forwarded as it came). On an
// error it returns b unchanged (its spare capacity written).
func appendDest(b []byte, d *tracker.DestCounts, countsLen int) ([]byte, error) {
	if err := checkDestHead(d); err != nil {
		return b, err
	}
	out := b
	if d.CensoringUnknown {
		out = append(out, 0x93)
	} else {
		out = append(out, 0x94)
	}
	out = appendStr(out, d.Dest)
	out = appendUint(out, d.Total)

	// The pairs, checked as checkDest checks them.
	out, w := growPairs(out, len(d.Buckets))
	w, sum, last, ok := putPairs(out, w, d.Buckets)
	if !ok {
		return b, bucketError(d, countsLen)
	}
	if err := checkDestTail(d, countsLen, last, sum); err != nil {
		return b, err
	}
	out = out[:w]

	switch {
	case d.CensoringUnknown:
	case len(d.TimedOut) == 0: // the common case: nothing timed out
		out = append(out, 0x90)
	default:
		out = appendPairs(out, d.TimedOut)
	}
	return out, nil
}

// appendPairs writes bs, checked before (ascending indices, counts above
// 0), as an array of delta-coded (index, count) pairs.
func appendPairs(b []byte, bs []tracker.Bucket) []byte {
	b, w := growPairs(b, len(bs))
	w, _, _, ok := putPairs(b, w, bs)
	if !ok {
		panic("codec: appendPairs of unchecked buckets")
	}
	return b[:w]
}

// growPairs writes the array header of n pairs and returns b extended by
// room for n of the largest pairs (uint16 delta, uint32 count), with the
// position of the first. putPairs writes them by index, not by append: an
// append per pair keeps a growth path, and the registers it spills, inside
// the loop. Cut b to the position putPairs returns.
func growPairs(b []byte, n int) ([]byte, int) {
	b = appendArrayLen(b, 2*n)
	w := len(b)
	b = slices.Grow(b, 14*n)
	return b[:w+14*n], w
}

// putPairs writes bs as delta-coded pairs at b[w:] (room made by
// growPairs) and returns the position after them, the sum of their counts
// and the last index; ok is false, and the rest unset, as soon as an index
// does not ascend or a count is 0. A leaf of its own, so the loop keeps its
// state in registers (the encoder's hottest loop).
func putPairs(b []byte, w int, bs []tracker.Bucket) (end int, sum uint64, last int, ok bool) {
	last = -1
	for _, bk := range bs {
		if int(bk.Index) <= last || bk.Count == 0 {
			return 0, 0, 0, false
		}
		delta := bk.Index - uint16(max(last, 0)) // the first index is absolute
		last = int(bk.Index)
		sum += uint64(bk.Count)                                // at most 65536 · (2^32−1): cannot overflow
		if delta <= math.MaxInt8 && bk.Count <= math.MaxInt8 { // the common case: two fixints
			b[w], b[w+1] = byte(delta), byte(bk.Count)
			w += 2
			continue
		}
		w = len(appendUint(b[:w], uint64(delta)))
		w = len(appendUint(b[:w], uint64(bk.Count)))
	}
	return w, sum, last, true
}

// AppendBatch appends b, encoded as one batch message with b.Key as is and
// no sent_at, to dst and returns the extended slice: AppendBatchAt with
// sentAtMillis 0. Every destination carries its TimedOut pairs (an empty
// list when nothing timed out), except one with CensoringUnknown, written
// without them, as an older sender wrote it. It validates b first, with
// the rules the Decoder enforces (TimedOut a subset of Buckets, as
// tracker.DestCounts documents, and empty when CensoringUnknown): an error
// wraps ErrLayout, ErrMalformed, or ErrTooLarge when b has more than
// MaxDests destinations or does not fit MaxMessageBytes (use
// Encoder.BatchParts for those), and dst is returned unchanged.
func AppendBatch(dst []byte, b tracker.Batch) ([]byte, error) { return AppendBatchAt(dst, b, 0) }

// AppendBatchAt is AppendBatch with sent_at: the sender's wall clock in
// Unix milliseconds, written when sentAtMillis > 0 (0 writes none; a
// negative value is ErrMalformed). Only a batch's origin writes it (see
// "Messages" in the package documentation): a member forwarding another
// origin's batch passes 0.
func AppendBatchAt(dst []byte, b tracker.Batch, sentAtMillis int64) ([]byte, error) {
	countsLen, err := checkBatchHead(&b)
	if err != nil {
		return dst, err
	}
	if err := checkSentAt(sentAtMillis); err != nil {
		return dst, err
	}
	if len(b.Dests) > MaxDests {
		return dst, tooLarge("%d destinations, more than %d", len(b.Dests), MaxDests)
	}
	out := appendBatchHead(dst, &b, b.Key.Part, sentAtMillis)
	out = appendArrayLen(out, len(b.Dests))
	for i := range b.Dests {
		if out, err = appendDest(out, &b.Dests[i], countsLen); err != nil {
			return dst, err
		}
	}
	if err := checkDistinct(b.Dests); err != nil { // after every destination's own errors
		return dst, err
	}
	return endMessage(dst, out, sentAtMillis, "batch")
}

// nameSeed keys the hash of checkDistinct; set once, never changed.
var nameSeed = maphash.MakeSeed()

// checkDistinct refuses duplicate destination names without allocating:
// an open-addressing table of indices on the stack (len(dests) <= MaxDests).
func checkDistinct(dests []tracker.DestCounts) error {
	if len(dests) <= 16 {
		for i := range dests {
			for j := range i {
				if dests[i].Dest == dests[j].Dest {
					return malformed("destination %q appears twice", dests[i].Dest)
				}
			}
		}
		return nil
	}
	var table [2 * MaxDests]uint16 // index+1 of a destination, 0 when empty
	size := 32
	for size < 2*len(dests) {
		size *= 2
	}
	slots := table[:size]
	mask := uint64(size - 1)
	for i := range dests {
		name := dests[i].Dest
		for h := maphash.String(nameSeed, name) & mask; ; h = (h + 1) & mask {
			j := slots[h]
			if j == 0 {
				slots[h] = uint16(i + 1)
				break
			}
			if dests[j-1].Dest == name {
				return malformed("destination %q appears twice", name)
			}
		}
	}
	return nil
}

// Encoder encodes batches split into parts, reusing its buffers: the
// zero value is ready to use. Not safe for concurrent use.
type Encoder struct {
	buf   []byte
	tmp   []byte
	ends  []int
	parts [][]byte
	seen  map[string]struct{}

	// The part being written: where it starts in buf, where its
	// destination array header is, and how many destinations it holds.
	start, hdr, count int
	// sentAt is the sent_at of every part, 0 for none; tail is its size.
	sentAt int64
	tail   int
}

// distinct refuses duplicate names in dests, of any length.
func (e *Encoder) distinct(dests []tracker.DestCounts) error {
	if len(dests) <= MaxDests {
		return checkDistinct(dests)
	}
	if e.seen == nil {
		e.seen = make(map[string]struct{}, len(dests))
	}
	clear(e.seen)
	for i := range dests {
		if _, dup := e.seen[dests[i].Dest]; dup {
			return malformed("destination %q appears twice", dests[i].Dest)
		}
		e.seen[dests[i].Dest] = struct{}{}
	}
	return nil
}

// begin starts part number part of b.
func (e *Encoder) begin(b *tracker.Batch, part int) {
	e.start, e.count = len(e.buf), 0
	e.buf = appendBatchHead(e.buf, b, uint16(part), e.sentAt)
	e.hdr = len(e.buf)
	e.buf = append(e.buf, 0xdc, 0, 0) // array16 placeholder, shrunk by finish when count < 16
}

// finish writes the destination count of the current part and ends it.
func (e *Encoder) finish() {
	if e.count < 16 {
		e.buf[e.hdr] = 0x90 | byte(e.count)
		e.buf = append(e.buf[:e.hdr+1], e.buf[e.hdr+3:]...)
	} else {
		e.buf[e.hdr+1], e.buf[e.hdr+2] = byte(e.count>>8), byte(e.count)
	}
	e.buf = appendSentAt(e.buf, e.sentAt)
	e.ends = append(e.ends, len(e.buf))
}

// BatchParts encodes b as one or more batch messages, splitting its
// destinations, in order, into parts of at most MaxDests destinations and
// at most maxBytes bytes each (maxBytes <= 0 or above MaxMessageBytes means
// MaxMessageBytes). Part i carries Key.Part = i; b.Key.Part is ignored. The
// split is greedy and deterministic, so encoding the same batch with the
// same maxBytes gives the same parts and keys. The parts carry no sent_at:
// BatchParts is BatchPartsAt with sentAtMillis 0.
//
// The returned slices alias the Encoder's buffer and are valid until its
// next call; copy them to keep them. Errors are those of AppendBatch, and
// ErrTooLarge when one destination alone exceeds maxBytes or more than
// 65536 parts would be needed.
func (e *Encoder) BatchParts(b tracker.Batch, maxBytes int) ([][]byte, error) {
	return e.BatchPartsAt(b, maxBytes, 0)
}

// BatchPartsAt is BatchParts with sent_at in every part (AppendBatchAt):
// the origin's wall clock in Unix milliseconds when sentAtMillis > 0. The
// parts are split as BatchParts splits them, sent_at counted in maxBytes.
func (e *Encoder) BatchPartsAt(b tracker.Batch, maxBytes int, sentAtMillis int64) ([][]byte, error) {
	if maxBytes <= 0 || maxBytes > MaxMessageBytes {
		maxBytes = MaxMessageBytes
	}
	countsLen, err := checkBatchHead(&b)
	if err != nil {
		return nil, err
	}
	if err := checkSentAt(sentAtMillis); err != nil {
		return nil, err
	}
	e.sentAt, e.tail = sentAtMillis, sentAtLen(sentAtMillis)
	if err := e.distinct(b.Dests); err != nil { // across all parts
		return nil, err
	}
	e.buf, e.ends = e.buf[:0], e.ends[:0]
	part := 0
	e.begin(&b, part)
	for i := range b.Dests {
		d := &b.Dests[i]
		mark := len(e.buf)
		if e.buf, err = appendDest(e.buf, d, countsLen); err != nil {
			return nil, err
		}
		if e.count > 0 && (e.count == MaxDests || len(e.buf)-e.start+e.tail > maxBytes) {
			// Move this destination to a new part.
			e.tmp = append(e.tmp[:0], e.buf[mark:]...)
			e.buf = e.buf[:mark]
			e.finish()
			if part++; part > math.MaxUint16 {
				return nil, tooLarge("batch needs more than %d parts", math.MaxUint16+1)
			}
			e.begin(&b, part)
			e.buf = append(e.buf, e.tmp...)
		}
		if len(e.buf)-e.start+e.tail > maxBytes {
			return nil, tooLarge("destination %q alone needs %d bytes, more than %d", d.Dest, len(e.buf)-e.start+e.tail, maxBytes)
		}
		e.count++
	}
	e.finish()
	e.parts = e.parts[:0]
	prev := 0
	for _, end := range e.ends {
		e.parts = append(e.parts, e.buf[prev:end:end])
		prev = end
	}
	return e.parts, nil
}

// checkKeys validates keys (canonical order, names, caps) and returns the
// number of (origin, boot) groups.
func checkKeys(keys []tracker.BatchKey) (int, error) {
	if len(keys) > MaxKeys {
		return 0, tooLarge("%d keys, more than %d", len(keys), MaxKeys)
	}
	groups := 0
	for i := range keys {
		k := &keys[i]
		if i > 0 && CompareKeys(keys[i-1], *k) >= 0 {
			return 0, malformed("key %d (%+v) not after key %d (%+v): use SortKeys", i, *k, i-1, keys[i-1])
		}
		if i == 0 || k.Origin != keys[i-1].Origin || k.Boot != keys[i-1].Boot {
			if err := checkName("origin", k.Origin); err != nil {
				return 0, err
			}
			groups++
		}
	}
	if groups > MaxKeyOrigins {
		return 0, tooLarge("%d origins, more than %d", groups, MaxKeyOrigins)
	}
	return groups, nil
}

func appendKeys(b []byte, sender string, keys []tracker.BatchKey, t MessageType, sentAtMillis int64) ([]byte, error) {
	if err := checkName("sender", sender); err != nil {
		return b, err
	}
	if err := checkSentAt(sentAtMillis); err != nil {
		return b, err
	}
	groups, err := checkKeys(keys)
	if err != nil {
		return b, err
	}
	out := append(b, messageHead(4, sentAtMillis), Version, byte(t))
	out = appendStr(out, sender)
	out = appendArrayLen(out, groups)
	for i := 0; i < len(keys); {
		j := i + 1
		for j < len(keys) && keys[j].Origin == keys[i].Origin && keys[j].Boot == keys[i].Boot {
			j++
		}
		out = append(out, 0x94)
		out = appendStr(out, keys[i].Origin)
		out = appendUint(out, keys[i].Boot)
		out = appendInt(out, keys[i].Epoch)
		out = appendArrayLen(out, 2*(j-i))
		prev := keys[i].Epoch
		for _, k := range keys[i:j] {
			out = appendUint(out, uint64(k.Epoch)-uint64(prev)) // ascending, so the wrap-free difference
			out = appendUint(out, uint64(k.Part))
			prev = k.Epoch
		}
		i = j
	}
	return endMessage(b, out, sentAtMillis, t)
}

// AppendDigest appends d, encoded as a digest message, to dst, with sent_at
// when d.SentAtMillis > 0. d.Keys must be in canonical order (SortKeys).
// Errors wrap ErrMalformed (a negative SentAtMillis among them) or
// ErrTooLarge (more than MaxKeys keys or MaxKeyOrigins origins, or over
// MaxMessageBytes), and then dst is returned unchanged.
func AppendDigest(dst []byte, d Digest) ([]byte, error) {
	return appendKeys(dst, d.Sender, d.Keys, TypeDigest, d.SentAtMillis)
}

// AppendPull appends p, encoded as a pull message, to dst, with the rules
// and errors of AppendDigest.
func AppendPull(dst []byte, p Pull) ([]byte, error) {
	return appendKeys(dst, p.Sender, p.Keys, TypePull, p.SentAtMillis)
}
