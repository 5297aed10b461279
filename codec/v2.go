package codec

import (
	"encoding/binary"
	"math"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// The message types of destination-owned aggregation (protocol v2). They
// are new types within Version 1, not a new version: a node that does not
// know them refuses them as ErrType (counted, dropped) and keeps decoding
// every v1 message, and a node sends them only once every member
// advertises protocol v2, so a rolling upgrade mixes the two safely.
const (
	// TypeRecords carries one origin's sealed records of one epoch for the
	// destinations a member owns, and the manifests of what the origin sent
	// that member for recent epochs.
	TypeRecords MessageType = 4
	// TypeAggregates carries aggregates: owners' merged fleet views, one
	// per destination and epoch.
	TypeAggregates MessageType = 5
	// TypeAggDigest summarises the aggregates a member holds, per epoch and
	// slice, for anti-entropy.
	TypeAggDigest MessageType = 6
	// TypeAggList lists the aggregates (destination, epoch, coverage) a
	// member holds in the slices a digest disagreed on.
	TypeAggList MessageType = 7
	// TypeAggPull asks for the aggregates of the listed destinations and
	// epochs.
	TypeAggPull MessageType = 8
	// TypeRecordPull asks an origin to send again its records of the
	// listed epochs for the destinations the sender owns.
	TypeRecordPull MessageType = 9
	// TypePackedAggregates carries aggregates as TypeAggregates does, with
	// each aggregate's buckets and censored counts packed densely as
	// uvarints in a bin (AppendPackedAggregates): about a third smaller. A node sends it
	// only while every member up advertises cluster Level4; an older node
	// refuses it as ErrType, as it would any type it does not know.
	TypePackedAggregates MessageType = 10
)

// lastType is the highest message type this release knows.
const lastType = TypePackedAggregates

// Caps of the v2 messages.
const (
	// MaxManifests is the most manifests one records message carries.
	MaxManifests = 256
	// MaxAggregates is the most aggregates one message carries.
	MaxAggregates = MaxDests
	// MaxDigestEpochs is the most epochs one aggregate digest summarises.
	MaxDigestEpochs = 16
	// MaxAggEntries is the most entries one aggregate list or pull holds.
	MaxAggEntries = 4 * MaxDests
	// MaxPullEpochs is the most epochs one record pull asks for.
	MaxPullEpochs = 256
)

// Records is one origin's sealed records of one epoch for some
// destinations (Batch: its key names origin, boot and epoch; Part only
// numbers the messages of one send) and the manifests of what the origin
// sent the receiver for recent epochs.
type Records struct {
	Batch     tracker.Batch
	Manifests []EpochManifest
	// SentAtMillis is the sender's clock in Unix milliseconds (sent_at), 0
	// for none, as in Digest.
	SentAtMillis int64
}

// EpochManifest is the manifest of one epoch's records an origin sent.
type EpochManifest struct {
	Epoch    int64
	Manifest tracker.Manifest
}

// Aggregates is a message of aggregates from Sender, all in Layout.
type Aggregates struct {
	Sender     string
	Layout     tracker.Layout
	Aggregates []tracker.Aggregate
	// SentAtMillis is the sender's clock in Unix milliseconds (sent_at), 0
	// for none, as in Digest.
	SentAtMillis int64
}

// AggDigest is a member's digest of the aggregates it holds.
type AggDigest struct {
	Sender string
	Epochs []tracker.AggregateDigest
	// SentAtMillis is the sender's clock in Unix milliseconds (sent_at), 0
	// for none, as in Digest.
	SentAtMillis int64
}

// AggEntries is an aggregate list (TypeAggList) or pull (TypeAggPull).
type AggEntries struct {
	Sender  string
	Entries []tracker.AggregateEntry
	// SentAtMillis is the sender's clock in Unix milliseconds (sent_at), 0
	// for none, as in Digest.
	SentAtMillis int64
}

// RecordPull asks for an origin's records of Epochs again.
type RecordPull struct {
	Sender string
	Epochs []int64
	// SentAtMillis is the sender's clock in Unix milliseconds (sent_at), 0
	// for none, as in Digest.
	SentAtMillis int64
}

// String names the v2 types; see MessageType.String.
func v2TypeName(t MessageType) string {
	switch t {
	case TypeRecords:
		return "records"
	case TypeAggregates:
		return "aggregates"
	case TypeAggDigest:
		return "agg_digest"
	case TypeAggList:
		return "agg_list"
	case TypeAggPull:
		return "agg_pull"
	case TypeRecordPull:
		return "record_pull"
	case TypePackedAggregates:
		return "packed_aggregates"
	}
	return ""
}

func appendManifests(b []byte, ms []EpochManifest) []byte {
	b = appendArrayLen(b, len(ms))
	for _, m := range ms {
		b = append(b, 0x93)
		b = appendInt(b, m.Epoch)
		b = appendUint(b, uint64(m.Manifest.Records))
		b = appendUint(b, m.Manifest.Hash)
	}
	return b
}

// AppendRecords appends r as a records message: a batch's fields, with
// type TypeRecords, then the manifests. The batch may have no
// destinations (a message carrying manifests only). Errors are
// AppendBatch's, and ErrTooLarge beyond MaxManifests.
func AppendRecords(dst []byte, r Records) ([]byte, error) {
	if len(r.Manifests) > MaxManifests {
		return dst, tooLarge("%d manifests, more than %d", len(r.Manifests), MaxManifests)
	}
	if err := checkSentAt(r.SentAtMillis); err != nil {
		return dst, err
	}
	start := len(dst)
	out, err := AppendBatch(dst, r.Batch)
	if err != nil {
		return dst, err
	}
	out[start] = messageHead(6, r.SentAtMillis)
	out[start+2] = byte(TypeRecords)
	out = appendManifests(out, r.Manifests)
	return endMessage(dst, out, r.SentAtMillis, "records")
}

// RecordsParts encodes r's batch in parts (as Encoder.BatchParts) and
// returns one records message per part, the manifests on the first, each
// of at most maxBytes (maxBytes <= 0 or above MaxMessageBytes means
// MaxMessageBytes) with its manifests and sent_at. Each message is a new
// slice. Manifests that leave no room for a destination in maxBytes are
// ErrTooLarge.
func (e *Encoder) RecordsParts(r Records, maxBytes int) ([][]byte, error) {
	if err := checkSentAt(r.SentAtMillis); err != nil {
		return nil, err
	}
	if len(r.Batch.Dests) == 0 {
		m, err := AppendRecords(nil, r)
		if err != nil {
			return nil, err
		}
		return [][]byte{m}, nil
	}
	if len(r.Manifests) > MaxManifests {
		return nil, tooLarge("%d manifests, more than %d", len(r.Manifests), MaxManifests)
	}
	if maxBytes <= 0 || maxBytes > MaxMessageBytes {
		maxBytes = MaxMessageBytes
	}
	// What the first message adds to its batch part: the manifests, as
	// written, and sent_at (the type and the array header keep their size).
	room := maxBytes - len(appendManifests(nil, r.Manifests)) - sentAtLen(r.SentAtMillis)
	if room <= 0 {
		return nil, tooLarge("%d manifests and sent_at leave no room in %d bytes", len(r.Manifests), maxBytes)
	}
	parts, err := e.BatchParts(r.Batch, room)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(parts))
	for i, p := range parts {
		msg := make([]byte, len(p), len(p)+20+30*len(r.Manifests))
		copy(msg, p)
		msg[0] = messageHead(6, r.SentAtMillis)
		msg[2] = byte(TypeRecords)
		var ms []EpochManifest
		if i == 0 {
			ms = r.Manifests
		}
		out[i] = appendSentAt(appendManifests(msg, ms), r.SentAtMillis)
	}
	return out, nil
}

