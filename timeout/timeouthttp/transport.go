package timeouthttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// ErrTimeout is the cause (context.Cause) of an attempt's context when the
// adaptive timeout ends it. Errors returned by RoundTrip and by reads of the
// response body then match it with errors.Is (and also
// context.DeadlineExceeded); a deadline or cancellation of the caller's own
// context never does.
var ErrTimeout = errors.New("timeouthttp: adaptive timeout exceeded")

// TimeoutError is the error of an attempt the adaptive timeout ended. It
// matches ErrTimeout and context.DeadlineExceeded with errors.Is, and unwraps
// to the error the wrapped transport or body returned (net/http returns the
// context's cause, ErrTimeout itself; other transports may return
// context.DeadlineExceeded or their own error).
type TimeoutError struct {
	Dest    string        // the destination key
	Attempt int           // the attempt number, from AttemptFrom
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

type attemptKey struct{}

// WithAttempt returns a context that tells the Transport that requests made
// with it are attempt n (1 is the first; n <= 1 counts as 1). Retry loops set
// it per try so that each retry's timeout doubles.
func WithAttempt(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, attemptKey{}, n)
}

// AttemptFrom returns the attempt number set by WithAttempt, or 1.
func AttemptFrom(ctx context.Context) int {
	if n, ok := ctx.Value(attemptKey{}).(int); ok {
		return n
	}
	return 1
}

// Host is the default destination key: the request URL's host[:port].
func Host(req *http.Request) string { return req.URL.Host }

// Options configures a Transport. Only Estimator is usually needed; the
// zero values of the others are sensible.
type Options struct {
	// Base is the RoundTripper that does the work. Default http.DefaultTransport.
	Base http.RoundTripper
	// Config picks timeouts; it must validate. Default (zero value):
	// timeout.DefaultConfig().
	Config timeout.Config
	// Estimator gives the latency quantile per destination key, e.g. a
	// tracker.SyncTracker[string] or the fleet view. Nil means no data: every
	// attempt gets the exponential fallback.
	Estimator timeout.Estimator[string]
	// Recorder takes the latency of every completed attempt and the timeout
	// of every timed-out one, in ms. Usually the same tracker as Estimator.
	// Nil records nothing.
	Recorder timeout.Recorder[string]
	// Destination maps a request to its destination key. Default Host.
	Destination func(*http.Request) string
	// Now is the clock for selecting timeouts and measuring latency.
	// Default time.Now. (The deadline itself is applied with
	// context.WithTimeoutCause, which uses the runtime's clock.)
	Now func() time.Time
}

// Transport is an http.RoundTripper that gives each request the adaptive
// timeout of its destination and attempt, and records its latency. It is safe
// for concurrent use if its Estimator and Recorder are.
type Transport struct {
	base   http.RoundTripper
	cfg    timeout.Config
	est    timeout.Estimator[string]
	rec    timeout.Recorder[string]
	dest   func(*http.Request) string
	now    func() time.Time
	noData bool
}

// New returns a Transport, or the error of o.Config.Validate.
func New(o Options) (*Transport, error) {
	if o.Config == (timeout.Config{}) {
		o.Config = timeout.DefaultConfig()
	}
	if err := o.Config.Validate(); err != nil {
		return nil, fmt.Errorf("timeouthttp: %w", err)
	}
	t := &Transport{base: o.Base, cfg: o.Config, est: o.Estimator, rec: o.Recorder, dest: o.Destination, now: o.Now}
	if t.base == nil {
		t.base = http.DefaultTransport
	}
	if t.dest == nil {
		t.dest = Host
	}
	if t.now == nil {
		t.now = time.Now
	}
	t.noData = t.est == nil
	return t, nil
}

// Timeout returns the timeout RoundTrip would apply to req now (before the
// caller's own deadline is taken into account).
func (t *Transport) Timeout(req *http.Request) time.Duration {
	return t.timeout(t.dest(req), AttemptFrom(req.Context()), t.now())
}

func (t *Transport) timeout(dest string, attempt int, now time.Time) time.Duration {
	if t.noData {
		return t.cfg.ExponentialBackoff(attempt)
	}
	return timeout.Select(t.cfg, t.est, []string{dest}, attempt, now)
}

