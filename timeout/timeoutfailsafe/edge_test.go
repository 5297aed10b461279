package timeoutfailsafe

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
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

// late returns a function that does not watch its execution: it answers
// after d (bubble time) whatever happens meanwhile.
func late(d time.Duration) func(failsafe.Execution[string]) (string, error) {
	return func(failsafe.Execution[string]) (string, error) {
		time.Sleep(d)
		return "ok", nil
	}
}

// TestAnsweredAfterACancellation: an answer that comes after the caller's
// cancellation or deadline, or after a timeout outside ours ended the
// attempt (a function that does not watch its execution), is the
// destination's answer: Completed at its latency, a caller probe's too,
// as node.Do learns a fn that returns nil after its caller left, and as
// timeoutgrpc and timeouthttp. Whoever cancelled still decides what the
// caller gets: the answer itself after the caller's cancellation (nothing
// outside replaces it), the outer timeout's error after that timeout.
func TestAnsweredAfterACancellation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		run   func(p *policytest.Policy) (string, error)
		probe bool
		err   error // what the caller gets; nil: the answer
	}{
		{name: "the caller's cancellation", run: func(p *policytest.Policy) (string, error) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			time.AfterFunc(20*time.Millisecond, cancel)
			return failsafe.With(New[string](p, "db-1")).WithContext(ctx).GetWithExecution(late(50 * time.Millisecond))
		}},
		{name: "the caller's deadline", run: func(p *policytest.Policy) (string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			return failsafe.With(New[string](p, "db-1")).WithContext(ctx).GetWithExecution(late(50 * time.Millisecond))
		}},
		{name: "the caller's cancellation during a caller probe", probe: true, run: func(p *policytest.Policy) (string, error) {
			p.SetTimeout("db-1", 10*time.Millisecond)
			p.OfferProbe(time.Second)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			time.AfterFunc(20*time.Millisecond, cancel)
			return failsafe.With(New[string](p, "db-1")).WithContext(ctx).GetWithExecution(late(50 * time.Millisecond))
		}},
		{name: "an outer failsafe-go timeout", err: fstimeout.ErrExceeded, run: func(p *policytest.Policy) (string, error) {
			return failsafe.With(fstimeout.New[string](20*time.Millisecond), New[string](p, "db-1")).GetWithExecution(late(50 * time.Millisecond))
		}},
		{name: "an outer adaptive timeout", err: ErrTimeout, run: func(p *policytest.Policy) (string, error) {
			return failsafe.With(New[string](policytest.New(20*time.Millisecond), "outer"), New[string](p, "db-1")).GetWithExecution(late(50 * time.Millisecond))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := policytest.New(time.Second)
				got, err := tc.run(p)
				if tc.err != nil {
					require.ErrorIs(t, err, tc.err)
				} else {
					require.NoError(t, err)
					require.Equal(t, "ok", got)
				}
				require.Equal(t, []obs{{Dest: "db-1", Attempt: 1, Outcome: timeout.Completed, Elapsed: 50 * time.Millisecond, Probe: tc.probe}}, p.Observed())
			})
		})
	}
}

// TestErrorAfterACancellation: an error that comes after the caller's
// cancellation may be the cancellation's own: Canceled, whatever it is, as
// node.Do and timeoutgrpc decide; the caller gets it as it is.
func TestErrorAfterACancellation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(time.Second)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		time.AfterFunc(20*time.Millisecond, cancel)
		refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		err := failsafe.With[any](New[any](p, "db-1")).WithContext(ctx).Run(func() error {
			time.Sleep(50 * time.Millisecond) // it does not watch its context
			return refused
		})
		require.Same(t, refused, err)
		require.Equal(t, []obs{{Dest: "db-1", Attempt: 1, Outcome: timeout.Canceled, Elapsed: 50 * time.Millisecond}}, p.Observed())
	})
}

// declining offers probes but never reserves one.
type declining struct{ *policytest.Policy }

func (declining) Probe(*timeout.Attempt, time.Time) bool { return false }