func checkAggregate(a *tracker.Aggregate, countsLen int) error {
	if err := checkName("aggregate destination", a.Dest); err != nil {
		return err
	}
	d := tracker.DestCounts{Dest: a.Dest, Total: a.Total, Buckets: a.Buckets}
	if len(a.Buckets) > 0 || a.Total > 0 {
		if err := checkDest(&d, countsLen); err != nil {
			return err
		}
	}
	if err := checkAggTimedOut(a.Dest, a.TimedOut, a.Buckets); err != nil {
		return err
	}
	if a.Peers < 0 || a.Peers > math.MaxUint32 {
		return malformed("aggregate %q: %d peers", a.Dest, a.Peers)
	}
	if a.Newest > a.Epoch {
		return malformed("aggregate %q: newest epoch %d after its epoch %d", a.Dest, a.Newest, a.Epoch)
	}
	if age := uint64(a.Epoch) - uint64(a.Newest); age > math.MaxUint32 { // written as this distance, read up to 2^32−1
		return malformed("aggregate %q: newest epoch %d is %d epochs before its epoch %d, more than %d", a.Dest, a.Newest, age, a.Epoch, uint64(math.MaxUint32))
	}
	return nil
}

// checkAggTimedOut reports whether censored counts to are ascending, each at
// an index of bs and at most its count.
func checkAggTimedOut(dest string, to, bs []tracker.Bucket) error {
	k, last := 0, -1
	for _, c := range to {
		if int(c.Index) <= last || c.Count == 0 {
			return malformed("%q: censored counts not ascending or zero", dest)
		}
		last = int(c.Index)
		for k < len(bs) && bs[k].Index < c.Index {
			k++
		}
		if k == len(bs) || bs[k].Index != c.Index || c.Count > bs[k].Count {
			return malformed("%q: censored count at %d not within the buckets", dest, c.Index)
		}
	}
	return nil
}

