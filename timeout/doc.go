// Package timeout picks each request's timeout from the latency observed to
// its destinations, falling back to exponential backoff while there is too
// little data. It is the rule of the Rust crate adaptive-timeout (itself
// modelled on Facebook LogDevice's store timeouts), matched exactly.
//
// # The formula
//
// For attempt a (1 is the first) and a Config c with floor = c.Backoff.Min and
// ceiling = c.Backoff.Max in whole milliseconds:
//
//	m        = 2^min(max(a−1, 0), 20)
//	fallback = min(floor·m, ceiling)                                   // ExponentialBackoffMillis
//	clamp(d) = clamp(trunc(c.SafetyFactor · float64(q̂(d)·m)), floor, ceiling)
//	timeout  = max(fallback, max over dests d with an estimate of clamp(d))   // Select
//
// where q̂(d) is Estimator.QuantileMillis(d, c.Quantile, now): by default the
// P99.99 of a sliding window. The product q̂·m saturates at 2^64−1, the float
// conversion saturates (NaN or negative → 0), and the clamp applies the floor
// first, then the ceiling. SelectQuorum gives every destination its own
// max(fallback, clamp(d)) (the fallback when it has no estimate) and returns
// the need-th smallest: a write that needs 2 of 3 replicas does not wait for
// the slowest. Explain and ExplainQuorum also say which destination decided.
//
// # Configuration
//
// Config holds the BackoffInterval (text form "250ms..1m", parsed by
// ParseBackoffInterval with the Rust crate's grammar and error texts), the
// quantile and the safety factor. DefaultConfig is 250ms..1m, 0.9999, 2.0.
// BackoffInterval implements encoding.TextMarshaler and TextUnmarshaler, so it
// reads from JSON, YAML and flag.TextVar; BackoffIntervalJSONSchema describes
// its text form for configuration tooling.
//
// # Hedging
//
// The pure parts of hedged requests, shared by node.DoHedged, the
// transport adapters and the simulator: OrderReplicas (replicas by their
// median, estimated under censoring, failing ones last), HedgeDelay (strictly above the bucket of the
// quantile HedgeQuantile(budget) = 1 − budget) and HedgeBudget (the token
// bucket: budget of the calls plus HedgeBurst). A Policy that is also a
// Hedger lets timeouthttp and timeoutgrpc hedge a request to one
// destination; the Decider is one (SetHedgeBudget).
//
// # Time and concurrency
//
// The package is pure: it has no state, starts no goroutines and reads no
// clock. Time enters only as the now argument, handed unchanged to the
// Estimator. Every function is safe for concurrent use as long as the
// Estimator is. Select, SelectMillis and Explain do not allocate;
// SelectQuorum and ExplainQuorum allocate only for more than 64 destinations.
//
// Recording latencies is the caller's job: Recorder is the interface for it.
// Record a timed-out attempt at its timeout value, or the tail vanishes
// exactly when timeouts are too tight and they ratchet down (the trackers'
// RecordTimeout does so and also counts the sample as censored, which the
// failure-aware decision input reads; see package tracker). The transport
// adapters (timeouthttp, timeoutgrpc, timeoutfailsafe) take a Policy, which
// decides and learns in one place.
package timeout
