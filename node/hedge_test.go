package node

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// replicas is a set of simulated replicas for DoHedged tests: each call's
// latency per replica is drawn before the call (so the draws do not depend
// on goroutine scheduling), and fn waits for it or for its context.
type replicas struct {
	names []string
	lat   map[string]time.Duration // this call's latency per replica; < 0: never answers
	mu    sync.Mutex
	// counts, over every call
	calls    atomic.Int64 // fn invocations
	timedOut atomic.Int64 // fn saw ErrTimeout as its context's cause
	canceled atomic.Int64 // fn saw context.Canceled as its cause
}

func newReplicas(names ...string) *replicas {
	return &replicas{names: names, lat: map[string]time.Duration{}}
}

// set fixes the latencies of the next call.
func (r *replicas) set(lat func(dest string) time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.names {
		r.lat[d] = lat(d)
	}
}

func (r *replicas) fn(ctx context.Context, dest string) error {
	r.calls.Add(1)
	r.mu.Lock()
	l := r.lat[dest]
	r.mu.Unlock()
	var wait <-chan time.Time
	if l >= 0 {
		wait = time.After(l)
	}
	select {
	case <-wait:
		return nil
	case <-ctx.Done():
		switch context.Cause(ctx) {
		case ErrTimeout:
			r.timedOut.Add(1)
		case context.Canceled:
			r.canceled.Add(1)
		}
		return ctx.Err()
	}
}

// hedgeStats is what a run of hedged calls measured.
type hedgeStats struct {
	calls             int
	p50, p99, p999    time.Duration
	extra, timedOutSh float64 // extra fn calls and attempts ended by our timeout, per call
}

// stallCalls makes calls sequential requests over the replicas, 2 % of
// attempts stalling for 1 s and the others taking 10–30 ms, and measures
// the time to a successful answer (a call that fails is retried with the
// next attempt number, as a caller would).
func stallCalls(t *testing.T, n *Node, r *replicas, rng *rand.Rand, calls int) hedgeStats {
	t.Helper()
	c0, to0 := r.calls.Load(), r.timedOut.Load()
	waits := make([]time.Duration, 0, calls)
	for range calls {
		start := time.Now()
		for attempt := 1; ; attempt++ {
			r.set(func(string) time.Duration {
				if rng.Float64() < 0.02 {
					return time.Second
				}
				return time.Duration(10+rng.IntN(21)) * time.Millisecond
			})
			_, err := n.DoHedged(t.Context(), r.names, attempt, r.fn)
			if err == nil {
				break
			}
			require.ErrorIs(t, err, ErrTimeout)
			require.Less(t, attempt, 10)
		}
		waits = append(waits, time.Since(start))
	}
	slices.Sort(waits)
	q := func(p float64) time.Duration { return waits[min(int(p*float64(len(waits))), len(waits)-1)] }
	return hedgeStats{calls: calls, p50: q(0.5), p99: q(0.99), p999: q(0.999),
		extra:      float64(r.calls.Load()-c0-int64(calls)) / float64(calls),
		timedOutSh: float64(r.timedOut.Load()-to0) / float64(calls)}
}

// TestDoHedgedStalls is issue 22's acceptance: three replicas where 2 % of
// calls stall for 1 s and the rest take 10–30 ms. With hedging, as time to
// a successful answer, p99 ≤ 100 ms, attempts ended by our timeout ≤ 0.5 %
// of requests and at most 7 % extra calls; without (HedgeBudget 0, the same
// draws), p99 ≥ 200 ms or ≥ 1 % of requests meet our timeout.
func TestDoHedgedStalls(t *testing.T) {
	const warm, calls = 300, 2000
	run := func(budget float64) (s hedgeStats, sent, refused float64) {
		synctest.Test(t, func(t *testing.T) {
			n := newAlone(t, nil, func(c *Config) { c.HedgeBudget = budget })
			r := newReplicas("r0", "r1", "r2")
			rng := rand.New(rand.NewPCG(22, 1))
			stallCalls(t, n, r, rng, warm)
			s = stallCalls(t, n, r, rng, calls)
			sent, refused = counterValue(t, n.met.hedgesSent), counterValue(t, n.met.hedgesRefused)
		})
		return
	}
	h, sent, refused := run(0.05)
	t.Logf("hedged: p50 %v p99 %v p99.9 %v, extra calls %.2f %%, ended by our timeout %.3f %% (hedges sent %v, refused %v)",
		h.p50, h.p99, h.p999, 100*h.extra, 100*h.timedOutSh, sent, refused)
	u, _, _ := run(0)
	t.Logf("no hedging: p50 %v p99 %v p99.9 %v, extra calls %.2f %%, ended by our timeout %.3f %%",
		u.p50, u.p99, u.p999, 100*u.extra, 100*u.timedOutSh)

	require.LessOrEqual(t, h.p99, 100*time.Millisecond)
	require.LessOrEqual(t, h.timedOutSh, 0.005)
	require.LessOrEqual(t, h.extra, 0.07)
	require.True(t, u.p99 >= 200*time.Millisecond || u.timedOutSh >= 0.01)
}

