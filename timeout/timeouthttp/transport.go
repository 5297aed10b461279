package timeouthttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/adaptivetimeout/adaptivetimeout/internal/netfail"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// ErrTimeout is the cause (context.Cause) of an attempt's context when the
// adaptive timeout ends it. Errors returned by RoundTrip and by reads of the
// response body then match it with errors.Is (and also
// context.DeadlineExceeded); a deadline or cancellation of the caller's own
// context never does.
var ErrTimeout = errors.New("timeouthttp: adaptive timeout exceeded")

// ErrNoPolicy is New's error when Options.Policy is nil.
var ErrNoPolicy = errors.New("timeouthttp: Options.Policy is nil")

// TimeoutError is the error of an attempt the adaptive timeout ended. It
// matches ErrTimeout and context.DeadlineExceeded with errors.Is, and unwraps
// to the error the wrapped transport or body returned (net/http returns the
// context's cause, ErrTimeout itself; other transports may return
// context.DeadlineExceeded or their own error; nil when the request went on
// as a shadow probe).
type TimeoutError struct {
	Dest    string        // the destination key
	Attempt int           // the attempt number, from timeout.AttemptFrom
	Limit   time.Duration // the timeout that was applied
	Err     error         // the error the wrapped transport or body returned
}

// Error reads "timeouthttp: adaptive timeout exceeded (dest D, attempt N,
// timeout T)", followed by ": " and Err when Err says more than that.
func (e *TimeoutError) Error() string {
	s := fmt.Sprintf("%v (dest %s, attempt %d, timeout %v)", ErrTimeout, e.Dest, e.Attempt, e.Limit)
	if e.Err != nil && e.Err != ErrTimeout && e.Err != context.DeadlineExceeded {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is reports whether target is ErrTimeout or context.DeadlineExceeded.
func (e *TimeoutError) Is(target error) bool {
	return target == ErrTimeout || target == context.DeadlineExceeded
}

// Unwrap returns the wrapped transport's error.
func (e *TimeoutError) Unwrap() error { return e.Err }

// Timeout returns true, so net.Error-style checks (url.Error.Timeout) see a
// timeout.
func (e *TimeoutError) Timeout() bool { return true }

// Host is the default destination key: the request URL's host[:port].
func Host(req *http.Request) string { return req.URL.Host }

// ClassifyError is the default Options.Classify. It returns timeout.Failed
// for a fast transport failure: the connection refused, reset or aborted, the
// host or network unreachable, any other error of dialling, a name that does
// not resolve, a failed TLS handshake (a peer that does not speak TLS, a
// certificate that does not verify, an alert), the connection closed before
// the whole response arrived. Any other error (a malformed request, an
// unsupported scheme, a timeout of the base transport's own) gives
// timeout.Canceled: nothing is learned from it.
func ClassifyError(err error) timeout.Outcome {
	if netfail.Is(err) {
		return timeout.Failed
	}
	return timeout.Canceled
}

// Options configures a Transport. Only Policy is required.
type Options struct {
	// Base is the RoundTripper that does the work. Default http.DefaultTransport.
	Base http.RoundTripper
	// Policy decides each attempt's timeout and learns from its outcome:
	// *node.Node (the fleet's view), or timeout.NewPolicy over one
	// process's tracker. Required.
	Policy timeout.Policy
	// Destination maps a request to its destination key. Default Host.
	Destination func(*http.Request) string
	// Classify gives the outcome of an attempt that ended with an error
	// that is neither the adaptive timeout nor the caller's own
	// cancellation or deadline (those are timeout.TimedOut and
	// timeout.Canceled). Its result is observed as is. Default
	// ClassifyError.
	Classify func(err error) timeout.Outcome
	// Now is the clock for the Policy's decisions and for measuring
	// latency. Default time.Now. (Deadlines themselves are context and
	// runtime timers.)
	Now func() time.Time
	// Hedge turns on hedging of idempotent requests to the same
	// destination (opt-in) when the Policy is a timeout.Hedger (*node.Node,
	// timeout.NewPolicy): when a request has not answered after its
	// destination's hedge delay and the Policy's budget allows, a copy is
	// sent and the first answer wins. See RoundTrip. Default false.
	Hedge bool
}

// Transport is an http.RoundTripper that gives each request the adaptive
// timeout of its destination and attempt, and tells its Policy how the
// attempt ended. It is safe for concurrent use if its Policy is (every
// Policy must be).
type Transport struct {
	base     http.RoundTripper
	p        timeout.Policy
	dest     func(*http.Request) string
	classify func(error) timeout.Outcome
	now      func() time.Time
	real     bool // now is time.Now: elapsed times read only the monotonic clock
	hedge    bool
}

// New returns a Transport, or ErrNoPolicy.
func New(o Options) (*Transport, error) {
	if o.Policy == nil {
		return nil, ErrNoPolicy
	}
	t := &Transport{base: o.Base, p: o.Policy, dest: o.Destination, classify: o.Classify, now: o.Now, hedge: o.Hedge}
	if t.base == nil {
		t.base = http.DefaultTransport
	}
	if t.dest == nil {
		t.dest = Host
	}
	if t.classify == nil {
		t.classify = ClassifyError
	}
	if t.now == nil {
		t.now, t.real = time.Now, true
	}
	return t, nil
}

// Timeout returns the timeout RoundTrip would apply to req now (before the
// caller's own deadline is taken into account).
func (t *Transport) Timeout(req *http.Request) time.Duration {
	return t.p.Decide(t.dest(req), timeout.AttemptFrom(req.Context()), t.now()).Timeout
}

// RoundTrip sends req through the base transport under a context that ends
// at the adaptive timeout (or at the caller's own deadline, if that is
// earlier). The timeout covers the whole attempt, body included: the
// context is cancelled only when the response body has been read to EOF or
// closed, so a body read within the timeout is never truncated. Close every
// response body, as with any http.Client.
//
// It observes every attempt exactly once through the Policy. An attempt
// that completes is observed as timeout.Completed at its latency from the
// start of RoundTrip to the moment the whole body had arrived: EOF, or the
// last of ContentLength bytes read. An attempt whose body is closed before
// that counts from the last moment body data (or, if none was read, the
// response headers) arrived: time the caller spends on the response
// afterwards is not latency. An attempt the adaptive timeout ends is
// timeout.TimedOut; one the caller's context ended (cancellation or its
// earlier deadline) is timeout.Canceled; one that failed otherwise, before
// or while the body arrived, is what Options.Classify says. Whichever came
// first decides: a cancellation of the caller's after our timeout ended the
// attempt leaves it timed out; a response whose whole body arrives after
// the caller's cancellation is completed, and one whose body is closed
// early after it canceled; an error the base transport's round trip or a
// read of the body returned before the deadline (ours, or the caller's) is
// what Options.Classify says, though the deadline may have passed by the
// time the Transport looks at the context.
//
// Protocol upgrades: a request asking to switch protocols (an Upgrade
// header, and "upgrade" in Connection) is never hedged or probed. Its 101
// Switching Protocols completes at the response headers, and the response
// body is the base transport's own, the connection as an
// io.ReadWriteCloser; the timeout covers the handshake only, and what the
// connection carries afterwards is not latency. (net/http detaches the
// connection from the request's context before returning it; a base
// transport whose upgraded connection ends with that context does not
// suit.)
//
// Shadow probes: when the Policy offered a probe (Attempt.ProbeTimeout
// beyond Timeout) and the attempt reaches its timeout before the response
// headers arrived, RoundTrip asks Policy.Probe. A round trip that has
// returned by the time RoundTrip handles the timeout's passing comes
// first and is never made a probe: its response is the caller's, and an
// error it returned before the timeout is its own, as Options.Classify
// says, not a timeout; its latency is read when it returned, by the
// goroutine that ran it, not when RoundTrip gets to it (a response's body
// is timed from its headers' arrival then). If Policy.Probe reserves the
// probe,
// the caller gets its *TimeoutError at the normal timeout while the request
// goes on unseen, detached from the caller's cancellation, until
// ProbeTimeout after its start; it then reads and discards the body and is
// observed once, as Completed at its real latency, TimedOut, or what
// Classify says. The probe runs on a copy of req, so it never touches the
// caller's request or reply; its goroutine ends by the probe timeout (as
// long as the base transport honours its context). A probe never outlives
// the caller's deadline: when that comes first, or when the request has a
// body that cannot be read again (no GetBody), the attempt ends at its
// timeout as any other. A probe sends nothing twice, but a non-idempotent
// request that the caller retries after ErrTimeout may then run twice at
// once, as it may after any timeout.
//
// Hedging (Options.Hedge, when the Policy is a timeout.Hedger): a request
// that is idempotent (GET, HEAD, OPTIONS, TRACE, or one with an
// Idempotency-Key or X-Idempotency-Key header) and whose body, if any, can
// be read again (GetBody) counts toward the Policy's hedge budget
// (Hedger.HedgeDelay). When its response headers have not arrived after
// its destination's hedge delay (the estimate strictly above the bucket at
// quantile 1 − budget, as node.DoHedged) and the budget allows
// (Hedger.SpendHedge), a copy is sent to the same destination. The first
// answer wins: a response, or an error Options.Classify calls
// timeout.Completed (returned as it is, as timeoutgrpc returns a status
// other than Unavailable); the other attempt is cancelled and observed as
// timeout.Superseded at its elapsed time (whatever it returns then, as in
// node.DoHedged and timeoutgrpc: timed out if its own timeout had ended it
// before the win and before its round trip returned, canceled if the
// caller's context had ended before the win). Each attempt has its own
// adaptive timeout; an attempt that fails otherwise (timed out, or an
// error Classify calls anything else) leaves the other running, and when
// both fail the first one's error is returned. The first attempt's
// return, if RoundTrip has it in hand when it handles the delay's passing,
// comes first, as in node.DoHedged: its answer wins, or its failure is the
// request's error, and no copy is sent (no token spent); one that comes
// in only after the copy was sent is decided as any other, by when it
// returned. Latencies, as in node.DoHedged, are read when each round trip
// returned, by the goroutine that ran it (on Options.Now), not when
// RoundTrip gets to its return: a response's body is timed from its
// headers' arrival then, and a loser whose round trip had returned before
// the win was handled is superseded at that return, if earlier than the
// win. Hedged requests run no shadow probe.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if h, ok := t.hedgeable(req); ok {
		if delay, ok := h.HedgeDelay(t.dest(req), t.now()); ok {
			return t.roundTripHedged(req, h, delay)
		}
	}
	parent := req.Context()
	start := t.now()
	a := &attempt{t: t, parent: parent, start: start, a: t.p.Decide(t.dest(req), timeout.AttemptFrom(parent), start)}
	if a.a.ProbeTimeout > a.a.Timeout && a.probeable(req, parent) {
		return a.roundTripAsync(req, parent)
	}
	var ctx context.Context
	if t.real { // the deadline from the clock reading we already have
		ctx, a.stop = context.WithDeadlineCause(parent, start.Add(a.a.Timeout), ErrTimeout)
	} else {
		ctx, a.stop = context.WithTimeoutCause(parent, a.a.Timeout, ErrTimeout)
	}
	a.req = req.WithContext(ctx)
	resp, err := t.base.RoundTrip(a.req)
	if err != nil {
		return nil, a.failReturned(err, time.Now())
	}
	return a.response(resp, a.elapsed())
}

