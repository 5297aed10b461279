package timeouthttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/internal/policytest"
	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// closeSpy is a request or response body that remembers being closed.
type closeSpy struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeSpy) Close() error {
	c.closed.Store(true)
	return nil
}

// TestObservedAtTheAttemptsEnd: Observe's now is the moment the attempt
// ended, its start plus its latency, not its start.
func TestObservedAtTheAttemptsEnd(t *testing.T) {
	p := policy("h", time.Second)
	tr := stepped(t, roundTripFunc(okResponse), p, 7*time.Millisecond)
	req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	// Clock reads 7 ms apart: start, headers, the read of the data, the
	// read of EOF (which completes it).
	require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 21 * time.Millisecond}}, p.Observed())
	require.Equal(t, []time.Time{time.Unix(1_700_000_000, 0).Add(21 * time.Millisecond)}, p.ObservedAt())
}

// TestObservedAtTheLastContentLengthByte: a body of known length completes
// at the read that brings its last byte, before the caller reads EOF or
// closes the body, and its context lives on until then.
func TestObservedAtTheLastContentLengthByte(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policy("h", 80*time.Millisecond)
		resp, ctx := dripGet(t, p, 10)
		_, err := io.ReadFull(resp.Body, make([]byte, 10))
		require.NoError(t, err)
		require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 30 * time.Millisecond}},
			p.Observed(), "observed at the last byte, before EOF")
		require.NoError(t, ctx.Err(), "the context lives on until EOF or Close")
		require.NoError(t, resp.Body.Close())
		require.Len(t, p.Observed(), 1)
	})
}

// TestReadAfterCompletionCutByTheTimeout: a body of known length that is
// complete but read on past its length until the adaptive timeout cuts it
// still hands the caller an error matching ErrTimeout, whatever error the
// base body gives, and observes the attempt only once.
func TestReadAfterCompletionCutByTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policy("h", 80*time.Millisecond)
		tr := newTransport(t, Options{Policy: p, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			ctx := r.Context()
			return &http.Response{StatusCode: http.StatusOK, ContentLength: 5, Request: r,
				Body: io.NopCloser(io.MultiReader(strings.NewReader("01234"), errAtDone{ctx}))}, nil
		})})
		req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		_, err = io.ReadFull(resp.Body, make([]byte, 5))
		require.NoError(t, err)
		_, err = resp.Body.Read(make([]byte, 1))
		require.ErrorIs(t, err, ErrTimeout)
		var te *TimeoutError
		require.ErrorAs(t, err, &te)
		require.Equal(t, 80*time.Millisecond, te.Limit)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.Completed}}, p.Observed())
	})
}

// errAtDone blocks until ctx ends, then fails with ctx.Err() (not its
// cause), as a base transport other than net/http may.
type errAtDone struct{ ctx context.Context }

func (r errAtDone) Read([]byte) (int, error) {
	<-r.ctx.Done()
	return 0, r.ctx.Err()
}

// TestCloseEndsTheAttempt: closing a body before EOF ends the attempt's
// context at once, not at the timeout.
func TestCloseEndsTheAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policy("h", 80*time.Millisecond)
		resp, ctx := dripGet(t, p, -1)
		_, err := io.ReadFull(resp.Body, make([]byte, 5))
		require.NoError(t, err)
		require.NoError(t, ctx.Err())
		require.NoError(t, resp.Body.Close())
		require.ErrorIs(t, ctx.Err(), context.Canceled, "released at Close")
		require.NotErrorIs(t, context.Cause(ctx), ErrTimeout)
	})
}

// TestCallerLeftBeforeClose: a caller that cancels its context after part
// of the body and then closes it gave up on the attempt: nothing is
// learned.
func TestCallerLeftBeforeClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policy("h", time.Second)
		tr := newTransport(t, Options{Policy: p, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusOK, ContentLength: -1, Request: r,
				Body: &dripBody{chunks: []string{"01234", "56789"}, delay: 10 * time.Millisecond}}, nil
		})})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		_, err = io.ReadFull(resp.Body, make([]byte, 5))
		require.NoError(t, err)
		cancel()
		require.NoError(t, resp.Body.Close())
		require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.Canceled, Elapsed: 10 * time.Millisecond}}, p.Observed())
	})
}