// AppendAggregates appends m as an aggregates message:
//
//	aggregates = [1, 5, layout, sender, [agg, …]]
//	agg = [dest, epoch, total, [index₀, count₀, Δ₁, count₁, …], [censored pairs],
//	       flags, peers, square sum hi, square sum lo, epoch − newest, coverage records, coverage hash]
//
// flags bit 0 is CensoringUnknown. Errors wrap ErrLayout, ErrMalformed or
// ErrTooLarge (over MaxAggregates or MaxMessageBytes).
func AppendAggregates(dst []byte, m Aggregates) ([]byte, error) {
	return appendAggregates(dst, m, TypeAggregates)
}

// AppendPackedAggregates appends m as a packed aggregates message: as
// AppendAggregates, with type TypePackedAggregates and each pair list a
// msgpack bin of uvarints, dense, instead of an array of (Δindex, count)
// pairs:
//
//	packed_aggregates = [1, 10, layout, sender, [agg, …]]
//	agg = [dest, epoch, total, bin(dense buckets), bin(dense censored),
//	       flags, peers, square sum hi, square sum lo, epoch − newest, coverage records, coverage hash]
//	dense = uvarint index₀, then per index up to the last bucket's: count (>= 1),
//	        or 0 and the number (>= 1) of empty indexes that follow
//
// A bucket next to the previous one with a count below 128 takes one
// byte (a pair takes two), one below 2¹⁴ two (a pair three), so a typical
// aggregate is about a quarter smaller with the same content. Errors are
// AppendAggregates'.
func AppendPackedAggregates(dst []byte, m Aggregates) ([]byte, error) {
	return appendAggregates(dst, m, TypePackedAggregates)
}

func appendAggregates(dst []byte, m Aggregates, t MessageType) ([]byte, error) {
	if err := m.Layout.Validate(); err != nil {
		return dst, layoutErr(err)
	}
	if err := checkName("sender", m.Sender); err != nil {
		return dst, err
	}
	if len(m.Aggregates) > MaxAggregates {
		return dst, tooLarge("%d aggregates, more than %d", len(m.Aggregates), MaxAggregates)
	}
	countsLen := m.Layout.CountsLen()
	for i := range m.Aggregates {
		if a := &m.Aggregates[i]; a.Layout != m.Layout {
			return dst, layoutErr(nil)
		} else if err := checkAggregate(a, countsLen); err != nil {
			return dst, err
		}
	}
	if err := checkSentAt(m.SentAtMillis); err != nil {
		return dst, err
	}
	pairs := appendPairs
	if t == TypePackedAggregates {
		pairs = appendPackedPairs
	}
	out := append(dst, messageHead(5, m.SentAtMillis), Version, byte(t), 0x93)
	out = appendInt(out, m.Layout.Lowest)
	out = appendInt(out, m.Layout.Highest)
	out = appendInt(out, int64(m.Layout.SignificantDigits))
	out = appendStr(out, m.Sender)
	out = appendArrayLen(out, len(m.Aggregates))
	for i := range m.Aggregates {
		a := &m.Aggregates[i]
		out = append(out, 0x9c)
		out = appendStr(out, a.Dest)
		out = appendInt(out, a.Epoch)
		out = appendUint(out, a.Total)
		out = pairs(out, a.Buckets)
		out = pairs(out, a.TimedOut)
		var flags uint64
		if a.CensoringUnknown {
			flags = 1
		}
		out = appendUint(out, flags)
		out = appendUint(out, uint64(a.Peers))
		out = appendUint(out, a.SquareSum[0])
		out = appendUint(out, a.SquareSum[1])
		out = appendUint(out, uint64(a.Epoch)-uint64(a.Newest))
		out = appendUint(out, uint64(a.Coverage.Records))
		out = appendUint(out, a.Coverage.Hash)
	}
	return endMessage(dst, out, m.SentAtMillis, t)
}

