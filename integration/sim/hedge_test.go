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
// bhope/hedge at its defaults there, at either budget, and README says so;
// what holds, pinned: at bhope/hedge's budget (HedgeBudget 0.10) ours has
// less extra load, a p99 not higher beyond doubt (the point estimates
// within 0.1 ms of each other in README's run) and no higher p99.9 than
// it; at our default budget, less than half its
// extra load (its budget never binds at 0.5 calls a second, which buys it
// a lower p99); against per-client P90 with its budget set to 10 % of the
// client's own rate, a p99 and p99.9 lower beyond doubt (that budget's
// burst of one token leaves stalls unhedged) at extra load within a point
// of its; against per-client P95 with a 5 % budget (our quantile and
// budget in bhope/hedge's terms) no more extra load and no higher p99 or
// p99.9. Regenerate README's tables from this test's log (ATNODE_SIM=1 go
// test -run TestHedgeTargets -v ./integration/sim/; 2–4 minutes).
//
// CI runs a small version (4 nodes, 70 s, four policies; about 2 s under
// -race) and checks the ordering that the large runs pin: hedging beats no
// hedging by far, within its budget, and ours at bhope/hedge's budget
// spends more than at ours and no more than bhope/hedge.
func TestHedgeTargets(t *testing.T) {
	full := os.Getenv("ATNODE_SIM") != ""
	cfg := HedgeConfig{Seed: 1}
	if !full {
		cfg.Nodes, cfg.Rate, cfg.Duration, cfg.Warmup, cfg.DegradeAt = 4, 30, 70*time.Second, 25*time.Second, 50*time.Second
		// Four policies, as before ours at 0.10 joined: fixed 20 ms, which
		// nothing here checks, left for it.
		cfg.Policies = hedgePoliciesNamed(hedgePolicies(), "no hedging", PolicyClient, PolicyOurs, PolicyOursClientBudget)
	}
	rs, err := RunHedge(cfg)
	require.NoError(t, err)
	t.Logf("\n%s", HedgeTable(rs))
	by := hedgeByPolicy(t, rs)
	ours, none := by[PolicyOurs], by["no hedging"]
	ours10, bhope := by[PolicyOursClientBudget], by[PolicyClient]
	median := 10 * time.Millisecond
	if !full {
		require.Less(t, 5*ours.Frequent.P99, none.Frequent.P99)
		require.LessOrEqual(t, ours.Frequent.P99, 10*median)
		require.LessOrEqual(t, ours.Frequent.Extra, 0.06)
		require.LessOrEqual(t, ours.Frequent.TimedOut, 0.02)
		require.Less(t, 5*ours10.Frequent.P99, none.Frequent.P99)
		require.Less(t, ours.Frequent.Extra, ours10.Frequent.Extra)
		require.LessOrEqual(t, ours10.Frequent.Extra, bhope.Frequent.Extra)
		return
	}
	hedgeFrequentTargets(t, rs)

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
	ours, ours10, bhope = by[PolicyOurs], by[PolicyOursClientBudget], by[PolicyClient]
	require.LessOrEqual(t, ours.Rare.TimedOut, 0.005)
	require.LessOrEqual(t, ours10.Rare.TimedOut, 0.005)
	// At the same budget: no more load, a p99 not higher beyond doubt, no
	// higher p99.9.
	require.LessOrEqual(t, ours10.Rare.Extra, bhope.Rare.Extra)
	require.LessOrEqual(t, ours10.Rare.P99CI[0], bhope.Rare.P99CI[1])
	require.LessOrEqual(t, ours10.Rare.P999, bhope.Rare.P999)
	require.Less(t, 2*ours.Rare.Extra, bhope.Rare.Extra)
	own := by[PolicyClientOwnRate].Rare
	require.Less(t, ours.Rare.P99CI[1], own.P99CI[0])
	require.Less(t, ours.Rare.P999CI[1], own.P999CI[0])
	require.LessOrEqual(t, ours.Rare.Extra, own.Extra+0.01)
	same := by[PolicyClientSameBudget].Rare
	require.LessOrEqual(t, ours.Rare.Extra, same.Extra)
	require.LessOrEqual(t, ours.Rare.P99, same.P99)
	require.LessOrEqual(t, ours.Rare.P999, same.P999)
	hedgeLogStrictlyBetter(t, by, PolicyClient, PolicyClientOwnRate, PolicyClientSameBudget)
}

// TestHedgeRarerCallers is README's extra table (ATNODE_SIM=1 only; about
// 4 minutes): the rare callers' table with callers five times rarer, 0.1
// calls a second, so that a per-client sketch holds 3 to 6 of its own
// winners (at 0.5 a second it holds 15 to 30). The run is five times
// longer (1500 s, a 300 s warm-up so that bhope/hedge's first 20 requests
// at its fixed 10 ms are behind every rare caller, the degradation at
// 1200 s), so that it pools as many rare requests. Pinned, for ours at
// bhope/hedge's budget against bhope/hedge at its defaults: no higher
// p99.9 at less than half its extra load (its thin sketch hedges early and
// often, 22.3 % extra in README's run, and still misses stalls); not
// pinned, and not StrictlyBetter: its p99 is lower than ours, and our
// p99.9 is no longer lower beyond doubt (our interval reaches 106.8 ms).
func TestHedgeRarerCallers(t *testing.T) {
	if os.Getenv("ATNODE_SIM") == "" {
		t.Skip("ATNODE_SIM=1 runs it")
	}
	cfg := HedgeConfig{Seed: 1, Seeds: 3, Nodes: 40, Rare: 36, RareRate: 0.1, Duration: 1500 * time.Second,
		Warmup: 300 * time.Second, DegradeAt: 1200 * time.Second,
		Policies: hedgePoliciesNamed(DefaultHedgePolicies(), PolicyClient, PolicyOurs, PolicyOursClientBudget)}
	rs, err := RunHedge(cfg)
	require.NoError(t, err)
	t.Logf("rare callers at %.1f calls a second, %d seeds pooled:\n%s", cfg.RareRate, cfg.Seeds, HedgeRareTable(rs))
	by := hedgeByPolicy(t, rs)
	ours10, bhope := by[PolicyOursClientBudget].Rare, by[PolicyClient].Rare
	require.LessOrEqual(t, ours10.P999, bhope.P999)
	require.Less(t, 2*ours10.Extra, bhope.Extra)
	require.LessOrEqual(t, ours10.TimedOut, 0.005)
	hedgeLogStrictlyBetter(t, by, PolicyClient)
}

