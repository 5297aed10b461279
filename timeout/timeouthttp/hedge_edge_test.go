package timeouthttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/internal/policytest"
	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// fixedHedger is a test Policy that is also a timeout.Hedger: every request
// may hedge after delay, and the budget always allows it. SpendHedge takes
// hold (none if zero): a budget behind a busy lock holds the request's
// coordinator as it spends.
type fixedHedger struct {
	*policytest.Policy
	delay time.Duration
	hold  time.Duration
	spent atomic.Int32
}

func (h *fixedHedger) HedgeDelay(string, time.Time) (time.Duration, bool) { return h.delay, true }

func (h *fixedHedger) SpendHedge(time.Time) bool {
	h.spent.Add(1)
	if h.hold > 0 {
		time.Sleep(h.hold)
	}
	return true
}

// hedger returns a fixedHedger with a hedge delay of 21 ms and a timeout of
// d to "h".
func hedger(d time.Duration) *fixedHedger {
	return &fixedHedger{Policy: policy("h", d), delay: 21 * time.Millisecond}
}

// callsBase is a RoundTripper whose n-th call (0, 1, …) is calls[n]: it
// records each request's body first.
type callsBase struct {
	calls  []roundTripFunc
	mu     sync.Mutex
	bodies []string
}

func (b *callsBase) RoundTrip(r *http.Request) (*http.Response, error) {
	var sent string
	if r.Body != nil {
		s, _ := io.ReadAll(r.Body)
		_ = r.Body.Close()
		sent = string(s)
	}
	b.mu.Lock()
	i := len(b.bodies)
	b.bodies = append(b.bodies, sent)
	b.mu.Unlock()
	return b.calls[i](r)
}

func (b *callsBase) sent() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.bodies...)
}

// after answers okResponse after d, unless the request's context ends
// first.
func after(d time.Duration) roundTripFunc {
	return func(r *http.Request) (*http.Response, error) {
		select {
		case <-time.After(d):
			return okResponse(r)
		case <-r.Context().Done():
			return nil, context.Cause(r.Context())
		}
	}
}

// TestHedgeableRequests: which requests hedge: every idempotent method, a
// request with either idempotency key header, and none whose body cannot
// be read again.
func TestHedgeableRequests(t *testing.T) {
	once := func() io.Reader { return io.MultiReader(strings.NewReader("once")) } // no GetBody
	for _, tc := range []struct {
		name   string
		method string
		header string
		body   func() io.Reader
		calls  int
	}{
		{"HEAD", http.MethodHead, "", nil, 2},
		{"OPTIONS", http.MethodOptions, "", nil, 2},
		{"TRACE", http.MethodTrace, "", nil, 2},
		{"POST with X-Idempotency-Key", http.MethodPost, "X-Idempotency-Key", nil, 2},
		{"PUT", http.MethodPut, "", nil, 1},
		{"POST with a key and a body read once", http.MethodPost, "Idempotency-Key", once, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := hedger(time.Second)
				seq := &policytest.Seq{Delays: []time.Duration{100 * time.Millisecond, 5 * time.Millisecond}}
				rt := newTransport(t, Options{Base: seqBase{seq}, Policy: p, Hedge: true})
				var body io.Reader
				if tc.body != nil {
					body = tc.body()
				}
				req, err := http.NewRequest(tc.method, "http://h/", body)
				require.NoError(t, err)
				if tc.header != "" {
					req.Header.Set(tc.header, "k1")
				}
				resp, err := rt.RoundTrip(req)
				require.NoError(t, err)
				require.NoError(t, resp.Body.Close())
				synctest.Wait()
				require.Len(t, seq.Causes(), tc.calls)
			})
		})
	}
}

