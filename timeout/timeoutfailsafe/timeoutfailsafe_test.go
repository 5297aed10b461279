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
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	fstimeout "github.com/failsafe-go/failsafe-go/timeout"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/adaptivetimeout/adaptivetimeout/internal/policytest"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type obs = policytest.Observation

// answers returns a function that takes d (bubble time) to answer, unless
// its execution is cancelled first.
func answers(d time.Duration) func(failsafe.Execution[string]) (string, error) {
	return func(exec failsafe.Execution[string]) (string, error) {
		select {
		case <-time.After(d):
			return "ok", nil
		case <-exec.Canceled():
			return "", exec.Context().Err()
		}
	}
}

// hangs never answers: it returns when its execution is cancelled.
func hangs(exec failsafe.Execution[string]) (string, error) {
	<-exec.Canceled()
	return "", exec.Context().Err()
}

func TestCompletedAndTimedOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(100 * time.Millisecond)
		var exceeded []failsafe.ExecutionDoneEvent[string]
		adaptive := NewBuilder[string](p, "db-1").
			OnTimeoutExceeded(func(e failsafe.ExecutionDoneEvent[string]) { exceeded = append(exceeded, e) }).
			Build()

		got, err := failsafe.With[string](adaptive).GetWithExecution(answers(30 * time.Millisecond))
		require.NoError(t, err)
		require.Equal(t, "ok", got)

		start := time.Now()
		_, err = failsafe.With[string](adaptive).GetWithExecution(hangs)
		require.Equal(t, 100*time.Millisecond, time.Since(start))
		require.ErrorIs(t, err, ErrTimeout)
		require.ErrorIs(t, err, fstimeout.ErrExceeded, "what failsafe-go's own timeout fails with")
		require.EqualError(t, err, "timeoutfailsafe: adaptive timeout exceeded (dest db-1, attempt 1, timeout 100ms)")
		var te *TimeoutError
		require.ErrorAs(t, err, &te)
		require.True(t, te.Timeout())
		require.Len(t, exceeded, 1)
		require.ErrorIs(t, exceeded[0].Error, ErrTimeout)

		require.Equal(t, []obs{
			{Dest: "db-1", Attempt: 1, Outcome: timeout.Completed, Elapsed: 30 * time.Millisecond},
			{Dest: "db-1", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 100 * time.Millisecond},
		}, p.Observed())
	})
}

// TestRetryGrowsTheTimeout: inside a RetryPolicy, every retry is the next
// attempt and gets a longer timeout.
func TestRetryGrowsTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(100 * time.Millisecond)
		retry := retrypolicy.NewBuilder[string]().HandleErrors(ErrTimeout).WithMaxRetries(3).Build()
		calls := 0
		start := time.Now()
		got, err := failsafe.With(retry, New[string](p, "db-1")).GetWithExecution(func(exec failsafe.Execution[string]) (string, error) {
			calls++
			if calls < 3 {
				return hangs(exec)
			}
			return answers(250 * time.Millisecond)(exec)
		})
		require.NoError(t, err)
		require.Equal(t, "ok", got)
		require.Equal(t, 100*time.Millisecond+200*time.Millisecond+250*time.Millisecond, time.Since(start))
		require.Equal(t, []obs{
			{Dest: "db-1", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 100 * time.Millisecond},
			{Dest: "db-1", Attempt: 2, Outcome: timeout.TimedOut, Elapsed: 200 * time.Millisecond},
			{Dest: "db-1", Attempt: 3, Outcome: timeout.Completed, Elapsed: 250 * time.Millisecond},
		}, p.Observed())

		// The context's attempt number counts too.
		p = policytest.New(100 * time.Millisecond)
		calls = 0
		ctx := timeout.WithAttempt(context.Background(), 3)
		_, err = failsafe.With(retry, New[string](p, "db-1")).WithContext(ctx).GetWithExecution(func(exec failsafe.Execution[string]) (string, error) {
			calls++
			if calls < 2 {
				return hangs(exec)
			}
			return "ok", nil
		})
		require.NoError(t, err)
		require.Equal(t, []obs{
			{Dest: "db-1", Attempt: 3, Outcome: timeout.TimedOut, Elapsed: 400 * time.Millisecond},
			{Dest: "db-1", Attempt: 4, Outcome: timeout.Completed},
		}, p.Observed())
	})
}

