package timeouthttp

import (
	"context"
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

// slowBase answers after delay (bubble time) unless its context ends first,
// and remembers the requests it saw.
type slowBase struct {
	delay  time.Duration
	body   string
	mu     sync.Mutex
	seen   []*http.Request
	bodies []string
}

func (s *slowBase) RoundTrip(r *http.Request) (*http.Response, error) {
	var sent string
	if r.Body != nil {
		b, _ := io.ReadAll(r.Body)
		_ = r.Body.Close()
		sent = string(b)
	}
	s.mu.Lock()
	s.seen = append(s.seen, r)
	s.bodies = append(s.bodies, sent)
	s.mu.Unlock()
	select {
	case <-time.After(s.delay):
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(s.body)), Request: r}, nil
	case <-r.Context().Done():
		return nil, context.Cause(r.Context())
	}
}

// hanging returns a Transport over p whose base never answers (within the
// test), and a GET to h under ctx.
func hanging(t *testing.T, p *policytest.Policy, ctx context.Context) (*Transport, *http.Request) {
	t.Helper()
	tr := newTransport(t, Options{Base: &slowBase{delay: time.Hour}, Policy: p})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://h/", nil)
	require.NoError(t, err)
	return tr, req
}

// probing returns a Policy with a 100 ms timeout to "h" and a probe of 1 s
// on offer.
func probing() *policytest.Policy {
	p := policy("h", 100*time.Millisecond)
	p.OfferProbe(time.Second)
	return p
}

func TestShadowProbe(t *testing.T) {
	t.Run("completes unseen at its real latency", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := probing()
			base := &slowBase{delay: 300 * time.Millisecond, body: "late"}
			tr := newTransport(t, Options{Base: base, Policy: p})
			req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
			require.NoError(t, err)
			start := time.Now()
			resp, err := tr.RoundTrip(req)
			require.Nil(t, resp)
			require.ErrorIs(t, err, ErrTimeout)
			require.EqualError(t, err, "timeouthttp: adaptive timeout exceeded (dest h, attempt 1, timeout 100ms)")
			require.Equal(t, 100*time.Millisecond, time.Since(start), "the caller's error at the normal timeout")
			require.Empty(t, p.Observed(), "the probe goes on")
			require.True(t, p.InFlight("h"))

			time.Sleep(time.Second)
			synctest.Wait()
			require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 300 * time.Millisecond, Probe: true}},
				p.Observed(), "observed once, at its latency")
			require.NotSame(t, req, base.seen[0], "the probe runs on a copy of the request")
			_, hasDeadline := req.Context().Deadline()
			require.False(t, hasDeadline)
		})
	})
	t.Run("times out at the probe timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := probing()
			ctx, cancel := context.WithCancel(context.Background())
			tr, req := hanging(t, p, ctx)
			_, err := tr.RoundTrip(req)
			require.ErrorIs(t, err, ErrTimeout)
			cancel() // the caller leaves, as a deferred cancel does: the probe is detached
			time.Sleep(2 * time.Second)
			synctest.Wait()
			require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: time.Second, Probe: true}},
				p.Observed())
			require.False(t, p.InFlight("h"))
		})
	})
	t.Run("declined: the attempt ends at its timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := probing()
			tr, req := hanging(t, p, context.Background())
			first := p.Decide("h", 1, time.Now())
			require.True(t, p.Probe(&first, time.Now()), "someone else took the probe after our Decide")
			a := p.Decide("h", 1, time.Now())
			require.Zero(t, a.ProbeTimeout)
			p.Observe(first, timeout.Canceled, 0, time.Now())
			p.OfferProbe(time.Second) // offered at Decide, gone by the timeout:
			go func() {
				time.Sleep(50 * time.Millisecond)
				p.OfferProbe(0)
			}()
			start := time.Now()
			_, err := tr.RoundTrip(req)
			require.ErrorIs(t, err, ErrTimeout)
			require.Equal(t, 100*time.Millisecond, time.Since(start))
			synctest.Wait()
			require.Equal(t, []obs{
				{Dest: "h", Attempt: 1, Outcome: timeout.Canceled, Probe: true},
				{Dest: "h", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 100 * time.Millisecond},
			}, p.Observed())
		})
	})
	t.Run("answered in time: the caller's reply, cut at the timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := probing()
			readStalledBody(t, newTransport(t, Options{Policy: p, Base: stallingBody(30 * time.Millisecond)}))
			require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 100 * time.Millisecond}}, p.Observed())
			require.Zero(t, p.Probes(), "a response in the caller's hands is never probed")
		})
	})
	t.Run("answered in time and read", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := probing()
			tr := newTransport(t, Options{Base: &slowBase{delay: 40 * time.Millisecond, body: "ok"}, Policy: p})
			req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			got, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, "ok", string(got))
			time.Sleep(time.Second) // past the timeout: nothing cuts a finished attempt
			require.NoError(t, resp.Body.Close())
			require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 40 * time.Millisecond}}, p.Observed())
		})
	})
	t.Run("caller cancels first", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := probing()
			ctx, cancel := context.WithCancel(context.Background())
			tr, req := hanging(t, p, ctx)
			time.AfterFunc(20*time.Millisecond, cancel)
			_, err := tr.RoundTrip(req)
			require.ErrorIs(t, err, context.Canceled)
			require.NotErrorIs(t, err, ErrTimeout)
			require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.Canceled, Elapsed: 20 * time.Millisecond}}, p.Observed())
			require.Zero(t, p.Probes())
		})
	})
	t.Run("caller's deadline before the probe timeout: no probe", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := probing()
			sp := &spy{base: &slowBase{delay: time.Hour}}
			tr := newTransport(t, Options{Base: sp, Policy: p})
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://h/", nil)
			require.NoError(t, err)
			_, err = tr.RoundTrip(req)
			require.ErrorIs(t, err, ErrTimeout)
			require.Equal(t, time.Now(), sp.deadline, "the base saw the normal timeout, which has just passed")
			require.Equal(t, []timeout.Outcome{timeout.TimedOut}, p.Outcomes())
			require.Zero(t, p.Probes())
		})
	})
	t.Run("a body read again for the probe", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := probing()
			base := &slowBase{delay: 200 * time.Millisecond}
			tr := newTransport(t, Options{Base: base, Policy: p})
			req, err := http.NewRequest(http.MethodPost, "http://h/", strings.NewReader("payload"))
			require.NoError(t, err)
			_, err = tr.RoundTrip(req)
			require.ErrorIs(t, err, ErrTimeout)
			time.Sleep(time.Second)
			synctest.Wait()
			require.Equal(t, []string{"payload"}, base.bodies)
			require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 200 * time.Millisecond, Probe: true}},
				p.Observed())
		})
	})
	t.Run("a body that cannot be read again: no probe", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := probing()
			tr := newTransport(t, Options{Base: &slowBase{delay: time.Hour}, Policy: p})
			req, err := http.NewRequest(http.MethodPost, "http://h/", io.MultiReader(strings.NewReader("once")))
			require.NoError(t, err)
			require.Nil(t, req.GetBody)
			_, err = tr.RoundTrip(req)
			require.ErrorIs(t, err, ErrTimeout)
			require.Equal(t, []timeout.Outcome{timeout.TimedOut}, p.Outcomes())
			require.Zero(t, p.Probes())
		})
	})
}