// TestHedgeSendsTheBodyAgain: the hedge of a request with a body sends the
// whole body again, from GetBody.
func TestHedgeSendsTheBodyAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := hedger(time.Second)
		base := &callsBase{calls: []roundTripFunc{after(time.Hour), after(5 * time.Millisecond)}}
		rt := newTransport(t, Options{Base: base, Policy: p, Hedge: true})
		req, err := http.NewRequest(http.MethodPost, "http://h/", strings.NewReader("payload"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "k1")
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		synctest.Wait()
		require.Equal(t, []string{"payload", "payload"}, base.sent())
	})
}

// TestHedgeBothFailFirstError: when the first attempt and its hedge both
// fail, the first one's error is returned, whichever failed last.
func TestHedgeBothFailFirstError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errFirst, errHedge := errors.New("first failed"), errors.New("hedge failed")
		fail := func(d time.Duration, err error) roundTripFunc {
			return func(*http.Request) (*http.Response, error) {
				time.Sleep(d)
				return nil, err
			}
		}
		p := hedger(time.Second)
		base := &callsBase{calls: []roundTripFunc{fail(50*time.Millisecond, errFirst), fail(39*time.Millisecond, errHedge)}}
		rt := newTransport(t, Options{Base: base, Policy: p, Hedge: true})
		req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		start := time.Now()
		_, err = rt.RoundTrip(req)
		require.ErrorIs(t, err, errFirst)
		require.NotErrorIs(t, err, errHedge)
		require.Equal(t, 60*time.Millisecond, time.Since(start), "the hedge was waited for")
		require.Len(t, p.Observed(), 2)
	})
}

// TestNoHedgeAfterTheCallerLeft: once the caller's context has ended, the
// hedge delay sends nothing and spends no budget, even if the first
// attempt has not returned yet.
func TestNoHedgeAfterTheCallerLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := hedger(time.Second)
		slow := func(r *http.Request) (*http.Response, error) { // a base that does not watch its context
			time.Sleep(100 * time.Millisecond)
			return okResponse(r)
		}
		base := &callsBase{calls: []roundTripFunc{slow, slow}}
		rt := newTransport(t, Options{Base: base, Policy: p, Hedge: true})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(10*time.Millisecond, cancel)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		synctest.Wait()
		require.Len(t, base.sent(), 1, "no hedge")
		require.Zero(t, p.spent.Load(), "no budget spent")
		require.Equal(t, []timeout.Outcome{timeout.Canceled}, p.Outcomes())
	})
}

// TestHedgeLoserTimedOut: a loser whose own timeout had ended it before
// the other attempt won is observed as timed out, not superseded, and the
// response it brings back late is closed.
func TestHedgeLoserTimedOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := hedger(250 * time.Millisecond)
		late := &closeSpy{Reader: strings.NewReader("late")}
		base := &callsBase{calls: []roundTripFunc{
			func(r *http.Request) (*http.Response, error) { // past its timeout: it does not watch its context
				time.Sleep(400 * time.Millisecond)
				return &http.Response{StatusCode: http.StatusOK, Body: late, Request: r}, nil
			},
			after(235 * time.Millisecond), // from 21 ms: it wins at 256 ms
		}}
		rt := newTransport(t, Options{Base: base, Policy: p, Hedge: true})
		req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []obs{
			{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 235 * time.Millisecond},
			{Dest: "h", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 400 * time.Millisecond},
		}, p.Observed())
		require.True(t, late.closed.Load(), "the loser's late response is closed")
	})
}

// TestHedgeLoserResponseClosed: a loser that answers after the other
// attempt won has its response closed, and is superseded at the time it
// lost.
func TestHedgeLoserResponseClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := hedger(time.Second)
		late := &closeSpy{Reader: strings.NewReader("late")}
		base := &callsBase{calls: []roundTripFunc{
			func(r *http.Request) (*http.Response, error) {
				time.Sleep(100 * time.Millisecond)
				return &http.Response{StatusCode: http.StatusOK, Body: late, Request: r}, nil
			},
			after(5 * time.Millisecond),
		}}
		rt := newTransport(t, Options{Base: base, Policy: p, Hedge: true})
		req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []obs{
			{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 5 * time.Millisecond},
			{Dest: "h", Attempt: 1, Outcome: timeout.Superseded, Elapsed: 26 * time.Millisecond},
		}, p.Observed())
		require.True(t, late.closed.Load())
	})
}

