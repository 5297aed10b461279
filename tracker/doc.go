// Package tracker keeps per-destination sliding-window latency histograms and
// answers high quantiles of them in a few nanoseconds.
//
// # Tracker and SyncTracker
//
// A Tracker records latencies per destination (any comparable type: a
// string, an address, a small struct) and answers quantiles of the last
// Config.Window of them:
//
//	t, _ := tracker.New[string](tracker.DefaultConfig())
//	t.Record("db-1", elapsed, now)
//	p, ok := t.Quantile("db-1", 0.9999, now) // ok is false until MinSamples samples
//
// Latencies are kept in whole milliseconds in an HdrHistogram layout with 2
// significant digits (Config.Layout; exactly hdrhistogram-go's buckets), so a
// quantile is the highest value equivalent to its bucket: within 1% above the
// exact sample. The window is a ring of Config.SubWindows sub-windows; per
// destination the tracker keeps the current sub-window dense, the sealed ones
// sparse, and the dense sum of all of them, updated incrementally: a record
// adds to it and an expiring sub-window is subtracted, so no query merges
// anything. High quantiles scan the sum from the top with block sums.
//
// Tracker is not safe for concurrent use. SyncTracker has the same methods and
// gives the same answers, and is safe for concurrent use: destinations are
// spread over 64 shards, each with its own mutex.
//
// With Config.MaxDestinations set, a new destination beyond it evicts the
// one with the fewest samples among the 16 least recently recorded, so a
// flood of new names with a sample each evicts only its own kind, never a
// destination with steady traffic; Stats counts the evictions.
//
// # Timed-out attempts and the decision input
//
// RecordTimeout records an attempt our timeout ended: a sample at its
// timeout, exactly as Record (so quantiles are what they were), that is also
// counted as censored in its bucket, since the latency was at least that.
// Censored counts are sparse and kept incrementally like the counts. Per
// view (a tracker's window; the fleet view) Q is the quantile, M the highest
// bucket holding a sample that did not time out, and v = min(Q, M) the value
// a timeout decision uses: with nothing censored v = Q, and when timeouts
// fill the top of the window v stays at the highest completed latency
// instead of ratcheting up with them. A view with enough samples, some
// censored and none completed is failing: the decision takes the
// exponential fallback. An Estimate carries this decision input
// (Estimate.Decision, Estimate.Failing, read with Estimate.DecisionValue);
// LocalEstimate gives it for one tracker, Fleet.Estimate with the fleet's
// precedence (see Decision).
//
// # How time enters
//
// Time is an argument of every method; the package never reads a clock and
// starts no goroutines. Sub-windows sit on a wall-clock grid shared by every
// node: epoch e covers [e·S, (e+1)·S) of Unix time in milliseconds, with S =
// Config.SubWindow (Config.Epoch). Every call first rotates to the epoch of
// its now: a sample recorded in epoch e is in the window for queries in epochs
// e … e+N−1 and gone at e+N. A tracker's current epoch never goes back: when
// now is earlier than a time already seen, nothing rotates and a sample goes
// into the current sub-window.
//
// # Sealed sub-windows
//
// Because the grid is shared, finished (sealed) sub-windows of different nodes
// cover the same interval and can be summed. SealedSubWindow hands out a past
// epoch's sub-window as sparse []DestCounts, ready for a Batch: without
// copying for typical ones, which are kept sparse; a sub-window wider than 1/8
// of the layout is kept packed (about a byte per bucket, so memory per
// destination stays bounded) and decoded on hand-out. Each carries its
// censored counts (DestCounts.TimedOut). CutMostSamples cuts one to what a
// batch may carry, keeping the destinations with the most samples.
// ExportHistogram returns a destination's window as a standard
// hdrhistogram-go Histogram.
//
// # Fleet
//
// A Fleet holds every peer's sealed batches (Batch, keyed by BatchKey: origin,
// boot, epoch, part) and keeps, per destination, the sum over distinct keys of
// the epochs in view [E−N+1, E−1], incrementally: a batch is added once on
// insert and subtracted when it expires or its member is excluded. Inserting
// the same key again is a no-op and another copy with other contents a counted
// conflict, so delivery order and re-delivery never change the result: once
// every batch has arrived, the view is bucket-for-bucket the same on every
// node. Censored counts travel, merge, expire and are share-capped with the
// counts; a record from a peer that does not send them (CensoringUnknown)
// makes its view use the quantile alone. Fleet.Estimate says which view
// backs a value (fleet, local or none), how many peers and samples back it,
// effective peers after the share cap, and staleness, and carries the input
// of a timeout decision (the value after the failing views' precedence and
// the local guard); Fleet.QuantileMillis returns that value, so a Fleet
// passed to timeout.Explain never skips the guard. Like Tracker, a Fleet
// takes time as an argument and starts no goroutines; it is safe for
// concurrent use, with one mutex around each call but an estimate answered
// from the cache a local SyncTracker keeps in each destination's entry
// (valid until the Fleet or that window changes; EstimateUncached is the
// reference it always equals).
//
// What a Fleet holds is bounded (FleetConfig documents each cap and the
// memory formula): members (MaxOrigins), buckets per member epoch
// (MaxEpochBuckets) and in all (MaxBuckets), destinations (MaxDestinations),
// and exclusions (4·MaxOrigins, kept apart from batches so an excluded
// member's batches never count again after an eviction). What a cap refuses
// or evicts is counted in FleetStats. The caps are where the "identical on
// every node" promise ends: when MaxDestinations is full, a new destination
// evicts one with at most one peer in view (a destination several peers
// report is never evicted, so one peer's junk names cannot push it out), and
// an evicted or refused destination's counts in held batches stay out of its
// view until they expire. So while the cap is full, which destinations with
// a single peer have a view depends on the order batches arrived, and under a
// steady flood of junk names a new destination may not reach a second peer
// before it is evicted; likewise batches refused by MaxOrigins or MaxBuckets
// are missing until anti-entropy delivers them again with room to spare.
package tracker
