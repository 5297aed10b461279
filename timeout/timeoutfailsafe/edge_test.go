package timeoutfailsafe

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"
	fstimeout "github.com/failsafe-go/failsafe-go/timeout"
	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/internal/policytest"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// TestObservedAtTheAttemptsEnd: Observe's now is the moment the attempt
// ended, its start plus its latency, not its start.
func TestObservedAtTheAttemptsEnd(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { now = now.Add(7 * time.Millisecond); return now }
	p := policytest.New(time.Second)
	adaptive := NewBuilder[any](p, "db-1").WithClock(clock).Build()
	require.NoError(t, failsafe.With[any](adaptive).Run(func() error { return nil }))
	require.Equal(t, []obs{{Dest: "db-1", Attempt: 1, Outcome: timeout.Completed, Elapsed: 7 * time.Millisecond}}, p.Observed())
	require.Equal(t, []time.Time{time.Unix(1_700_000_000, 0).Add(14 * time.Millisecond)}, p.ObservedAt())
}

// TestExecutionReleased: once the function returned, the attempt's context
// is released, as failsafe-go's own timeout does.
func TestExecutionReleased(t *testing.T) {
	p := policytest.New(time.Hour)
	var ctx context.Context
	require.NoError(t, failsafe.With[any](New[any](p, "db-1")).RunWithExecution(func(exec failsafe.Execution[any]) error {
		ctx = exec.Context()
		return nil
	}))
	require.Error(t, ctx.Err(), "released when the function returned")
}

// TestFunctionErrorIsNotOurFailure: only our timeout is a failure of this
// policy; a function's own error is left to the policies that handle it,
// as with failsafe-go's own timeout.
func TestFunctionErrorIsNotOurFailure(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		p    failsafe.Policy[any]
	}{
		{"failsafe-go's timeout", fstimeout.New[any](time.Hour)},
		{"ours", New[any](policytest.New(time.Hour), "db-1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var success, failure int
			err := failsafe.With(tc.p).
				OnSuccess(func(failsafe.ExecutionDoneEvent[any]) { success++ }).
				OnFailure(func(failsafe.ExecutionDoneEvent[any]) { failure++ }).
				Run(func() error { return boom })
			require.ErrorIs(t, err, boom)
			require.Equal(t, 1, success)
			require.Zero(t, failure)
		})
	}
}

// TestCanceledBeforeOurTimeout: an attempt cancelled from outside before
// our timeout, whose function is slow to return, is the canceller's: our
// timeout passing meanwhile neither times it out nor replaces its result.
func TestCanceledBeforeOurTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(100 * time.Millisecond)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		_, err := failsafe.With(New[string](p, "db-1")).WithContext(ctx).GetWithExecution(func(exec failsafe.Execution[string]) (string, error) {
			<-exec.Canceled()
			time.Sleep(130 * time.Millisecond) // returns 150 ms after the start, past our 100 ms
			return "", exec.Context().Err()
		})
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrTimeout)
		require.Equal(t, []obs{{Dest: "db-1", Attempt: 1, Outcome: timeout.Canceled, Elapsed: 150 * time.Millisecond}}, p.Observed())
	})
}

// TestProbeRoomFromTheTimeout: a caller probe needs the caller's deadline
// to leave room for the rest of the probe after the timeout, not for the
// whole probe timeout again.
func TestProbeRoomFromTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(100 * time.Millisecond)
		p.OfferProbe(time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 1050*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := failsafe.With(New[string](p, "db-1")).WithContext(ctx).GetWithExecution(hangs)
		require.EqualError(t, err, "timeoutfailsafe: adaptive timeout exceeded (dest db-1, attempt 1, timeout 1s)")
		require.Equal(t, time.Second, time.Since(start), "the probe ends before the caller's deadline")
		require.Equal(t, []obs{{Dest: "db-1", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: time.Second, Probe: true}}, p.Observed())
	})
}