// TestTimedOutThenCallerCancels: an attempt our timeout ended is timed out
// even if the caller cancels while its function is still returning,
// whether or not it could have become a probe (the probe declined), as in
// node.Do and the other adapters. It is observed at the timeout, when the
// timer fails it (failsafe-go's timeout model), not when it returns.
func TestTimedOutThenCallerCancels(t *testing.T) {
	for _, probe := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			p := policytest.New(100 * time.Millisecond)
			if probe {
				p.OfferProbe(time.Second)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			time.AfterFunc(150*time.Millisecond, cancel)
			_, err := failsafe.With(New[string](declining{p}, "db-1")).WithContext(ctx).GetWithExecution(func(exec failsafe.Execution[string]) (string, error) {
				<-exec.Canceled()
				time.Sleep(100 * time.Millisecond) // it reports its context's end late
				return "", exec.Context().Err()
			})
			require.ErrorIs(t, err, ErrTimeout, "probeable: %v", probe)
			require.Equal(t, []obs{{Dest: "db-1", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 100 * time.Millisecond}}, p.Observed(), "probeable: %v", probe)
			require.Zero(t, p.Probes())
		})
	}
}

// TestAnsweredAfterOurTimeout: an answer that comes after our timeout
// ended the attempt is timed out, and the caller gets our *TimeoutError,
// not the answer: the timeout decides the result, as failsafe-go's own
// timeout does (node.Do, which hands fn's nil on, learns a completion
// then).
func TestAnsweredAfterOurTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(100 * time.Millisecond)
		got, err := failsafe.With(New[string](p, "db-1")).GetWithExecution(late(150 * time.Millisecond))
		require.ErrorIs(t, err, ErrTimeout)
		require.Empty(t, got)
		require.Equal(t, []obs{{Dest: "db-1", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 100 * time.Millisecond}}, p.Observed())
	})
}

// TestCallerCancelsAProbe: a caller probe the caller's cancellation ends
// is the caller's, Canceled, as node.Do's: the cancellation came before
// the probe timeout.
func TestCallerCancelsAProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(100 * time.Millisecond)
		p.OfferProbe(time.Second)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		time.AfterFunc(300*time.Millisecond, cancel)
		_, err := failsafe.With(New[string](p, "db-1")).WithContext(ctx).GetWithExecution(hangs)
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrTimeout)
		require.Equal(t, []obs{{Dest: "db-1", Attempt: 1, Outcome: timeout.Canceled, Elapsed: 300 * time.Millisecond, Probe: true}}, p.Observed())
		require.False(t, p.InFlight("db-1"))
	})
}

// TestErrorBeforeTheDeadline: an error the function returned 1 ms before
// our timeout, or before the caller's deadline, is its own, Failed at the
// latency measured, and not ErrTimeout, even when the deadline has passed
// by the time the clock is read (here the clock, read as the function
// returns, holds it for 2 ms, and our timer fires meanwhile): the policy
// decides as the function returns, before it reads the clock, as node.Do
// decides by when fn returned.
func TestErrorBeforeTheDeadline(t *testing.T) {
	for _, caller := range []time.Duration{0, 250 * time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			var hold atomic.Bool
			clock := func() time.Time {
				now := time.Now()
				if hold.CompareAndSwap(true, false) {
					time.Sleep(2 * time.Millisecond) // past the deadline
				}
				return now
			}
			p := policytest.New(250 * time.Millisecond)
			ctx := context.Background()
			if caller > 0 {
				p = policytest.New(time.Second)
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, caller)
				defer cancel()
			}
			refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
			err := failsafe.With[any](NewBuilder[any](p, "db-1").WithClock(clock).Build()).WithContext(ctx).Run(func() error {
				time.Sleep(249 * time.Millisecond)
				hold.Store(true)
				return refused
			})
			require.Same(t, refused, err, "caller's deadline: %v", caller)
			require.Equal(t, []obs{{Dest: "db-1", Attempt: 1, Outcome: timeout.Failed, Elapsed: 249 * time.Millisecond}}, p.Observed(), "caller's deadline: %v", caller)
		})
	}
}

// hedged runs fns[0] as the primary attempt and fns[1] as the hedge.
func hedged(fns ...func(failsafe.Execution[string]) (string, error)) func(failsafe.Execution[string]) (string, error) {
	var calls atomic.Int32
	return func(exec failsafe.Execution[string]) (string, error) {
		return fns[calls.Add(1)-1](exec) // the primary's call happens before the hedge starts
	}
}