// TestDoHedgedBudget: under a burst of stalls (every first attempt stalls: the replica tried first),
// hedges never exceed HedgeBudget of the calls plus the burst of 10 over
// any stretch of calls, and the refused ones are counted.
func TestDoHedgedBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newAlone(t, nil, nil)
		r := newReplicas("r0", "r1", "r2")
		rng := rand.New(rand.NewPCG(22, 2))
		stallCalls(t, n, r, rng, 300) // warm
		type point struct {
			at     time.Time
			calls  float64
			hedges float64
		}
		pts := []point{{time.Now(), counterValue(t, n.met.hedgedCalls), counterValue(t, n.met.hedgesSent)}}
		for range 400 {
			first := n.replicaOrder(r.names, time.Now())[0]
			r.set(func(d string) time.Duration {
				if d == first {
					return time.Second // the burst: the first replica stalls
				}
				return 20 * time.Millisecond
			})
			_, err := n.DoHedged(t.Context(), r.names, 1, r.fn)
			require.NoError(t, err)
			pts = append(pts, point{time.Now(), counterValue(t, n.met.hedgedCalls), counterValue(t, n.met.hedgesSent)})
		}
		for i := range pts {
			for j := i + 1; j < len(pts); j++ {
				calls, hedges := pts[j].calls-pts[i].calls, pts[j].hedges-pts[i].hedges
				require.LessOrEqual(t, hedges, n.cfg.HedgeBudget*calls+timeout.HedgeBurst+1e-9,
					"calls %d..%d (%v)", i, j, pts[j].at.Sub(pts[i].at))
			}
		}
		refused := counterValue(t, n.met.hedgesRefused)
		t.Logf("burst: %v calls over %v, %v hedges, %v refused", pts[len(pts)-1].calls-pts[0].calls,
			pts[len(pts)-1].at.Sub(pts[0].at), pts[len(pts)-1].hedges-pts[0].hedges, refused)
		require.Positive(t, refused)
	})
}

// TestDoHedgedCancel: a context cancelled by the caller while a hedge and
// the first attempt run cancels both and records nothing.
func TestDoHedgedCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newAlone(t, nil, nil)
		for range 100 {
			n.Record("a", 20*time.Millisecond)
			n.Record("b", 30*time.Millisecond)
		}
		before := map[string][2]uint64{}
		for _, d := range []string{"a", "b"} {
			e, err := n.Estimate(d, 0)
			require.NoError(t, err)
			before[d] = [2]uint64{e.LocalSamples, e.LocalCensored}
		}
		ctx, cancel := context.WithCancel(t.Context())
		var started, ended atomic.Int32
		var causes sync.Map
		time.AfterFunc(100*time.Millisecond, cancel) // after a's hedge delay (21 ms)
		dest, err := n.DoHedged(ctx, []string{"b", "a"}, 1, func(ctx context.Context, dest string) error {
			started.Add(1)
			defer ended.Add(1)
			<-ctx.Done()
			causes.Store(dest, context.Cause(ctx))
			return ctx.Err()
		})
		require.ErrorIs(t, err, context.Canceled)
		require.Empty(t, dest)
		synctest.Wait()
		require.EqualValues(t, 2, started.Load())
		require.EqualValues(t, 2, ended.Load())
		for _, d := range []string{"a", "b"} {
			c, _ := causes.Load(d)
			require.Equal(t, context.Canceled, c, d)
			e, err := n.Estimate(d, 0)
			require.NoError(t, err)
			require.Equal(t, before[d], [2]uint64{e.LocalSamples, e.LocalCensored}, "%s: nothing recorded", d)
		}
		require.Equal(t, 1.0, counterValue(t, n.met.hedgesSent))
		require.Equal(t, 2.0, outcomesValue(t, n, timeout.Canceled.String()))
	})
}