// TestCallerCancelIsNotClassified: the caller's own cancellation is
// Canceled whatever Options.Classify would say of the error it causes.
func TestCallerCancelIsNotClassified(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policy("h", time.Second)
		tr := newTransport(t, Options{Policy: p, Base: &slowBase{delay: time.Hour},
			Classify: func(error) timeout.Outcome { return timeout.Failed }})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		_, err = tr.RoundTrip(req)
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.Canceled, Elapsed: 20 * time.Millisecond}}, p.Observed())
	})
}

// TestTimeoutErrorWrapsTheBaseError: the *TimeoutError of an attempt the
// adaptive timeout ended unwraps to the base transport's own error.
func TestTimeoutErrorWrapsTheBaseError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gaveUp := errors.New("base gave up")
		p := policy("h", 50*time.Millisecond)
		tr := newTransport(t, Options{Policy: p, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			return nil, gaveUp
		})})
		req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		_, err = tr.RoundTrip(req)
		require.ErrorIs(t, err, ErrTimeout)
		require.ErrorIs(t, err, gaveUp)
		require.EqualError(t, err, "timeouthttp: adaptive timeout exceeded (dest h, attempt 1, timeout 50ms): base gave up")
	})
}

// TestProbeableAttemptClosesTheRequestBody: an attempt that may become a
// shadow probe sends a copy of the body (GetBody) and closes the caller's,
// as a RoundTripper must.
func TestProbeableAttemptClosesTheRequestBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := probing()
		base := &slowBase{delay: 10 * time.Millisecond, body: "ok"}
		tr := newTransport(t, Options{Base: base, Policy: p})
		req, err := http.NewRequest(http.MethodPost, "http://h/", strings.NewReader("payload"))
		require.NoError(t, err)
		body := &closeSpy{Reader: strings.NewReader("payload")}
		req.Body = body // GetBody stays: the attempt is probeable
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.True(t, body.closed.Load(), "the caller's body is closed")
		require.Equal(t, []string{"payload"}, base.bodies)
	})
}

// TestProbeableBodyCutWhenTheCallerLeaves: a probeable attempt answered in
// time hands the caller a body that its own cancellation cuts at once, not
// only the timeout.
func TestProbeableBodyCutWhenTheCallerLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := probing()
		tr := newTransport(t, Options{Policy: p, Base: stallingBody(10 * time.Millisecond)})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		start := time.Now()
		time.AfterFunc(20*time.Millisecond, cancel)
		got, err := io.ReadAll(resp.Body)
		require.Equal(t, "part", string(got))
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrTimeout)
		require.Equal(t, 20*time.Millisecond, time.Since(start), "cut when the caller left")
		require.NoError(t, resp.Body.Close())
		require.Equal(t, []timeout.Outcome{timeout.Canceled}, p.Outcomes())
		require.Zero(t, p.Probes())
	})
}

// TestShadowProbeTimesTheWholeBody: a shadow probe's latency runs until its
// whole body arrived, not to its headers.
func TestShadowProbeTimesTheWholeBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := probing()
		tr := newTransport(t, Options{Policy: p, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			time.Sleep(300 * time.Millisecond)
			return &http.Response{StatusCode: http.StatusOK, ContentLength: -1, Request: r,
				Body: &dripBody{chunks: []string{"01234", "56789"}, delay: 100 * time.Millisecond}}, nil
		})})
		req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		_, err = tr.RoundTrip(req)
		require.ErrorIs(t, err, ErrTimeout)
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 500 * time.Millisecond, Probe: true}},
			p.Observed())
	})
}

// TestShadowProbeOnlyIfUnanswered: a response that arrives at the very
// moment of the timeout goes either to the caller or to a probe, and the
// attempt is observed once either way: a round trip that has returned is
// never made a probe (nobody would observe it, and its reservation would
// stay). Both wake-ups are ready at once, so repeat to give either order
// its turn.
func TestShadowProbeOnlyIfUnanswered(t *testing.T) {
	for range 32 {
		synctest.Test(t, func(t *testing.T) {
			p := probing()
			tr := newTransport(t, Options{Policy: p, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				time.Sleep(100 * time.Millisecond) // exactly the timeout
				return okResponse(r)
			})})
			req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				require.NoError(t, resp.Body.Close())
			} else {
				require.ErrorIs(t, err, ErrTimeout)
			}
			synctest.Wait()
			require.Len(t, p.Observed(), 1)
			require.Equal(t, timeout.Completed, p.Observed()[0].Outcome)
			require.False(t, p.InFlight("h"), "no reservation left")
		})
	}
}