// TestHedgeLoserTimedOutBeforeTheWin: a loser whose own timeout had ended
// it before the other attempt won is timed out, whatever its function
// returns then, as node.DoHedged and the other adapters say: our timeout
// came first.
func TestHedgeLoserTimedOutBeforeTheWin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(100 * time.Millisecond)
		slowToReturn := func(exec failsafe.Execution[string]) (string, error) {
			<-exec.Canceled()
			time.Sleep(100 * time.Millisecond) // it reports its context's end late
			return "ok", nil
		}
		start := time.Now()
		got, err := failsafe.With(hedgepolicy.NewWithDelay[string](50*time.Millisecond), New[string](p, "db-1")).
			GetWithExecution(hedged(slowToReturn, late(70*time.Millisecond)))
		require.NoError(t, err)
		require.Equal(t, "ok", got)
		require.Equal(t, 120*time.Millisecond, time.Since(start))
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []obs{
			{Dest: "db-1", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 100 * time.Millisecond},
			{Dest: "db-1", Attempt: 1, Outcome: timeout.Completed, Elapsed: 70 * time.Millisecond},
		}, p.Observed())
	})
}

// TestHedgeLoserAnsweredAfterTheWin: a loser still running when the other
// attempt won is superseded, even when its function then answers (it did
// not watch its execution), as node.DoHedged says. It is observed when its
// function returns, at that elapsed time: failsafe-go tells an attempt
// that it lost only by cancelling its execution (node.DoHedged censors it
// at the win).
func TestHedgeLoserAnsweredAfterTheWin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(time.Second)
		got, err := failsafe.With(hedgepolicy.NewWithDelay[string](50*time.Millisecond), New[string](p, "db-1")).
			GetWithExecution(hedged(late(100*time.Millisecond), late(10*time.Millisecond)))
		require.NoError(t, err)
		require.Equal(t, "ok", got)
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []obs{
			{Dest: "db-1", Attempt: 1, Outcome: timeout.Completed, Elapsed: 10 * time.Millisecond},
			{Dest: "db-1", Attempt: 1, Outcome: timeout.Superseded, Elapsed: 100 * time.Millisecond},
		}, p.Observed())
	})
}

// TestHedgeAnsweredAfterTheCallerLeft: once the caller's context ended,
// failsafe-go's hedge policy returns the cancellation, whichever attempt
// answers first: no attempt wins, and each is the caller's, Canceled,
// even when its function then answers (it did not watch its execution),
// as node.DoHedged's losers after the caller left. (There node.DoHedged
// and the other adapters hand the first answer on, and learn it as
// Completed.)
func TestHedgeAnsweredAfterTheCallerLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(time.Second)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		time.AfterFunc(40*time.Millisecond, cancel)
		_, err := failsafe.With(hedgepolicy.NewWithDelay[string](10*time.Millisecond), New[string](p, "db-1")).
			WithContext(ctx).GetWithExecution(hedged(late(200*time.Millisecond), late(50*time.Millisecond)))
		require.ErrorIs(t, err, context.Canceled, "failsafe-go's hedge policy hands the cancellation on")
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []obs{
			{Dest: "db-1", Attempt: 1, Outcome: timeout.Canceled, Elapsed: 50 * time.Millisecond},
			{Dest: "db-1", Attempt: 1, Outcome: timeout.Canceled, Elapsed: 200 * time.Millisecond},
		}, p.Observed())
	})
}

// TestHedgeAnsweredAfterAnotherTimedOut: when the primary attempt times
// out, failsafe-go's hedge policy takes that result and cancels the hedge
// with it: the hedge is Canceled, even when its function then answers (it
// did not watch its execution), and the caller gets the timeout. (There
// node.DoHedged and the other adapters let the hedge go on, and hand its
// answer on.)
func TestHedgeAnsweredAfterAnotherTimedOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(100 * time.Millisecond)
		_, err := failsafe.With(hedgepolicy.NewWithDelay[string](50*time.Millisecond), New[string](p, "db-1")).
			GetWithExecution(hedged(hangs, late(80*time.Millisecond)))
		require.ErrorIs(t, err, ErrTimeout)
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []obs{
			{Dest: "db-1", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 100 * time.Millisecond},
			{Dest: "db-1", Attempt: 1, Outcome: timeout.Canceled, Elapsed: 80 * time.Millisecond},
		}, p.Observed())
	})
}
