package sim

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The policies of DefaultPolicies, by name.
const (
	f100, f250, f1s = "fixed 100ms", "fixed 250ms", "fixed 1s"
	local, fleet    = "local adaptive", "fleet adaptive"
	noGuard         = "fleet, no local guard"
	shadow, caller  = "failure-aware, shadow probes", "failure-aware, caller probes"
)

// ciDecision is the decision scenario at a size every go test affords
// (4 nodes, 180 s: each event at 120 s has a minute
// after it); TestDecisionSeeds runs README's, DecisionConfig{Seed: s} with
// every default.
var ciDecision = DecisionConfig{Seed: 1, Nodes: 4, Duration: 180 * time.Second}

// ranks groups the policy names by metric, ascending; policies with exactly
// the same value share a group, in the policies' order.
func ranks(rs []DecisionResult, metric func(DecisionResult) float64) [][]string {
	sorted := slices.Clone(rs)
	slices.SortStableFunc(sorted, func(a, b DecisionResult) int { return cmp.Compare(metric(a), metric(b)) })
	var out [][]string
	for i, r := range sorted {
		if i > 0 && metric(r) == metric(sorted[i-1]) {
			out[len(out)-1] = append(out[len(out)-1], r.Policy)
			continue
		}
		out = append(out, []string{r.Policy})
	}
	return out
}

// column is one column of the decision tables, lower is better.
type column struct {
	name  string
	value func(DecisionResult) float64
	// existing marks the columns of the table before failure-aware
	// timeouts, which the new rule must not make worse.
	existing bool
}

func seconds(d func(DecisionResult) time.Duration) func(DecisionResult) float64 {
	return func(r DecisionResult) float64 { return d(r).Seconds() }
}

// followed returns a step-follow time in seconds, +Inf when some node never
// followed.
func followed(d func(DecisionResult) time.Duration) func(DecisionResult) float64 {
	return func(r DecisionResult) float64 {
		if r.FollowNever > 0 {
			return math.Inf(1)
		}
		return d(r).Seconds()
	}
}

func scenario(dest string, f func(Scenario) float64) func(DecisionResult) float64 {
	return func(r DecisionResult) float64 { return f(r.Scenarios[dest]) }
}

func waitMean(s Scenario) float64     { return s.WaitMean().Seconds() }
func hungWaitMean(s Scenario) float64 { return s.HungWaitMean().Seconds() }
func spurious(s Scenario) float64     { return s.SpuriousRate() }

// columns are the columns of DecisionTable and FailureTable.
var columns = []column{
	{"spurious timeouts, all", func(r DecisionResult) float64 { return r.Spurious }, true},
	{"stall dest", func(r DecisionResult) float64 { return r.SpuriousStall }, true},
	{"rare callers", func(r DecisionResult) float64 { return r.SpuriousRare }, true},
	{"step dest, 30 s after step", func(r DecisionResult) float64 { return r.SpuriousStep }, true},
	{"mean timeout, stall dest", seconds(func(r DecisionResult) time.Duration { return r.MeanTimeoutStall }), true},
	{"step followed after, p50", followed(func(r DecisionResult) time.Duration { return r.FollowP50 }), true},
	{"step followed after, max", followed(func(r DecisionResult) time.Duration { return r.FollowMax }), true},
	{"wait per request to dead peer", seconds(func(r DecisionResult) time.Duration { return r.DeadWaitMean }), true},
	{"1 % hang: wait per hung request", scenario(DestHang, hungWaitMean), false},
	{"1 % hang: failed by our timeout", scenario(DestHang, spurious), false},
	{"0.05 % hang: wait per hung request", scenario(DestHangRare, hungWaitMean), false},
	{"1 % slow: failed by our timeout", scenario(DestSlow, spurious), false},
	{"1 % slow: wait per request", scenario(DestSlow, waitMean), false},
	{"tight start: failed by our timeout", scenario(DestTight, spurious), false},
	{"tight start: recovered after", func(r DecisionResult) float64 {
		if r.TightNever > 0 {
			return math.Inf(1)
		}
		return r.TightRecovered.Seconds()
	}, false},
	{"step: failed by our timeout", scenario(DestStep, spurious), false},
}

func byPolicy(rs []DecisionResult) map[string]DecisionResult {
	by := map[string]DecisionResult{}
	for _, r := range rs {
		by[r.Policy] = r
	}
	return by
}

