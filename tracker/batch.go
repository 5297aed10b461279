package tracker

import "unicode/utf8"

// MaxNameBytes is the longest origin or destination name, in bytes.
const MaxNameBytes = 256

// ValidName reports whether s can name an origin or a destination: non-empty
// UTF-8 of at most MaxNameBytes bytes. The fleet refuses a batch naming
// anything else (InsertMalformed), so a name that fails it cannot travel.
func ValidName(s string) bool {
	if s == "" || len(s) > MaxNameBytes {
		return false
	}
	for i := range len(s) { // names are short and mostly ASCII: cheaper than ValidString's word steps
		if s[i] >= utf8.RuneSelf {
			return utf8.ValidString(s[i:])
		}
	}
	return true
}

// BatchKey names one origin's sealed sub-window. Keys are what the fleet view
// deduplicates on: the same key received twice is counted once.
type BatchKey struct {
	// Origin is the node's -name: the peer, stable across restarts.
	Origin string
	// Boot is random per process start, so a restarted node's batches are
	// told apart from those of its previous run.
	Boot uint64
	// Epoch is the sub-window number on the shared wall-clock grid:
	// floor(unix milliseconds / sub-window length).
	Epoch int64
	// Part splits a batch by destination when an origin has more
	// destinations than fit one message.
	Part uint16
}

// Bucket is one non-empty count of a sparse histogram: Index into the
// layout's counts, and Count >= 1.
type Bucket struct {
	Index uint16
	Count uint32
}

// DestCounts is one destination's sparse histogram within a sealed
// sub-window: Buckets ascend by Index and Total is the sum of their Counts.
//
// TimedOut are the censored counts: of the samples in Buckets, those that
// were timed-out attempts recorded at their timeout (RecordTimeout). They
// are a subset of Buckets: ascending, each Index one of Buckets' with a
// Count of at least 1 and at most the bucket's. Empty when nothing timed
// out. CensoringUnknown marks a record from a peer that does not send
// censored counts (decoded without the field): TimedOut is then empty and
// means "unknown", not "none", and a view holding it uses the quantile
// alone (it is never failing).
type DestCounts struct {
	Dest             string
	Total            uint64
	Buckets          []Bucket
	TimedOut         []Bucket
	CensoringUnknown bool
}

// Batch is one origin's sealed sub-window: per destination, the latencies
// recorded in epoch Key.Epoch, in the histogram layout Layout.
type Batch struct {
	Key    BatchKey
	Layout Layout
	Dests  []DestCounts
}
