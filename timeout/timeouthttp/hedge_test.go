package timeouthttp

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/internal/policytest"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// seqBase answers its n-th call after delays[n] (bubble time) with body
// "n", unless its context ends first.
type seqBase struct {
	mu     sync.Mutex
	delays []time.Duration
	calls  int
	causes []error // per call: the context's cause when it ended first
}

func (s *seqBase) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	i := s.calls
	s.calls++
	d := s.delays[min(i, len(s.delays)-1)]
	s.causes = append(s.causes, nil)
	s.mu.Unlock()
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	select {
	case <-time.After(d):
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(string(rune('0' + i)))), Request: r}, nil
	case <-r.Context().Done():
		s.mu.Lock()
		s.causes[i] = context.Cause(r.Context())
		s.mu.Unlock()
		return nil, r.Context().Err()
	}
}

// hedgedGet sends a GET to h under ctx through a hedging Transport over base
// and p.
func hedgedGet(t *testing.T, ctx context.Context, p timeout.Policy, base http.RoundTripper) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://h/", nil)
	require.NoError(t, err)
	return newTransport(t, Options{Base: base, Policy: p, Hedge: true}).RoundTrip(req)
}

func TestHedge(t *testing.T) {
	t.Run("a stalled GET is hedged; the hedge wins, the first is superseded", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, tr := policytest.Hedging(t)
			base := &seqBase{delays: []time.Duration{time.Second, 5 * time.Millisecond}}
			start := time.Now()
			resp, err := hedgedGet(t, t.Context(), p, base)
			require.NoError(t, err)
			require.Equal(t, 26*time.Millisecond, time.Since(start))
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, "1", string(b), "the hedge's answer")
			synctest.Wait()
			require.Equal(t, 2, base.calls)
			require.Equal(t, context.Canceled, base.causes[0], "the loser is cancelled")
			e := policytest.HedgedLocal(t, tr)
			require.EqualValues(t, 102, e.LocalSamples, "the hedge completed, the loser superseded")
			require.EqualValues(t, 1, e.LocalCensored)
			require.EqualValues(t, 26, e.LocalValueMillis, "censored at its elapsed time")
		})
	})
	t.Run("no hedge when the answer comes in time, for a POST, or when not opted in", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			method string
			hedge  bool
			header string
			calls  int
		}{
			{"in time", http.MethodGet, true, "", 1},
			{"POST", http.MethodPost, true, "", 1},
			{"POST with an idempotency key", http.MethodPost, true, "Idempotency-Key", 2},
			{"not opted in", http.MethodGet, false, "", 1},
		} {
			t.Run(tc.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					p, _ := policytest.Hedging(t)
					delays := []time.Duration{100 * time.Millisecond, 5 * time.Millisecond}
					if tc.name == "in time" {
						delays[0] = 15 * time.Millisecond
					}
					base := &seqBase{delays: delays}
					rt := newTransport(t, Options{Base: base, Policy: p, Hedge: tc.hedge})
					req, err := http.NewRequest(tc.method, "http://h/", strings.NewReader("x"))
					require.NoError(t, err)
					if tc.header != "" {
						req.Header.Set(tc.header, "k1")
					}
					resp, err := rt.RoundTrip(req)
					require.NoError(t, err)
					_, _ = io.Copy(io.Discard, resp.Body)
					require.NoError(t, resp.Body.Close())
					synctest.Wait()
					require.Equal(t, tc.calls, base.calls)
				})
			})
		}
	})
	t.Run("a budget of 0 never hedges", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, _ := policytest.Hedging(t)
			p.SetHedgeBudget(0)
			base := &seqBase{delays: []time.Duration{100 * time.Millisecond, 5 * time.Millisecond}}
			resp, err := hedgedGet(t, t.Context(), p, base)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, 1, base.calls)
		})
	})
	t.Run("both time out: the first one's error", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, tr := policytest.Hedging(t)
			start := time.Now()
			_, err := hedgedGet(t, t.Context(), p, &seqBase{delays: []time.Duration{time.Hour}})
			require.ErrorIs(t, err, ErrTimeout)
			require.Equal(t, 271*time.Millisecond, time.Since(start), "the hedge's own timeout, from 21 ms")
			e := policytest.HedgedLocal(t, tr)
			require.EqualValues(t, 2, e.LocalCensored)
		})
	})
	t.Run("the caller's cancellation ends both and records nothing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, tr := policytest.Hedging(t)
			base := &seqBase{delays: []time.Duration{time.Hour}}
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(50*time.Millisecond, cancel)
			_, err := hedgedGet(t, ctx, p, base)
			require.ErrorIs(t, err, context.Canceled)
			require.NotErrorIs(t, err, ErrTimeout)
			require.Equal(t, 2, base.calls)
			e := policytest.HedgedLocal(t, tr)
			require.EqualValues(t, 100, e.LocalSamples)
		})
	})
}