// TestOutsideTheRetry: composed outside a RetryPolicy, one timeout covers
// every try.
func TestOutsideTheRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(100 * time.Millisecond)
		retry := retrypolicy.NewBuilder[string]().WithMaxRetries(-1).WithDelay(30 * time.Millisecond).Build()
		boom := errors.New("boom")
		_, err := failsafe.With(New[string](p, "db-1"), retry).Get(func() (string, error) { return "", boom })
		require.ErrorIs(t, err, ErrTimeout)
		require.Equal(t, []obs{{Dest: "db-1", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 100 * time.Millisecond}}, p.Observed())
	})
}

// TestCircuitBreaker: timeouts are failures to a circuit breaker outside;
// once it opens, no attempt is made and the Policy is not asked.
func TestCircuitBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(50 * time.Millisecond)
		cb := circuitbreaker.NewBuilder[string]().WithFailureThreshold(2).WithDelay(time.Minute).Build()
		exec := failsafe.With(cb, New[string](p, "db-1"))
		for range 2 {
			_, err := exec.GetWithExecution(hangs)
			require.ErrorIs(t, err, ErrTimeout)
		}
		_, err := exec.GetWithExecution(hangs)
		require.ErrorIs(t, err, circuitbreaker.ErrOpen)
		require.Equal(t, 2, p.Decided())
		require.Equal(t, []timeout.Outcome{timeout.TimedOut, timeout.TimedOut}, p.Outcomes())
	})
}

// TestHedge: inside a HedgePolicy each attempt has its own timeout, and the
// loser the winning hedge cancels is superseded, censored at its elapsed
// time.
func TestHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(time.Second)
		hedge := hedgepolicy.NewWithDelay[string](50 * time.Millisecond)
		var calls atomic.Int32
		start := time.Now()
		got, err := failsafe.With(hedge, New[string](p, "db-1")).GetWithExecution(func(exec failsafe.Execution[string]) (string, error) {
			if calls.Add(1) == 1 { // the primary's call happens before the hedge starts
				return hangs(exec)
			}
			return answers(10 * time.Millisecond)(exec)
		})
		require.NoError(t, err)
		require.Equal(t, "ok", got)
		require.Equal(t, 60*time.Millisecond, time.Since(start))
		synctest.Wait() // the loser returns once cancelled
		require.ElementsMatch(t, []obs{
			{Dest: "db-1", Attempt: 1, Outcome: timeout.Completed, Elapsed: 10 * time.Millisecond},
			{Dest: "db-1", Attempt: 1, Outcome: timeout.Superseded, Elapsed: 60 * time.Millisecond},
		}, p.Observed())
	})
}

func TestCanceledFromOutside(t *testing.T) {
	t.Run("the caller's context", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := policytest.New(time.Second)
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(20*time.Millisecond, cancel)
			_, err := failsafe.With(New[string](p, "db-1")).WithContext(ctx).GetWithExecution(hangs)
			require.ErrorIs(t, err, context.Canceled)
			require.NotErrorIs(t, err, ErrTimeout)
			require.Equal(t, []obs{{Dest: "db-1", Attempt: 1, Outcome: timeout.Canceled, Elapsed: 20 * time.Millisecond}}, p.Observed())
		})
	})
	t.Run("an outer failsafe-go timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := policytest.New(time.Second)
			_, err := failsafe.With(fstimeout.New[string](30*time.Millisecond), New[string](p, "db-1")).GetWithExecution(hangs)
			require.ErrorIs(t, err, fstimeout.ErrExceeded)
			require.NotErrorIs(t, err, ErrTimeout)
			require.Equal(t, []timeout.Outcome{timeout.Canceled}, p.Outcomes())
		})
	})
}

