package sim

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHedgeTargets runs the hedging scenario. With ATNODE_SIM=1 it runs
// README's first table (HedgeConfig{Seed: 1} with every default) and
// checks docs/design.md's hedging targets for frequent callers on it: on
// replicas where 2 % of requests stall 50–100× the median, ours
// (DoHedged's rule) keeps their p99 within 5× the median with attempts
// ended by our timeout ≤ 0.5 % of requests and at most 5 % extra
// requests, and its p99 is at most the best fixed delay's among those with
// no more extra load (ATNODE_SIM=1 go test -run TestHedgeTargets -v
// ./integration/sim/; under a minute). Rarely calling nodes are
// TestHedgeRareCallers'.
//
// CI runs a small version (4 nodes, 70 s, four policies; about 2 s under
// -race) and checks the ordering that the large run pins: hedging beats no
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
}

// RareRates are the rare callers' rates TestHedgeRareCallers sweeps, per
// second. "Rarely calling" is what the per-client rule cannot serve: a
// node whose own calls to the replica set are too few for its own
// quantile. bhope/hedge's sketch reads the last 30 to 60 s, and its P90 of
// n values is the largest of them until n >= 1/(1 − 0.9) = 10; so a caller
// is rare when it makes fewer than 10 calls in the sketch's shortest span,
// 30 s: below 1/3 of a call a second. The sweep brackets that: 1 a second
// (30–60 values in the sketch: not rare, the control), 0.3 (9–18: the
// edge), 0.1 (3–6) and 0.03 (1–2, often none): rare.
var RareRates = []float64{1, 0.3, 0.1, 0.03}

// rareSweep is TestHedgeRareCallers' configuration at rare rate r: 4
// frequent callers (50 calls a second, the fleet's view) and 100 rare
// ones, three seeds pooled, about 20,000 rare requests at every rate (the
// time measured is 20,000 / (3 seeds × 100 nodes × r): 67 s at 1 a second,
// 2,222 s at 0.03) after a 60 s warm-up, replica 0 degrading two thirds of
// the way through; per-client sketches start past their warm-up requests
// (HedgeConfig.ClientWarm: a long-running client, which the rare callers
// here would be).
func rareSweep(r float64) HedgeConfig {
	const seeds, rare, requests = 3, 100, 20_000
	measured := time.Duration(requests / (seeds * rare * r) * float64(time.Second)).Round(time.Second)
	warmup := 60 * time.Second
	return HedgeConfig{Seed: 1, Seeds: seeds, Nodes: rare + 4, Rare: rare, RareRate: r, ClientWarm: true,
		Warmup: warmup, Duration: warmup + measured, DegradeAt: warmup + 2*measured/3,
		Policies: RareHedgePolicies()}
}

