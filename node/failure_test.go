package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// callFor runs one sequential caller's Do calls to dest for d, each
// answering after latency(i) or, when latency returns a negative value,
// never (only the context ends it); it returns each call's wait.
func callFor(t *testing.T, n *Node, dest string, d time.Duration, latency func(i int) time.Duration) []time.Duration {
	t.Helper()
	var waits []time.Duration
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end); i++ {
		start := time.Now()
		_ = n.Do(t.Context(), dest, 1, func(ctx context.Context) error {
			l := latency(i)
			if l < 0 {
				<-ctx.Done()
				return ctx.Err()
			}
			select {
			case <-time.After(l):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		waits = append(waits, time.Since(start))
	}
	return waits
}

func meanMedian(ws []time.Duration) (mean, median time.Duration) {
	var sum time.Duration
	for _, w := range ws {
		sum += w
	}
	s := slices.Clone(ws)
	slices.Sort(s)
	return sum / time.Duration(len(s)), s[len(s)/2]
}

// TestDoDeadDestination is issue 19's acceptance: a single sequential
// caller of Do against a destination that stops answering waits at most
// 1 s per call on average over the next 120 s, and at most 300 ms for the
// median call.
func TestDoDeadDestination(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newAlone(t, nil, nil)
		callFor(t, n, "db", time.Minute, func(i int) time.Duration { return time.Duration(10+i%20) * time.Millisecond })
		waits := callFor(t, n, "db", 120*time.Second, func(int) time.Duration { return -1 })
		mean, median := meanMedian(waits)
		t.Logf("dead destination, 120 s: %d calls, mean wait %v, median %v, max %v", len(waits), mean, median, slices.Max(waits))
		require.LessOrEqual(t, mean, time.Second)
		require.LessOrEqual(t, median, 300*time.Millisecond)
	})
}

// TestDoSlowDestinationRecovers is issue 19's acceptance: a destination
// that is alive but slower than every timeout (it answers every call after
// 3 s; the fallback is 250 ms) recovers through caller probes within a
// window: successive probes double until one completes, and from then on
// every call completes.
func TestDoSlowDestinationRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newAlone(t, nil, nil)
		start := time.Now()
		var recovered time.Duration
		for i := 0; i < 1000 && time.Since(start) < 3*time.Minute; i++ {
			err := n.Do(t.Context(), "slow", 1, func(ctx context.Context) error {
				select {
				case <-time.After(3 * time.Second):
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			switch {
			case err == nil && recovered == 0:
				recovered = time.Since(start)
			case err != nil:
				require.Zero(t, recovered, "a call timed out after the recovery at %v", recovered)
			}
		}
		t.Logf("slower than every timeout: recovered after %v", recovered)
		require.NotZero(t, recovered)
		require.Less(t, recovered, n.cfg.Tracker.Window, "within a window")
		e, err := n.Estimate("slow", 0)
		require.NoError(t, err)
		require.False(t, e.Failing)
		d, err := n.Timeout([]string{"slow"}, 1)
		require.NoError(t, err)
		require.Greater(t, d.Timeout, 3*time.Second)
	})
}