// attempt is one RoundTrip's state and, after it returns, the response body.
// Every request allocates one, so it holds only what every attempt needs, in
// as few words as it can (a shadow probe's and a hedged attempt's extra
// state lives in their own closures and hedgeTry): each size class it
// drops is a measurable part of the Transport's own cost.
type attempt struct {
	t *Transport
	// req is the request the base transport got; its context is the
	// attempt's (ctx).
	req *http.Request
	// parent is the caller's context.
	parent context.Context
	// stop releases the attempt's context and whatever else the attempt
	// holds (the sync path's timeout context; the async and hedged paths'
	// contexts and timers). end calls it once.
	stop  context.CancelFunc
	body  io.ReadCloser
	a     timeout.Attempt
	start time.Time
	left  int64 // body bytes still to come of a known ContentLength; <= 0: unknown, or all arrived (Read is never concurrent with itself)
	// state holds the flags observed, ended and cut in its low bits and, above
	// them, when body data (at first, the headers) last arrived, as time
	// since start: one word, so that a Close racing a Read takes the last
	// arrival and the right to observe the attempt in one step.
	state atomic.Int64
}

// The flags of attempt.state.
const (
	observed  = 1 << iota // the Policy has been told how the attempt ended
	ended                 // stop has been called
	cut                   // a timer ends the body at the timeout, before its context's deadline (the async path)
	flagBits  = iota      // the flags' width; the last arrival is above them
	flagsMask = 1<<flagBits - 1
)