// targetMisses returns the targets of failure-aware timeouts
// (docs/design.md, "Failure-aware timeouts") that one run misses, each
// with its figures; none when all hold.
func targetMisses(rs []DecisionResult) []string {
	by := byPolicy(rs)
	dead := func(p string) time.Duration { return by[p].Scenarios[DestDead].WaitMean() }
	hung := func(p string) time.Duration { return by[p].Scenarios[DestHang].HungWaitMean() }
	var misses []string
	miss := func(ok bool, format string, args ...any) {
		if !ok {
			misses = append(misses, fmt.Sprintf(format, args...))
		}
	}
	miss(dead(shadow) <= 100*time.Millisecond, "dead peer, shadow probes: wait per request %v > 100ms", dead(shadow))
	miss(dead(caller) <= time.Second, "dead peer, caller probes: wait per request %v > 1s", dead(caller))
	miss(float64(hung(shadow)) <= 1.1*float64(hung(f100)), "1 %% hang, shadow probes: wait per hung request %v > 1.1 × fixed 100ms's %v", roundWait(hung(shadow)), hung(f100))
	miss(hung(caller) <= hung(f1s), "1 %% hang, caller probes: wait per hung request %v > fixed 1s's %v", roundWait(hung(caller)), hung(f1s))
	for _, p := range []string{shadow, caller} {
		miss(by[p].Spurious <= 1.3*by[f1s].Spurious, "%s: spurious timeouts, all %.4f %% > 1.3 × fixed 1s's %.4f %%", p, 100*by[p].Spurious, 100*by[f1s].Spurious)
	}
	return misses
}

// requireUnchanged checks that the failure-aware rule leaves the spurious
// timeouts of the original scenario (no destination there hangs) exactly
// where the rule before left them.
func requireUnchanged(t *testing.T, rs []DecisionResult) {
	t.Helper()
	by := byPolicy(rs)
	for _, p := range []string{shadow, caller} {
		require.Equal(t, by[fleet].Spurious, by[p].Spurious, "%s: spurious timeouts, all, as fleet adaptive's", p)
	}
}

// TestDecisionOrdering runs the decision scenario at CI size (ciDecision)
// and pins its tables' ordering of the policies on every column, ties
// included, the targets of failure-aware timeouts, and the comparisons
// README's prose draws from the full-size table. A change in the
// estimator, the fleet view, the local guard, the decider or the protocol
// that changes a decision fails here; then look at the full tables
// (TestDecisionSeeds) and update README and both tests. The seed fixes
// every number (TestDecisionDeterministic), so the exact ordering, ties
// included, is stable. About 3 s, 30 s under -race.
func TestDecisionOrdering(t *testing.T) {
	rs, err := RunDecision(ciDecision)
	require.NoError(t, err)
	t.Logf("\n%s\n%s", DecisionTable(rs), FailureTable(rs))
	requireOrdering(t, rs, ciOrdering)
	require.Empty(t, targetMisses(rs), "every target of failure-aware timeouts holds")
	requireUnchanged(t, rs)
	requireProse(t, rs)
}

// requireProse checks the comparisons README's prose draws from the
// decision tables.
func requireProse(t *testing.T, rs []DecisionResult) {
	t.Helper()
	by := byPolicy(rs)
	require.Zero(t, by[fleet].SpuriousRare, "none on the rarely called destination")
	require.Zero(t, by[fleet].SpuriousStall, "none on rare stalls: the fleet places P99.99 in the slow mode")
	require.Less(t, by[fleet].MeanTimeoutStall, time.Second, "a timeout well below a safe fixed one")
	require.Greater(t, by[f100].Spurious, 0.02, "100 ms is too tight: 2.2 % spurious")
	require.Greater(t, by[noGuard].FollowMax, by[fleet].FollowMax+5*time.Second, "without the guard the fleet view lags by about a sub-window")
	for _, p := range []string{local, fleet} {
		require.Greater(t, by[p].DeadWaitMean, 10*by[f1s].DeadWaitMean, "the rule before: censoring ratchets a dead peer's timeout towards the ceiling")
	}
	for _, p := range []string{shadow, caller} {
		sc := by[p].Scenarios
		require.Positive(t, sc[DestDead].Probes, "%s probes the dead peer", p)
		require.Zero(t, by[p].TightNever, "%s: every node recovers from the tight start through probes", p)
		require.Greater(t, sc[DestTight].SpuriousRate(), by[fleet].Scenarios[DestTight].SpuriousRate(), "%s loses the tight start to the rule before", p)
	}
}

