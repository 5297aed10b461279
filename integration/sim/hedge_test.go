package sim

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHedgeTargets runs the hedging scenario. With ATNODE_SIM=1 it runs
// README's table (HedgeConfig{Seed: 1} with every default, 25–50 s)
// and checks docs/design.md's hedging targets on it: on replicas where 2 %
// of requests stall 50–100× the median, ours (DoHedged's rule) keeps the
// frequent callers' p99 within 5× the median with attempts ended by our
// timeout ≤ 0.5 % of requests and at most 5 % extra requests; its p99 is
// at most the best fixed delay's among those with no more extra load; for
// rarely calling nodes its p99.9 is strictly better than per-client P90's,
// at less extra load (their p99 is not: README says why). Regenerate README's table from this test's log
// (ATNODE_SIM=1 go test -run TestHedgeTargets -v ./integration/sim/).
//
// CI runs a small version (4 nodes, 70 s, four policies; about 2 s under
// -race) and checks only that hedging beats no hedging by far, within its
// budget.
func TestHedgeTargets(t *testing.T) {
	full := os.Getenv("ATNODE_SIM") != ""
	cfg := HedgeConfig{Seed: 1}
	if !full {
		cfg.Nodes, cfg.Rate, cfg.Duration, cfg.Warmup, cfg.DegradeAt = 4, 30, 70*time.Second, 25*time.Second, 50*time.Second
		all := hedgePolicies(20)
		cfg.Policies = []HedgePolicy{all[0], all[1], all[3], all[len(all)-1]} // none, fixed 20 ms, per-client P90, ours
	}
	rs, err := RunHedge(cfg)
	require.NoError(t, err)
	t.Logf("\n%s", HedgeTable(rs))
	by := map[string]HedgeResult{}
	for _, r := range rs {
		by[r.Policy] = r
		t.Logf("%s: %d + %d requests, %d hedges, %d refused by the budget, %d failed", r.Policy,
			r.Frequent.Requests, r.Rare.Requests, r.Hedges, r.Refused, r.FailedRequests)
	}
	ours, none := by["ours (DoHedged)"], by["no hedging"]
	median := 10 * time.Millisecond
	if !full {
		require.Less(t, 5*ours.Frequent.P99, none.Frequent.P99)
		require.LessOrEqual(t, ours.Frequent.P99, 10*median)
		require.LessOrEqual(t, ours.Frequent.Extra, 0.06)
		require.LessOrEqual(t, ours.Frequent.TimedOut, 0.02)
		return
	}
	require.LessOrEqual(t, ours.Frequent.P99, 5*median)
	require.LessOrEqual(t, ours.Frequent.TimedOut, 0.005)
	require.LessOrEqual(t, ours.Rare.TimedOut, 0.005)
	require.LessOrEqual(t, ours.Frequent.Extra, 0.05)
	best, ok := BestFixed(rs, ours.Frequent.Extra)
	require.True(t, ok)
	t.Logf("best fixed delay at no more extra load: %s (p99 %v, %.2f %% extra)", best.Policy, best.Frequent.P99, 100*best.Frequent.Extra)
	require.LessOrEqual(t, ours.Frequent.P99, best.Frequent.P99)
	for _, p := range []string{"per-client P90, 10 % budget, own order", "per-client P90, 10 % budget"} {
		require.Less(t, ours.Rare.P999, by[p].Rare.P999, p)
		require.Less(t, ours.Rare.Extra, by[p].Rare.Extra, p)
	}
}

// TestHedgeDeterministic: one seed gives one table.
func TestHedgeDeterministic(t *testing.T) {
	cfg := HedgeConfig{Seed: 3, Nodes: 2, Rate: 20, Duration: 30 * time.Second, Warmup: 10 * time.Second,
		DegradeAt: 20 * time.Second, Policies: hedgePolicies()}
	a, err := RunHedge(cfg)
	require.NoError(t, err)
	b, err := RunHedge(cfg)
	require.NoError(t, err)
	require.Equal(t, a, b)
	require.Positive(t, a[len(a)-1].Hedges)
}