func TestCallerProbe(t *testing.T) {
	t.Run("answers within the probe timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := policytest.New(100 * time.Millisecond)
			p.OfferProbe(time.Second)
			start := time.Now()
			got, err := failsafe.With(New[string](p, "db-1")).GetWithExecution(answers(300 * time.Millisecond))
			require.NoError(t, err, "the caller waited on")
			require.Equal(t, "ok", got)
			require.Equal(t, 300*time.Millisecond, time.Since(start))
			require.Equal(t, []obs{{Dest: "db-1", Attempt: 1, Outcome: timeout.Completed, Elapsed: 300 * time.Millisecond, Probe: true}}, p.Observed())
		})
	})
	t.Run("times out at the probe timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := policytest.New(100 * time.Millisecond)
			p.OfferProbe(time.Second)
			start := time.Now()
			_, err := failsafe.With(New[string](p, "db-1")).GetWithExecution(hangs)
			require.EqualError(t, err, "timeoutfailsafe: adaptive timeout exceeded (dest db-1, attempt 1, timeout 1s)")
			require.Equal(t, time.Second, time.Since(start))
			require.Equal(t, []obs{{Dest: "db-1", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: time.Second, Probe: true}}, p.Observed())
			require.False(t, p.InFlight("db-1"))
		})
	})
	t.Run("the caller's deadline leaves no room: no probe", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := policytest.New(100 * time.Millisecond)
			p.OfferProbe(time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			_, err := failsafe.With(New[string](p, "db-1")).WithContext(ctx).GetWithExecution(hangs)
			require.ErrorIs(t, err, ErrTimeout)
			require.Zero(t, p.Probes())
			require.Equal(t, []timeout.Outcome{timeout.TimedOut}, p.Outcomes())
		})
	})
}

func TestClassify(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	notFound := errors.New("key not found")
	for _, tt := range []struct {
		name     string
		err      error
		classify func(error) timeout.Outcome
		want     timeout.Outcome
	}{
		{"refused", refused, nil, timeout.Failed},
		{"the destination's answer", notFound, nil, timeout.Completed},
		{"hook", notFound, func(error) timeout.Outcome { return timeout.Failed }, timeout.Failed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := policytest.New(time.Second)
			b := NewBuilder[any](p, "db-1")
			if tt.classify != nil {
				b = b.WithClassify(tt.classify)
			}
			err := failsafe.With[any](b.Build()).Run(func() error { return tt.err })
			require.Same(t, tt.err, err, "the function's error, unchanged")
			require.Equal(t, []timeout.Outcome{tt.want}, p.Outcomes())
		})
	}
}

func TestClassifyError(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want timeout.Outcome
	}{
		{nil, timeout.Completed},
		{errors.New("not found"), timeout.Completed},
		{&net.OpError{Op: "read", Err: syscall.ECONNRESET}, timeout.Failed},
		{&net.DNSError{Err: "no such host", Name: "db-1.invalid"}, timeout.Failed},
		{context.DeadlineExceeded, timeout.Canceled},
		{context.Canceled, timeout.Canceled},
		{&net.OpError{Op: "read", Err: timeoutErr{}}, timeout.Canceled},
	} {
		require.Equal(t, tt.want, ClassifyError(tt.err), "%v", tt.err)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestDestinationAndClock(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { now = now.Add(7 * time.Millisecond); return now }
	type destKey struct{}
	p := policytest.New(time.Second)
	adaptive := NewBuilder[any](p, "unused").
		WithDestinationFunc(func(exec failsafe.ExecutionInfo) string { return exec.Context().Value(destKey{}).(string) }).
		WithClock(clock).Build()
	ctx := context.WithValue(context.Background(), destKey{}, "db-7")
	require.NoError(t, failsafe.With[any](adaptive).WithContext(ctx).Run(func() error { return nil }))
	require.Equal(t, []obs{{Dest: "db-7", Attempt: 1, Outcome: timeout.Completed, Elapsed: 7 * time.Millisecond}}, p.Observed())
}

func TestNilPolicyPanics(t *testing.T) {
	require.PanicsWithValue(t, "timeoutfailsafe: nil Policy", func() { New[any](nil, "db-1") })
}

// TestComposesWithAny: the policy is result agnostic, so it composes with
// policies of any result type.
func TestComposesWithAny(t *testing.T) {
	p := policytest.New(time.Second)
	retry := retrypolicy.NewWithDefaults[int]()
	got, err := failsafe.With[int](retry).ComposeAny(New[any](p, "db-1")).Get(func() (int, error) { return 42, nil })
	require.NoError(t, err)
	require.Equal(t, 42, got)
	require.Equal(t, []timeout.Outcome{timeout.Completed}, p.Outcomes())
}
