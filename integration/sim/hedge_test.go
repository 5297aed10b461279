package sim

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHedgeTargets runs the hedging scenario. With ATNODE_SIM=1 it runs
// README's two tables and checks docs/design.md's hedging targets on them.
//
// The first (HedgeConfig{Seed: 1} with every default) is for frequent
// callers: on replicas where 2 % of requests stall 50–100× the median,
// ours (DoHedged's rule) keeps their p99 within 5× the median with
// attempts ended by our timeout ≤ 0.5 % of requests and at most 5 % extra
// requests, and its p99 is at most the best fixed delay's among those with
// no more extra load.
//
// The second is for rarely calling nodes, large enough for their p99.9 to
// mean something: 36 rare and 4 frequent callers, 300 s, three seeds
// pooled (about 13,000 rare requests). Ours is not StrictlyBetter than
// the per-client P90 rows there, and README says so; what holds, pinned:
// against per-client P90 with its budget set to 10 % of the client's own
// rate, a p99 and p99.9 lower beyond doubt (that budget's burst of one
// token leaves stalls unhedged) at extra load within a point of its;
// against per-client P95 with a 5 % budget (our quantile and budget in
// bhope/hedge's terms) no more extra load and no higher p99 or p99.9 (one
// lower beyond the intervals in README's run, narrowly: logged, not
// pinned); against bhope/hedge at its
// defaults less than half the extra load (its budget never binds at two
// calls a second, which buys it a lower p99). Regenerate README's
// tables from this test's log (ATNODE_SIM=1 go test -run TestHedgeTargets
// -v ./integration/sim/; 1.5–4 minutes).
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
	by := hedgeByPolicy(t, rs)
	ours, none := by[PolicyOurs], by["no hedging"]
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

	rare := HedgeConfig{Seed: 1, Seeds: 3, Nodes: 40, Rare: 36, Duration: 300 * time.Second, Warmup: 60 * time.Second,
		DegradeAt: 200 * time.Second}
	for _, p := range DefaultHedgePolicies() {
		if p.Kind == HedgeClient && p.Order == OrderFleet || p.Kind == HedgeFleet {
			rare.Policies = append(rare.Policies, p)
		}
	}
	rs, err = RunHedge(rare)
	require.NoError(t, err)
	t.Logf("rare callers, %d seeds pooled:\n%s", rare.Seeds, HedgeRareTable(rs))
	by = hedgeByPolicy(t, rs)
	ours = by[PolicyOurs]
	require.LessOrEqual(t, ours.Rare.TimedOut, 0.005)
	own := by[PolicyClientOwnRate].Rare
	require.Less(t, ours.Rare.P99CI[1], own.P99CI[0])
	require.Less(t, ours.Rare.P999CI[1], own.P999CI[0])
	require.LessOrEqual(t, ours.Rare.Extra, own.Extra+0.01)
	same := by[PolicyClientSameBudget].Rare
	require.LessOrEqual(t, ours.Rare.Extra, same.Extra)
	require.LessOrEqual(t, ours.Rare.P99, same.P99)
	require.LessOrEqual(t, ours.Rare.P999, same.P999)
	bhope := by[PolicyClient].Rare
	require.Less(t, 2*ours.Rare.Extra, bhope.Extra)
	for _, p := range []string{PolicyClient, PolicyClientOwnRate, PolicyClientSameBudget} {
		t.Logf("ours strictly better than %s for rare callers: %v", p, StrictlyBetter(ours.Rare, by[p].Rare))
	}
}

// hedgeByPolicy logs each result's counts and returns the results by
// policy name.
func hedgeByPolicy(t *testing.T, rs []HedgeResult) map[string]HedgeResult {
	by := map[string]HedgeResult{}
	for _, r := range rs {
		by[r.Policy] = r
		t.Logf("%s: %d + %d requests, %d hedges, %d refused by the budget, %d failed", r.Policy,
			r.Frequent.Requests, r.Rare.Requests, r.Hedges, r.Refused, r.FailedRequests)
	}
	return by
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

// TestClientSketch: the per-client model hedges after the warm-up delay for
// its first 20 requests, then at the quantile of its last 30 to 60 s.
func TestClientSketch(t *testing.T) {
	c := newClientSketch()
	for k := range clientWarmupRequests {
		c.add(time.Duration(k+1)*time.Millisecond, time.Second)
		require.Equal(t, clientWarmupDelay, c.delay(0.9, time.Second))
	}
	d := c.delay(0.9, time.Second) // the 21st: P90 of 1..20 ms is 18 ms
	require.InEpsilon(t, float64(18*time.Millisecond), float64(d), 0.011)
	d, ok := c.quantile(0.9, 35*time.Second) // rotated once: still there
	require.True(t, ok)
	require.InEpsilon(t, float64(18*time.Millisecond), float64(d), 0.011)
	_, ok = c.quantile(0.9, 60*time.Second) // rotated twice: gone
	require.False(t, ok)
	require.Equal(t, clientWarmupDelay, c.delay(0.9, 60*time.Second))

	b := newClientBucket(0.1, 0.5) // 10 % of 0.5 calls a second: burst 1
	require.True(t, b.spend(0))
	require.False(t, b.spend(10*time.Second))
	require.True(t, b.spend(20*time.Second))
	b = newClientBucket(0.1, clientDefaultRPS) // the default: 10 a second, burst 20
	for range 20 {
		require.True(t, b.spend(0))
	}
	require.False(t, b.spend(0))
	require.True(t, b.spend(100*time.Millisecond))
}

func TestStrictlyBetter(t *testing.T) {
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	c := func(extra float64, p99, p999 int, ci99, ci999 [2]int) HedgeCallers {
		return HedgeCallers{Extra: extra, P99: ms(p99), P999: ms(p999),
			P99CI: [2]time.Duration{ms(ci99[0]), ms(ci99[1])}, P999CI: [2]time.Duration{ms(ci999[0]), ms(ci999[1])}}
	}
	ours := c(0.05, 30, 40, [2]int{29, 31}, [2]int{38, 45})
	require.True(t, StrictlyBetter(ours, c(0.05, 40, 40, [2]int{35, 45}, [2]int{38, 45})), "p99 lower beyond doubt")
	require.False(t, StrictlyBetter(ours, c(0.05, 31, 41, [2]int{30, 33}, [2]int{39, 50})), "lower, but within the intervals")
	require.False(t, StrictlyBetter(ours, c(0.04, 900, 900, [2]int{800, 990}, [2]int{850, 990})), "more extra load")
	require.False(t, StrictlyBetter(ours, c(0.10, 27, 39, [2]int{26, 28}, [2]int{36, 500})), "lower tail at more load")
}
