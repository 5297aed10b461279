package sim

import (
	"cmp"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

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

// TestDecisionOrdering runs the scenario of README's table ("Do fleet-wide
// timeouts decide better?"), DecisionConfig{Seed: 1} with every default, and
// pins the table's ordering of the policies on each column, ties included,
// and the comparisons README's prose draws from it. A change in the
// estimator, the fleet view, the local guard or the protocol that changes a
// decision fails here; then regenerate the table from this test's log
// (go test -run TestDecisionOrdering -v ./integration/sim/) and update both.
// The seed fixes every number (TestDecisionDeterministic), so the exact
// ordering, ties included, is stable. About 3 s, 25 s under -race.
func TestDecisionOrdering(t *testing.T) {
	rs, err := RunDecision(DecisionConfig{Seed: 1})
	require.NoError(t, err)
	t.Logf("\n%s", DecisionTable(rs))
	const (
		f100, f250, f1s = "fixed 100ms", "fixed 250ms", "fixed 1s"
		local, fleet    = "local adaptive", "fleet adaptive"
		noGuard         = "fleet, no local guard"
	)
	for _, tc := range []struct {
		column string
		value  func(DecisionResult) float64
		want   [][]string
	}{
		{"spurious timeouts, all", func(r DecisionResult) float64 { return r.Spurious },
			[][]string{{f1s}, {fleet}, {local}, {noGuard}, {f250}, {f100}}},
		{"stall dest", func(r DecisionResult) float64 { return r.SpuriousStall },
			[][]string{{f1s, fleet, noGuard}, {local}, {f250}, {f100}}},
		{"rare callers", func(r DecisionResult) float64 { return r.SpuriousRare },
			[][]string{{f1s, fleet, noGuard}, {f250, local}, {f100}}},
		{"step dest, 30 s after step", func(r DecisionResult) float64 { return r.SpuriousStep },
			[][]string{{f1s}, {f250}, {fleet}, {local}, {noGuard}, {f100}}},
		{"mean timeout, stall dest", func(r DecisionResult) float64 { return r.MeanTimeoutStall.Seconds() },
			[][]string{{f100}, {f250}, {local}, {noGuard}, {fleet}, {f1s}}},
		{"step followed after, p50", followed(func(r DecisionResult) time.Duration { return r.FollowP50 }),
			[][]string{{f250, f1s}, {local, fleet}, {noGuard}, {f100}}},
		{"step followed after, max", followed(func(r DecisionResult) time.Duration { return r.FollowMax }),
			[][]string{{f250, f1s}, {local, fleet}, {noGuard}, {f100}}},
		{"wait per request to dead peer", func(r DecisionResult) float64 { return r.DeadWaitMean.Seconds() },
			[][]string{{f100}, {f250}, {f1s}, {noGuard}, {fleet}, {local}}},
	} {
		t.Run(tc.column, func(t *testing.T) {
			require.Equal(t, tc.want, ranks(rs, tc.value))
		})
	}
	by := map[string]DecisionResult{}
	for _, r := range rs {
		by[r.Policy] = r
	}
	// README's prose, in numbers.
	require.Equal(t, 7.0, math.Round(by[local].Spurious/by[fleet].Spurious), "7× fewer spurious timeouts overall than local-only")
	require.Zero(t, by[fleet].SpuriousRare, "none on the rarely called destination")
	require.Zero(t, by[fleet].SpuriousStall, "none on rare stalls: the fleet places P99.99 in the slow mode")
	require.Less(t, by[fleet].MeanTimeoutStall, time.Second, "a timeout well below a safe fixed one")
	require.Greater(t, by[f100].Spurious, 0.02, "100 ms is too tight: 2.2 % spurious")
	require.Greater(t, by[noGuard].FollowMax, by[fleet].FollowMax+5*time.Second, "without the guard the fleet view lags by about a sub-window")
	require.Equal(t, by[local].FollowP50, by[fleet].FollowP50, "the local guard makes fleet adaptive follow exactly as fast as local-only")
	require.Equal(t, by[local].FollowMax, by[fleet].FollowMax)
	for _, p := range []string{local, fleet} {
		require.Greater(t, by[p].DeadWaitMean, 30*by[f1s].DeadWaitMean, "censoring ratchets a dead peer's timeout towards the ceiling")
	}
}

// TestDecisionDeterministic checks that the seed fixes the results.
func TestDecisionDeterministic(t *testing.T) {
	cfg := DecisionConfig{Seed: 1, Nodes: 4, Duration: 130 * time.Second, Rate: 30}
	a, err := RunDecision(cfg)
	require.NoError(t, err)
	b, err := RunDecision(cfg)
	require.NoError(t, err)
	require.Equal(t, a, b)
}