// TestDoCallerProbe pins a caller probe: fn's context carries the probe's
// deadline when one is due, Do waits for fn past the timeout, and a probe
// ends at its probe timeout with ErrTimeout; a caller's deadline that
// leaves no room for the probe keeps the plain timeout.
func TestDoCallerProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newAlone(t, nil, nil)
		for range 100 {
			n.Record("db", 200*time.Millisecond)
		}
		block := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
		require.ErrorIs(t, n.Do(t.Context(), "db", 1, block), ErrTimeout) // censored at 400: Q 401, v 200

		d, err := n.Timeout([]string{"db"}, 1)
		require.NoError(t, err)
		require.Equal(t, Decision{Timeout: 400 * time.Millisecond, Attempt: 1, Need: 1, DecidedBy: "db", Source: tracker.SourceLocal,
			Reason: timeout.ReasonCapped, ProbeTimeout: 802 * time.Millisecond}, d)

		// A caller deadline short of the probe timeout: no probe.
		ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
		err = n.Do(ctx, "db", 1, func(ctx context.Context) error {
			dl, _ := ctx.Deadline()
			require.Equal(t, 400*time.Millisecond, time.Until(dl))
			return block(ctx)
		})
		cancel()
		require.ErrorIs(t, err, ErrTimeout)

		// The probe: fn answers at 600 ms, past the 400 ms timeout.
		start := time.Now()
		err = n.Do(t.Context(), "db", 1, func(ctx context.Context) error {
			dl, _ := ctx.Deadline()
			require.Equal(t, 802*time.Millisecond, time.Until(dl), "the probe's deadline")
			time.Sleep(600 * time.Millisecond)
			return ctx.Err()
		})
		require.NoError(t, err)
		require.Equal(t, 600*time.Millisecond, time.Since(start))
		e, err := n.Estimate("db", 0)
		require.NoError(t, err)
		require.EqualValues(t, 603, e.MaxCompletedMillis, "the probe's latency is a sample (600's bucket is 600..603)")

		// One probe per sub-window: the next waits at the timeout only.
		d, err = n.Timeout([]string{"db"}, 1)
		require.NoError(t, err)
		require.Zero(t, d.ProbeTimeout)

		// A probe that times out ends at the probe timeout, with
		// ErrTimeout (another destination: still in the first
		// sub-window, on the local view).
		for range 100 {
			n.Record("db2", 200*time.Millisecond)
		}
		require.ErrorIs(t, n.Do(t.Context(), "db2", 1, block), ErrTimeout)
		start = time.Now()
		err = n.Do(t.Context(), "db2", 1, func(ctx context.Context) error {
			<-ctx.Done()
			require.ErrorIs(t, context.Cause(ctx), ErrTimeout)
			return ctx.Err()
		})
		require.ErrorIs(t, err, ErrTimeout)
		require.Equal(t, 802*time.Millisecond, time.Since(start))
		require.EqualError(t, err, "node: adaptive timeout expired after 802ms: context deadline exceeded")
		require.Less(t, time.Since(epochStartOf(n, start)), n.tcfg.SubWindow(), "all in one sub-window")
		ds := n.dec.Stats()
		require.Equal(t, uint64(2), ds.ProbesStarted)
		require.Equal(t, timeout.OutcomeCounts{Completed: 1, TimedOut: 1}, ds.ProbesEnded)
	})
}

// epochStartOf returns the start of the sub-window t falls in.
func epochStartOf(n *Node, t time.Time) time.Time { return n.tcfg.EpochStart(n.tcfg.Epoch(t)) }

// TestDoClassify checks Config.Classify: fast failures classified as
// Failed are no latency sample and make the destination failing after
// three; by default fn's own errors are completions, as before.
func TestDoClassify(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refuse := func(context.Context) error { time.Sleep(2 * time.Millisecond); return errRefused }
		n := newAlone(t, nil, func(c *Config) {
			c.Classify = func(err error) timeout.Outcome {
				if errors.Is(err, errRefused) {
					return timeout.Failed
				}
				return timeout.Completed
			}
		})
		for range 3 {
			require.ErrorIs(t, n.Do(t.Context(), "db", 1, refuse), errRefused)
		}
		e, err := n.Estimate("db", 0)
		require.NoError(t, err)
		require.Zero(t, e.LocalSamples, "a fast failure is no latency sample")
		require.True(t, e.Failing)
		d, err := n.Timeout([]string{"db"}, 1)
		require.NoError(t, err)
		require.Equal(t, []string{"db"}, d.Failing)
		require.Equal(t, timeout.ReasonFailing, d.Reason)
		require.Equal(t, 3.0, outcomesValue(t, n, "failed"))
		require.Equal(t, 3.0, doCallsValue(t, n, "error"))
		require.NoError(t, n.Do(t.Context(), "db", 1, func(context.Context) error { return nil }))
		require.False(t, n.dec.Failing("db"), "a completion resets the detector")

		def := newAlone(t, nil, nil)
		for range 3 {
			require.ErrorIs(t, def.Do(t.Context(), "db", 1, refuse), errRefused)
		}
		e, err = def.Estimate("db", 0)
		require.NoError(t, err)
		require.EqualValues(t, 3, e.LocalSamples, "by default an error of fn's own is a completion")
		require.False(t, e.Failing)
	})
}