func requireOrdering(t *testing.T, rs []DecisionResult, want map[string][][]string) {
	t.Helper()
	for _, c := range columns {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, want[c.name], ranks(rs, c.value))
		})
	}
}

// ciOrdering is TestDecisionOrdering's ordering of the policies per column.
var ciOrdering = map[string][][]string{
	"spurious timeouts, all":             {{f1s, fleet, shadow, caller}, {local}, {noGuard}, {f250}, {f100}},
	"stall dest":                         {{f1s, fleet, noGuard, shadow, caller}, {local}, {f250}, {f100}},
	"rare callers":                       {{f250, f1s, fleet, noGuard, shadow, caller}, {local}, {f100}},
	"step dest, 30 s after step":         {{f250, f1s}, {local, fleet, shadow, caller}, {noGuard}, {f100}},
	"mean timeout, stall dest":           {{f100}, {f250}, {local}, {noGuard}, {shadow, caller}, {fleet}, {f1s}},
	"step followed after, p50":           {{f250, f1s}, {local}, {fleet, shadow, caller}, {noGuard}, {f100}},
	"step followed after, max":           {{f250, f1s}, {local, fleet, shadow, caller}, {noGuard}, {f100}},
	"wait per request to dead peer":      {{shadow}, {caller}, {f100}, {f250}, {f1s}, {noGuard}, {local}, {fleet}},
	"1 % hang: wait per hung request":    {{shadow}, {f100}, {f250}, {caller}, {f1s}, {noGuard}, {local}, {fleet}},
	"1 % hang: failed by our timeout":    {{f100, f250, f1s, local, fleet, noGuard, shadow, caller}},
	"0.05 % hang: wait per hung request": {{shadow}, {f100}, {local}, {f250}, {f1s}, {caller}, {noGuard}, {fleet}},
	"1 % slow: failed by our timeout":    {{local, fleet, noGuard, shadow, caller}, {f1s}, {f100, f250}},
	"1 % slow: wait per request":         {{f100}, {f250}, {f1s}, {local, fleet, noGuard, shadow, caller}},
	"tight start: failed by our timeout": {{f1s}, {local, fleet, noGuard}, {f250}, {caller}, {shadow}, {f100}},
	"tight start: recovered after":       {{f1s}, {local, fleet, noGuard}, {shadow, caller}, {f100, f250}},
	"step: failed by our timeout":        {{f1s}, {f250, local, fleet, shadow, caller}, {noGuard}, {f100}},
}

// readmeOrdering is the ordering of README's tables (seed 1, every
// default).
var readmeOrdering = map[string][][]string{
	"spurious timeouts, all":             {{f1s}, {fleet, shadow, caller}, {local}, {noGuard}, {f250}, {f100}},
	"stall dest":                         {{f1s, fleet, noGuard, shadow, caller}, {local}, {f250}, {f100}},
	"rare callers":                       {{f1s, fleet, noGuard, shadow, caller}, {f250, local}, {f100}},
	"step dest, 30 s after step":         {{f1s}, {f250}, {fleet, shadow, caller}, {local}, {noGuard}, {f100}},
	"mean timeout, stall dest":           {{f100}, {f250}, {local}, {noGuard}, {shadow, caller}, {fleet}, {f1s}},
	"step followed after, p50":           {{f250, f1s}, {local, fleet}, {shadow, caller}, {noGuard}, {f100}},
	"step followed after, max":           {{f250, f1s}, {local, fleet, shadow, caller}, {noGuard}, {f100}},
	"wait per request to dead peer":      {{shadow}, {caller}, {f100}, {f250}, {f1s}, {noGuard}, {fleet}, {local}},
	"1 % hang: wait per hung request":    {{f100}, {shadow}, {f250}, {caller}, {f1s}, {noGuard}, {local}, {fleet}},
	"1 % hang: failed by our timeout":    {{f100, f250, f1s, local, fleet, noGuard, shadow, caller}},
	"0.05 % hang: wait per hung request": {{f100}, {shadow}, {f250}, {f1s}, {local}, {caller}, {noGuard}, {fleet}},
	"1 % slow: failed by our timeout":    {{fleet, noGuard, shadow, caller}, {local}, {f1s}, {f250}, {f100}},
	"1 % slow: wait per request":         {{f100}, {f250}, {f1s}, {local}, {fleet, noGuard, shadow, caller}},
	"tight start: failed by our timeout": {{f1s}, {local, fleet, noGuard}, {caller}, {shadow}, {f250}, {f100}},
	"tight start: recovered after":       {{f1s}, {local, fleet, noGuard}, {shadow, caller}, {f100, f250}},
	"step: failed by our timeout":        {{f1s}, {f250}, {fleet, shadow, caller}, {local}, {noGuard}, {f100}},
}