// TestHedgeRareCallers is README's rare-caller sweep (ATNODE_SIM=1 only;
// an hour or more on a shared 2-core machine, most of it the 0.03
// rate): every policy of RareHedgePolicies side by side in one run per
// rate of RareRates, the rare callers' time to a successful answer with
// 95 % intervals, for ours at 0.05 and 0.10 its Verdict against every
// other row, and for every other row ours at no more extra load
// (RareAtNoMoreLoad: the budget whose extra load is nearest the row's from
// below) (ATNODE_SIM=1 go test -run TestHedgeRareCallers -v -timeout 3h
// ./integration/sim/; one rate: -run 'TestHedgeRareCallers/^0.1$').
//
// "Strictly better than the per-client P90 policy" is judged at equal
// load: ours at a budget whose rare callers spend no more extra requests
// than bhope/hedge's (at its defaults) must have a lower p99 and a lower
// p99.9 (LowerTail). With the hedge delay under censoring (the
// Kaplan–Meier quantile at 1 − budget) that holds at every rare rate,
// pinned: at 0.3 a second ours at 0.125 (13.6 % extra against 14.3 %) and
// at 0.1 ours at 0.25 (22.4 % against 22.4 %) have both tails lower, at
// least one beyond doubt (StrictlyBetter); at 0.03 ours at 0.40 (38.8 %
// against 42.1 %) has both lower, 22.0 and 28.5 ms against 22.8 and 32.3,
// neither beyond doubt (the p99.9 intervals touch). With the plain
// quantile's delay (the rule before, HedgePolicy.PlainDelay) only 0.3 held:
// budgets above 0.10 ran their bucket dry and waited out stalls. Also
// pinned: at every rate ours at 0.05 and 0.10 spend less than bhope/hedge,
// and every budget of ours keeps attempts ended by our timeout within
// 0.5 %; at 0.1 and 0.03 a smaller budget (0.10 and 0.20) still has the
// lower p99.9; at the 1-a-second control, where ours at no more extra load
// (0.10) has both tails a little higher (30.7 and 47.9 ms against 30.3 and
// 47.4), ours at 0.10 keeps its p99.9 within twice bhope/hedge's (it was
// 228 ms with the plain quantile's delay). Against per-client rules with a
// 5 % budget: ours at 0.05 has a p99 and p99.9 many times lower than P90
// at 5 % of the client's own rate (a budget that binds) at every rate, at
// more extra load (3.5–4.6 % against 4.8–10.1 %); it is StrictlyBetter
// than P95 at a 5 % budget at 0.3 a second; P90 at a 5 % budget of the
// library's default rate never binds for a rare caller and spends
// 14–42 %, and ours at 0.05 has the lower p99.9 at 0.3 a second (not at
// the 1-a-second control any more: 51.9 ms (46.0–65.3) against 49.7
// (44.7–77.2), within each other's intervals, as 45.3 against 49.7 was
// before). Against P90 at 10 % of its own rate ours at 0.05 is
// StrictlyBetter below 0.3 a second.
func TestHedgeRareCallers(t *testing.T) {
	if os.Getenv("ATNODE_SIM") == "" {
		t.Skip("ATNODE_SIM=1 runs it")
	}
	for _, r := range RareRates {
		t.Run(fmt.Sprint(r), func(t *testing.T) {
			cfg := rareSweep(r)
			rs, err := RunHedge(cfg)
			require.NoError(t, err)
			t.Logf("rare callers at %v calls a second (%v measured, %d seeds pooled):\n%s", r, cfg.Duration-cfg.Warmup, cfg.Seeds, HedgeRareTable(rs))
			by := hedgeByPolicy(t, rs)
			ours, ours10, bhope := by[PolicyOurs].Rare, by[PolicyOursClientBudget].Rare, by[PolicyClient].Rare
			eq, ok := RareAtNoMoreLoad(rs, bhope.Extra)
			require.True(t, ok)
			t.Logf("at no more extra load than bhope/hedge (%.2f %%): ours at %s (%.2f %%), p99 %v against %v, p99.9 %v against %v; both lower: %v",
				100*bhope.Extra, budgetText(eq.Budget), 100*eq.Rare.Extra, eq.Rare.P99, bhope.P99, eq.Rare.P999, bhope.P999, LowerTail(eq.Rare, bhope))
			for _, o := range rs {
				if o.Kind == HedgeFleet {
					require.LessOrEqual(t, o.Rare.TimedOut, 0.005, o.Policy)
				}
			}
			for _, o := range []HedgeCallers{ours, ours10} {
				require.Less(t, o.Extra, bhope.Extra)
			}
			own5 := by[PolicyClientOwnRate5].Rare
			require.Less(t, ours.P99, own5.P99)
			require.Less(t, ours.P999, own5.P999)
			switch r {
			case 1:
				require.Less(t, ours10.P999, 2*bhope.P999)
			case 0.3:
				require.Equal(t, 0.125, eq.Budget)
				require.True(t, LowerTail(eq.Rare, bhope))
				require.True(t, StrictlyBetter(eq.Rare, bhope))
				require.True(t, StrictlyBetter(ours, by[PolicyClientSameBudget].Rare))
			case 0.1, 0.03:
				// Both tails lower at equal load (at 0.1 beyond doubt).
				require.Equal(t, map[float64]float64{0.1: 0.25, 0.03: 0.40}[r], eq.Budget)
				require.True(t, LowerTail(eq.Rare, bhope))
				if r == 0.1 {
					require.True(t, StrictlyBetter(eq.Rare, bhope))
				}
				// A smaller budget has the lower p99.9 too.
				lower := ours10
				if r == 0.03 {
					lower = by[PolicyOursAt(0.20)].Rare
				}
				require.LessOrEqual(t, lower.Extra, bhope.Extra)
				require.Less(t, lower.P999, bhope.P999)
				require.True(t, StrictlyBetter(ours, by[PolicyClientOwnRate].Rare))
			}
			if r == 0.3 {
				require.Less(t, ours.P999, by[PolicyClientBudget5].Rare.P999)
			}
		})
	}
}