// TestClassifyErrorDefault: without a Classify of one's own, a connection
// the network refused is a failure (no sample, counted for the detector:
// failing after three) and DoHedged fails over from the replica that
// refuses; an error of the application's, io.EOF included, is a
// completion.
func TestClassifyErrorDefault(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	require.Equal(t, timeout.Failed, ClassifyError(refused))
	require.Equal(t, timeout.Failed, ClassifyError(fmt.Errorf("query: %w", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET})))
	require.Equal(t, timeout.Completed, ClassifyError(io.EOF), "fn may return io.EOF as its own result")
	require.Equal(t, timeout.Completed, ClassifyError(errors.New("not found")))

	synctest.Test(t, func(t *testing.T) {
		n := newAlone(t, nil, nil)
		for range timeout.FailingAfter {
			require.ErrorIs(t, n.Do(t.Context(), "down", 1, func(context.Context) error { return refused }), syscall.ECONNREFUSED)
		}
		e, err := n.Estimate("down", 0)
		require.NoError(t, err)
		require.Zero(t, e.LocalSamples, "a refusal is no latency sample")
		require.True(t, e.Failing)

		for range 100 {
			n.Record("a", 20*time.Millisecond)
			n.Record("b", 10*time.Millisecond) // b first: the lower median
		}
		var tried []string
		dest, err := n.DoHedged(t.Context(), []string{"a", "b"}, 1, func(ctx context.Context, d string) error {
			tried = append(tried, d)
			if d == "b" {
				return refused
			}
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, "a", dest, "failed over from the refusing replica")
		require.Equal(t, []string{"b", "a"}, tried)
	})
}

// TestNodeIsAPolicy drives *Node through timeout.Policy as an adapter
// does: Decide, Probe once per destination in flight, Observe with every
// outcome (on the local view: everything happens in one sub-window).
func TestNodeIsAPolicy(t *testing.T) {
	clk := &testClock{now: epochStart(e0).Add(100 * time.Millisecond)}
	n := newAlone(t, clk, nil)
	var p timeout.Policy = n
	for range 200 {
		n.Record("db", 300*time.Millisecond)
	}
	now := clk.Now()
	a := p.Decide("db", 2, now)
	// 2 × 301 × 2: 300's bucket is 300..301.
	require.Equal(t, timeout.Attempt{Dest: "db", Attempt: 2, Timeout: 1204 * time.Millisecond, Reason: timeout.ReasonEstimate}, a)
	require.False(t, p.Probe(&a, now.Add(a.Timeout)), "no probe offered")
	p.Observe(a, timeout.TimedOut, a.Timeout, now.Add(a.Timeout))

	a = p.Decide("db", 1, now)
	require.Equal(t, timeout.ReasonCapped, a.Reason, "v = M = 301 < Q")
	require.Equal(t, 602*time.Millisecond, a.Timeout)
	require.Equal(t, 2*1207*time.Millisecond, a.ProbeTimeout, "today's rule on Q: 1204's bucket is 1200..1207")
	b := p.Decide("db", 1, now)
	require.True(t, p.Probe(&a, now.Add(a.Timeout)))
	require.False(t, p.Probe(&b, now.Add(b.Timeout)), "one probe in flight")
	p.Observe(a, timeout.Completed, 2*time.Second, now.Add(2*time.Second))
	p.Observe(b, timeout.Superseded, 700*time.Millisecond, now.Add(700*time.Millisecond))
	for range 3 {
		c := p.Decide("db", 1, now)
		p.Observe(c, timeout.Failed, time.Millisecond, now)
	}
	require.True(t, p.Decide("db", 1, now).Failing)
	e, err := n.Estimate("db", 0)
	require.NoError(t, err)
	require.True(t, e.Failing)
	require.EqualValues(t, 2, e.LocalCensored, "the timeout and the superseded attempt")
	require.EqualValues(t, 2007, e.LocalValueMillis, "the probe's completion at 2 s (2000's bucket is 2000..2007)")
	p.Observe(timeout.Attempt{Dest: "", Attempt: 1}, timeout.Completed, time.Millisecond, now) // rejected
	require.Equal(t, 1.0, counterValue(t, n.met.rejected))
	require.Equal(t, 1.0, outcomesValue(t, n, "completed"))
	require.Equal(t, 3.0, outcomesValue(t, n, "failed"))
	require.Equal(t, 1.0, outcomesValue(t, n, "superseded"))
}