// seedMisses is how many targets TestDecisionSeeds's seeds miss (README
// names them): on seed 2 the shadow probes' wait per hung request (112 ms,
// twice the highest completed latency) and, with the rule before too, the
// spurious timeouts against fixed 1 s's (both rules 0.0033 %, fixed 1 s
// 0.0004 %); on seed 3 the latter (0.0028 % against 0.0011 %).
var seedMisses = map[uint64]int{1: 0, 2: 3, 3: 2}

// TestDecisionSeeds is README's decision tables: DecisionConfig{Seed: s}
// with every default, for seeds 1, 2 and 3, each a single run with every
// policy side by side. Opt-in with ATNODE_SIM=1 (about 20 s of CPU per
// seed, several minutes under -race: give -race runs -timeout 30m):
//
//	ATNODE_SIM=1 go test -run TestDecisionSeeds -v ./integration/sim/
//
// prints each seed's tables (README shows seed 1's). On every seed it
// checks which targets of failure-aware timeouts hold (seedMisses), that
// the spurious timeouts of the original scenario are exactly the rule
// before's, and that the failure-aware
// policies are no worse than fleet adaptive on any column of the table
// before them by more than the noise between seeds (fleet adaptive's
// spread over the three seeds); on seed 1 it pins README's ordering.
func TestDecisionSeeds(t *testing.T) {
	if os.Getenv("ATNODE_SIM") != "1" {
		t.Skip("set ATNODE_SIM=1 to run README's decision tables on three seeds")
	}
	var runs [][]DecisionResult
	for seed := uint64(1); seed <= 3; seed++ {
		rs, err := RunDecision(DecisionConfig{Seed: seed, RunSettings: RunSettings{Progress: throttle(t)}})
		require.NoError(t, err)
		t.Logf("seed %d:\n%s\n%s", seed, DecisionTable(rs), FailureTable(rs))
		t.Run(fmt.Sprintf("targets, seed %d", seed), func(t *testing.T) {
			misses := targetMisses(rs)
			for _, m := range misses {
				t.Logf("target missed: %s", m)
			}
			require.Equal(t, seedMisses[seed], len(misses), "the targets missed, as README says")
			requireUnchanged(t, rs)
		})
		runs = append(runs, rs)
	}
	requireOrdering(t, runs[0], readmeOrdering)
	requireProse(t, runs[0])
	by := byPolicy(runs[0])
	require.Equal(t, 7.0, math.Round(by[local].Spurious/by[fleet].Spurious), "7× fewer spurious timeouts overall than local-only")
	require.Equal(t, by[local].FollowP50, by[fleet].FollowP50, "the local guard makes fleet adaptive follow exactly as fast as local-only")
	require.Equal(t, by[local].FollowMax, by[fleet].FollowMax)
	for _, c := range columns {
		if !c.existing {
			continue
		}
		var vs []float64
		for _, rs := range runs {
			vs = append(vs, c.value(byPolicy(rs)[fleet]))
		}
		noise := slices.Max(vs) - slices.Min(vs)
		t.Logf("%s: fleet adaptive %v, noise %v", c.name, vs, noise)
		for i, rs := range runs {
			by := byPolicy(rs)
			for _, p := range []string{shadow, caller} {
				require.LessOrEqual(t, c.value(by[p]), c.value(by[fleet])+noise, "seed %d, %s: %s no worse than fleet adaptive beyond the noise", i+1, c.name, p)
			}
		}
	}
}

// TestDecisionDeterministic checks that the seed fixes the results.
func TestDecisionDeterministic(t *testing.T) {
	cfg := DecisionConfig{Seed: 1, Nodes: 2, Duration: 100 * time.Second, StepAt: 70 * time.Second, DeadAt: 70 * time.Second, TightAt: 70 * time.Second, Rate: 5}
	a, err := RunDecision(cfg)
	require.NoError(t, err)
	b, err := RunDecision(cfg)
	require.NoError(t, err)
	require.Equal(t, a, b)
}