// TestHedgedAttemptNumber: both attempts of a hedged request are the
// attempt the context names, with that attempt's timeout.
func TestHedgedAttemptNumber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := hedger(100 * time.Millisecond)
		seq := &policytest.Seq{Delays: []time.Duration{time.Hour}}
		rt := newTransport(t, Options{Base: seqBase{seq}, Policy: p, Hedge: true})
		req, err := http.NewRequestWithContext(timeout.WithAttempt(context.Background(), 3), http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		start := time.Now()
		_, err = rt.RoundTrip(req)
		require.ErrorIs(t, err, ErrTimeout)
		require.Equal(t, 421*time.Millisecond, time.Since(start), "the hedge's 400 ms timeout, from 21 ms")
		require.Equal(t, []obs{
			{Dest: "h", Attempt: 3, Outcome: timeout.TimedOut, Elapsed: 400 * time.Millisecond},
			{Dest: "h", Attempt: 3, Outcome: timeout.TimedOut, Elapsed: 400 * time.Millisecond},
		}, p.Observed())
	})
}

// TestHedgeWithInjectedClock: with Options.Now, a hedged attempt's
// deadline is its timeout on the runtime's timers, not a reading of the
// injected clock.
func TestHedgeWithInjectedClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := hedger(100 * time.Millisecond)
		clock := &stepClock{t: time.Now().Add(time.Hour), step: time.Millisecond}
		seq := &policytest.Seq{Delays: []time.Duration{time.Hour}}
		rt := newTransport(t, Options{Base: seqBase{seq}, Policy: p, Hedge: true, Now: clock.Now})
		req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		start := time.Now()
		_, err = rt.RoundTrip(req)
		require.ErrorIs(t, err, ErrTimeout)
		require.Equal(t, 121*time.Millisecond, time.Since(start), "the hedge's own timeout, from 21 ms")
		require.Equal(t, []timeout.Outcome{timeout.TimedOut, timeout.TimedOut}, p.Outcomes())
	})
}

// TestHedgeAttemptsAnswerTogether: when both attempts answer at the same
// moment, one wins and the other is observed (superseded) and its response
// closed, whichever order their results are taken in. Repeat to give
// either order its turn.
func TestHedgeAttemptsAnswerTogether(t *testing.T) {
	for range 64 {
		synctest.Test(t, func(t *testing.T) {
			p := hedger(time.Second)
			bodies := []*closeSpy{{Reader: strings.NewReader("0")}, {Reader: strings.NewReader("1")}}
			answer := func(i int, d time.Duration) roundTripFunc {
				return func(r *http.Request) (*http.Response, error) {
					time.Sleep(d)
					return &http.Response{StatusCode: http.StatusOK, Body: bodies[i], Request: r}, nil
				}
			}
			base := &callsBase{calls: []roundTripFunc{answer(0, 100*time.Millisecond), answer(1, 79*time.Millisecond)}}
			rt := newTransport(t, Options{Base: base, Policy: p, Hedge: true})
			req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
			require.NoError(t, err)
			resp, err := rt.RoundTrip(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			synctest.Wait()
			require.ElementsMatch(t, []timeout.Outcome{timeout.Completed, timeout.Superseded}, p.Outcomes())
			require.True(t, bodies[0].closed.Load())
			require.True(t, bodies[1].closed.Load())
		})
	}
}

// TestHedgeLoserSupersededBeforeItsDeadline: a loser that lost before its
// own deadline is superseded at the time it lost, even when its base
// reports a deadline's error after that deadline has passed: the other
// attempt's win came first, as node.DoHedged and timeoutgrpc say.
func TestHedgeLoserSupersededBeforeItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := hedger(300 * time.Millisecond)
		base := &callsBase{calls: []roundTripFunc{
			func(*http.Request) (*http.Response, error) { // it does not watch its context
				time.Sleep(400 * time.Millisecond)
				return nil, context.DeadlineExceeded
			},
			after(100 * time.Millisecond),
		}}
		rt := newTransport(t, Options{Base: base, Policy: p, Hedge: true})
		req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []obs{
			{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 100 * time.Millisecond},
			{Dest: "h", Attempt: 1, Outcome: timeout.Superseded, Elapsed: 121 * time.Millisecond},
		}, p.Observed())
	})
}

