// Package timeouthttp is an http.RoundTripper that gives every request the
// adaptive timeout a timeout.Policy decides and tells the Policy how the
// attempt ended, so any http.Client gets adaptive timeouts, and the fleet's
// view when the Policy is a *node.Node:
//
//	rt, err := timeouthttp.New(timeouthttp.Options{Policy: p})
//	client := &http.Client{Transport: rt}
//
// For each request the Transport takes a destination key (by default the
// URL's host:port; Options.Destination changes it) and an attempt number
// (timeout.WithAttempt on the request's context; 1 when unset), asks
// Policy.Decide for the timeout, and runs the request under
// context.WithTimeoutCause(req.Context(), timeout, ErrTimeout): never later
// than a deadline the caller already set. The context lives until the
// response body is read to EOF or closed, so bodies are not truncated. A
// request the adaptive timeout ends fails with a *TimeoutError that matches
// ErrTimeout (and context.DeadlineExceeded) with errors.Is.
//
// # Outcomes
//
// Every attempt is observed exactly once (Policy.Observe): a response, of any
// status, is timeout.Completed at its latency (start of RoundTrip until the
// whole body arrived: EOF or the last Content-Length byte; on an early Close,
// until its data last arrived), less the caller's own time between the
// headers and its reads and between reads, so the caller's work on the
// response is not latency; our timeout is timeout.TimedOut (a censored
// sample: the destination took at least that long), unless the caller came
// back to read the body only after the timeout had passed (its own delay
// used the attempt up: timeout.Canceled, nothing learned, though its read
// still fails with the timeout's error); the caller's cancellation or earlier
// deadline is timeout.Canceled (nothing learned), and so is an outer
// Transport's timeout when this Transport is its base (the caller's
// context then ends with ErrTimeout too); a fast transport failure
// (refused, reset, DNS, TLS handshake: ClassifyError) is timeout.Failed, not
// a latency sample. Options.Classify overrides how errors are classified.
// Whichever ended the attempt first decides, as in node.Do and timeoutgrpc:
// an attempt our timeout ended is timed out even if the caller cancels
// while the base transport is still returning, and a response whose whole
// body arrives after the caller's cancellation is completed (the
// destination answered), while one whose body the caller closes early
// after cancelling is canceled; an error the base transport's round trip
// or a read of the body returned before the deadline (ours, or the
// caller's) is its own, as Options.Classify says, though the deadline may
// have passed by the time the Transport looks.
//
// # Shadow probes
//
// A destination whose every attempt times out would never show that it got
// faster, nor a tail above the current timeout. When the Policy offers a
// probe (Attempt.ProbeTimeout) and an attempt reaches its timeout before the
// response headers arrive, Policy.Probe may reserve it: the caller gets
// ErrTimeout at the normal timeout, and the request goes on unseen, on a copy
// of the request and detached from the caller's cancellation, until the
// probe timeout; it is then observed once. The caller never waits for it and
// never sees its reply. RoundTrip documents the details.
//
// # Hedging
//
// With Options.Hedge and a Policy that is a timeout.Hedger (*node.Node,
// timeout.NewPolicy), an idempotent request (GET, HEAD, OPTIONS, TRACE, or
// one with an Idempotency-Key header) that has not answered after its
// destination's hedge delay is sent again to the same destination, within
// the Policy's hedge budget; the first answer (a response, or an error
// Options.Classify calls timeout.Completed) wins and the other attempt
// is observed as timeout.Superseded (whatever it returns then,
// timeout.TimedOut if its own timeout had ended it before the win and
// before its round trip returned, timeout.Canceled if the caller's context
// had ended before the win). An answer (or a failure) of the first attempt
// in hand when the delay's passing is handled comes first: no copy is
// sent, no token spent. node.DoHedged's rule for one destination, as
// timeoutgrpc's; RoundTrip documents the details.
//
// # Time and concurrency
//
// Options.Now (default time.Now) is the clock of the Policy's decisions and
// of latency, read for an attempt of a hedged request or one that may
// become a shadow probe by the goroutine that runs its round trip, as the
// round trip returns (as node.DoHedged reads when fn returned): the
// Transport's own delay in handling a return is not latency. Deadlines
// themselves are context and runtime timers. The
// Transport is safe for concurrent use (every Policy is). It starts a
// goroutine only for an attempt that may become a shadow probe, and that
// goroutine ends by the probe timeout, or for each attempt of a hedged
// request, which ends with its round trip.
//
// The Transport does not retry: a retry loop sets timeout.WithAttempt(ctx, n)
// on each try so that the retry's timeout grows. A protocol upgrade (101
// Switching Protocols, as a WebSocket handshake) is timed up to its
// response headers and its connection handed over untouched.
package timeouthttp