// declining offers probes at Decide but declines them at Probe, as when
// another attempt reserved the probe in between.
type declining struct{ *policytest.Policy }

func (declining) Probe(*timeout.Attempt, time.Time) bool { return false }

// TestTimedOutThenCallerCancels: once our timeout has ended an attempt, a
// cancellation of the caller's that comes while the base transport is
// still returning changes nothing: TimedOut, matching ErrTimeout, whether
// the attempt could become a probe (and the probe was declined at the
// timeout) or not, as node.Do and timeoutgrpc say.
func TestTimedOutThenCallerCancels(t *testing.T) {
	for _, probe := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			p := policy("h", 100*time.Millisecond)
			if probe {
				p.OfferProbe(time.Second)
			}
			tr := newTransport(t, Options{Policy: declining{p}, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				time.Sleep(200 * time.Millisecond) // it reports its context's end late
				return nil, context.Cause(r.Context())
			})})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			time.AfterFunc(150*time.Millisecond, cancel)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://h/", nil)
			require.NoError(t, err)
			_, err = tr.RoundTrip(req)
			require.ErrorIs(t, err, ErrTimeout, "probeable: %v", probe)
			require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 200 * time.Millisecond}}, p.Observed(),
				"probeable: %v", probe)
			require.Zero(t, p.Probes())
		})
	}
}

// TestAnsweredAfterTheCallerLeft: a response whose whole body arrives
// after the caller's cancellation (a base and body that do not watch the
// context) is the destination's answer: Completed at its latency, as
// node.Do has a fn that returns nil after its caller left, and as
// timeoutgrpc has a reply that comes then. (An early Close after the
// caller left is Canceled: TestCallerLeftBeforeClose.)
func TestAnsweredAfterTheCallerLeft(t *testing.T) {
	for _, probe := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			p := policy("h", time.Second)
			if probe {
				p.OfferProbe(time.Minute)
			}
			tr := newTransport(t, Options{Policy: p, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				time.Sleep(50 * time.Millisecond)
				return &http.Response{StatusCode: http.StatusOK, ContentLength: -1, Request: r,
					Body: io.NopCloser(strings.NewReader("hello"))}, nil
			})})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			time.AfterFunc(20*time.Millisecond, cancel)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://h/", nil)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err, "probeable: %v", probe)
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, "hello", string(b))
			require.NoError(t, resp.Body.Close())
			require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 50 * time.Millisecond}}, p.Observed(),
				"probeable: %v", probe)
		})
	}
}

// holdingClock returns a clock that holds its caller for 2 ms on the read
// after hold is set: an attempt's deadline 1 ms away then passes between
// the base transport's return and the Transport's look at the context.
func holdingClock(hold *atomic.Bool) func() time.Time {
	return func() time.Time {
		now := time.Now()
		if hold.CompareAndSwap(true, false) {
			time.Sleep(2 * time.Millisecond) // past the deadline: the attempt's context ends
		}
		return now
	}
}

var errApp, errRefused = errors.New("not found"), errors.New("refused")

// classifyTest says Failed of errRefused and Completed of any other error.
func classifyTest(err error) timeout.Outcome {
	if errors.Is(err, errRefused) {
		return timeout.Failed
	}
	return timeout.Completed
}

// TestErrorBeforeTheDeadline: an error the base transport returned 1 ms
// before our timeout, or before the caller's deadline, is its own, as
// Options.Classify says at the latency measured, and not ErrTimeout, even
// when the deadline has ended the attempt's context by the time the
// Transport looks at it, as node.Do decides by when fn returned.
func TestErrorBeforeTheDeadline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		caller  time.Duration // the caller's deadline; 0: none
		err     error
		outcome timeout.Outcome
	}{
		{"an answer, before our timeout", 0, errApp, timeout.Completed},
		{"a refusal, before our timeout", 0, errRefused, timeout.Failed},
		{"a refusal, before the caller's deadline", 250 * time.Millisecond, errRefused, timeout.Failed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var hold atomic.Bool
				p := policy("h", 250*time.Millisecond)
				ctx := context.Background()
				if tc.caller > 0 {
					p = policy("h", time.Second)
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.caller)
					defer cancel()
				}
				tr := newTransport(t, Options{Policy: p, Now: holdingClock(&hold), Classify: classifyTest,
					Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
						time.Sleep(249 * time.Millisecond)
						hold.Store(true)
						return nil, tc.err
					})})
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://h/", nil)
				require.NoError(t, err)
				_, err = tr.RoundTrip(req)
				require.ErrorIs(t, err, tc.err)
				require.NotErrorIs(t, err, ErrTimeout)
				require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: tc.outcome, Elapsed: 249 * time.Millisecond}}, p.Observed())
			})
		})
	}
}

