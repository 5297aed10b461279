package node

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

var errRefused = errors.New("connection refused")

// TestDo runs Do in a synctest bubble: time.Now (the node's clock) and the
// context deadlines are the bubble's fake time, so durations are exact.
func TestDo(t *testing.T) {
	sleep := func(d time.Duration, ret error) func(context.Context) error {
		return func(context.Context) error { time.Sleep(d); return ret }
	}
	waitDone := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	tests := []struct {
		name    string
		parent  func(context.Context) (context.Context, context.CancelFunc)
		fn      func(context.Context) error
		wantErr func(*testing.T, error)
		// recorded latency in ms; -1: nothing recorded
		recorded int64
		result   string
	}{
		{name: "fast", fn: sleep(10*time.Millisecond, nil), recorded: 10, result: "ok",
			wantErr: func(t *testing.T, err error) { require.NoError(t, err) }},
		{name: "fails on its own", fn: sleep(5*time.Millisecond, errRefused), recorded: 5, result: "error",
			wantErr: func(t *testing.T, err error) {
				require.ErrorIs(t, err, errRefused)
				require.NotErrorIs(t, err, ErrTimeout)
			}},
		{name: "slow: our timeout, censored at it", fn: waitDone, recorded: 250, result: "timeout",
			wantErr: func(t *testing.T, err error) {
				require.ErrorIs(t, err, ErrTimeout)
				require.ErrorIs(t, err, context.DeadlineExceeded)
				require.EqualError(t, err, "node: adaptive timeout expired after 250ms: context deadline exceeded")
			}},
		{name: "slow, returns the cause", fn: func(ctx context.Context) error { <-ctx.Done(); return context.Cause(ctx) },
			recorded: 250, result: "timeout",
			wantErr: func(t *testing.T, err error) { require.Equal(t, ErrTimeout, err) }},
		{name: "ignores the context and succeeds late", fn: sleep(254*time.Millisecond, nil), recorded: 254, result: "ok",
			wantErr: func(t *testing.T, err error) { require.NoError(t, err) }},
		{name: "caller cancels", recorded: -1, result: "canceled",
			parent: func(ctx context.Context) (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(ctx)
				time.AfterFunc(50*time.Millisecond, cancel)
				return ctx, cancel
			},
			fn: waitDone,
			wantErr: func(t *testing.T, err error) {
				require.ErrorIs(t, err, context.Canceled)
				require.NotErrorIs(t, err, ErrTimeout)
			}},
		{name: "caller's shorter deadline is kept", recorded: -1, result: "canceled",
			parent: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(ctx, 100*time.Millisecond)
			},
			fn: func(ctx context.Context) error {
				dl, ok := ctx.Deadline()
				if !ok || dl != time.Now().Add(100*time.Millisecond) {
					return errors.New("deadline extended")
				}
				return waitDone(ctx)
			},
			wantErr: func(t *testing.T, err error) {
				require.ErrorIs(t, err, context.DeadlineExceeded)
				require.NotErrorIs(t, err, ErrTimeout)
			}},
		{name: "caller's longer deadline is shortened", recorded: 250, result: "timeout",
			parent: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(ctx, time.Hour)
			},
			fn: func(ctx context.Context) error {
				if dl, _ := ctx.Deadline(); dl != time.Now().Add(250*time.Millisecond) {
					return errors.New("wrong deadline")
				}
				return waitDone(ctx)
			},
			wantErr: func(t *testing.T, err error) { require.ErrorIs(t, err, ErrTimeout) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := newAlone(t, nil, nil)
				ctx := t.Context()
				if tc.parent != nil {
					var cancel context.CancelFunc
					ctx, cancel = tc.parent(ctx)
					defer cancel()
				}
				tc.wantErr(t, n.Do(ctx, "db", 1, tc.fn))
				e, err := n.Estimate("db", 1)
				require.NoError(t, err)
				if tc.recorded < 0 {
					require.Zero(t, e.LocalSamples)
				} else {
					require.EqualValues(t, 1, e.LocalSamples)
					require.EqualValues(t, tc.recorded, e.LocalValueMillis)
				}
				require.Equal(t, 1.0, doCallsValue(t, n, tc.result))
			})
		})
	}
}