// TestShadowProbeLoopback runs a shadow probe against a real server: the
// caller's client gets ErrTimeout, and the request the server is still
// serving is observed once it answers.
func TestShadowProbeLoopback(t *testing.T) {
	release := make(chan struct{})
	srv, host := server(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
			_, _ = io.WriteString(w, "late")
		case <-r.Context().Done():
		}
	})
	p := policy(host, 50*time.Millisecond)
	p.OfferProbe(time.Minute)
	tr := newTransport(t, Options{Base: srv.Client().Transport, Policy: p})
	c := &http.Client{Transport: tr}
	defer c.CloseIdleConnections()

	resp, err := get(t, context.Background(), c, srv.URL)
	require.Nil(t, resp)
	require.ErrorIs(t, err, ErrTimeout)
	require.Empty(t, p.Observed())
	close(release)
	testutil.Eventually(t, "the probe observed", func() bool { return len(p.Observed()) == 1 })
	o := p.Observed()[0]
	require.Equal(t, timeout.Completed, o.Outcome)
	require.True(t, o.Probe)
	require.GreaterOrEqual(t, o.Elapsed, 50*time.Millisecond)
}

// TestShadowProbeErrorBeforeItsDeadline: an error a shadow probe's round
// trip returned 1 ms before the probe timeout is its own, as
// Options.Classify says, though the probe's deadline has passed by the
// time it is observed (here the clock holds it for 2 ms), as timeoutgrpc's
// probe and node.Do decide by when it returned.
func TestShadowProbeErrorBeforeItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hold atomic.Bool
		p := probing()
		tr := newTransport(t, Options{Policy: p, Now: holdingClock(&hold), Classify: classifyTest,
			Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
				time.Sleep(999 * time.Millisecond) // it does not watch its context
				hold.Store(true)
				return nil, errRefused
			})})
		req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		_, err = tr.RoundTrip(req)
		require.ErrorIs(t, err, ErrTimeout, "the caller's error at the normal timeout")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.Failed, Elapsed: 999 * time.Millisecond, Probe: true}},
			p.Observed())
	})
}