// TestStepSweepsDetectorState: the node's periodic step drops failure
// detector state that holds nothing any more, so a destination probed
// once and never called again does not keep the decisions of every other
// destination off their quick path.
func TestStepSweepsDetectorState(t *testing.T) {
	clk := &testClock{now: epochStart(e0).Add(100 * time.Millisecond)}
	n := newAlone(t, clk, nil)
	now := clk.Now()
	a := n.Decide("gone", 1, now)
	a.ProbeTimeout = 2 * a.Timeout
	require.True(t, n.Probe(&a, now.Add(a.Timeout)))
	n.Observe(a, timeout.Completed, a.Timeout+time.Millisecond, now.Add(a.Timeout+time.Millisecond))
	require.False(t, n.dec.Quiet(), "the probe's sub-window is not over")
	clk.Set(now.Add(n.tcfg.SubWindow()))
	n.step(clk.Now())
	require.True(t, n.dec.Quiet())
}

// TestRecordOutcomesHTTP checks POST /v1/record's timed_out and failed:
// a timed-out sample is censored at latency_ms, a failed one is no sample
// (latency_ms may be omitted), and samples count for the failure detector
// in body order; GET /v1/estimate and GET /v1/timeout then say failing,
// with the reason and the probe.
func TestRecordOutcomesHTTP(t *testing.T) {
	clk := &testClock{now: epochStart(e0).Add(100 * time.Millisecond)}
	n := newAlone(t, clk, nil)
	h := n.Handler()
	record := func(body string) {
		t.Helper()
		code, b := do(t, h, "POST", "/v1/record", body, "")
		require.Equal(t, 200, code, "%s", b)
	}
	field := func(target, name string) any {
		t.Helper()
		return getJSON(t, h, target).(map[string]any)[name]
	}
	record(samplesBody("db", 10, 10, 10, 10, 10, 10, 10, 10, 10, 12))
	record(`{"samples":[{"dest":"db","latency_ms":250,"timed_out":true},{"dest":"db","latency_ms":250,"timed_out":true},` +
		`{"dest":"db","latency_ms":11},{"dest":"db","latency_ms":250,"timed_out":true}]}`)
	require.Equal(t, false, field("/v1/estimate?dest=db", "failing"), "the completion between reset the count")
	require.Equal(t, json.Number("3"), field("/v1/estimate?dest=db", "local_censored"))
	require.Equal(t, json.Number("12"), field("/v1/estimate?dest=db", "max_completed_ms"))
	require.Equal(t, map[string]any{
		"timeout_ms": json.Number("250"), "attempt": json.Number("1"), "need": json.Number("1"), "decided_by": "",
		"source": "none", "guarded": false, "fallback": true, "reason": "fallback", "failing": []any{},
		"probe_ms": json.Number("500"), // v = M = 12 < Q = 250: a probe on Q
	}, getJSON(t, h, "/v1/timeout?dest=db"))

	record(`{"samples":[{"dest":"db","failed":true},{"dest":"db","latency_ms":3,"failed":true}]}`)
	e, err := n.Estimate("db", 0)
	require.NoError(t, err)
	require.True(t, e.Failing, "3 in a row: a timeout, then two fast failures")
	require.EqualValues(t, 14, e.LocalSamples, "failed attempts are no samples")
	require.Equal(t, map[string]any{
		"timeout_ms": json.Number("250"), "attempt": json.Number("1"), "need": json.Number("2"), "decided_by": "",
		"source": "none", "guarded": false, "fallback": true, "reason": "failing", "failing": []any{"db"},
		"probe_ms": json.Number("500"),
	}, getJSON(t, h, "/v1/timeout?dest=ok&dest=db"))
	require.Equal(t, true, field("/v1/estimate?dest=db", "failing"))

	// A refused body counts nothing; a completion resets.
	code, b := do(t, h, "POST", "/v1/record", `{"samples":[{"dest":"db","latency_ms":5},{"dest":"db","timed_out":true}]}`, "")
	requireError(t, code, b, 400, `samples[1]: missing field "latency_ms"`)
	require.True(t, n.dec.Failing("db"))
	record(`{"samples":[{"dest":"db","latency_ms":9}]}`)
	require.Equal(t, false, field("/v1/estimate?dest=db", "failing"))
	record(`{"samples":[{"dest":"db2","latency_ms":300},{"dest":"db2","latency_ms":300},{"dest":"db2","latency_ms":300},` +
		`{"dest":"db2","latency_ms":700,"timed_out":true}]}`)
	require.Equal(t, map[string]any{
		"timeout_ms": json.Number("602"), "attempt": json.Number("1"), "need": json.Number("1"), "decided_by": "db2",
		"source": "local", "guarded": false, "fallback": false, "reason": "capped", "failing": []any{},
		"probe_ms": json.Number("1406"), // v = M = 301 < Q = 703 (700's bucket is 700..703)
	}, getJSON(t, h, "/v1/timeout?dest=db2"))

	// Outcomes are counted.
	for o, want := range map[string]float64{"completed": 15, "timed_out": 4, "failed": 2} {
		require.Equal(t, want, outcomesValue(t, n, o), o)
	}
}