// TestDoHedged pins the rules one by one.
func TestDoHedged(t *testing.T) {
	errRefused := errors.New("connection refused")
	classify := func(c *Config) {
		c.Classify = func(err error) timeout.Outcome {
			if errors.Is(err, errRefused) {
				return timeout.Failed
			}
			return timeout.Completed
		}
	}
	seed := func(n *Node) {
		for range 100 {
			n.Record("fast", 20*time.Millisecond)
			n.Record("slow", 40*time.Millisecond)
		}
	}

	t.Run("no destinations, bad attempt", func(t *testing.T) {
		n := newAlone(t, nil, nil)
		ran := false
		fn := func(context.Context, string) error { ran = true; return nil }
		_, err := n.DoHedged(t.Context(), nil, 1, fn)
		require.ErrorIs(t, err, ErrNoDestinations)
		_, err = n.DoHedged(t.Context(), []string{"a"}, 0, fn)
		require.ErrorIs(t, err, ErrAttempt)
		require.False(t, ran)
	})

	t.Run("order: by median, no estimate after, failing last, ties in caller's order", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := newAlone(t, nil, nil)
			seed(n)
			for range 100 {
				n.Record("tie", 20*time.Millisecond)
			}
			for range timeout.FailingAfter {
				n.Observe(timeout.Attempt{Dest: "down", Attempt: 1, Timeout: time.Second}, timeout.Failed, 0, time.Now())
			}
			require.Equal(t, []string{"fast", "tie", "slow", "new", "down"},
				n.replicaOrder([]string{"down", "new", "slow", "fast", "tie"}, time.Now()))
			require.Equal(t, []string{"tie", "fast"}, n.replicaOrder([]string{"tie", "fast"}, time.Now()))
		})
	})

	t.Run("order: by the median whatever its sample count; medians in one bucket tie", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := newAlone(t, nil, nil)
			for range 4 { // trusted (MinSamples 3), a lower median on few samples
				n.Record("thin", 7*time.Millisecond)
			}
			for range 1000 {
				n.Record("known", 10*time.Millisecond)
			}
			require.Equal(t, []string{"thin", "known"}, n.replicaOrder([]string{"known", "thin"}, time.Now()))

			// Both medians in the 10 ms bucket, at different places in it
			// (rank 100 of 200, its top, for "top"; rank 50 of 100, 50 of
			// its 60 samples, for "low"): a tie all the same.
			for range 100 {
				n.Record("top", 10*time.Millisecond)
				n.Record("top", 30*time.Millisecond)
			}
			for range 60 {
				n.Record("low", 10*time.Millisecond)
			}
			for range 40 {
				n.Record("low", 30*time.Millisecond)
			}
			median := func(d string) tracker.Survival {
				e, err := n.Estimate(d, timeout.MedianQuantile)
				require.NoError(t, err)
				return n.fleet.Median(d, timeout.HedgeView(&e), time.Now())
			}
			mt, ml := median("top"), median("low")
			require.Equal(t, mt.Millis, ml.Millis)
			for _, given := range [][]string{{"top", "low"}, {"low", "top"}} {
				require.Equal(t, given, n.replicaOrder(given, time.Now()), "the caller's order")
			}
		})
	})

	t.Run("order: hedges' losers do not pull a replica's median down", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := newAlone(t, nil, nil)
			for range 100 {
				n.Record("fast", 10*time.Millisecond)
				n.Record("demoted", 40*time.Millisecond) // when it was tried first
			}
			// Mostly tried as a hedge, which lost after 3 ms.
			for range 300 {
				n.Observe(timeout.Attempt{Dest: "demoted", Attempt: 1, Timeout: time.Second}, timeout.Superseded, 3*time.Millisecond, time.Now())
			}
			e, err := n.Estimate("demoted", timeout.MedianQuantile)
			require.NoError(t, err)
			require.Equal(t, uint64(3), e.ValueMillis, "the plain median counts the losers at 3 ms")
			require.Equal(t, []string{"fast", "demoted"}, n.replicaOrder([]string{"demoted", "fast"}, time.Now()))
		})
	})

	t.Run("delay: under censoring, hedges' losers do not pull it down", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := newAlone(t, nil, nil)
			superseded := func(d string, el time.Duration, k int) {
				for range k {
					n.Observe(timeout.Attempt{Dest: d, Attempt: 1, Timeout: time.Second}, timeout.Superseded, el, time.Now())
				}
			}
			// Mostly tried as a hedge, which lost after 3 ms; completed at
			// 10 (80), 20 (15) and 40 ms (5).
			superseded("hedged", 3*time.Millisecond, 300)
			for _, c := range []struct{ ms, k int }{{10, 80}, {20, 15}, {40, 5}} {
				for range c.k {
					n.Record("hedged", time.Duration(c.ms)*time.Millisecond)
				}
			}
			e, err := n.Estimate("hedged", timeout.HedgeQuantile(n.cfg.HedgeBudget))
			require.NoError(t, err)
			require.Equal(t, uint64(10), e.ValueMillis, "the plain P95 (rank 380 of 400) counts the losers, and stays the timeout's")
			d, ok := n.hedgeDelay("hedged", time.Now())
			require.True(t, ok)
			require.Equal(t, 21*time.Millisecond, d, "S falls to 0.05 at 20 ms: 5 of the 100 that were not cut short")

			// Nothing censored: the plain P95's bucket, as before.
			for range 100 {
				n.Record("plain", 10*time.Millisecond)
			}
			d, ok = n.hedgeDelay("plain", time.Now())
			require.True(t, ok)
			require.Equal(t, 11*time.Millisecond, d)

			// 10 % censored above every completion: S never falls to 0.05,
			// the P95 is above 10 ms by an unknown amount, and there is no
			// hedge (the plain P95 would hedge at 51 ms).
			for range 90 {
				n.Record("above", 10*time.Millisecond)
			}
			superseded("above", 50*time.Millisecond, 10)
			e, err = n.Estimate("above", timeout.HedgeQuantile(n.cfg.HedgeBudget))
			require.NoError(t, err)
			require.Equal(t, uint64(50), e.ValueMillis)
			_, ok = n.hedgeDelay("above", time.Now())
			require.False(t, ok)
		})
	})

	t.Run("hedge after the delay; the hedge wins; the loser is superseded at its elapsed time", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := newAlone(t, nil, nil)
			seed(n)
			loser := make(chan error, 1)
			start := time.Now()
			dest, err := n.DoHedged(t.Context(), []string{"slow", "fast"}, 1, func(ctx context.Context, dest string) error {
				if dest == "fast" { // tried first: the lower median; stalls
					<-ctx.Done()
					loser <- context.Cause(ctx)
					return ctx.Err()
				}
				time.Sleep(5 * time.Millisecond)
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, "slow", dest)
			// fast's P95 is 20 ms, in the bucket [20, 20]: the hedge starts at 21 ms.
			require.Equal(t, 26*time.Millisecond, time.Since(start))
			require.Equal(t, context.Canceled, <-loser)
			e, err := n.Estimate("fast", 1)
			require.NoError(t, err)
			require.EqualValues(t, 101, e.LocalSamples)
			require.EqualValues(t, 1, e.LocalCensored)
			require.EqualValues(t, 26, e.LocalValueMillis, "censored at its elapsed time")
			require.Equal(t, 1.0, counterValue(t, n.met.hedgesSent))
			require.Equal(t, 1.0, counterValue(t, n.met.hedgesWon))
			require.Equal(t, 1.0, outcomesValue(t, n, timeout.Superseded.String()))
			require.Zero(t, outcomesValue(t, n, timeout.TimedOut.String()))
		})
	})

	t.Run("no hedge: the first attempt wins", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			mutate func(*Config)
			seeded bool
			dests  []string
			answer time.Duration // every attempt's latency
			first  string        // the one attempt made
		}{
			{"answered in time", nil, true, []string{"slow", "fast"}, 15 * time.Millisecond, "fast"},
			{"budget 0, ordering kept", func(c *Config) { c.HedgeBudget = 0 }, true, []string{"slow", "fast"}, 100 * time.Millisecond, "fast"},
			{"no trusted estimate", nil, false, []string{"a", "b"}, 200 * time.Millisecond, "a"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					n := newAlone(t, nil, tc.mutate)
					if tc.seeded {
						seed(n)
					}
					var called []string
					dest, err := n.DoHedged(t.Context(), tc.dests, 1, func(ctx context.Context, dest string) error {
						called = append(called, dest)
						time.Sleep(tc.answer)
						return nil
					})
					require.NoError(t, err)
					require.Equal(t, tc.first, dest)
					require.Equal(t, []string{tc.first}, called)
					require.Zero(t, counterValue(t, n.met.hedgesSent))
				})
			})
		}
	})

	t.Run("an answer with an application error wins", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := newAlone(t, nil, classify)
			seed(n)
			errApp := errors.New("not found")
			dest, err := n.DoHedged(t.Context(), []string{"fast", "slow"}, 1, func(ctx context.Context, dest string) error {
				return errApp
			})
			require.Equal(t, "fast", dest)
			require.Equal(t, errApp, err)
		})
	})

	t.Run("failover at once on a failure, without spending budget", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := newAlone(t, nil, func(c *Config) { classify(c); c.HedgeBudget = 0 })
			seed(n)
			start := time.Now()
			var called []string
			dest, err := n.DoHedged(t.Context(), []string{"slow", "fast"}, 1, func(ctx context.Context, dest string) error {
				called = append(called, dest)
				if dest == "fast" {
					time.Sleep(2 * time.Millisecond)
					return errRefused
				}
				time.Sleep(10 * time.Millisecond)
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, "slow", dest)
			require.Equal(t, []string{"fast", "slow"}, called)
			require.Equal(t, 12*time.Millisecond, time.Since(start))
			require.Zero(t, counterValue(t, n.met.hedgesSent))
			require.Equal(t, 1.0, outcomesValue(t, n, timeout.Failed.String()))
		})
	})

	t.Run("failover at the timeout; our timeout is the cause; every attempt failing joins their errors", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := newAlone(t, nil, func(c *Config) { classify(c); c.HedgeBudget = 0 })
			start := time.Now()
			var mu sync.Mutex
			causes := map[string]error{}
			var at []time.Duration
			dest, err := n.DoHedged(t.Context(), []string{"x", "y", "z"}, 1, func(ctx context.Context, dest string) error {
				mu.Lock()
				at = append(at, time.Since(start))
				mu.Unlock()
				if dest == "y" {
					return errRefused
				}
				<-ctx.Done()
				mu.Lock()
				causes[dest] = context.Cause(ctx)
				mu.Unlock()
				return ctx.Err()
			})
			require.Empty(t, dest)
			require.ErrorIs(t, err, ErrTimeout)
			require.ErrorIs(t, err, errRefused)
			// No estimates: the fallback, 250 ms; y fails at once.
			require.Equal(t, []time.Duration{0, 250 * time.Millisecond, 250 * time.Millisecond}, at)
			require.Equal(t, 500*time.Millisecond, time.Since(start))
			require.Equal(t, map[string]error{"x": ErrTimeout, "z": ErrTimeout}, causes)
			require.EqualError(t, err, "node: adaptive timeout expired after 250ms: context deadline exceeded\n"+
				"connection refused\nnode: adaptive timeout expired after 250ms: context deadline exceeded")
			require.Equal(t, 2.0, outcomesValue(t, n, timeout.TimedOut.String()))
		})
	})

	t.Run("a caller probe fails over at its timeout and may still win", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := newAlone(t, nil, func(c *Config) { c.HedgeBudget = 0 })
			for range 100 {
				n.Record("a", 200*time.Millisecond)
				n.Record("b", 300*time.Millisecond)
			}
			// One attempt of a times out at 2 × 200 = 400 ms, censored: its
			// value is now capped at M = 200 below Q = 401, so a probe is due.
			_, err := n.DoHedged(t.Context(), []string{"a"}, 1, func(ctx context.Context, _ string) error {
				<-ctx.Done()
				return ctx.Err()
			})
			require.ErrorIs(t, err, ErrTimeout)
			d, err := n.Timeout([]string{"a"}, 1)
			require.NoError(t, err)
			require.Equal(t, 400*time.Millisecond, d.Timeout)
			require.Positive(t, d.ProbeTimeout)

			start := time.Now()
			var mu sync.Mutex
			var called []string
			dest, err := n.DoHedged(t.Context(), []string{"b", "a"}, 1, func(ctx context.Context, dest string) error {
				mu.Lock()
				called = append(called, dest)
				mu.Unlock()
				lat := 500 * time.Millisecond // a: past its timeout, within its probe's
				if dest == "b" {
					lat = 300 * time.Millisecond
				}
				select {
				case <-time.After(lat):
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			require.NoError(t, err)
			require.Equal(t, "a", dest, "the probe answered first")
			require.Equal(t, 500*time.Millisecond, time.Since(start))
			require.Equal(t, []string{"a", "b"}, called, "b started at a's timeout")
			ds := n.dec.Stats()
			require.EqualValues(t, 1, ds.ProbesStarted)
			require.EqualValues(t, 1, ds.ProbesEnded.Completed)
			require.Zero(t, counterValue(t, n.met.hedgesSent), "a failover is not a hedge")
			require.Equal(t, 1.0, outcomesValue(t, n, timeout.Superseded.String()))
		})
	})

}