// RoundTrip sends req through the base transport under a context that ends
// at the adaptive timeout (or at the caller's own deadline, if that is
// earlier). The timeout covers the whole attempt, body included: the
// context is cancelled only when the response body has been read to EOF or
// closed, so a body read within the timeout is never truncated. Close every
// response body, as with any http.Client.
//
// Recording, through Options.Recorder, once per attempt. An attempt that
// completes is recorded at its latency from the start of RoundTrip to the
// moment the whole body had arrived: EOF, or the last of ContentLength bytes
// read. An attempt whose body is closed before that is recorded at the last
// moment body data (or, if none was read, the response headers) arrived:
// time the caller spends on the response afterwards is not latency. An
// attempt the adaptive timeout ends while it waits on the destination is
// recorded at the timeout (censoring: otherwise the tail vanishes exactly
// when timeouts are too tight and they ratchet down). An attempt the
// caller's context ended (cancellation or the caller's earlier deadline) and
// one that failed for another reason (connection refused, reset) are not
// recorded.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	parent := req.Context()
	a := &attempt{t: t, parent: parent, dest: t.dest(req), attempt: AttemptFrom(parent), start: t.now()}
	a.timeout = t.timeout(a.dest, a.attempt, a.start)
	a.ctx, a.cancel = context.WithTimeoutCause(parent, a.timeout, ErrTimeout)
	resp, err := t.base.RoundTrip(req.WithContext(a.ctx))
	if err != nil {
		return nil, a.fail(err)
	}
	headers := a.elapsed()
	if resp.Body == nil { // not allowed by the RoundTripper contract; be safe
		a.complete(headers)
		a.cancel()
		return resp, nil
	}
	a.last.Store(int64(headers))
	a.length = resp.ContentLength
	a.body = resp.Body
	resp.Body = a
	return resp, nil
}

// attempt is one RoundTrip's state and, after it returns, the response body.
type attempt struct {
	t       *Transport
	parent  context.Context
	ctx     context.Context
	cancel  context.CancelFunc
	dest    string
	attempt int
	start   time.Time
	timeout time.Duration
	body    io.ReadCloser
	length  int64        // the response's ContentLength; <= 0 means unknown (EOF decides)
	got     int64        // body bytes read (Read is never concurrent with itself)
	last    atomic.Int64 // when body data (at first, the headers) last arrived, as time since start
	done    atomic.Bool  // recorded, or judged not to be
}

func (a *attempt) elapsed() time.Duration { return a.t.now().Sub(a.start) }

// Read reads the body. The attempt completes when the whole body has arrived
// (the last of ContentLength bytes, or EOF); an error other than EOF ends it.
// Close may run concurrently with Read, as net/http allows.
func (a *attempt) Read(p []byte) (int, error) {
	n, err := a.body.Read(p)
	var at time.Duration = -1
	if n > 0 {
		at = a.elapsed()
		a.last.Store(int64(at))
		a.got += int64(n)
		if a.length > 0 && a.got >= a.length {
			a.complete(at) // the context lives on until EOF or Close
		}
	}
	switch {
	case err == io.EOF:
		if at < 0 {
			at = a.elapsed()
		}
		a.complete(at)
		a.cancel()
	case err != nil:
		err = a.fail(err)
	}
	return n, err
}

// Close closes the body. If the whole body had not arrived, the caller
// stopped reading of its own accord: the attempt counts as completed when its
// last data arrived.
func (a *attempt) Close() error {
	err := a.body.Close()
	a.complete(time.Duration(a.last.Load()))
	a.cancel()
	return err
}

// complete ends a successful attempt at latency d: record it unless the
// caller gave up on it.
func (a *attempt) complete(d time.Duration) {
	if !a.done.CompareAndSwap(false, true) {
		return
	}
	if a.parent.Err() != nil {
		return
	}
	a.record(d)
}

// fail ends a failed attempt and returns the error to hand the caller: a
// *TimeoutError, recorded at the timeout, when the adaptive timeout caused it.
func (a *attempt) fail(err error) error {
	timedOut := context.Cause(a.ctx) == ErrTimeout
	if a.done.CompareAndSwap(false, true) && timedOut {
		a.record(a.timeout)
	}
	a.cancel()
	if timedOut {
		return &TimeoutError{Dest: a.dest, Attempt: a.attempt, Limit: a.timeout, Err: err}
	}
	return err
}

func (a *attempt) record(d time.Duration) {
	if a.t.rec == nil {
		return
	}
	a.t.rec.RecordMillis(a.dest, uint64(max(d, 0)/time.Millisecond), a.t.now())
}

// CloseIdleConnections closes the base transport's idle connections if it
// can (http.Client.CloseIdleConnections calls this).
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
