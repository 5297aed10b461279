package sim

import (
	"os"
	"testing"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
	"github.com/stretchr/testify/require"
)

// churnBound is how long after a member comes up (at up, since the start
// of the run) the views of the destinations it owns may take to be exact
// again, by the protocol's schedule: the origins send a restarted or new
// owner the window's records at once (they see its new boot), so the
// first aggregates it publishes, those of the epoch it came up in, cover
// the whole window. They are out SealJitter + PublishDelay after the next
// epoch boundary, or FailoverDelay later from the second owner when the
// first missed its publish; then one check interval and the spread
// (milliseconds on this network; 100 ms allowed). Without the resend the
// new owner's aggregates would lack the records of the epochs before its
// return until the window has refilled: SubWindows epochs.
func churnBound(cfg ChurnConfig, up time.Duration) time.Duration {
	g, sw := cluster.DefaultGossip(), tracker.DefaultConfig().SubWindow()
	if cfg.Gossip != (cluster.Gossip{}) {
		g = cfg.Gossip
	}
	next := (up/sw + 1) * sw
	return next - up + g.SealJitter + g.PublishDelay + g.FailoverDelay + 100*time.Millisecond + 100*time.Millisecond
}

// TestChurnSmall restarts an owner (back before and after the others list
// it dead, with two owners per destination and with one) and joins a
// member late, in a 6-node cluster, and checks what the protocol's design
// promises an operator: the other observers' views of the destinations
// the member owns, and its own view of every destination, are the exact
// merge again within churnBound of its return, and stay so (in every
// later epoch within SealJitter + PublishDelay + the spread: the member's
// own aggregates are complete, so no second owner has to take over); its
// own view holds every sample of the exact merge by the middle of the next
// epoch. Three epochs are checked after the return's: without the resend
// the views would take the whole window (TestChurnSweep's horizon).
func TestChurnSmall(t *testing.T) {
	one := cluster.DefaultGossip()
	one.Owners = 1
	for _, tc := range []struct {
		name string
		cfg  ChurnConfig
	}{
		{"restart before detection", ChurnConfig{Down: time.Second}},
		{"restart after detection", ChurnConfig{Down: 10 * time.Second}},
		{"restart before detection one owner", ChurnConfig{Down: time.Second, Gossip: one}},
		{"restart after detection one owner", ChurnConfig{Down: 10 * time.Second, Gossip: one}},
		{"late join", ChurnConfig{Join: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Seed, cfg.Nodes, cfg.Epochs, cfg.Progress = 42, 6, 3, throttle(t)
			r, err := RunChurn(cfg)
			require.NoError(t, err)
			t.Logf("\n%s", ChurnTable([]ChurnResult{r}))
			t.Logf("protocol v2 after the return: %+v", r.V2)
			sw := tracker.DefaultConfig().SubWindow()
			up := time.Duration(tracker.DefaultConfig().SubWindows+1)*sw + 50*time.Millisecond + cfg.Down
			bound := churnBound(cfg, up)
			g := cluster.DefaultGossip()
			require.Positive(t, r.Owned, "the member owns destinations")
			require.Positive(t, r.V2.Resent, "the origins sent it the window's records again")
			require.GreaterOrEqual(t, r.ViewsExact, time.Duration(0), "the others' views are exact again")
			require.LessOrEqual(t, r.ViewsExact, bound, "within the next epoch's publish (and failover)")
			require.GreaterOrEqual(t, r.SelfExact, time.Duration(0), "its own view is exact again")
			require.LessOrEqual(t, r.SelfExact, bound)
			require.Less(t, r.ViewsLagMax, g.SealJitter+g.PublishDelay+200*time.Millisecond,
				"then every epoch's views are exact from the first owner's publish: no failover")
			require.Len(t, r.Self, 3)
			require.Equal(t, 1.0, r.Self[1].Samples, "its view holds the exact merge by the next epoch's middle")
			require.Equal(t, r.Dests, r.Self[1].Exact)
			require.Zero(t, r.Refused)
			// Nothing is lost on this network: an owner keeping the
			// records of destinations the owners gave to others for a
			// while must not pull them again.
			require.Zero(t, r.V2.RecordPulls, "records pulled though none was lost")
			// Back (or joined) after its round's publish time, the member
			// publishes that round itself once the origins' records come,
			// though it knew too few destinations to own them when they
			// came: no second owner takes over, and with one owner the
			// views do not wait for the next round.
			require.Zero(t, r.V2.Takeovers, "a second owner took over")
			require.Less(t, r.ViewsExact, g.PublishDelay+g.FailoverDelay, "the views waited for a later round")
		})
	}
}

// TestChurnDeterministic checks that a seed fixes a churn run.
func TestChurnDeterministic(t *testing.T) {
	run := func(join bool) ChurnResult {
		net := DefaultNetworkConfig()
		net.Loss = 0.02
		r, err := RunChurn(ChurnConfig{Seed: 7, Nodes: 5, Join: join, Down: 3 * time.Second, Epochs: 2, Network: net})
		require.NoError(t, err)
		r.Wall = 0
		return r
	}
	require.Equal(t, run(false), run(false))
	require.Equal(t, run(true), run(true))
}

// TestChurnSweep is the churn table for README's Scale section (opt-in
// with ATNODE_SIM=1): restarts back before and after the failure
// detector's delay, with two owners and with one, and a late join, at 100
// nodes and destinations and 10 000 samples/s per node.
func TestChurnSweep(t *testing.T) {
	if os.Getenv("ATNODE_SIM") != "1" {
		t.Skip("set ATNODE_SIM=1 to run the churn sweep")
	}
	one := cluster.DefaultGossip()
	one.Owners = 1
	var rs []ChurnResult
	for _, cfg := range []ChurnConfig{
		{Down: time.Second},
		{Down: 10 * time.Second},
		{Down: time.Second, Gossip: one},
		{Down: 10 * time.Second, Gossip: one},
		{Join: true},
		{Down: 10 * time.Second, Protocol: 1},
		{Join: true, Protocol: 1},
	} {
		cfg.Seed, cfg.Nodes, cfg.RatePerNode, cfg.Progress = 1, 100, 10_000, throttle(t)
		r, err := RunChurn(cfg)
		require.NoError(t, err)
		rs = append(rs, r)
		t.Logf("\n%s", ChurnTable(rs))
		if r.Protocol >= cluster.ProtocolV2 {
			t.Logf("%s, down %v (0: a late join): protocol v2 after the return: %+v", r.Node, r.Down, r.V2)
		}
		require.GreaterOrEqual(t, r.ViewsExact, time.Duration(0))
		require.GreaterOrEqual(t, r.SelfExact, time.Duration(0))
	}
}