// TestDoHedgedConcurrent: callers on several goroutines, with stalls,
// failures and their own cancellations mixed in: every attempt fn ran is
// observed exactly once, and every fn's context ends.
func TestDoHedgedConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errRefused := errors.New("connection refused")
		n := newAlone(t, nil, func(c *Config) {
			c.Classify = func(err error) timeout.Outcome {
				if errors.Is(err, errRefused) {
					return timeout.Failed
				}
				return timeout.Completed
			}
		})
		var attempts atomic.Int64
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 22))
				for range 150 {
					ctx, cancel := context.WithCancel(t.Context())
					if rng.IntN(10) == 0 {
						time.AfterFunc(time.Duration(rng.IntN(60))*time.Millisecond, cancel)
					}
					var mu sync.Mutex
					lat := map[string]time.Duration{}
					for _, d := range []string{"a", "b", "c"} {
						switch r := rng.IntN(100); {
						case r < 3:
							lat[d] = time.Second
						case r < 5:
							lat[d] = -1 // refused
						default:
							lat[d] = time.Duration(5+rng.IntN(20)) * time.Millisecond
						}
					}
					_, _ = n.DoHedged(ctx, []string{"a", "b", "c"}, 1, func(ctx context.Context, dest string) error {
						attempts.Add(1)
						mu.Lock()
						l := lat[dest]
						mu.Unlock()
						if l < 0 {
							return errRefused
						}
						select {
						case <-time.After(l):
							return nil
						case <-ctx.Done():
							return ctx.Err()
						}
					})
					cancel()
				}
			})
		}
		wg.Wait()
		synctest.Wait() // every fn returned: its context ended
		var observed float64
		for o := timeout.Completed; o <= timeout.Canceled; o++ {
			observed += outcomesValue(t, n, o.String())
		}
		require.Equal(t, float64(attempts.Load()), observed, "every attempt observed once")
		require.Zero(t, n.dec.Stats().ProbesInFlight, "no probe left reserved")
		t.Logf("%d calls, %d attempts, %v hedges, %v refused", 6*150, attempts.Load(),
			counterValue(t, n.met.hedgesSent), counterValue(t, n.met.hedgesRefused))
	})
}

