package sim

import (
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ciDecision is the decision scenario at a size CI runs in about a second
// (a few under -race).
func ciDecision() DecisionConfig {
	return DecisionConfig{Seed: 1, Nodes: 10, Duration: 180 * time.Second, Rate: 30}
}

// order returns the policy names sorted by metric ascending; ties keep the
// policies' order.
func order(rs []DecisionResult, metric func(DecisionResult) float64) []string {
	idx := make([]int, len(rs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		ma, mb := metric(rs[a]), metric(rs[b])
		switch {
		case ma < mb:
			return -1
		case ma > mb:
			return 1
		}
		return 0
	})
	out := make([]string, len(idx))
	for i, k := range idx {
		out[i] = rs[k].Policy
	}
	return out
}

// follow is the step-follow time, +Inf when some node never followed.
func follow(r DecisionResult) float64 {
	if r.FollowNever > 0 {
		return math.Inf(1)
	}
	return r.FollowMax.Seconds()
}

// TestDecisionOrdering pins, with a fixed seed, the measured ordering of the
// policies on each metric (best first), so a change in the estimator, the
// fleet view, the local guard or the protocol that changes a decision shows
// up here. The numbers behind it are in the test log.
func TestDecisionOrdering(t *testing.T) {
	rs, err := RunDecision(ciDecision())
	require.NoError(t, err)
	t.Logf("\n%s", DecisionTable(rs))
	const (
		f100, f250, f1s = "fixed 100ms", "fixed 250ms", "fixed 1s"
		local, fleet    = "local adaptive", "fleet adaptive"
		noGuard         = "fleet, no local guard"
	)
	for _, tc := range []struct {
		metric string
		value  func(DecisionResult) float64
		want   []string
	}{
		{"spurious, all", func(r DecisionResult) float64 { return r.Spurious }, []string{f1s, fleet, local, f250, noGuard, f100}},
		{"spurious, stall dest", func(r DecisionResult) float64 { return r.SpuriousStall }, []string{f1s, fleet, noGuard, f250, local, f100}},
		{"spurious, rare callers", func(r DecisionResult) float64 { return r.SpuriousRare }, []string{f1s, fleet, noGuard, f250, local, f100}},
		{"spurious, after step", func(r DecisionResult) float64 { return r.SpuriousStep }, []string{f1s, f250, fleet, local, noGuard, f100}},
		{"step follow", follow, []string{f250, f1s, local, fleet, noGuard, f100}},
		{"wait on dead peer", func(r DecisionResult) float64 { return r.DeadWaitMean.Seconds() }, []string{f100, f250, f1s, noGuard, local, fleet}},
	} {
		t.Run(tc.metric, func(t *testing.T) {
			require.Equal(t, tc.want, order(rs, tc.value))
		})
	}
	by := map[string]DecisionResult{}
	for _, r := range rs {
		by[r.Policy] = r
	}
	// The claims README makes, in numbers.
	require.Zero(t, by[fleet].SpuriousRare, "the fleet knows the rarely called destination")
	require.Greater(t, by[local].SpuriousRare, 0.0)
	require.Zero(t, by[fleet].SpuriousStall, "the fleet sees enough stalls to place P99.99 in the slow mode")
	require.Greater(t, by[local].SpuriousStall, 0.0)
	require.Equal(t, by[local].FollowMax, by[fleet].FollowMax, "after a step the local guard makes the fleet policy as fast as the local one")
	require.Greater(t, by[noGuard].FollowMax, by[fleet].FollowMax+5*time.Second, "without the guard the fleet view lags by about a sub-window")
	require.Greater(t, by[fleet].DeadWaitMean, 10*time.Second, "censoring ratchets a dead peer's timeout towards the ceiling")
}

// TestDecisionDeterministic checks that the seed fixes the results.
func TestDecisionDeterministic(t *testing.T) {
	cfg := ciDecision()
	cfg.Nodes, cfg.Duration = 4, 130*time.Second
	a, err := RunDecision(cfg)
	require.NoError(t, err)
	b, err := RunDecision(cfg)
	require.NoError(t, err)
	require.Equal(t, a, b)
}

// TestDecisionFull is the README's table: opt-in with ATNODE_SIM=1.
func TestDecisionFull(t *testing.T) {
	if os.Getenv("ATNODE_SIM") != "1" {
		t.Skip("set ATNODE_SIM=1 to run the full decision scenario")
	}
	start := time.Now()
	rs, err := RunDecision(DecisionConfig{Seed: 1, Progress: throttle(t)})
	require.NoError(t, err)
	t.Logf("took %v\n%s", time.Since(start).Round(time.Second), DecisionTable(rs))
}
