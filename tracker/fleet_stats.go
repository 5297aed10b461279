package tracker

// InsertOutcome says what Fleet.Insert did with a batch. Every outcome is
// counted in FleetStats.
type InsertOutcome uint8

// The outcomes of Fleet.Insert. Only InsertNew changes the fleet's state.
const (
	// InsertNew: the batch was stored and counted.
	InsertNew InsertOutcome = iota
	// InsertDuplicate: a batch with this key and the same contents is held;
	// nothing changed.
	InsertDuplicate
	// InsertConflict: a batch with this key but other contents is held; the
	// first copy stays.
	InsertConflict
	// InsertTooOld: the epoch is before E−N−1.
	InsertTooOld
	// InsertTooNew: the epoch is after E+1.
	InsertTooNew
	// InsertLayoutMismatch: the histogram layout differs from this fleet's.
	InsertLayoutMismatch
	// InsertMalformed: an origin or destination name that is not ValidName, a
	// repeated destination, bucket indices out of range or not ascending, a
	// zero bucket count, a total that is not the sum of the counts, or
	// censored counts (TimedOut) that are not ascending, not a subset of
	// the buckets, above a bucket's count, or given with CensoringUnknown.
	InsertMalformed
	// InsertTooLarge: more than MaxDestinations destinations, more than
	// MaxEpochBuckets buckets, or more than 2^40 samples, for one member's
	// epoch (over all its parts).
	InsertTooLarge
	// InsertOriginCapped: a new member beyond MaxOrigins, and every held
	// member is at least as recent.
	InsertOriginCapped
	// InsertBucketsCapped: holding the batch would take the buckets held
	// over all batches beyond MaxBuckets.
	InsertBucketsCapped
	// InsertSuperseded: an aggregate whose coverage is smaller than that of
	// the aggregate held for its destination and epoch (InsertAggregate);
	// the larger stays.
	InsertSuperseded

	numInsertOutcomes
)

var insertOutcomeNames = [numInsertOutcomes]string{
	"new", "duplicate", "conflict", "too_old", "too_new", "layout_mismatch", "malformed", "too_large", "origin_capped",
	"buckets_capped", "superseded",
}

// String returns the outcome in snake_case, as used for metric labels.
func (o InsertOutcome) String() string {
	if o < numInsertOutcomes {
		return insertOutcomeNames[o]
	}
	return "unknown"
}

// FleetStats are a Fleet's counters (monotonic) and sizes (current).
type FleetStats struct {
	// Inserts counts Insert calls by outcome, indexed by InsertOutcome.
	Inserts [numInsertOutcomes]uint64
	// AggregateInserts counts InsertAggregate calls by outcome.
	AggregateInserts [numInsertOutcomes]uint64
	// Expired counts batches dropped because they aged out.
	Expired uint64
	// OriginsEvicted counts members evicted by the MaxOrigins cap.
	OriginsEvicted uint64
	// DestinationsEvicted counts destinations evicted by MaxDestinations.
	DestinationsEvicted uint64
	// DestinationsRefused counts batch entries not counted because their
	// destination was new, MaxDestinations were held, and each had two or
	// more peers in view.
	DestinationsRefused uint64
	// ExclusionsEvicted counts exclusions forgotten early because more than
	// 4·MaxOrigins were remembered (see Fleet.Exclude).
	ExclusionsEvicted uint64

	// Members is the number of members (peer name + boot) whose batches
	// are held (protocol v1: an aggregate names no member).
	Members int
	// Excluded is the number of exclusions remembered (see Fleet.Exclude).
	Excluded int
	// Peers is the number of distinct peer names whose batches are held
	// (protocol v1).
	Peers int
	// Destinations is the number of destinations with a fleet view: with
	// batches (protocol v1) or aggregates (protocol v2) held.
	Destinations int
	// AggregateDestinations is the number of destinations with aggregates
	// held (protocol v2; of Destinations).
	AggregateDestinations int
	// Batches is the number of batches held.
	Batches int
	// Buckets is the number of sparse buckets held over all batches,
	// censored counts (DestCounts.TimedOut entries) included.
	Buckets int
	// Aggregates is the number of aggregates held (protocol v2), over all
	// destinations and epochs.
	Aggregates int
}

// Outcome returns how many inserts had outcome o.
func (s FleetStats) Outcome(o InsertOutcome) uint64 {
	if o < numInsertOutcomes {
		return s.Inserts[o]
	}
	return 0
}