// TestDoHedgedNested runs DoHedged inside a Do's fn and a Do inside a
// DoHedged attempt: the enclosing call's timeout ends the inner call's
// context with the same cause, ErrTimeout, which the inner call must take
// for its caller's deadline (nothing recorded, nothing counted for the
// failure detector, its error not ours).
func TestDoHedgedNested(t *testing.T) {
	block := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	t.Run("DoHedged inside Do", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := newAlone(t, nil, nil)
			for range timeout.FailingAfter {
				var inner error
				// front, attempt 1: 250 ms; a and b, attempt 3: 1 s each.
				outer := n.Do(t.Context(), "front", 1, func(ctx context.Context) error {
					_, inner = n.DoHedged(ctx, []string{"a", "b"}, 3, func(ctx context.Context, _ string) error { return block(ctx) })
					return inner
				})
				require.ErrorIs(t, outer, ErrTimeout)
				require.NotErrorIs(t, inner, ErrTimeout)
			}
			for _, d := range []string{"a", "b"} {
				e, err := n.Estimate(d, 1)
				require.NoError(t, err)
				require.Zero(t, e.LocalSamples, d)
				require.False(t, e.Failing, d)
			}
			require.Equal(t, float64(timeout.FailingAfter), outcomesValue(t, n, timeout.TimedOut.String()),
				"only front's attempts timed out")
		})
	})
	t.Run("Do inside a DoHedged attempt", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := newAlone(t, nil, nil)
			var inner error
			// a, attempt 1: 250 ms; db, attempt 3: 1 s.
			_, err := n.DoHedged(t.Context(), []string{"a"}, 1, func(ctx context.Context, _ string) error {
				inner = n.Do(ctx, "db", 3, block)
				return inner
			})
			require.ErrorIs(t, err, ErrTimeout)
			require.NotErrorIs(t, inner, ErrTimeout)
			e, err := n.Estimate("db", 1)
			require.NoError(t, err)
			require.Zero(t, e.LocalSamples)
			require.Equal(t, 1.0, doCallsValue(t, n, "canceled"))
		})
	})
}

// TestDoHedgedClassifiedAnswer: an error Config.Classify calls
// timeout.Canceled is an answer of the replica (only Failed and TimedOut
// fail over), so the first replica wins with its error and nothing is
// learned of it; an error it calls Failed fails over.
func TestDoHedgedClassifiedAnswer(t *testing.T) {
	errApp := errors.New("application said no")
	errRefused := errors.New("connection refused")
	synctest.Test(t, func(t *testing.T) {
		n := newAlone(t, nil, func(c *Config) {
			c.Classify = func(err error) timeout.Outcome {
				if errors.Is(err, errApp) {
					return timeout.Canceled
				}
				return timeout.Failed
			}
		})
		var called []string
		dest, err := n.DoHedged(t.Context(), []string{"a", "b"}, 1, func(ctx context.Context, d string) error {
			called = append(called, d)
			if d == "a" {
				return errApp
			}
			return nil
		})
		require.Equal(t, "a", dest)
		require.ErrorIs(t, err, errApp)
		require.Equal(t, []string{"a"}, called)
		e, err := n.Estimate("a", 1)
		require.NoError(t, err)
		require.Zero(t, e.LocalSamples, "Canceled: nothing to learn")

		called = nil
		dest, err = n.DoHedged(t.Context(), []string{"a", "b"}, 1, func(ctx context.Context, d string) error {
			called = append(called, d)
			if d == "a" {
				return errRefused
			}
			return nil
		})
		require.Equal(t, "b", dest)
		require.NoError(t, err)
		require.Equal(t, []string{"a", "b"}, called)
	})
}