// appendPackedPairs writes bs (checked: ascending, counts > 0) as a msgpack
// bin of uvarints, dense: the first index, then for each index from it to
// the last bucket's either the bucket's count (>= 1), or a 0 and how many
// indexes (>= 1) in a row hold no bucket. A histogram's buckets are mostly
// adjacent with counts below 128, so a bucket takes about one byte instead
// of a pair's two.
func appendPackedPairs(b []byte, bs []tracker.Bucket) []byte {
	n := 0
	if len(bs) > 0 {
		next := int(bs[0].Index)
		n = uvarintLen(uint64(next))
		for _, bk := range bs {
			if gap := int(bk.Index) - next; gap > 0 {
				n += 1 + uvarintLen(uint64(gap))
			}
			n += uvarintLen(uint64(bk.Count))
			next = int(bk.Index) + 1
		}
	}
	switch {
	case n <= math.MaxUint8:
		b = append(b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		b = append(b, 0xc5, byte(n>>8), byte(n))
	default:
		b = append(b, 0xc6, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	if len(bs) == 0 {
		return b
	}
	next := int(bs[0].Index)
	b = binary.AppendUvarint(b, uint64(next))
	for _, bk := range bs {
		if gap := int(bk.Index) - next; gap > 0 {
			b = binary.AppendUvarint(append(b, 0), uint64(gap))
		}
		b = binary.AppendUvarint(b, uint64(bk.Count))
		next = int(bk.Index) + 1
	}
	return b
}

// uvarintLen is the length of v as a uvarint.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// AppendAggDigest appends d as an aggregate digest:
//
//	agg_digest = [1, 6, sender, [[epoch, [count₀, hash₀, …, count₁₅, hash₁₅]], …]]
//
// at most MaxDigestEpochs epochs, strictly ascending.
func AppendAggDigest(dst []byte, d AggDigest) ([]byte, error) {
	out, err := appendListHead(dst, TypeAggDigest, d.Sender, d.SentAtMillis, "digest epochs", len(d.Epochs), MaxDigestEpochs)
	if err != nil {
		return dst, err
	}
	for i, g := range d.Epochs {
		if i > 0 && g.Epoch <= d.Epochs[i-1].Epoch {
			return dst, malformed("digest epochs not ascending")
		}
		out = append(out, 0x92)
		out = appendInt(out, g.Epoch)
		out = appendArrayLen(out, 2*tracker.AggregateSlices)
		for _, s := range g.Slices {
			out = appendUint(out, uint64(s.Count))
			out = appendUint(out, s.Hash)
		}
	}
	return appendSentAt(out, d.SentAtMillis), nil
}

// AppendAggEntries appends e as an aggregate list (t = TypeAggList) or
// pull (t = TypeAggPull):
//
//	agg_list = [1, 7, sender, [[dest, epoch, coverage records, coverage hash], …]]
//	agg_pull = [1, 8, sender, [[dest, epoch, coverage records, coverage hash], …]]
//
// at most MaxAggEntries entries (a pull's coverage is what the puller
// holds, zero for none).
func AppendAggEntries(dst []byte, t MessageType, e AggEntries) ([]byte, error) {
	if t != TypeAggList && t != TypeAggPull {
		return dst, typeErr(t)
	}
	out, err := appendListHead(dst, t, e.Sender, e.SentAtMillis, "entries", len(e.Entries), MaxAggEntries)
	if err != nil {
		return dst, err
	}
	for _, x := range e.Entries {
		if err := checkName("entry destination", x.Dest); err != nil {
			return dst, err
		}
		out = append(out, 0x94)
		out = appendStr(out, x.Dest)
		out = appendInt(out, x.Epoch)
		out = appendUint(out, uint64(x.Coverage.Records))
		out = appendUint(out, x.Coverage.Hash)
	}
	return endMessage(dst, out, e.SentAtMillis, t)
}

// AppendRecordPull appends p as a record pull:
//
//	record_pull = [1, 9, sender, [epoch, …]]
//
// at most MaxPullEpochs epochs.
func AppendRecordPull(dst []byte, p RecordPull) ([]byte, error) {
	out, err := appendListHead(dst, TypeRecordPull, p.Sender, p.SentAtMillis, "epochs", len(p.Epochs), MaxPullEpochs)
	if err != nil {
		return dst, err
	}
	for _, e := range p.Epochs {
		out = appendInt(out, e)
	}
	return appendSentAt(out, p.SentAtMillis), nil
}

// appendListHead checks and appends the head of a message of type t whose
// known fields are the sender's name and an array of n elements (what) of
// at most limit, the encoding side of decodeList:
//
//	[1, t, sender, [n elements…] (appended by the caller), sent_at?]
func appendListHead(dst []byte, t MessageType, sender string, sentAtMillis int64, what string, n, limit int) ([]byte, error) {
	if err := checkName("sender", sender); err != nil {
		return dst, err
	}
	if n > limit {
		return dst, tooLarge("%d %s, more than %d", n, what, limit)
	}
	if err := checkSentAt(sentAtMillis); err != nil {
		return dst, err
	}
	out := append(dst, messageHead(4, sentAtMillis), Version, byte(t))
	out = appendStr(out, sender)
	return appendArrayLen(out, n), nil
}