// TestDoAdapts checks that Do's timeout follows what was recorded and the
// attempt, and that fn is not run for an invalid attempt.
func TestDoAdapts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newAlone(t, nil, nil)
		for range 100 {
			n.Record("db", 200*time.Millisecond)
		}
		var took [3]time.Duration
		for a := 1; a <= 3; a++ {
			start := time.Now()
			err := n.Do(t.Context(), "db", a, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
			require.ErrorIs(t, err, ErrTimeout)
			took[a-1] = time.Since(start)
		}
		// Timeout = 2 × v × 2^(a−1) with v = min(Q, M): each timed-out
		// attempt is recorded at its timeout, censored, so Q (P99.99)
		// becomes it (as the highest equivalent value of its bucket) while
		// M, the highest completed latency, stays 200; and v < Q makes a
		// probe due, with today's rule on Q:
		//   a=1: 2 × 200 = 400; 400 is in [400, 401] → Q = 401
		//   a=2: 2 × 200 × 2 = 800 (capped), but a probe is due: Do keeps
		//        waiting until 2 × 401 × 2 = 1604; 1604 is in [1600, 1607] → Q = 1607
		//   a=3: 2 × 200 × 4 = 1600, and no probe: one was started in this
		//        sub-window. (Before the failure-aware rule: 2 × 1607 × 4 = 12856.)
		require.Equal(t, [3]time.Duration{400 * time.Millisecond, 1604 * time.Millisecond, 1600 * time.Millisecond}, took)

		ran := false
		err := n.Do(t.Context(), "db", 0, func(context.Context) error { ran = true; return nil })
		require.ErrorIs(t, err, ErrAttempt)
		require.False(t, ran)

		start := time.Now()
		n.RecordSince("since", start.Add(-42*time.Millisecond))
		require.Equal(t, time.Duration(0), n.RecordSince("since", start.Add(time.Second))) // future start counts as 0
		e, err := n.Estimate("since", 1)
		require.NoError(t, err)
		require.EqualValues(t, 42, e.LocalValueMillis)
		require.EqualValues(t, 2, e.LocalSamples)
	})
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

// TestDoNested runs a Do inside another Do's fn: the enclosing call's
// timeout ends the inner call's context with the same cause, ErrTimeout,
// and the inner call must take it for its caller's deadline (nothing
// learned of its destination, its error not ours), while an inner timeout
// that comes first is the inner call's own.
func TestDoNested(t *testing.T) {
	block := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	t.Run("outer timeout first", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := newAlone(t, nil, nil)
			for range 3 { // as many as make a destination failing
				var inner error
				// front, attempt 1: 250 ms; db, attempt 3: 1 s.
				outer := n.Do(t.Context(), "front", 1, func(ctx context.Context) error {
					inner = n.Do(ctx, "db", 3, block)
					return inner
				})
				require.ErrorIs(t, outer, ErrTimeout)
				require.NotErrorIs(t, inner, ErrTimeout)
				require.ErrorIs(t, inner, context.DeadlineExceeded)
			}
			db, err := n.Estimate("db", 1)
			require.NoError(t, err)
			require.Zero(t, db.LocalSamples, "db's own timeout never came")
			require.False(t, db.Failing)
			front, err := n.Estimate("front", 1)
			require.NoError(t, err)
			require.EqualValues(t, 3, front.LocalSamples)
			require.EqualValues(t, 3, front.LocalCensored)
			require.Equal(t, 3.0, doCallsValue(t, n, "timeout"))
			require.Equal(t, 3.0, doCallsValue(t, n, "canceled"))
		})
	})
	t.Run("inner timeout first", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := newAlone(t, nil, nil)
			var inner error
			start := time.Now()
			_ = n.Do(t.Context(), "db", 3, func(ctx context.Context) error {
				inner = n.Do(ctx, "front", 1, block)
				return inner
			})
			require.ErrorIs(t, inner, ErrTimeout)
			require.Equal(t, 250*time.Millisecond, time.Since(start))
			front, err := n.Estimate("front", 1)
			require.NoError(t, err)
			require.EqualValues(t, 1, front.LocalSamples)
			require.EqualValues(t, 1, front.LocalCensored)
		})
	})
}
