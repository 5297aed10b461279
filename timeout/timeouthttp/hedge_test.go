package timeouthttp

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/internal/policytest"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// seqBase is a RoundTripper over a Seq: its n-th call answers with body
// "n", unless the request's context ends first.
type seqBase struct{ *policytest.Seq }

func (s seqBase) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	i, err := s.Call(r.Context())
	if err != nil {
		return nil, err
	}
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(string(rune('0' + i)))), Request: r}, nil
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
	policytest.HedgeScenarios(t,
		func(t *testing.T, ctx context.Context, p *timeout.Decider, seq *policytest.Seq) (string, error) {
			resp, err := hedgedGet(t, ctx, p, seqBase{seq})
			if err != nil {
				return "", err
			}
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			return string(b), nil
		},
		func(t *testing.T, err error) { require.ErrorIs(t, err, ErrTimeout) },
		func(t *testing.T, err error) {
			require.ErrorIs(t, err, context.Canceled)
			require.NotErrorIs(t, err, ErrTimeout)
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
					seq := &policytest.Seq{Delays: delays}
					rt := newTransport(t, Options{Base: seqBase{seq}, Policy: p, Hedge: tc.hedge})
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
					require.Equal(t, tc.calls, len(seq.Causes()))
				})
			})
		}
	})
	t.Run("a budget of 0 never hedges", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, _ := policytest.Hedging(t)
			p.SetHedgeBudget(0)
			seq := &policytest.Seq{Delays: []time.Duration{100 * time.Millisecond, 5 * time.Millisecond}}
			resp, err := hedgedGet(t, t.Context(), p, seqBase{seq})
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, 1, len(seq.Causes()))
		})
	})
}
