package timeout

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

func TestHedgeDelay(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    tracker.Estimate
		want time.Duration
		ok   bool
	}{
		{"no trusted view", tracker.Estimate{ValueMillis: 30}, 0, false},
		{"fleet", tracker.Estimate{Source: tracker.SourceFleet, ValueMillis: 30}, 31 * time.Millisecond, true},
		{"guarded: the local view's", tracker.Estimate{Source: tracker.SourceFleet, ValueMillis: 30, LocalValueMillis: 50,
			Decision: tracker.Decision{Guarded: true}}, 51 * time.Millisecond, true},
		{"failing", tracker.Estimate{Source: tracker.SourceLocal, ValueMillis: 30, Failing: true}, 0, false},
		// The local guard from fewer than 1/(1 − q) = 20 samples: the
		// fleet's quantile, not the maximum of a rare caller's few calls.
		{"guarded by 19 local samples at q 0.95: the fleet's", tracker.Estimate{Quantile: 0.95, Source: tracker.SourceFleet,
			ValueMillis: 30, LocalValueMillis: 50, LocalSamples: 19, HasMaxCompleted: true,
			Decision: tracker.Decision{Guarded: true}}, 31 * time.Millisecond, true},
		{"guarded by 20 local samples at q 0.95: the local view's", tracker.Estimate{Quantile: 0.95, Source: tracker.SourceFleet,
			ValueMillis: 30, LocalValueMillis: 50, LocalSamples: 20, HasMaxCompleted: true,
			Decision: tracker.Decision{Guarded: true}}, 51 * time.Millisecond, true},
		{"a failing fleet view deferring to few local samples: the local view's", tracker.Estimate{Quantile: 0.95,
			Source: tracker.SourceFleet, ValueMillis: 30, LocalValueMillis: 50, LocalSamples: 3,
			Decision: tracker.Decision{Guarded: true}}, 51 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := HedgeDelay(&tc.e)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, d)
		})
	}
	require.InDelta(t, 0.95, HedgeQuantile(0.05), 1e-12)
}

func TestOrderReplicas(t *testing.T) {
	trusted := func(ms uint64) tracker.Estimate {
		return tracker.Estimate{Source: tracker.SourceLocal, ValueMillis: ms}
	}
	failing := trusted(5)
	failing.Failing = true
	es := []tracker.Estimate{
		0: failing,
		1: {},          // no estimate
		2: trusted(40), //
		3: trusted(20),
		4: {},          // no estimate, after 1
		5: trusted(20), // ties 3: after it
		6: {Source: tracker.SourceFleet, ValueMillis: 10, LocalValueMillis: 60, Decision: tracker.Decision{Guarded: true}},
	}
	order := []int{0, 1, 2, 3, 4, 5, 6}
	OrderReplicas(es, order)
	require.Equal(t, []int{3, 5, 2, 6, 1, 4, 0}, order)
}

func TestHedgeBudget(t *testing.T) {
	t.Run("burst, then the share of calls", func(t *testing.T) {
		b := NewHedgeBudget(0.05)
		require.Equal(t, float64(HedgeBurst), b.Tokens())
		for range HedgeBurst {
			require.True(t, b.Spend())
		}
		require.False(t, b.Spend())
		spent := 0
		for range 1000 {
			b.Deposit()
			if b.Spend() {
				spent++
			}
		}
		require.Equal(t, 50, spent)
	})
	t.Run("capped at the burst", func(t *testing.T) {
		b := NewHedgeBudget(0.5)
		for range 1000 {
			b.Deposit()
		}
		require.Equal(t, float64(HedgeBurst), b.Tokens())
	})
	t.Run("zero or NaN: never", func(t *testing.T) {
		for _, s := range []float64{0, -1, math.NaN()} {
			b := NewHedgeBudget(s)
			b.Deposit()
			require.False(t, b.Spend())
		}
	})
	t.Run("concurrent: never more than the share plus the burst", func(t *testing.T) {
		b := NewHedgeBudget(0.1)
		var wg sync.WaitGroup
		var mu sync.Mutex
		spent := 0
		for range 4 {
			wg.Go(func() {
				for range 10_000 {
					b.Deposit()
					if b.Spend() {
						mu.Lock()
						spent++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		require.LessOrEqual(t, spent, 4_000+HedgeBurst)
		require.GreaterOrEqual(t, spent, 3_900)
	})
}