// TestDoHedgedAnswerBeforeHedge: an attempt's answer that came in by the
// time the coordinator handles the hedge delay's firing wins, and no hedge
// is sent for it: no token spent, nothing counted, no fn run. Here the
// coordinator is held (in Config.Classify, while it learns a's failure)
// across the instant c's hedge delay passes and b answers, so that both
// wait for it, the timer's firing first.
func TestDoHedgedAnswerBeforeHedge(t *testing.T) {
	errRefused := errors.New("connection refused")
	synctest.Test(t, func(t *testing.T) {
		held, release := make(chan struct{}), make(chan struct{})
		n := newAlone(t, nil, func(c *Config) {
			c.Classify = func(err error) timeout.Outcome {
				if errors.Is(err, errRefused) {
					close(held)
					<-release
					return timeout.Failed
				}
				return timeout.Completed
			}
		})
		for range 100 { // hedge delays 21 ms, timeouts 250 ms (the floor)
			for _, d := range []string{"a", "b", "c"} {
				n.Record(d, 20*time.Millisecond)
			}
		}
		answerB := make(chan struct{})
		var mu sync.Mutex
		var called []string
		var dest string
		var err error
		done := make(chan struct{})
		start := time.Now()
		go func() {
			defer close(done)
			dest, err = n.DoHedged(t.Context(), []string{"a", "b", "c"}, 1, func(ctx context.Context, d string) error {
				mu.Lock()
				called = append(called, d)
				mu.Unlock()
				switch d {
				case "a": // fails 1 ms before c's hedge delay passes (21 + 21 ms)
					time.Sleep(41 * time.Millisecond)
					return errRefused
				case "b": // the hedge at 21 ms; answers when told
					<-answerB
					return nil
				}
				<-ctx.Done()
				return ctx.Err()
			})
		}()
		<-held // the coordinator learns a's failure, at 41 ms
		time.Sleep(time.Millisecond)
		synctest.Wait() // c's hedge delay passed: the timer fired
		require.Equal(t, 42*time.Millisecond, time.Since(start))
		close(answerB)
		synctest.Wait() // b answered, at the same instant
		close(release)
		<-done
		synctest.Wait() // every fn started has returned

		require.NoError(t, err)
		require.Equal(t, "b", dest)
		require.Equal(t, []string{"a", "b"}, called, "no hedge to c")
		require.Equal(t, 1.0, counterValue(t, n.met.hedgesSent), "b's hedge only")
		require.Equal(t, 1.0, counterValue(t, n.met.hedgesWon))
		require.Zero(t, counterValue(t, n.met.hedgesRefused))
		require.Equal(t, float64(timeout.HedgeBurst-1), n.hedge.Tokens(), "one token spent, b's")
	})
}

// TestDoHedgedErrorBeforeTimeout: an attempt's error that fn returned 1 ms
// before its timeout is the replica's answer, learned as Config.Classify
// says, even when the timeout has ended its context by the time the
// coordinator reads it (here the coordinator is held, in Config.Classify,
// while it learns the other attempt's failure, across both instants).
func TestDoHedgedErrorBeforeTimeout(t *testing.T) {
	errRefused := errors.New("connection refused")
	errApp := errors.New("not found")
	synctest.Test(t, func(t *testing.T) {
		n := newAlone(t, nil, func(c *Config) {
			c.Classify = func(err error) timeout.Outcome {
				if errors.Is(err, errRefused) {
					time.Sleep(35 * time.Millisecond) // to 275 ms
					return timeout.Failed
				}
				return timeout.Completed
			}
		})
		for range 100 { // hedge delays 21 ms, timeouts 250 ms (the floor)
			n.Record("a", 20*time.Millisecond)
			n.Record("b", 20*time.Millisecond)
		}
		var seen sync.Map
		dest, err := n.DoHedged(t.Context(), []string{"a", "b"}, 1, func(ctx context.Context, d string) error {
			seen.Store(d, ctx)
			if d == "a" { // tried first; refused at 240 ms
				time.Sleep(240 * time.Millisecond)
				return errRefused
			}
			time.Sleep(249 * time.Millisecond) // b, the hedge at 21 ms, times out at 271 ms
			return errApp
		})
		require.Equal(t, "b", dest)
		require.ErrorIs(t, err, errApp)
		require.NotErrorIs(t, err, ErrTimeout)
		b, _ := seen.Load("b")
		require.Equal(t, ErrTimeout, context.Cause(b.(context.Context)), "b's timeout came before the coordinator read its answer")
		require.Equal(t, 1.0, outcomesValue(t, n, timeout.Completed.String()))
		require.Equal(t, 1.0, outcomesValue(t, n, timeout.Failed.String()))
		require.Zero(t, outcomesValue(t, n, timeout.TimedOut.String()))
		e, err := n.Estimate("b", 1)
		require.NoError(t, err)
		require.EqualValues(t, 101, e.LocalSamples)
		require.Zero(t, e.LocalCensored)
	})
}