// TestHedgeLaterReserve is README's record of a rule tried for the rare
// callers and not adopted (ATNODE_SIM=1 only; about 50 minutes on a shared
// 2-core machine, 35 of them the 0.03 rate; one part: -run
// 'TestHedgeLaterReserve/frequent'): a call's second and later hedges
// sent only while the node's bucket keeps 5 tokens after them
// (HedgePolicy.LaterReserve), so that they never take the tokens of
// another call's first hedge. At every rare rate but the 1-a-second
// control (rareSweep, the same seeds) ours with it at the budget nearest
// bhope/hedge's load from below has both tails lower (at 0.3 beyond doubt,
// as without it); at the control ours at 0.10 has a p99.9 higher than
// without it, and on README's first table (seed 1, every default) it costs
// the frequent callers their p99.9 at the default budget. It was measured
// with the hedge delay of then, the plain quantile at 1 − budget, and every
// row of ours here keeps it (HedgePolicy.PlainDelay), so that it still
// records what was tried.
func TestHedgeLaterReserve(t *testing.T) {
	if os.Getenv("ATNODE_SIM") == "" {
		t.Skip("ATNODE_SIM=1 runs it")
	}
	reserve := func(name string, b float64) HedgePolicy {
		return HedgePolicy{Name: name, Kind: HedgeFleet, Budget: b, LaterReserve: 5, PlainDelay: true}
	}
	t.Run("frequent callers", func(t *testing.T) {
		cfg := HedgeConfig{Seed: 1, Policies: []HedgePolicy{{Name: PolicyOurs, Kind: HedgeFleet, PlainDelay: true}, reserve("ours, later hedges keep 5 tokens", 0)}}
		rs, err := RunHedge(cfg)
		require.NoError(t, err)
		t.Logf("\n%s", HedgeTable(rs))
		hedgeByPolicy(t, rs)
		require.Greater(t, rs[1].Frequent.P999, 2*rs[0].Frequent.P999)
	})
	for _, tc := range []struct {
		rate, equal float64 // the rare rate, and the budget at no more extra load than bhope/hedge's
	}{{1, 0.10}, {0.3, 0.10}, {0.1, 0.15}, {0.03, 0.30}} {
		t.Run(fmt.Sprintf("rare callers at %v", tc.rate), func(t *testing.T) {
			cfg := rareSweep(tc.rate)
			cfg.Policies = hedgePoliciesNamed(DefaultHedgePolicies(), PolicyClient)
			if tc.rate == 1 {
				cfg.Policies = append(cfg.Policies, HedgePolicy{Name: PolicyOursClientBudget, Kind: HedgeFleet, Budget: 0.10, PlainDelay: true})
			}
			for _, b := range []float64{0.10, 0.15, 0.20, 0.30} {
				cfg.Policies = append(cfg.Policies, reserve(fmt.Sprintf("ours, HedgeBudget %.2f, later hedges keep 5 tokens", b), b))
			}
			rs, err := RunHedge(cfg)
			require.NoError(t, err)
			t.Logf("\n%s", HedgeRareTable(rs))
			by := hedgeByPolicy(t, rs)
			bhope := by[PolicyClient].Rare
			if tc.rate == 1 {
				with := by[fmt.Sprintf("ours, HedgeBudget %.2f, later hedges keep 5 tokens", 0.10)].Rare
				require.Greater(t, with.P999, by[PolicyOursClientBudget].Rare.P999)
				return
			}
			eq, ok := RareAtNoMoreLoad(rs, bhope.Extra) // every row of ours has the reserve
			require.True(t, ok)
			require.Equal(t, tc.equal, eq.Budget)
			require.True(t, LowerTail(eq.Rare, bhope))
			if tc.rate == 0.3 {
				require.True(t, StrictlyBetter(eq.Rare, bhope))
			}
		})
	}
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

// hedgeByPolicy logs each result's counts and returns the results by
// policy name.
func hedgeByPolicy(t *testing.T, rs []HedgeResult) map[string]HedgeResult {
	by := map[string]HedgeResult{}
	for _, r := range rs {
		by[r.Policy] = r
		t.Logf("%s: %d + %d requests, %d hedges, %d refused by the budget (rare callers: %d, %d; their later hedges: %d, %d), %d failed",
			r.Policy, r.Frequent.Requests, r.Rare.Requests, r.Hedges, r.Refused, r.Rare.Hedges, r.Rare.Refused,
			r.Rare.LaterHedges, r.Rare.LaterRefused, r.FailedRequests)
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
	require.Equal(t, "better", Verdict(ours, c(0.05, 40, 40, [2]int{35, 45}, [2]int{38, 45})))
	require.Equal(t, "worse", Verdict(ours, c(0.04, 20, 30, [2]int{19, 21}, [2]int{28, 33})))
	require.Equal(t, "neither", Verdict(ours, c(0.10, 27, 39, [2]int{26, 28}, [2]int{36, 500})))
}