// TestFailureMetrics checks the failure-aware metrics: failing
// destinations (the view's and the detector's, counted once), probes
// started and finished, and that promlint accepts them.
func TestFailureMetrics(t *testing.T) {
	clk := &testClock{now: epochStart(e0).Add(100 * time.Millisecond)}
	n := newAlone(t, clk, nil)
	now := clk.Now()
	// "gone" fails fast three times (no samples at all), "dead" times out
	// three times after a history, "ok" answers.
	for range 3 {
		n.dec.Record("gone", timeout.Failed, 0, now)
	}
	for range 20 {
		n.Record("dead", 10*time.Millisecond)
		n.Record("ok", 10*time.Millisecond)
	}
	for range 3 {
		n.Observe(timeout.Attempt{Dest: "dead", Attempt: 1, Timeout: 250 * time.Millisecond}, timeout.TimedOut, 250*time.Millisecond, now)
	}
	a := n.Decide("dead", 1, now)
	require.True(t, a.Failing)
	require.True(t, n.Probe(&a, now.Add(a.Timeout)))
	n.step(now)

	requireMetrics(t, n,
		`atnode_destinations_failing 2`,
		`atnode_destination_failing{dest="dead"} 1`,
		`atnode_destination_failing{dest="ok"} 0`,
		`atnode_probes_started_total 1`,
		`atnode_probes_in_flight 1`,
		`atnode_probes_finished_total{outcome="timed_out"} 0`,
		`atnode_outcomes_total{outcome="timed_out"} 3`,
		`atnode_failure_state_evicted_total 0`,
	)
	n.Observe(a, timeout.TimedOut, a.ProbeTimeout, now.Add(a.ProbeTimeout))
	requireMetrics(t, n, `atnode_probes_finished_total{outcome="timed_out"} 1`, `atnode_probes_in_flight 0`)

	// A probe a hedge's winner superseded is counted as such: started =
	// finished + in flight.
	later := now.Add(n.tcfg.SubWindow() + 10*time.Second) // a new sub-window, the pause over
	b := n.Decide("dead", 1, later)
	require.True(t, n.Probe(&b, later.Add(b.Timeout)))
	n.Observe(b, timeout.Superseded, b.Timeout+time.Millisecond, later.Add(b.Timeout+time.Millisecond))
	requireMetrics(t, n, `atnode_probes_started_total 2`, `atnode_probes_finished_total{outcome="superseded"} 1`, `atnode_probes_in_flight 0`)
}

