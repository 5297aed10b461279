package policytest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// The scenarios every hedging adapter passes, against a scripted backend.

// Seq is a backend for hedging tests: its n-th call answers after
// Delays[n] (the last delay for the calls beyond; bubble time), unless the
// call's context ends first. It is safe for concurrent use.
type Seq struct {
	Delays []time.Duration

	mu     sync.Mutex
	causes []error // per call started: its context's cause when it ended first
}

// Call waits as the next call: it returns the call's number (0, 1, …)
// after its delay, or ctx.Err() when ctx ends first.
func (s *Seq) Call(ctx context.Context) (int, error) {
	s.mu.Lock()
	i := len(s.causes)
	d := s.Delays[min(i, len(s.Delays)-1)]
	s.causes = append(s.causes, nil)
	s.mu.Unlock()
	select {
	case <-time.After(d):
		return i, nil
	case <-ctx.Done():
		s.mu.Lock()
		s.causes[i] = context.Cause(ctx)
		s.mu.Unlock()
		return i, ctx.Err()
	}
}

// Causes returns, per call started, the cause of its context when it
// ended before the call's delay, else nil.
func (s *Seq) Causes() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.causes)
}

// A HedgeCall sends one hedgeable call to "h" under ctx through the
// adapter under test, with the Hedging policy p and backend seq, and
// returns the answer (the number of the call that answered, "0", "1", …)
// or the adapter's error.
type HedgeCall func(t *testing.T, ctx context.Context, p *timeout.Decider, seq *Seq) (string, error)

// HedgeScenarios runs, each in a synctest bubble, what every hedging
// adapter does under the Hedging policy (hedge delay 21 ms, timeout 250 ms):
// a stalled call is hedged and the hedge wins, the first attempt is
// cancelled and censored at its elapsed time; when both attempts time out
// the first one's error is returned (timedOut checks it); the caller's
// cancellation ends both and records nothing (canceled checks the error).
func HedgeScenarios(t *testing.T, call HedgeCall, timedOut, canceled func(t *testing.T, err error)) {
	t.Run("a stalled call is hedged; the hedge wins, the first is superseded", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, tr := Hedging(t)
			seq := &Seq{Delays: []time.Duration{time.Second, 5 * time.Millisecond}}
			start := time.Now()
			answer, err := call(t, t.Context(), p, seq)
			require.NoError(t, err)
			require.Equal(t, 26*time.Millisecond, time.Since(start))
			require.Equal(t, "1", answer, "the hedge's answer")
			synctest.Wait()
			require.Equal(t, []error{context.Canceled, nil}, seq.Causes(), "two calls, the loser cancelled")
			e := HedgedLocal(t, tr)
			require.EqualValues(t, 102, e.LocalSamples, "the hedge completed, the loser superseded")
			require.EqualValues(t, 1, e.LocalCensored)
			require.EqualValues(t, 26, e.LocalValueMillis, "superseded, censored at its elapsed time")
		})
	})
	t.Run("both time out: the first one's error", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, tr := Hedging(t)
			start := time.Now()
			_, err := call(t, t.Context(), p, &Seq{Delays: []time.Duration{time.Hour}})
			timedOut(t, err)
			require.Equal(t, 271*time.Millisecond, time.Since(start), "the hedge's own timeout, from 21 ms")
			e := HedgedLocal(t, tr)
			require.EqualValues(t, 2, e.LocalCensored)
		})
	})
	t.Run("the caller's cancellation ends both and records nothing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, tr := Hedging(t)
			seq := &Seq{Delays: []time.Duration{time.Hour}}
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(50*time.Millisecond, cancel)
			_, err := call(t, ctx, p, seq)
			canceled(t, err)
			require.Len(t, seq.Causes(), 2)
			e := HedgedLocal(t, tr)
			require.EqualValues(t, 100, e.LocalSamples)
		})
	})
}