// TestHedgeDegrade3 is README's variant of the first table where replica 0
// becomes 3× slower instead of 2× (ATNODE_SIM=1 only; under a minute): the
// frequent callers' targets still hold, the best fixed delay's included.
func TestHedgeDegrade3(t *testing.T) {
	if os.Getenv("ATNODE_SIM") == "" {
		t.Skip("ATNODE_SIM=1 runs it")
	}
	rs, err := RunHedge(HedgeConfig{Seed: 1, Degrade: 3})
	require.NoError(t, err)
	t.Logf("replica 0 3× slower from 120 s:\n%s", HedgeTable(rs))
	hedgeByPolicy(t, rs)
	hedgeFrequentTargets(t, rs)
}

// hedgeFrequentTargets checks docs/design.md's targets for frequent
// callers on ours (DoHedged's rule at the default budget).
func hedgeFrequentTargets(t *testing.T, rs []HedgeResult) {
	t.Helper()
	var ours HedgeResult
	for _, r := range rs {
		if r.Policy == PolicyOurs {
			ours = r
		}
	}
	require.Equal(t, PolicyOurs, ours.Policy)
	median := time.Duration(ours.MedianMillis * float64(time.Millisecond))
	require.LessOrEqual(t, ours.Frequent.P99, 5*median)
	require.LessOrEqual(t, ours.Frequent.TimedOut, 0.005)
	require.LessOrEqual(t, ours.Rare.TimedOut, 0.005)
	require.LessOrEqual(t, ours.Frequent.Extra, 0.05)
	best, ok := BestFixed(rs, ours.Frequent.Extra)
	require.True(t, ok)
	t.Logf("best fixed delay at no more extra load: %s (p99 %v, %.2f %% extra)", best.Policy, best.Frequent.P99, 100*best.Frequent.Extra)
	require.LessOrEqual(t, ours.Frequent.P99, best.Frequent.P99)
}

// hedgeLogStrictlyBetter logs, for ours at each budget, whether it is
// StrictlyBetter than each of the named rows for rare callers.
func hedgeLogStrictlyBetter(t *testing.T, by map[string]HedgeResult, names ...string) {
	t.Helper()
	for _, o := range []string{PolicyOurs, PolicyOursClientBudget} {
		for _, p := range names {
			t.Logf("%s strictly better than %s for rare callers: %v", o, p, StrictlyBetter(by[o].Rare, by[p].Rare))
		}
	}
}

// hedgePoliciesNamed returns the policies of ps with the given names, in
// that order.
func hedgePoliciesNamed(ps []HedgePolicy, names ...string) []HedgePolicy {
	var out []HedgePolicy
	for _, n := range names {
		for _, p := range ps {
			if p.Name == n {
				out = append(out, p)
			}
		}
	}
	return out
}

// hedgeByPolicy logs each result's counts and returns the results by
// policy name.
func hedgeByPolicy(t *testing.T, rs []HedgeResult) map[string]HedgeResult {
	by := map[string]HedgeResult{}
	for _, r := range rs {
		by[r.Policy] = r
		t.Logf("%s: %d + %d requests, %d hedges, %d refused by the budget (rare callers: %d, %d), %d failed", r.Policy,
			r.Frequent.Requests, r.Rare.Requests, r.Hedges, r.Refused, r.Rare.Hedges, r.Rare.Refused, r.FailedRequests)
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
// its first 20 round trips, then at the quantile of its last 30 to 60 s,
// its windows rotating every 30 s from the sketch's first use.
func TestClientSketch(t *testing.T) {
	c := newClientSketch() // made at 1 s: rotates at 31 s, 61 s, …
	for k := range clientWarmupRequests {
		c.add(time.Duration(k+1)*time.Millisecond, time.Second)
		require.Equal(t, clientWarmupDelay, c.delay(0.9, time.Second))
	}
	d := c.delay(0.9, time.Second) // the 21st: P90 of 1..20 ms is 18 ms
	require.InEpsilon(t, float64(18*time.Millisecond), float64(d), 0.011)
	d, ok := c.quantile(0.9, 60*time.Second) // rotated once: still there
	require.True(t, ok)
	require.InEpsilon(t, float64(18*time.Millisecond), float64(d), 0.011)
	_, ok = c.quantile(0.9, 61*time.Second) // rotated twice: gone
	require.False(t, ok)
	require.Equal(t, clientWarmupDelay, c.delay(0.9, 61*time.Second))

	// Fewer values than 1/(1 − q): the quantile is their maximum.
	c = newClientSketch()
	c.n = clientWarmupRequests
	for _, ms := range []int{10, 11, 12, 700} {
		c.add(time.Duration(ms)*time.Millisecond, 0)
	}
	require.InEpsilon(t, float64(700*time.Millisecond), float64(c.delay(0.9, time.Second)), 0.011)

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