// TestDoErrorBeforeTimeout: an error fn returned 1 ms before our timeout
// is fn's own, learned as Config.Classify says and at the latency measured,
// even when the timeout has ended fn's context by the time Do looks at it
// (here the node's clock, read as fn returns, holds Do for 2 ms); an error
// fn returns after our timeout ended its context is a timeout, whether or
// not it wraps the context's.
func TestDoErrorBeforeTimeout(t *testing.T) {
	errApp := errors.New("not found")
	for _, tc := range []struct {
		name     string
		fn       func(ctx context.Context) error
		err      error  // fn's
		ours     bool   // Do's error matches ErrTimeout
		outcome  string // each call's, in atnode_outcomes_total
		result   string // each call's, in atnode_do_calls_total
		samples  uint64 // local samples after the calls
		censored uint64 // of them
		value    uint64 // their value, ms
		failing  bool   // after the calls
	}{
		{"an answer, 1 ms before", func(context.Context) error { time.Sleep(249 * time.Millisecond); return errApp },
			errApp, false, "completed", "error", 3, 0, 249, false},
		{"a refusal, 1 ms before", func(context.Context) error { time.Sleep(249 * time.Millisecond); return errRefused },
			errRefused, false, "failed", "error", 0, 0, 0, true},
		{"its own error, after our timeout", func(ctx context.Context) error { <-ctx.Done(); return errApp },
			errApp, true, "timed_out", "timeout", 3, 3, 250, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var hold atomic.Bool
				n := newAlone(t, nil, func(c *Config) {
					c.Clock = func() time.Time {
						now := time.Now()
						if hold.CompareAndSwap(true, false) {
							time.Sleep(2 * time.Millisecond) // past the timeout: fn's context ends
						}
						return now
					}
					c.Classify = func(err error) timeout.Outcome {
						if errors.Is(err, errRefused) {
							return timeout.Failed
						}
						return timeout.Completed
					}
				})
				for range timeout.FailingAfter {
					var seen context.Context
					start := time.Now()
					err := n.Do(t.Context(), "db", 1, func(ctx context.Context) error { // 250 ms: the fallback
						seen = ctx
						err := tc.fn(ctx)
						hold.Store(true)
						return err
					})
					require.ErrorIs(t, err, tc.err)
					require.Equal(t, tc.ours, errors.Is(err, ErrTimeout), "%v", err)
					require.Equal(t, ErrTimeout, context.Cause(seen), "the timeout came, after fn returned or before")
					require.GreaterOrEqual(t, time.Since(start), 251*time.Millisecond)
				}
				require.Equal(t, float64(timeout.FailingAfter), outcomesValue(t, n, tc.outcome))
				require.Equal(t, float64(timeout.FailingAfter), doCallsValue(t, n, tc.result))
				e, err := n.Estimate("db", 1)
				require.NoError(t, err)
				require.Equal(t, tc.samples, e.LocalSamples)
				require.Equal(t, tc.censored, e.LocalCensored)
				if tc.samples > 0 {
					require.EqualValues(t, tc.value, e.LocalValueMillis)
				}
				require.Equal(t, tc.failing, n.dec.Failing("db"))
			})
		})
	}
}

