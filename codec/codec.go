package codec

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// Version is the protocol version this package writes and the only one it
// reads. It is the first element of every message.
const Version = 1

// Caps on what one message may declare. A decoder refuses anything larger
// with ErrTooLarge before allocating for it; an encoder refuses to write it.
const (
	// MaxMessageBytes is the largest message, in bytes (1 MiB).
	MaxMessageBytes = 1 << 20
	// MaxDests is the largest number of destinations in one batch message.
	// Encoder.BatchParts splits a larger batch into parts.
	MaxDests = 4096
	// MaxNameBytes is the longest destination, origin or sender name, in
	// bytes of UTF-8: the tracker's limit (tracker.MaxNameBytes).
	MaxNameBytes = tracker.MaxNameBytes
	// MaxKeyOrigins is the largest number of (origin, boot) groups in one
	// digest or pull: a cluster of a thousand members, each remembered
	// across a few restarts, fits.
	MaxKeyOrigins = 4096
	// MaxKeys is the largest number of batch keys in one digest or pull:
	// 4096 origins holding 16 sub-windows each.
	MaxKeys = 1 << 16
	// MaxExtraFields is the largest number of unknown fields a record may
	// carry after its known ones (see "Versions and extensions" in the
	// package documentation).
	MaxExtraFields = 16
	// maxSkipDepth bounds the nesting of a skipped unknown field, so a
	// hostile [[[[…]]]] cannot recurse deeply.
	maxSkipDepth = 8
)

// Errors returned by decoders, always wrapped with detail: test with
// errors.Is. Every error a decoder returns wraps exactly one of them.
var (
	// ErrVersion reports a message of a protocol version other than Version.
	ErrVersion = errors.New("codec: unsupported protocol version")
	// ErrType reports an unknown message type, or a message of another type
	// than the decoder method called.
	ErrType = errors.New("codec: unexpected message type")
	// ErrLayout reports a batch whose histogram layout tracker does not
	// support, or one other than the layout the Decoder expects. When the
	// layout is unsupported the error also wraps tracker.ErrLayout.
	ErrLayout = errors.New("codec: histogram layout refused")
	// ErrTooLarge reports a message, or a count or length declared in it,
	// above one of the caps (MaxMessageBytes, MaxDests, MaxNameBytes,
	// MaxKeyOrigins, MaxKeys). Encoders return it too.
	ErrTooLarge = errors.New("codec: message too large")
	// ErrMalformed reports bytes that are not a well-formed message of this
	// version: wrong msgpack types, truncation, trailing bytes, lengths that
	// exceed the bytes present, out-of-range or unordered values,
	// inconsistent totals, duplicate names. Encoders return it for a value
	// that breaks the same rules, so they never write what a peer refuses.
	ErrMalformed = errors.New("codec: malformed message")
)

// MessageType is the second element of every message.
type MessageType uint8

// The message types of Version 1.
const (
	// TypeBatch carries one part of one origin's sealed sub-window.
	TypeBatch MessageType = 1
	// TypeDigest lists the batch keys its sender holds (anti-entropy).
	TypeDigest MessageType = 2
	// TypePull asks a peer for the batches with the listed keys.
	TypePull MessageType = 3
)

// String returns "batch", "digest", "pull", or "type(N)" for another value.
func (t MessageType) String() string {
	switch t {
	case TypeBatch:
		return "batch"
	case TypeDigest:
		return "digest"
	case TypePull:
		return "pull"
	}
	if n := v2TypeName(t); n != "" {
		return n
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Digest announces which batches its sender holds, so that peers can pull
// the ones they miss.
type Digest struct {
	// Sender is the sending member's name.
	Sender string
	// Keys are the held batch keys in canonical order (see SortKeys):
	// strictly ascending by CompareKeys, hence without duplicates.
	Keys []tracker.BatchKey
	// SentAtMillis is the sender's wall clock when it encoded the digest,
	// in Unix milliseconds (sent_at); 0 when the message carries none (a
	// sender older than sent_at). Encoders write it when > 0.
	SentAtMillis int64
}

// Pull asks a peer to send the batches with the given keys.
type Pull struct {
	// Sender is the asking member's name.
	Sender string
	// Keys are the wanted batch keys in canonical order (see SortKeys).
	Keys []tracker.BatchKey
	// SentAtMillis is the sender's clock, as in Digest.
	SentAtMillis int64
}

// CompareKeys orders batch keys by Origin, then Boot, Epoch and Part: the
// canonical order of keys in a Digest or Pull.
func CompareKeys(a, b tracker.BatchKey) int {
	if c := cmp.Compare(a.Origin, b.Origin); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Boot, b.Boot); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Epoch, b.Epoch); c != 0 {
		return c
	}
	return cmp.Compare(a.Part, b.Part)
}

// SortKeys sorts keys into canonical order in place, drops duplicates and
// returns the shortened slice.
func SortKeys(keys []tracker.BatchKey) []tracker.BatchKey {
	slices.SortFunc(keys, CompareKeys)
	return slices.Compact(keys)
}

// CloneBatch returns a deep copy of b whose Dests, Buckets and TimedOut
// share nothing with b: use it to keep a batch returned by
// Decoder.DecodeBatch past the Decoder's next call. All buckets go into one
// allocation.
func CloneBatch(b tracker.Batch) tracker.Batch {
	n := 0
	for _, d := range b.Dests {
		n += len(d.Buckets) + len(d.TimedOut)
	}
	buckets := make([]tracker.Bucket, 0, n)
	out := b
	out.Dests = make([]tracker.DestCounts, len(b.Dests))
	for i, d := range b.Dests {
		start := len(buckets)
		buckets = append(buckets, d.Buckets...)
		d.Buckets = buckets[start:len(buckets):len(buckets)]
		if len(d.TimedOut) > 0 {
			start = len(buckets)
			buckets = append(buckets, d.TimedOut...)
			d.TimedOut = buckets[start:len(buckets):len(buckets)]
		}
		out.Dests[i] = d
	}
	return out
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

func layoutErr(err error) error {
	if err == nil {
		return fmt.Errorf("%w: an aggregate's layout differs from its message's", ErrLayout)
	}
	return fmt.Errorf("%w: %w", ErrLayout, err)
}

func typeErr(t MessageType) error { return fmt.Errorf("%w: %s", ErrType, t) }

func tooLarge(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrTooLarge}, args...)...)
}