// TestHedgeLoserAfterTheCallerLeft: when the caller's context ended
// before the other attempt won (a response that did not watch its
// context), a loser still running is the caller's, Canceled, not
// superseded: the cancellation came first, as node.DoHedged and
// timeoutgrpc say. The winner's response is an answer, as in node.Do.
func TestHedgeLoserAfterTheCallerLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := hedger(time.Second)
		slow := func(d time.Duration) roundTripFunc {
			return func(r *http.Request) (*http.Response, error) {
				time.Sleep(d) // it does not watch its context
				return &http.Response{StatusCode: http.StatusOK, ContentLength: -1, Request: r,
					Body: io.NopCloser(strings.NewReader("ok"))}, nil
			}
		}
		base := &callsBase{calls: []roundTripFunc{slow(200 * time.Millisecond), slow(50 * time.Millisecond)}}
		rt := newTransport(t, Options{Base: base, Policy: p, Hedge: true})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		time.AfterFunc(40*time.Millisecond, cancel)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		_, err = io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []obs{
			{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 50 * time.Millisecond},
			{Dest: "h", Attempt: 1, Outcome: timeout.Canceled, Elapsed: 200 * time.Millisecond},
		}, p.Observed())
	})
}

// TestHedgeErrorBeforeTheTimeout: a hedged attempt's error that came back
// 1 ms before its timeout is its own, though the timeout has ended its
// context by the time the request's coordinator takes it (here the clock,
// read as the round trip returns, holds the attempt for 2 ms before it is
// handed over), as node.DoHedged decides by when fn returned.
func TestHedgeErrorBeforeTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hold atomic.Bool
		p := hedger(250 * time.Millisecond)
		base := &callsBase{calls: []roundTripFunc{
			func(*http.Request) (*http.Response, error) {
				time.Sleep(249 * time.Millisecond)
				hold.Store(true)
				return nil, errRefused
			},
			after(time.Hour),
		}}
		rt := newTransport(t, Options{Base: base, Policy: p, Hedge: true, Now: holdingClock(&hold), Classify: classifyTest})
		req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		_, err = rt.RoundTrip(req)
		require.ErrorIs(t, err, errRefused, "the first attempt's error")
		require.NotErrorIs(t, err, ErrTimeout)
		require.Equal(t, []obs{
			{Dest: "h", Attempt: 1, Outcome: timeout.Failed, Elapsed: 249 * time.Millisecond},
			{Dest: "h", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 250 * time.Millisecond},
		}, p.Observed())
	})
}

