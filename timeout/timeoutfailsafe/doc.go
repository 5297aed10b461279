// Package timeoutfailsafe is a failsafe-go policy whose timeout comes from a
// timeout.Policy, so services that compose failsafe-go's retry, circuit
// breaker and hedge policies gain adaptive timeouts, and the fleet's view
// when the Policy is a *node.Node:
//
//	adaptive := timeoutfailsafe.New[*http.Response](p, "db-1")
//	retry := retrypolicy.NewBuilder[*http.Response]().HandleErrors(timeoutfailsafe.ErrTimeout).Build()
//	resp, err := failsafe.With(retry, adaptive).Get(fn)
//
// It is a drop-in for failsafe-go's timeout.New(d): it cancels the
// execution attempt it wraps at the adaptive timeout (the execution's
// context and Canceled channel; like failsafe-go's timeout it then waits
// for the function to return) and fails it with a *TimeoutError, which
// matches ErrTimeout and failsafe-go's timeout.ErrExceeded. Composed inside
// a RetryPolicy (failsafe.With(retry, adaptive)) every attempt gets its own
// timeout, and the attempt number the Policy sees grows with each retry
// (timeout.AttemptFrom of the execution's context plus its retries), so
// each retry waits longer; composed outside (failsafe.With(adaptive,
// retry)) one timeout covers every try. Inside a HedgePolicy each hedge
// gets its own timeout, and the losers the hedge cancels when another
// attempt answers are observed as timeout.Superseded (slower than their
// elapsed time); those it cancels on another's timeout are
// timeout.Canceled (see Outcomes).
//
// # Outcomes
//
// Every attempt is observed once (Policy.Observe), and whichever ended it
// first decides, as in node.Do and the other adapters: our timeout is
// timeout.TimedOut, whatever happens after it (the caller cancelling while
// the function is still returning, the function answering then: the caller
// gets our *TimeoutError, as failsafe-go's own timeout replaces the
// result); an attempt cancelled from outside first (the caller's context,
// an outer timeout, failsafe-go's or an adaptive one) is timeout.Canceled
// when its function returns an error, and timeout.Completed when it
// returns an answer (a nil error) all the same: the destination answered,
// as node.Do learns a fn that returns nil after its caller left. Otherwise
// ClassifyError (or WithClassify) says: the function's result, error or
// not, is timeout.Completed unless the error is a fast transport failure
// (timeout.Failed) or someone else's timeout (timeout.Canceled). An error
// is decided as the function returns, before the clock is read, so one
// returned before our timeout or the caller's deadline is its own.
//
// Inside a HedgePolicy an attempt the hedge policy, or something outside
// it, ends is decided by what ended it, whatever its function returns
// then, as node.DoHedged's losers: a loser of another attempt's answer is
// timeout.Superseded (timeout.TimedOut if its own timeout had ended it
// first), observed when its function returns (failsafe-go tells an
// attempt it lost only by cancelling it; node.DoHedged censors it at the
// win). Where failsafe-go's hedge policy decides the result itself, the
// outcomes follow it, unlike node.DoHedged and the other adapters: once
// the caller's context ended it returns the cancellation, whichever
// attempt answers first, so no attempt wins and each is timeout.Canceled,
// an answer too; and it takes an attempt's timeout as the result and
// cancels the others, timeout.Canceled, where those let them go on.
//
// Since the function runs in the caller's goroutine, the probes of
// failure-aware timeouts are caller probes: when the Policy offers one and
// an attempt reaches its timeout, Policy.Probe may reserve it, and the
// attempt goes on, the caller still waiting, until the probe timeout.
//
// # Time and concurrency
//
// WithClock (default time.Now) is the clock of the Policy's decisions and of
// latency; the timeout itself is a runtime timer (time.AfterFunc, as in
// failsafe-go's timeout), whose callback also observes a timed-out attempt.
// A Timeout is safe for concurrent use (every Policy is).
package timeoutfailsafe