// TestDoHedgedProbeNotReserved: an attempt that could go on as a caller
// probe, when the probe cannot be reserved at its timeout, is ended there
// by the coordinator with ErrTimeout, and the error fn returns for it is a
// timeout, though it comes before the probe's deadline.
func TestDoHedgedProbeNotReserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newAlone(t, nil, func(c *Config) { c.HedgeBudget = 0 })
		for range 100 {
			n.Record("a", 200*time.Millisecond)
		}
		block := func(ctx context.Context, _ string) error { <-ctx.Done(); return ctx.Err() }
		// A timeout at 2 × 200 = 400 ms, censored, caps a's value at M = 200
		// below Q = 401: a probe is due.
		_, err := n.DoHedged(t.Context(), []string{"a"}, 1, block)
		require.ErrorIs(t, err, ErrTimeout)

		var cause error
		var deadline time.Time
		start := time.Now()
		_, err = n.DoHedged(t.Context(), []string{"a"}, 1, func(ctx context.Context, d string) error {
			deadline, _ = ctx.Deadline()
			// Another caller takes the probe before this attempt's timeout.
			other := n.Decide("a", 1, time.Now())
			require.Positive(t, other.ProbeTimeout)
			require.True(t, n.Probe(&other, time.Now()))
			err := block(ctx, d)
			cause = context.Cause(ctx)
			return err
		})
		require.ErrorIs(t, err, ErrTimeout)
		require.Equal(t, ErrTimeout, cause)
		require.Greater(t, deadline.Sub(start), 400*time.Millisecond, "the attempt's context runs to the probe's deadline")
		require.Equal(t, 400*time.Millisecond, time.Since(start), "ended at its timeout, not its probe's")
		require.Equal(t, 2.0, outcomesValue(t, n, timeout.TimedOut.String()))
		require.Zero(t, outcomesValue(t, n, timeout.Completed.String()))
		e, err := n.Estimate("a", 1)
		require.NoError(t, err)
		require.EqualValues(t, 2, e.LocalCensored)
	})
}

// TestDoHedgedMeasuredAtReturn: an attempt is measured when its fn
// returned, not when the coordinator handles it, and one whose fn returned
// before its timeout is no timeout, though the coordinator reads it after
// the timeout has ended its context. Here the coordinator is held (in
// Config.Classify, while it learns c's failure) from 240 to 260 ms, across
// b's answer (245 ms, after 224 ms) and a's (249 ms, 1 ms before its
// timeout).
func TestDoHedgedMeasuredAtReturn(t *testing.T) {
	errRefused := errors.New("connection refused")
	synctest.Test(t, func(t *testing.T) {
		n := newAlone(t, nil, func(c *Config) {
			c.Classify = func(err error) timeout.Outcome {
				if errors.Is(err, errRefused) {
					time.Sleep(20 * time.Millisecond)
					return timeout.Failed
				}
				return timeout.Completed
			}
		})
		for range 100 { // hedge delays 21 ms, timeouts 250 ms (the floor)
			for _, d := range []string{"a", "b", "c"} {
				n.Record(d, 20*time.Millisecond)
			}
		}
		var seen sync.Map
		dest, err := n.DoHedged(t.Context(), []string{"a", "b", "c"}, 1, func(ctx context.Context, d string) error {
			seen.Store(d, ctx)
			switch d {
			case "a": // tried first; its timeout at 250 ms
				time.Sleep(249 * time.Millisecond)
			case "b": // the hedge at 21 ms
				time.Sleep(224 * time.Millisecond)
			case "c": // the hedge at 42 ms; refused at 240 ms
				time.Sleep(198 * time.Millisecond)
				return errRefused
			}
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, "b", dest)
		a, _ := seen.Load("a")
		require.Equal(t, ErrTimeout, context.Cause(a.(context.Context)), "a's timeout came before the coordinator read its answer")
		require.Equal(t, 1.0, outcomesValue(t, n, timeout.Completed.String()), "b's answer")
		require.Equal(t, 1.0, outcomesValue(t, n, timeout.Failed.String()), "c's refusal")
		require.Equal(t, 1.0, outcomesValue(t, n, timeout.Superseded.String()), "a answered before its timeout, after b")
		require.Zero(t, outcomesValue(t, n, timeout.TimedOut.String()))
		e, err := n.Estimate("b", 1)
		require.NoError(t, err)
		require.EqualValues(t, 101, e.LocalSamples)
		require.EqualValues(t, 224, e.LocalValueMillis, "b's answer at the time fn took")
		e, err = n.Estimate("a", 1)
		require.NoError(t, err)
		require.EqualValues(t, 1, e.LocalCensored, "superseded at 249 ms")
		require.False(t, n.dec.Failing("a"))
	})
}

// TestDoHedgedErrorBeforeCallerDeadline: an attempt's answer or error that
// fn returned 1 ms before the caller's deadline is decided as Do decides it
// (TestDoErrorBeforeCallerDeadline), by when fn returned, whichever of the
// caller's end and the attempt's return the coordinator takes first; a
// refusal then is learned, and no failover follows it past the deadline.
// Here the coordinator is held (in Config.Classify, while it learns b's
// refusal at 98 ms) to 102 ms, past the caller's deadline at 100 ms, so
// that both are in hand when it comes back. b, the hedge at 21 ms, has no
// trusted estimate, hence no hedge delay: c is tried only on a failover.
func TestDoHedgedErrorBeforeCallerDeadline(t *testing.T) {
	errRefused := errors.New("connection refused")
	errApp := errors.New("not found")
	for _, tc := range []struct {
		name     string
		fn       func(ctx context.Context) error // a's
		dest     string
		err      error
		outcomes map[timeout.Outcome]float64
		samples  uint64 // a's
	}{
		{"an answer, 1 ms before", func(context.Context) error { time.Sleep(99 * time.Millisecond); return nil },
			"a", nil, map[timeout.Outcome]float64{timeout.Completed: 1, timeout.Failed: 1}, 101},
		{"an error answering, 1 ms before", func(context.Context) error { time.Sleep(99 * time.Millisecond); return errApp },
			"a", errApp, map[timeout.Outcome]float64{timeout.Completed: 1, timeout.Failed: 1}, 101},
		{"a refusal, 1 ms before", func(context.Context) error { time.Sleep(99 * time.Millisecond); return errRefused },
			"", context.DeadlineExceeded, map[timeout.Outcome]float64{timeout.Failed: 2}, 100},
		{"its own error, after the deadline", func(ctx context.Context) error { <-ctx.Done(); return errApp },
			"", context.DeadlineExceeded, map[timeout.Outcome]float64{timeout.Failed: 1}, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var held atomic.Bool
				n := newAlone(t, nil, func(c *Config) {
					c.Classify = func(err error) timeout.Outcome {
						if !errors.Is(err, errRefused) {
							return timeout.Completed
						}
						if held.CompareAndSwap(false, true) { // b's, the first
							time.Sleep(4 * time.Millisecond)
						}
						return timeout.Failed
					}
				})
				for range 100 { // a's hedge delay 21 ms, its timeout 250 ms (the floor)
					n.Record("a", 20*time.Millisecond)
				}
				ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
				defer cancel()
				var mu sync.Mutex
				var called []string
				dest, err := n.DoHedged(ctx, []string{"a", "b", "c"}, 1, func(ctx context.Context, d string) error {
					mu.Lock()
					called = append(called, d)
					mu.Unlock()
					if d == "b" {
						time.Sleep(77 * time.Millisecond)
						return errRefused
					}
					return tc.fn(ctx)
				})
				require.Equal(t, tc.dest, dest)
				if tc.err == nil {
					require.NoError(t, err)
				} else {
					require.ErrorIs(t, err, tc.err)
					require.NotErrorIs(t, err, ErrTimeout)
				}
				require.Error(t, ctx.Err(), "the caller's deadline came, after fn returned or before")
				mu.Lock()
				require.Equal(t, []string{"a", "b"}, called, "no failover past the caller's deadline")
				mu.Unlock()
				for _, o := range []timeout.Outcome{timeout.Completed, timeout.Failed, timeout.TimedOut, timeout.Superseded} {
					require.Equal(t, tc.outcomes[o], outcomesValue(t, n, o.String()), "%v", o)
				}
				e, err := n.Estimate("a", 1)
				require.NoError(t, err)
				require.Equal(t, tc.samples, e.LocalSamples)
				require.Zero(t, e.LocalCensored)
				if tc.samples > 100 {
					require.EqualValues(t, 99, e.LocalValueMillis)
				}
			})
		})
	}
}