// TestDoProbeNotReserved: Do's attempt that could go on as a caller probe,
// when the probe cannot be reserved at its timeout, ends there with
// ErrTimeout as its cause, and the error fn returns for it is a timeout,
// though it comes before the probe's deadline.
func TestDoProbeNotReserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newAlone(t, nil, nil)
		for range 100 {
			n.Record("a", 200*time.Millisecond)
		}
		block := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
		// A timeout at 2 × 200 = 400 ms, censored, caps a's value at M = 200
		// below Q = 401: a probe is due.
		require.ErrorIs(t, n.Do(t.Context(), "a", 1, block), ErrTimeout)

		var cause error
		var deadline time.Time
		start := time.Now()
		err := n.Do(t.Context(), "a", 1, func(ctx context.Context) error {
			deadline, _ = ctx.Deadline()
			// Another caller takes the probe before this attempt's timeout.
			other := n.Decide("a", 1, time.Now())
			require.Positive(t, other.ProbeTimeout)
			require.True(t, n.Probe(&other, time.Now()))
			err := block(ctx)
			cause = context.Cause(ctx)
			return err
		})
		require.ErrorIs(t, err, ErrTimeout)
		require.Equal(t, ErrTimeout, cause)
		require.Greater(t, deadline.Sub(start), 400*time.Millisecond, "the attempt's context runs to the probe's deadline")
		require.Equal(t, 400*time.Millisecond, time.Since(start), "ended at its timeout, not its probe's")
		require.Equal(t, 2.0, doCallsValue(t, n, "timeout"))
		e, err := n.Estimate("a", 1)
		require.NoError(t, err)
		require.EqualValues(t, 2, e.LocalCensored)
	})
}

// TestDoErrorBeforeCallerDeadline: an error fn returned 1 ms before the
// caller's deadline is fn's own too, learned as Config.Classify says, even
// when that deadline has ended ctx by the time Do looks at it; an error fn
// returns once the caller's deadline (or cancellation) ended its context
// is learned as nothing.
func TestDoErrorBeforeCallerDeadline(t *testing.T) {
	errApp := errors.New("not found")
	for _, tc := range []struct {
		name    string
		fn      func(ctx context.Context) error
		result  string // atnode_do_calls_total
		samples uint64
	}{
		{"an answer, 1 ms before", func(context.Context) error { time.Sleep(99 * time.Millisecond); return errApp }, "error", 1},
		{"its own error, after the deadline", func(ctx context.Context) error { <-ctx.Done(); return errApp }, "canceled", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var hold atomic.Bool
				n := newAlone(t, nil, func(c *Config) {
					c.Clock = func() time.Time {
						now := time.Now()
						if hold.CompareAndSwap(true, false) {
							time.Sleep(2 * time.Millisecond) // past the caller's deadline
						}
						return now
					}
				})
				ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
				defer cancel()
				err := n.Do(ctx, "db", 1, func(ctx context.Context) error { // 250 ms: the fallback
					err := tc.fn(ctx)
					hold.Store(true)
					return err
				})
				require.ErrorIs(t, err, errApp)
				require.NotErrorIs(t, err, ErrTimeout)
				require.Error(t, ctx.Err(), "the caller's deadline came, after fn returned or before")
				require.Equal(t, 1.0, doCallsValue(t, n, tc.result))
				e, err := n.Estimate("db", 1)
				require.NoError(t, err)
				require.Equal(t, tc.samples, e.LocalSamples)
				if tc.samples > 0 {
					require.EqualValues(t, 99, e.LocalValueMillis)
				}
			})
		})
	}
}
