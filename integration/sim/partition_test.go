package sim

import (
	"os"
	"testing"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
	"github.com/stretchr/testify/require"
)

// partitionBound is how long after the heal the views may take to be the
// exact merge of every origin's records again, by the protocol's
// schedule: from when the sides list each other alive again (the merge, if
// they listed each other dead; else the heal), the first seal after the
// next epoch boundary carries the manifests of its epoch and the one
// before, and the gap in what an origin sent an owner makes the owner pull
// the older epochs (a merge makes the origins send the window again at
// once); that round's aggregates are out SealJitter + PublishDelay after
// the boundary, or FailoverDelay later from the second owner; then one
// check interval and the spread (100 ms allowed). Without the gap's pull
// an owner cut off for more than two seals and never listed dead lacked
// the older epochs' records until they slid out of the window.
func partitionBound(r PartitionResult, heal time.Duration) time.Duration {
	g, sw := cluster.DefaultGossip(), tracker.DefaultConfig().SubWindow()
	from := heal
	if r.Detected {
		from += r.Merge
	}
	next := (from/sw + 1) * sw
	return next - heal + g.SealJitter + g.PublishDelay + g.FailoverDelay + 100*time.Millisecond + 100*time.Millisecond
}

// TestPartitionSmall cuts a 6-node cluster in two (even and odd nodes,
// three observers each) for 2 s (healed before the member lists notice),
// 10 s (each side lists the other dead after 8 s), 70 s never noticed
// (longer than the 60 s window: the case the gap's pull fixes), 30 s
// never noticed, and 30 s one way, and checks what an operator is
// promised: no view ever counts a record twice, after the heal every view
// is the exact merge of every origin's records within partitionBound and
// stays so (every later epoch from the first owner's publish, no
// takeover), and during a noticed cut each side's views become the exact
// merge of its own side's records.
func TestPartitionSmall(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  PartitionConfig
	}{
		{"2s under detection", PartitionConfig{Cut: 2 * time.Second}},
		{"10s detected", PartitionConfig{Cut: 10 * time.Second}},
		{"70s never noticed", PartitionConfig{Cut: 70 * time.Second, Unnoticed: true}},
		{"30s never noticed", PartitionConfig{Cut: 30 * time.Second, Unnoticed: true}},
		{"30s one way", PartitionConfig{Cut: 30 * time.Second, OneWay: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Seed, cfg.Nodes, cfg.Progress = 42, 6, throttle(t)
			r, err := RunPartition(cfg)
			require.NoError(t, err)
			t.Logf("\n%s", PartitionTable([]PartitionResult{r}))
			t.Logf("protocol v2 during the cut: %+v\nafter the heal: %+v", r.CutV2, r.HealV2)
			sw := tracker.DefaultConfig().SubWindow()
			heal := time.Duration(tracker.DefaultConfig().SubWindows+1)*sw + 5*time.Second + cfg.Cut
			g := cluster.DefaultGossip()
			require.Equal(t, !cfg.Unnoticed && cfg.Cut > 8*time.Second, r.Detected, "listed dead when the cut outlasts the detection")
			require.Positive(t, r.Dropped, "the cut dropped messages")
			require.Zero(t, r.Overcounts, "a record counted twice")
			require.GreaterOrEqual(t, r.HealExact, time.Duration(0), "the views are exact again")
			require.LessOrEqual(t, r.HealExact, partitionBound(r, heal), "within the first round after the next seal")
			require.Less(t, r.HealLagMax, g.SealJitter+g.PublishDelay+200*time.Millisecond,
				"then every epoch's views are exact from the first owner's publish: no failover")
			require.Len(t, r.Held, 2)
			require.Equal(t, 1.0, r.Held[0].Samples, "every sample of the exact merge 10 s after the heal")
			if r.Detected {
				require.GreaterOrEqual(t, r.SidesExact, time.Duration(0), "each side's views are its side's merge")
				require.LessOrEqual(t, r.SidesExact, 8*time.Second+sw, "from the round after the deaths on")
			}
		})
	}
}