// TestHedgeLoserReturnedInTime: a loser whose round trip returned before
// its own timeout, though that timeout has ended its context by the time
// the request's coordinator, taking the winner, gets to it (here the clock
// holds the coordinator for 3 ms as it handles the win, past the loser's
// timeout), is superseded, not timed out, as node.DoHedged decides a loser
// by when its fn returned and as timeoutgrpc says. Both are observed at
// their latencies when their round trips returned: the winner's 227 ms
// from its start, the loser's 249 ms (earlier than the coordinator's
// reading of the win, 251 ms), as node.DoHedged reads them when fn
// returned: the coordinator's delay is not the destination's.
func TestHedgeLoserReturnedInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hold atomic.Bool
		clock := testutil.CallerHeldClock(&hold, 3*time.Millisecond) // past the loser's timeout
		p := hedger(250 * time.Millisecond)
		late := &closeSpy{Reader: strings.NewReader("late")}
		base := &callsBase{calls: []roundTripFunc{
			func(r *http.Request) (*http.Response, error) { // it does not watch its context
				time.Sleep(249 * time.Millisecond)
				return &http.Response{StatusCode: http.StatusOK, Body: late, Request: r}, nil
			},
			func(r *http.Request) (*http.Response, error) {
				time.Sleep(227 * time.Millisecond) // from 21 ms: at 248 ms
				hold.Store(true)
				return okResponse(r)
			},
		}}
		rt := newTransport(t, Options{Base: base, Policy: p, Hedge: true, Now: clock})
		req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []obs{
			{Dest: "h", Attempt: 1, Outcome: timeout.Superseded, Elapsed: 249 * time.Millisecond}, // when it returned, before the win was handled
			{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 227 * time.Millisecond},  // when it returned, not when it was handled
		}, p.Observed())
		require.True(t, late.closed.Load())
	})
}

// TestHedgeAnswerErrorWins: an error Options.Classify calls Completed is
// an answer: it wins as a response does, is returned at once, and the
// other attempt is superseded, as timeoutgrpc has a status other than
// Unavailable win and node.DoHedged a completion. An error it calls
// Failed (or Canceled) leaves the other attempt running
// (TestHedgeBothFailFirstError).
func TestHedgeAnswerErrorWins(t *testing.T) {
	for _, first := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			p := hedger(time.Second)
			answer := func(r *http.Request) (*http.Response, error) {
				time.Sleep(5 * time.Millisecond)
				return nil, errApp
			}
			calls := []roundTripFunc{after(time.Hour), answer} // the hedge answers, at 26 ms
			ends := 26 * time.Millisecond
			want := []obs{
				{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 5 * time.Millisecond},
				{Dest: "h", Attempt: 1, Outcome: timeout.Superseded, Elapsed: 26 * time.Millisecond},
			}
			if first { // the first attempt answers, at 30 ms
				answer := func(r *http.Request) (*http.Response, error) {
					time.Sleep(30 * time.Millisecond)
					return nil, errApp
				}
				calls, ends = []roundTripFunc{answer, after(time.Hour)}, 30*time.Millisecond
				want = []obs{
					{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 30 * time.Millisecond},
					{Dest: "h", Attempt: 1, Outcome: timeout.Superseded, Elapsed: 9 * time.Millisecond},
				}
			}
			rt := newTransport(t, Options{Base: &callsBase{calls: calls}, Policy: p, Hedge: true, Classify: classifyTest})
			req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
			require.NoError(t, err)
			start := time.Now()
			_, err = rt.RoundTrip(req)
			require.ErrorIs(t, err, errApp, "first: %v", first)
			require.NotErrorIs(t, err, ErrTimeout)
			require.Equal(t, ends, time.Since(start), "returned at the answer; first: %v", first)
			synctest.Wait()
			require.Equal(t, want, p.Observed(), "first: %v", first)
		})
	}
}

