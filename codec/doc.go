// Package codec is the wire format nodes exchange over memberlist: sealed
// sub-windows (batches), digests of the batches a node holds, and pulls of
// missing batches. Everything a peer sends is untrusted, so decoding is
// strict and bounded.
//
// # Messages
//
// Every message is one msgpack array: the protocol version (Version, 1),
// the message type (TypeBatch 1, TypeDigest 2, TypePull 3), then the
// type's fields. Integers use the most compact msgpack encoding (the
// encoder writes exactly what msgpack/v5 writes with UseCompactInts);
// decoders accept any integer encoding whose value is in range, but never
// nil, floats or a negative value where a non-negative one is expected.
//
//	batch     = [1, 1, layout, key, [dest, …] (, sent_at)]
//	layout    = [lowest, highest, significant digits]    must be tracker-supported
//	key       = [origin, boot, epoch, part]              str, uint64, int64, uint16
//	dest      = [name, total, buckets, timed_out]
//	buckets   = [index₀, count₀, Δ₁, count₁, …]
//	timed_out = [index₀, count₀, Δ₁, count₁, …]          a subset of buckets; may be empty
//	digest    = [1, 2, sender, [group, …] (, sent_at)]
//	pull      = [1, 3, sender, [group, …] (, sent_at)]
//	group     = [origin, boot, base epoch, [Δepoch₀, part₀, Δepoch₁, part₁, …]]
//	sent_at   = the sender's wall clock, Unix ms         uint in [0, 2^63−1]; optional
//
// Destination-owned aggregation (protocol v2) adds six message types
// within the same version (v2.go; old decoders refuse them as ErrType and
// nodes send them only once every member up is at protocol level 3):
//
//	records     = [1, 4, layout, key, [dest, …], [[epoch, records, hash], …]]   a batch's fields plus manifests
//	aggregates  = [1, 5, layout, sender, [agg, …]]
//	agg         = [dest, epoch, total, [pairs], [censored pairs], flags, peers,
//	               square sum hi, lo, epoch − newest, coverage records, coverage hash]
//	agg_digest  = [1, 6, sender, [[epoch, [count₀, hash₀, …, count₁₅, hash₁₅]], …]]
//	agg_list    = [1, 7, sender, [[dest, epoch, coverage records, coverage hash], …]]
//	agg_pull    = [1, 8, sender, [[dest, epoch, coverage records, coverage hash], …]]
//	record_pull = [1, 9, sender, [epoch, …]]
//
// and, at protocol level 4, a seventh:
//
//	packed_aggregates = [1, 10, layout, sender, [packed agg, …]]
//	packed agg = agg with [pairs] and [censored pairs] each a bin of uvarints:
//	             index₀, then per index up to the last bucket's its count (>= 1),
//	             or 0 and the number (>= 1) of empty indexes that follow
//
// with the same rules for names, pairs and lengths, and caps of their own
// (MaxManifests, MaxAggregates, MaxDigestEpochs, MaxAggEntries,
// MaxPullEpochs).
//
// A destination's buckets are (index, count) pairs: the first index is
// absolute, each later one is the difference Δ >= 1 from the previous
// index, so indices are strictly ascending by construction of a valid
// message; indices are < Layout.CountsLen(), counts in [1, 2^32−1], and
// total must equal their sum. Names (origin, sender, destination) are
// non-empty valid UTF-8 of at most MaxNameBytes; a batch never names a
// destination twice and holds at least one bucket per destination.
//
// The timed_out pairs (tracker.DestCounts.TimedOut) say how many of a
// bucket's samples were attempts ended by their timeout, recorded at it
// (tracker's RecordTimeout): coded as the buckets are, each index one of
// the destination's bucket indices (so strictly ascending), each count in
// [1, that bucket's count]. The list is empty when nothing timed out. The
// field was appended to the destination record by a minor revision (see
// "Versions and extensions"): a decoder older than it skips it, and a
// record without it, from an older sender, decodes with
// DestCounts.CensoringUnknown set: unknown, not none (a fleet view holding
// it uses the quantile alone and is never failing). Encoders write it for
// every destination except one whose censoring is unknown: that one is
// written as it came, in the old three-field form, so a node forwarding an
// older peer's batch sends the bytes the peer sent. The other way round a
// node of the older revision forwards a newer batch without the field, a
// copy that differs from the origin's: a receiver keeps whichever copy
// arrived first and counts the other as a conflict, so while both
// revisions run, a few views may hold a batch with censoring unknown.
//
// sent_at, appended to the message array by a minor revision (see
// "Versions and extensions"), is the sender's wall clock when it encoded the
// message, in Unix milliseconds, so that receivers can tell a node whose
// clock is off (AppendBatchAt, Encoder.BatchPartsAt, Digest.SentAtMillis,
// Decoder.SentAtMillis). Messages of older senders lack it, and 0 means
// the same: unknown. A batch carries it only when its sender is its origin
// (a seal, or the origin answering a pull): a batch forwarded by another
// member does not say who forwarded it, so the clock could not be
// attributed. Every digest and pull carries it.
//
// Digest and pull keys travel grouped by (origin, boot) with epochs
// delta-coded from the group's base epoch (epoch₀ = base + Δepoch₀), about
// 2 bytes per key. Keys must be in canonical order (CompareKeys, SortKeys):
// groups strictly ascending by (origin, boot), keys within a group strictly
// ascending by (epoch, part). So a decoded key list is sorted and free of
// duplicates without any map.
//
// # Limits
//
// Before allocating anything from a declared length the decoder checks it
// against a cap and against the bytes actually left: a message is at most
// MaxMessageBytes (1 MiB), a batch at most MaxDests (4096) destinations, a
// digest or pull at most MaxKeyOrigins (4096) groups and MaxKeys (65 536)
// keys, a name at most MaxNameBytes (256) bytes. An 8-byte message
// declaring a 4 GiB string or array costs a few small allocations for the
// error, not the declared size (TestHostileInputAllocatesLittle). No
// trailing bytes are accepted.
//
// msgpack/v5's reflection decoding (Unmarshal into structs) is never used
// on peer bytes: it allocates the length a sender declares, silently
// narrows integers and ignores trailing bytes. Decoder uses only its
// streaming primitives (DecodeArrayLen, DecodeUint64, DecodeInt64,
// DecodeBytesLen then ReadFull into a fixed buffer, DecodeMapLen,
// DecodeExtHeader, Skip of fixed-size values), each guarded as described
// in decode.go. hdrhistogram-go's Decode is never called on peer bytes.
//
// # Errors
//
// Every decoding error wraps exactly one of ErrVersion, ErrType, ErrLayout,
// ErrTooLarge and ErrMalformed, with detail; test with errors.Is and count
// refusals by sentinel. A count or length above a documented cap is
// ErrTooLarge; one that contradicts the bytes present is ErrMalformed.
// Encoders validate their input with the same rules, so a node never sends
// what its peers refuse.
//
// # Versions and extensions
//
// A decoder accepts only messages whose version equals Version; anything
// else is ErrVersion, never guessed at. A message type it does not know is
// ErrType (so a receiver can count and drop it).
//
// Within a version, a minor revision may append fields to any record: the
// message array, layout, key, destination and key group. A decoder reads
// the fields it knows, then skips up to MaxExtraFields more per record,
// each a msgpack value nested at most 8 deep whose declared lengths must
// fit the bytes left; str, bin and ext payloads are skipped without being
// read. Fewer fields than known is ErrMalformed. Lists (destinations,
// bucket pairs, groups, keys) never take extra elements. sent_at and a
// destination's timed_out are such appended fields, of the message array
// and of the destination record: a decoder older than them skips them;
// this one reads each as the first field after its record's known ones (an
// integer, a list of pairs, or
// ErrMalformed) and skips up to MaxExtraFields after it. Anything that an
// older decoder must not ignore — new meaning for a known field, a changed
// encoding, an extension that alters counts — needs a new Version; a node
// that speaks two versions keeps the old encoder until every peer decodes
// the new one. The bytes of every version and revision are pinned by
// golden files under testdata/golden (see testdata/README.md); those of
// earlier revisions stay as fixtures that must still decode.
//
// # Splitting batches
//
// A batch with more than MaxDests destinations, or more bytes than the
// sender's transport takes, is split by destination into parts, each its
// own BatchKey.Part, by Encoder.BatchParts. The split is greedy and
// deterministic, so the same sealed sub-window always maps to the same
// keys; the fleet view deduplicates on keys.
//
// # Concurrency and time
//
// Decoder and Encoder reuse their buffers and are not safe for concurrent
// use; use one per goroutine. Results of Decoder methods alias its buffers
// until its next call (CloneBatch keeps a batch). AppendBatch,
// AppendDigest, AppendPull, CompareKeys, SortKeys and CloneBatch are safe
// for concurrent use on distinct arguments. The package has no notion of
// time: epochs are numbers on tracker's shared grid, carried as they are.
package codec