// settle marks the attempt observed and reports whether this call did: the
// caller then observes it (every attempt is observed exactly once).
func (a *attempt) settle() bool { return a.state.Or(observed)&observed == 0 }

// settled reports whether the attempt has been observed.
func (a *attempt) settled() bool { return a.state.Load()&observed != 0 }

// arrived records that body data (or the headers) arrived at elapsed time
// at.
func (a *attempt) arrived(at time.Duration) {
	for {
		s := a.state.Load()
		if a.state.CompareAndSwap(s, int64(at)<<flagBits|s&flagsMask) {
			return
		}
	}
}

// ctx returns the attempt's context: the base transport's request's.
func (a *attempt) ctx() context.Context { return a.req.Context() }

// ours reports whether our timeout ended the attempt's context: its cause
// is ErrTimeout, and not one passed down from the caller's context (an
// outer Transport's timeout, whose base this Transport is, ends the
// attempt as the caller's doing).
func (a *attempt) ours() bool {
	return context.Cause(a.ctx()) == ErrTimeout && context.Cause(a.parent) != ErrTimeout
}

// callerLeft reports whether the caller's context has ended.
func (a *attempt) callerLeft() bool {
	done := a.parent.Done()
	if done == nil { // context.Background and its kind: no runtime call
		return false
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

func (a *attempt) elapsed() time.Duration {
	if a.t.real {
		return time.Since(a.start)
	}
	return a.t.now().Sub(a.start)
}

// elapsedAt is the attempt's elapsed time at ret, a reading of the
// runtime's clock just taken: ret itself when Options.Now is time.Now,
// else a reading of Options.Now. The goroutine that ran the round trip
// takes it as the round trip returns, so that a coordinator that handles
// the return late (descheduled, or holding a lock) adds none of its own
// delay to the latency, as node.DoHedged reads when fn returned.
func (a *attempt) elapsedAt(ret time.Time) time.Duration {
	if a.t.real {
		return ret.Sub(a.start)
	}
	return a.t.now().Sub(a.start)
}

// probeable reports whether the attempt may become a shadow probe: the
// Policy offered one, the caller's deadline leaves room for it, and the
// request's body (if any) can be read again by the probe's own copy.
func (a *attempt) probeable(req *http.Request, parent context.Context) bool {
	if a.a.ProbeTimeout <= a.a.Timeout {
		return false
	}
	if d, ok := parent.Deadline(); ok && time.Until(d) < a.a.ProbeTimeout {
		return false
	}
	if upgrading(req) {
		return false // a probe cannot tell when an upgraded connection's traffic ends
	}
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// upgrading reports whether req asks to switch protocols (a non-empty
// Upgrade header and the token "upgrade" in Connection), as net/http
// decides it.
func upgrading(req *http.Request) bool {
	return req.Header.Get("Upgrade") != "" && httpguts.HeaderValuesContainsToken(req.Header["Connection"], "upgrade")
}

// response hands the base transport's answer, whose headers arrived at
// elapsed time headers (when its round trip returned), to the caller. The
// body's timing starts there: whatever delays the caller's first read,
// the Transport's own handling of the return included, is not latency.
func (a *attempt) response(resp *http.Response, headers time.Duration) (*http.Response, error) {
	// A switch of protocols (101) completes at its headers, and its body, the
	// connection now the caller's (an io.ReadWriteCloser), is handed over as
	// it is. net/http detaches that connection from the request's context
	// before it returns, so ending the attempt's context cuts nothing. (A
	// nil body is not allowed by the RoundTripper contract; be safe.)
	if resp.Body == nil || resp.StatusCode == http.StatusSwitchingProtocols {
		a.complete(headers)
		a.end()
		return resp, nil
	}
	a.state.Store(int64(headers) << flagBits) // nothing observed or ended yet, and not yet shared
	a.left = resp.ContentLength
	a.body = resp.Body
	resp.Body = a
	return resp, nil
}

// call is the base transport's round trip of an async attempt, run in a
// goroutine of its own.
type call struct {
	done     chan struct{} // closed when the round trip returned
	mu       sync.Mutex
	finished bool          // the round trip returned
	inTime   bool          // it returned an error before the timeout (the caller's deadline is later)
	probing  bool          // the caller left: the attempt goes on as a probe
	at       time.Duration // the attempt's elapsed time when the round trip returned
	resp     *http.Response
	err      error
}

// roundTripAsync runs an attempt that may become a shadow probe: the base
// round trip runs in a goroutine under a context detached from the caller's
// and ending at the probe timeout, while the caller waits for the answer,
// its own context, or the timeout.
func (a *attempt) roundTripAsync(req *http.Request, parent context.Context) (*http.Response, error) {
	probeCtx, stop := context.WithTimeoutCause(context.WithoutCancel(parent), a.a.ProbeTimeout, ErrTimeout)
	ctx, cancel := context.WithCancelCause(probeCtx)
	var release func() // stops what cuts the caller's body at the timeout
	a.stop = func() {
		if release != nil {
			release()
		}
		cancel(nil)
		stop()
	}
	pd, _ := probeCtx.Deadline()
	deadline := pd.Add(a.a.Timeout - a.a.ProbeTimeout) // the timeout, on the probe deadline's clock reading
	r := req.Clone(ctx)
	a.req = r
	if req.GetBody != nil && req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		_ = req.Body.Close() // ours to close: the base gets the copy
		if err != nil {
			return nil, a.fail(err)
		}
		r.Body = body
	}
	c := &call{done: make(chan struct{})}
	go a.run(c, deadline)

	timer := time.NewTimer(a.a.Timeout)
	defer timer.Stop()
	select {
	case <-c.done:
	case <-parent.Done():
		cancel(context.Cause(parent))
		<-c.done
	case <-timer.C:
		c.mu.Lock()
		switch {
		case c.finished:
			// The round trip's return, in hand by the time the timeout's
			// passing is handled (the timer and the return may be ready
			// together, and Go's select takes either), comes first, as if
			// taken before the timer: no probe, and nothing ends its
			// context.
			c.mu.Unlock()
		case parent.Err() == nil && a.t.p.Probe(&a.a, a.t.now()):
			c.probing = true
			c.mu.Unlock()
			return nil, &TimeoutError{Dest: a.a.Dest, Attempt: a.a.Attempt, Limit: a.a.Timeout}
		default:
			c.mu.Unlock()
			if parent.Err() != nil {
				cancel(context.Cause(parent))
			} else {
				cancel(ErrTimeout)
			}
			<-c.done
		}
	}
	// Latencies are the attempt's when its round trip returned (c.at), not
	// when the wait above ended, as on the hedged path.
	if c.err != nil {
		// An error the round trip returned before the timeout is its own,
		// as on the plain path (failReturned), though the timer may have
		// ended the context by the time it is looked at.
		return nil, a.failAt(c.err, c.at, c.at, false, c.inTime)
	}
	if c.resp.Body != nil {
		// The caller reads the body: cut it at the timeout, or when the
		// caller's context ends.
		cutTimer := time.AfterFunc(time.Until(deadline), func() { cancel(ErrTimeout) })
		stopParent := context.AfterFunc(parent, func() { cancel(context.Cause(parent)) })
		release = func() { cutTimer.Stop(); stopParent() }
	}
	resp, err := a.response(c.resp, c.at)
	if release != nil { // before the caller can read the body
		a.state.Or(cut)
	}
	return resp, err
}

// run is the goroutine of an async attempt: the round trip, then, if the
// caller left, the rest of the probe. deadline is the attempt's timeout,
// on the probe deadline's clock.
func (a *attempt) run(c *call, deadline time.Time) {
	resp, err := a.t.base.RoundTrip(a.req)
	ret := time.Now() // when it returned, on the probe deadline's clock
	at := a.elapsedAt(ret)
	inTime := err != nil && ret.Before(deadline)
	c.mu.Lock()
	c.finished, c.inTime, c.at, c.resp, c.err = true, inTime, at, resp, err
	probing := c.probing
	c.mu.Unlock()
	close(c.done)
	if probing {
		a.finishProbe(resp, err, ret, at)
	}
}

// finishProbe ends a shadow probe whose round trip returned at ret (on
// the runtime's clock) at elapsed time at: it reads the body to its end
// (the latency runs until the whole body arrived) and observes the
// attempt. An error that came back before the probe's deadline is its
// own, as Options.Classify says, though the deadline may have passed by
// the time it is looked at.
func (a *attempt) finishProbe(resp *http.Response, err error, ret time.Time, at time.Duration) {
	defer a.end()
	elapsed := at
	if err == nil && resp.Body != nil {
		_, err = io.Copy(io.Discard, resp.Body)
		ret = time.Now() // before Options.Now
		elapsed = a.elapsedAt(ret)
		_ = resp.Body.Close()
	}
	o := timeout.Completed
	if err != nil {
		if context.Cause(a.ctx()) == ErrTimeout && !returnedBefore(a.ctx(), ret) {
			o = timeout.TimedOut
		} else {
			o = a.t.classify(err)
		}
	}
	a.observe(o, elapsed)
}

// end releases the attempt's context and timers, once: at EOF, and again at
// Close, costs nothing the second time.
func (a *attempt) end() {
	if a.state.Load()&ended == 0 && a.state.Or(ended)&ended == 0 {
		a.stop()
	}
}

// observe tells the Policy how the attempt ended, elapsed after its start
// (which is also when: the end of the attempt, not of the caller's work).
func (a *attempt) observe(o timeout.Outcome, elapsed time.Duration) {
	a.t.p.Observe(a.a, o, elapsed, a.start.Add(elapsed))
}

// Read reads the body. The attempt completes when the whole body has arrived
// (the last of ContentLength bytes, or EOF); an error other than EOF ends it.
// Its latency is the time to the headers plus the time spent in Read: what
// the caller did between the headers and its reads, or between reads, is
// its own, not the destination's. Close may run concurrently with Read, as
// net/http allows.
func (a *attempt) Read(p []byte) (int, error) {
	s := a.state.Load()
	if s&observed != 0 {
		// Observed (the last of ContentLength bytes, or an early Close):
		// nothing is left to time.
		n, err := a.body.Read(p)
		if err != nil {
			if err != io.EOF {
				d := a.elapsed()
				return n, a.failAt(err, d, d, false, a.before(time.Now()))
			}
			a.end()
		}
		return n, err
	}
	// The caller is back. The last arrival (in state) is the destination's
	// time so far, so the rest of the time since the start, away, is the
	// caller's own, outside Read, and is left out of the latency.
	back := a.elapsed()
	away := back - time.Duration(s>>flagBits)
	n, err := a.body.Read(p)
	var ret time.Time
	if err != nil && err != io.EOF {
		// When it failed, on the deadline's clock: read before anything
		// else (Options.Now included) can let the deadline pass.
		ret = time.Now()
	}
	at := a.elapsed() - away // the destination's time
	if n > 0 {
		switch {
		case a.left <= 0: // the length is unknown (or the body has arrived)
			a.arrived(at)
		case a.left > int64(n):
			a.left -= int64(n)
			a.arrived(at)
		default: // the last of ContentLength bytes: Close has nothing to time
			a.left = 0
			a.complete(at) // the context lives on until EOF or Close
		}
	}
	if err != nil {
		if err != io.EOF {
			// Back only after the timeout had passed: the caller's own
			// delay used the attempt up, whatever the destination did.
			return n, a.failAt(err, at, at+away, back >= a.a.Timeout, a.before(ret))
		}
		if !a.settled() {
			a.complete(at)
		}
		a.end()
	}
	return n, err
}

// Close closes the body. If the whole body had not arrived, the caller
// stopped reading of its own accord: the attempt counts as completed when its
// last data arrived, or as canceled if the caller's context has ended (it
// gave up on the attempt).
func (a *attempt) Close() error {
	err := a.body.Close()
	if !a.settled() {
		if s := a.state.Or(observed); s&observed == 0 {
			d := time.Duration(s >> flagBits)
			if a.callerLeft() {
				a.observe(timeout.Canceled, d)
			} else {
				a.observe(timeout.Completed, d)
			}
		}
	}
	a.end()
	return err
}

// complete ends an attempt whose whole response arrived at latency d,
// unless it has been observed: Completed, even if the caller's context
// ended meanwhile (the destination answered, as when node.Do's fn returns
// nil after its caller left).
func (a *attempt) complete(d time.Duration) {
	if a.settle() {
		a.observe(timeout.Completed, d)
	}
}

// fail ends a failed attempt and returns the error to hand the caller: a
// *TimeoutError when the adaptive timeout caused it.
func (a *attempt) fail(err error) error {
	d := a.elapsed()
	return a.failAt(err, d, d, false, false)
}

// failReturned is fail for an error the base transport's round trip
// returned at ret (on the runtime's clock, read before anything else,
// Options.Now included, lets the deadline pass) under the attempt's own
// deadline, ours or the caller's if earlier (the plain and hedged paths).
// An error returned before that deadline is the base's own, as node.Do
// decides by when fn returned, though the deadline may have ended the
// context by the time it is looked at.
func (a *attempt) failReturned(err error, ret time.Time) error {
	d := a.elapsed()
	_, err = a.failWith(err, d, d, false, returnedBefore(a.ctx(), ret))
	return err
}

// before reports whether ret, on the runtime's clock, is before the
// attempt's deadline: its context's, or on the async path, the timeout at
// which the body is cut (the context's deadline is the probe's). A body's
// read error then is its own, as a round trip's is (failReturned), though
// the deadline may have passed by the time the Transport looks.
func (a *attempt) before(ret time.Time) bool {
	d, ok := a.ctx().Deadline()
	if ok && a.state.Load()&cut != 0 {
		d = d.Add(a.a.Timeout - a.a.ProbeTimeout)
	}
	return ok && ret.Before(d)
}

// returnedBefore reports whether ret is before ctx's deadline: then ctx was
// still live at ret, whatever it says by now (a context ends at its
// deadline or later, never before).
func returnedBefore(ctx context.Context, ret time.Time) bool {
	d, ok := ctx.Deadline()
	return ok && ret.Before(d)
}

// failAt is fail for an attempt that failed at latency d (its body's
// Reads leave the caller's time out), wall after its start (the caller's
// time included: a timeout's latency, since our timeout counts it).
// callerLate says the caller came back
// to read only after the timeout: a timeout then is its own doing, and
// nothing is learned (Canceled), though the caller still gets the
// timeout's error. first says the error came back before the attempt's
// deadline (its context's; for a body on the async path, the timeout):
// neither our timeout nor the caller's deadline is its cause (a
// cancellation of the caller's has no time to compare with).
func (a *attempt) failAt(err error, d, wall time.Duration, callerLate, first bool) error {
	_, err = a.failWith(err, d, wall, callerLate, first)
	return err
}

// failWith is failAt, also reporting whether the attempt answered:
// Options.Classify decided its outcome and said timeout.Completed (the
// destination answered with an error; a hedged request's answer wins).
func (a *attempt) failWith(err error, d, wall time.Duration, callerLate, first bool) (answered bool, _ error) {
	timedOut := !first && a.ours()
	if a.settle() {
		switch {
		case timedOut && callerLate:
			a.observe(timeout.Canceled, d)
		case timedOut:
			a.observe(timeout.TimedOut, wall)
		case a.callerLeft() && !(first && a.parent.Err() == context.DeadlineExceeded):
			a.observe(timeout.Canceled, d)
		default:
			o := a.t.classify(err)
			answered = o == timeout.Completed
			a.observe(o, d)
		}
	}
	a.end()
	if timedOut {
		return false, &TimeoutError{Dest: a.a.Dest, Attempt: a.a.Attempt, Limit: a.a.Timeout, Err: err}
	}
	return answered, err
}

// CloseIdleConnections closes the base transport's idle connections if it
// can (http.Client.CloseIdleConnections calls this).
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