// TestHedgeAnswerInHandBeforeTheHedge: the first attempt's return that
// the request's coordinator has in hand when it handles the hedge delay's
// passing comes first, as in node.DoHedged: an answer wins, and no hedge
// is sent (nothing spent, the base called once); a refusal is the
// request's error, as it is before the delay. Here the clock holds the
// coordinator (and only it: not the attempts' goroutines, which read it
// as their round trips return) for 2 ms on its first read after the first
// round trip started: the read that handles the delay's passing, when the timer is
// what it takes (or else the one that handles the answer). The round
// trip returns at the delay, 21 ms, the same instant the timer fires, so
// either may be taken first (repeated, so that each gets its turn), or
// 1 ms later, while the coordinator is held on the timer's firing.
func TestHedgeAnswerInHandBeforeTheHedge(t *testing.T) {
	for _, tc := range []struct {
		name    string
		returns time.Duration
		refused bool
		runs    int
	}{
		{"an answer at the delay", 21 * time.Millisecond, false, 64},
		{"an answer while the delay's passing is handled", 22 * time.Millisecond, false, 1},
		{"a refusal at the delay", 21 * time.Millisecond, true, 64},
		{"a refusal while the delay's passing is handled", 22 * time.Millisecond, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range tc.runs {
				synctest.Test(t, func(t *testing.T) {
					var hold atomic.Bool
					p := hedger(time.Second)
					base := &callsBase{calls: []roundTripFunc{
						func(r *http.Request) (*http.Response, error) {
							hold.Store(true) // the coordinator's start is read
							time.Sleep(tc.returns)
							if tc.refused {
								return nil, errRefused
							}
							return okResponse(r)
						},
						after(time.Millisecond), // the hedge, if sent, would win
					}}
					rt := newTransport(t, Options{Base: base, Policy: p, Hedge: true, Now: testutil.CallerHeldClock(&hold, 2*time.Millisecond), Classify: classifyTest})
					req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
					require.NoError(t, err)
					resp, err := rt.RoundTrip(req)
					if tc.refused {
						require.ErrorIs(t, err, errRefused)
					} else {
						require.NoError(t, err)
						_, err = io.ReadAll(resp.Body)
						require.NoError(t, err)
						require.NoError(t, resp.Body.Close())
					}
					synctest.Wait()
					require.Len(t, base.sent(), 1, "no hedge sent")
					require.Zero(t, p.spent.Load(), "no hedge token spent")
					want := timeout.Completed
					if tc.refused {
						want = timeout.Failed
					}
					require.Equal(t, []timeout.Outcome{want}, p.Outcomes())
				})
			}
		})
	}
}

// TestHedgeBodyUnavailableSpendsNothing: a hedge whose copy of the body
// cannot be had (GetBody fails) is not sent, and spends no hedge token:
// the budget pays only for hedges sent. The first attempt answers alone.
func TestHedgeBodyUnavailableSpendsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := hedger(time.Second)
		base := &callsBase{calls: []roundTripFunc{after(50 * time.Millisecond)}}
		rt := newTransport(t, Options{Base: base, Policy: p, Hedge: true})
		req, err := http.NewRequest(http.MethodPost, "http://h/", strings.NewReader("payload"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "k1")
		req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("body gone") }
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		synctest.Wait()
		require.Equal(t, []string{"payload"}, base.sent(), "no hedge sent")
		require.Zero(t, p.spent.Load(), "no hedge token spent")
		require.Equal(t, []timeout.Outcome{timeout.Completed}, p.Outcomes())
	})
}

// denyingHedger is a fixedHedger whose budget never allows a hedge.
type denyingHedger struct{ *fixedHedger }

func (h denyingHedger) SpendHedge(now time.Time) bool {
	h.fixedHedger.SpendHedge(now)
	return false
}

// TestHedgeDeniedClosesTheBodyCopy: a hedge the budget does not allow is
// not sent, and the copy of the body made for it is closed.
func TestHedgeDeniedClosesTheBodyCopy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := denyingHedger{hedger(time.Second)}
		base := &callsBase{calls: []roundTripFunc{after(50 * time.Millisecond)}}
		rt := newTransport(t, Options{Base: base, Policy: p, Hedge: true})
		req, err := http.NewRequest(http.MethodPost, "http://h/", strings.NewReader("payload"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "k1")
		var copies []*closeSpy
		req.GetBody = func() (io.ReadCloser, error) {
			c := &closeSpy{Reader: strings.NewReader("payload")}
			copies = append(copies, c)
			return c, nil
		}
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		synctest.Wait()
		require.Equal(t, []string{"payload"}, base.sent(), "no hedge sent")
		require.Equal(t, int32(1), p.spent.Load(), "the budget was asked")
		require.Len(t, copies, 1)
		require.True(t, copies[0].closed.Load(), "the unsent copy is closed")
	})
}