// TestDoHedgedNoHedgePastCallerDeadline: a hedge delay that passes after
// the caller's deadline sends no hedge, whichever of the caller's end and
// the timer's firing the coordinator takes first. Here the coordinator is
// held (in Config.Classify, while it learns a's refusal at 40 ms) to
// 45 ms, across the caller's deadline at 41 ms and c's hedge delay at
// 42 ms, so that both are in hand when it comes back; the call is made on
// a fresh node a few times, as the coordinator's choice between them is
// Go's select's.
func TestDoHedgedNoHedgePastCallerDeadline(t *testing.T) {
	errRefused := errors.New("connection refused")
	for range 8 {
		synctest.Test(t, func(t *testing.T) {
			n := newAlone(t, nil, func(c *Config) {
				c.Classify = func(err error) timeout.Outcome {
					if errors.Is(err, errRefused) {
						time.Sleep(5 * time.Millisecond)
						return timeout.Failed
					}
					return timeout.Completed
				}
			})
			for range 100 { // hedge delays 21 ms, timeouts 250 ms (the floor)
				for _, d := range []string{"a", "b", "c"} {
					n.Record(d, 20*time.Millisecond)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), 41*time.Millisecond)
			defer cancel()
			var mu sync.Mutex
			var called []string
			var running sync.WaitGroup
			defer running.Wait() // b's fn returns at 121 ms
			dest, err := n.DoHedged(ctx, []string{"a", "b", "c"}, 1, func(ctx context.Context, d string) error {
				running.Add(1)
				defer running.Done()
				mu.Lock()
				called = append(called, d)
				mu.Unlock()
				if d == "a" { // tried first; refused at 40 ms
					time.Sleep(40 * time.Millisecond)
					return errRefused
				}
				time.Sleep(100 * time.Millisecond) // b, the hedge at 21 ms, slow to see its context end
				return ctx.Err()
			})
			require.Empty(t, dest)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			synctest.Wait() // every fn started is running or has returned
			mu.Lock()
			require.Equal(t, []string{"a", "b"}, called, "no hedge to c")
			mu.Unlock()
			require.Equal(t, 1.0, counterValue(t, n.met.hedgesSent), "b's hedge only")
			require.Equal(t, float64(timeout.HedgeBurst-1), n.hedge.Tokens(), "one token spent, b's")
			require.Equal(t, 1.0, outcomesValue(t, n, timeout.Failed.String()), "a's refusal, before the deadline")
		})
	}
}
