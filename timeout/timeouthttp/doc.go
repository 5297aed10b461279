// Package timeouthttp is an http.RoundTripper that gives every request the
// adaptive timeout of package timeout and records its latency, so a Go
// service gets adaptive timeouts by wrapping its http.Client's transport:
//
//	tr, _ := timeouthttp.New(timeouthttp.Options{Estimator: tracker, Recorder: tracker})
//	client := &http.Client{Transport: tr}
//
// For each request the Transport takes a destination key (by default the
// URL's host:port; Options.Destination changes it) and an attempt number
// (WithAttempt; 1 when unset), selects the timeout with timeout.Select over
// Options.Estimator, and runs the request under
// context.WithTimeoutCause(req.Context(), timeout, ErrTimeout): never later
// than a deadline the caller already set. The context lives until the
// response body is read to EOF or closed, so bodies are not truncated. A
// request the adaptive timeout ends fails with a *TimeoutError that matches
// ErrTimeout (and context.DeadlineExceeded) with errors.Is.
//
// Through Options.Recorder it records once per attempt: completed attempts at
// their latency (start of RoundTrip until the whole body arrived: EOF or the
// last Content-Length byte; on an early Close, until its data last arrived,
// so the caller's own work on the response is not latency); timed-out
// attempts at their timeout value (censoring, so that the tail is not lost
// when timeouts are too tight); attempts ended by the caller (cancellation,
// or its own earlier deadline) and other failures not at all.
//
// # Time and concurrency
//
// Options.Now (default time.Now) is the clock used to select timeouts and to
// measure latency; the deadline itself is a context timer. The Transport
// starts no goroutines of its own and is safe for concurrent use if the
// Estimator and Recorder are (tracker.SyncTracker is).
//
// The Transport does not retry: a retry loop sets WithAttempt(ctx, n) on each
// try so that the retry's timeout doubles (timeout.Config's exponential
// rule). It is meant for request/response traffic; protocol upgrades (101
// Switching Protocols) should bypass it.
package timeouthttp