// TestPartitionSweep is the partition table for README's Scale section
// (opt-in with ATNODE_SIM=1): cuts of 2 s, 10 s, 30 s and 70 s that the
// member lists notice after 8 s, cuts of 10 s, 30 s and 70 s never
// noticed, a one-way cut, and two cuts whose sends stall for memberlist's
// 10 s connect timeout, at 100 nodes and destinations and 10 000
// samples/s per node. ATNODE_SIM_PARTITION=unnoticed runs only the cuts
// never noticed, ATNODE_SIM_PARTITION=stall only the cuts whose sends
// stall.
func TestPartitionSweep(t *testing.T) {
	if os.Getenv("ATNODE_SIM") != "1" {
		t.Skip("set ATNODE_SIM=1 to run the partition sweep")
	}
	var rs []PartitionResult
	for _, cfg := range []PartitionConfig{
		{Cut: 2 * time.Second},
		{Cut: 10 * time.Second},
		{Cut: 30 * time.Second},
		{Cut: 70 * time.Second},
		{Cut: 10 * time.Second, Unnoticed: true},
		{Cut: 30 * time.Second, Unnoticed: true},
		{Cut: 70 * time.Second, Unnoticed: true},
		{Cut: 30 * time.Second, OneWay: true},
		{Cut: 10 * time.Second, Stall: 10 * time.Second},
		{Cut: 30 * time.Second, Unnoticed: true, Stall: 10 * time.Second},
	} {
		switch os.Getenv("ATNODE_SIM_PARTITION") {
		case "unnoticed":
			if !cfg.Unnoticed {
				continue
			}
		case "stall":
			if cfg.Stall == 0 {
				continue
			}
		}
		cfg.Seed, cfg.Nodes, cfg.RatePerNode, cfg.Progress = 1, 100, 10_000, throttle(t)
		r, err := RunPartition(cfg)
		require.NoError(t, err)
		rs = append(rs, r)
		t.Logf("\n%s", PartitionTable(rs))
		t.Logf("cut %v (unnoticed %v, one way %v): protocol v2 during the cut: %+v\nafter the heal: %+v", r.Cut, r.Unnoticed, r.OneWay, r.CutV2, r.HealV2)
		require.Zero(t, r.Overcounts)
		require.GreaterOrEqual(t, r.HealExact, time.Duration(0))
	}
}

// TestPartitionModel checks the cut itself: messages between the sides are
// dropped (both ways, or only the first group's one way), each side lists
// the other's members dead after the detection delay and alive again with
// the same boots and a new Since a merge delay after the heal, a cut
// healed before the detection is noticed by nobody, and one never noticed
// leaves the lists alone.
func TestPartitionModel(t *testing.T) {
	s := churnSim(t, 4, cluster.ProtocolV2, nil)
	sides := Cut{Groups: [][]int{{0, 1}, {2, 3}}, Detect: 3 * time.Second}
	state := func(i, j int) (cluster.State, time.Time) {
		for _, m := range s.membersOf(int32(i)) {
			if m.Member == s.nodes[j].member {
				return m.State, m.Since
			}
		}
		t.Fatalf("node %d lists no member of node %d", i, j)
		return 0, time.Time{}
	}
	boots := []uint64{s.nodes[0].boot, s.nodes[1].boot, s.nodes[2].boot, s.nodes[3].boot}
	require.NoError(t, s.Run(time.Second))
	s.Partition(sides)
	require.True(t, s.cutOff(0, 2))
	require.True(t, s.cutOff(3, 1))
	require.False(t, s.cutOff(0, 1))
	require.False(t, s.cutOff(2, 3))
	require.NoError(t, s.Run(3900*time.Millisecond))
	st, _ := state(0, 2)
	require.Equal(t, cluster.StateAlive, st, "not yet noticed")
	require.NoError(t, s.Run(4100*time.Millisecond))
	st, since := state(0, 2)
	require.Equal(t, cluster.StateDead, st, "noticed after the detection delay")
	require.Equal(t, s.Start().Add(4*time.Second), since)
	st, _ = state(2, 1)
	require.Equal(t, cluster.StateDead, st, "both ways")
	st, _ = state(0, 1)
	require.Equal(t, cluster.StateAlive, st, "its own side alive")
	require.NoError(t, s.Run(10*time.Second))
	s.Heal(time.Second)
	require.False(t, s.cutOff(0, 2), "messages pass at once")
	st, _ = state(0, 2)
	require.Equal(t, cluster.StateDead, st, "until the sides merge")
	require.NoError(t, s.Run(11*time.Second))
	st, since = state(0, 2)
	require.Equal(t, cluster.StateAlive, st)
	require.Equal(t, s.Start().Add(11*time.Second), since, "back with a new Since")
	_, since = state(0, 1)
	require.True(t, since.IsZero(), "its own side's Since unchanged")
	for i, n := range s.nodes {
		require.Equal(t, boots[i], n.boot, "the same boots")
	}
	var cut uint64
	for i := range 4 {
		cut += s.NodeStats(i).Cut
	}
	require.Positive(t, cut, "the cut dropped messages")

	// Healed before the detection: nobody notices.
	s.Partition(sides)
	require.NoError(t, s.Run(13*time.Second))
	s.Heal(time.Second)
	require.NoError(t, s.Run(20*time.Second))
	st, since = state(1, 3)
	require.Equal(t, cluster.StateAlive, st)
	require.Equal(t, s.Start().Add(11*time.Second), since, "no death, no return")

	// One way, never noticed.
	s.Partition(Cut{Groups: [][]int{{0}}, OneWay: true})
	require.True(t, s.cutOff(0, 1))
	require.False(t, s.cutOff(1, 0))
	require.False(t, s.cutOff(2, 3), "the nodes in no group are one group")
	require.NoError(t, s.Run(60*time.Second))
	st, _ = state(1, 0)
	require.Equal(t, cluster.StateAlive, st, "never noticed")
	require.NoError(t, s.err)
}