// TestNestedAdaptiveTimeouts: an outer adaptive timeout that ends an inner
// one's attempt cancels it; the inner attempt is not superseded (no hedge
// won).
func TestNestedAdaptiveTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		outer, inner := policytest.New(50*time.Millisecond), policytest.New(time.Second)
		_, err := failsafe.With(New[string](outer, "outer"), New[string](inner, "inner")).GetWithExecution(hangs)
		require.ErrorIs(t, err, ErrTimeout)
		require.EqualError(t, err, "timeoutfailsafe: adaptive timeout exceeded (dest outer, attempt 1, timeout 50ms)")
		require.Equal(t, []timeout.Outcome{timeout.TimedOut}, outer.Outcomes())
		require.Equal(t, []obs{{Dest: "inner", Attempt: 1, Outcome: timeout.Canceled, Elapsed: 50 * time.Millisecond}}, inner.Observed())
	})
}

// TestHedgedCanceledFromOutside: hedged attempts that something outside
// the hedge ends (a failsafe-go timeout, an adaptive timeout of ours, the
// caller's cancellation or deadline) are cancelled, not superseded: no
// hedge won.
func TestHedgedCanceledFromOutside(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(p *policytest.Policy) error
	}{
		{"a failsafe-go timeout", func(p *policytest.Policy) error {
			_, err := failsafe.With(fstimeout.New[string](30*time.Millisecond), hedgepolicy.NewWithDelay[string](10*time.Millisecond), New[string](p, "db-1")).
				GetWithExecution(hangs)
			return err
		}},
		{"our own timeout outside the hedge", func(p *policytest.Policy) error {
			_, err := failsafe.With(New[string](policytest.New(30*time.Millisecond), "outer"), hedgepolicy.NewWithDelay[string](10*time.Millisecond), New[string](p, "db-1")).
				GetWithExecution(hangs)
			return err
		}},
		{"the caller's cancellation", func(p *policytest.Policy) error {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(30*time.Millisecond, cancel)
			_, err := failsafe.With(hedgepolicy.NewWithDelay[string](10*time.Millisecond), New[string](p, "db-1")).
				WithContext(ctx).GetWithExecution(hangs)
			return err
		}},
		{"the caller's deadline", func(p *policytest.Policy) error {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
			defer cancel()
			_, err := failsafe.With(hedgepolicy.NewWithDelay[string](10*time.Millisecond), New[string](p, "db-1")).
				WithContext(ctx).GetWithExecution(hangs)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := policytest.New(time.Second)
				err := tc.run(p)
				require.Error(t, err)
				var te *TimeoutError
				if errors.As(err, &te) {
					require.Equal(t, "outer", te.Dest, "only an outer adaptive timeout")
				}
				synctest.Wait()
				require.Equal(t, []timeout.Outcome{timeout.Canceled, timeout.Canceled}, p.Outcomes())
			})
		})
	}
}

// TestReturnsAtTheTimeout: a function that returns at the very moment of
// the timeout is observed once, whichever of the two wins. Both are ready
// at once, so repeat to give either order its turn.
func TestReturnsAtTheTimeout(t *testing.T) {
	for range 64 {
		synctest.Test(t, func(t *testing.T) {
			p := policytest.New(100 * time.Millisecond)
			_, _ = failsafe.With(New[string](p, "db-1")).Get(func() (string, error) {
				time.Sleep(100 * time.Millisecond)
				return "ok", nil
			})
			synctest.Wait()
			require.Len(t, p.Observed(), 1)
		})
	}
}

// TestHedgeCanceledOnAnotherTimeout: when the primary attempt times out and
// the hedge policy cancels the hedge with that result, the hedge is
// cancelled, not superseded: nothing answered.
func TestHedgeCanceledOnAnotherTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(100 * time.Millisecond)
		_, err := failsafe.With(hedgepolicy.NewWithDelay[string](50*time.Millisecond), New[string](p, "db-1")).GetWithExecution(hangs)
		require.ErrorIs(t, err, ErrTimeout)
		synctest.Wait()
		require.ElementsMatch(t, []obs{
			{Dest: "db-1", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 100 * time.Millisecond},
			{Dest: "db-1", Attempt: 1, Outcome: timeout.Canceled, Elapsed: 50 * time.Millisecond},
		}, p.Observed())
	})
}