// TestBodyErrorBeforeTheDeadline: an error a read of the body returned
// 1 ms before our timeout, or before the caller's deadline, is its own, as
// Options.Classify says at the latency measured, and not ErrTimeout, even
// when the deadline has ended the attempt (or, for an attempt that could
// have become a probe, cut its body) by the time the Transport looks, as a
// round trip's error is (TestErrorBeforeTheDeadline) and as timeoutgrpc
// decides. A read error once the caller has cancelled is the caller's.
func TestBodyErrorBeforeTheDeadline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		caller  time.Duration // the caller's deadline; 0: none
		cancel  bool          // the caller cancels at 100 ms
		probe   bool          // the attempt could become a probe
		outcome timeout.Outcome
	}{
		{"before our timeout", 0, false, false, timeout.Failed},
		{"before our timeout, probeable", 0, false, true, timeout.Failed},
		{"before the caller's deadline", 250 * time.Millisecond, false, false, timeout.Failed},
		{"after the caller cancelled", 0, true, false, timeout.Canceled},
		{"after the caller cancelled, probeable", 0, true, true, timeout.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var hold atomic.Bool
				p := policy("h", 250*time.Millisecond)
				ctx := context.Background()
				if tc.caller > 0 {
					p = policy("h", time.Second)
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.caller)
					defer cancel()
				}
				if tc.probe {
					p.OfferProbe(time.Second)
				}
				if tc.cancel {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(ctx)
					defer cancel()
					time.AfterFunc(100*time.Millisecond, cancel)
				}
				tr := newTransport(t, Options{Policy: p, Now: holdingClock(&hold), Classify: classifyTest,
					Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
						time.Sleep(10 * time.Millisecond)
						return &http.Response{StatusCode: http.StatusOK, ContentLength: -1, Request: r,
							Body: io.NopCloser(readFunc(func([]byte) (int, error) {
								time.Sleep(239 * time.Millisecond) // it does not watch the context
								hold.Store(true)
								return 0, errRefused
							}))}, nil
					})})
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://h/", nil)
				require.NoError(t, err)
				resp, err := tr.RoundTrip(req)
				require.NoError(t, err)
				_, err = resp.Body.Read(make([]byte, 5))
				require.ErrorIs(t, err, errRefused)
				require.NotErrorIs(t, err, ErrTimeout)
				require.NoError(t, resp.Body.Close())
				require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: tc.outcome, Elapsed: 249 * time.Millisecond}}, p.Observed())
			})
		})
	}
}

type readFunc func([]byte) (int, error)

func (f readFunc) Read(p []byte) (int, error) { return f(p) }

// TestProbeableErrorBeforeTheTimeout: an error the round trip of an
// attempt that may become a probe returned 1 ms before its timeout is its
// own, as Options.Classify says, not a timeout, though the timer has fired
// too by the time the Transport looks: the return in hand comes first, and
// no probe is taken for it, as on the plain path
// (TestErrorBeforeTheDeadline) and in node.Do. Here the caller's context
// holds the Transport for 101 ms as it enters its wait, so the return (99
// ms) and the timer's firing (100 ms) are both ready when it looks and Go's
// select takes either: repeated, so that each gets its turn. The latency
// is the round trip's, 99 ms, not the time the Transport got to it.
func TestProbeableErrorBeforeTheTimeout(t *testing.T) {
	for range 64 {
		synctest.Test(t, func(t *testing.T) {
			p := probing()
			tr := newTransport(t, Options{Policy: p, Classify: classifyTest, Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
				time.Sleep(99 * time.Millisecond)
				return nil, errRefused
			})})
			ctx := testutil.SlowDone(context.Background(), 101*time.Millisecond)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://h/", nil)
			require.NoError(t, err)
			_, err = tr.RoundTrip(req)
			require.True(t, ctx.Held())
			require.ErrorIs(t, err, errRefused)
			require.NotErrorIs(t, err, ErrTimeout)
			synctest.Wait()
			require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.Failed, Elapsed: 99 * time.Millisecond}}, p.Observed())
			require.Zero(t, p.Probes())
			require.False(t, p.InFlight("h"), "no reservation left")
		})
	}
}
