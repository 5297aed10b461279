package sim

import (
	"testing"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/stretchr/testify/require"
)

// churnSim is a small scale-workload simulation of protocol proto with
// every node an observer.
func churnSim(t *testing.T, nodes, proto int, late []LateJoin) *Sim {
	t.Helper()
	cfg := DefaultConfig(nodes)
	cfg.Seed, cfg.Observers, cfg.LateJoins = 3, nodes, late
	cfg.Gossip.Protocol = proto
	cfg.Workload = newScaleWorkload(3, ScaleDests(3, nodes), 10)
	s, err := New(cfg)
	require.NoError(t, err)
	return s
}

// TestKillDuringSend kills a node while one of its sends is in flight:
// the send's completion, which arrives after the kill, finds the killed
// node's send queues gone and must not touch them (it dereferenced a
// peer queue that Kill had dropped, and panicked).
func TestKillDuringSend(t *testing.T) {
	s := churnSim(t, 4, cluster.ProtocolV2, nil)
	workers := cluster.DefaultGossip().SendWorkers
	var at time.Duration
	for step := time.Duration(0); step < 20*time.Second && at == 0; step += 100 * time.Microsecond {
		require.NoError(t, s.Run(step))
		if s.nodes[1].sh.idle < workers {
			at = step
		}
	}
	require.Positive(t, at, "node 1 sent something within 20 s")
	s.Kill(1, time.Second)
	require.NoError(t, s.Run(at+30*time.Second))
	require.True(t, s.nodes[1].dead)
}

// TestRestartAndLateJoin restarts a node and joins another late, under
// both protocols: the restarted node comes back under its name with a new
// boot ID, the others list its old boot dead after the detection delay and
// its new boot alive, messages to the old boot are lost, and both nodes
// end with the exact merge in their views, as every other observer.
func TestRestartAndLateJoin(t *testing.T) {
	for _, proto := range []int{1, cluster.ProtocolV2} {
		t.Run(map[int]string{1: "v1", 2: "v2"}[proto], func(t *testing.T) {
			const nodes = 6
			sw := DefaultConfig(1).Tracker.SubWindow()
			s := churnSim(t, nodes, proto, []LateJoin{{Node: 5, At: 3*sw + sw/3}})
			s.TrackKills()
			require.NoError(t, s.Run(sw/2))
			require.Nil(t, s.nodes[5].sh.proto, "a late node has no protocol before it joins")
			for i := range 5 {
				for _, m := range s.memberList {
					require.NotEqual(t, s.Name(5), m.Name, "no member lists a late node")
				}
				require.NotNil(t, s.nodes[i].sh.proto)
			}
			require.NoError(t, s.Run(2*sw+sw/4))
			oldBoot, oldMember := s.nodes[2].boot, s.nodes[2].member
			s.Kill(2, 2*time.Second)
			s.At(2*sw+sw/4+time.Second, func(time.Time) { s.Restart(2) })
			require.NoError(t, s.Run(2*sw+sw/4+1500*time.Millisecond))
			require.NotEqual(t, oldBoot, s.nodes[2].boot)
			require.Equal(t, uint32(1), s.nodes[2].gen)
			state := map[string]cluster.State{}
			for _, m := range s.memberList {
				state[m.Member] = m.State
			}
			require.Equal(t, cluster.StateAlive, state[oldMember], "before the detection delay the old boot is listed alive")
			require.Equal(t, cluster.StateAlive, state[s.nodes[2].member])
			require.NoError(t, s.Run(2*sw+sw/4+2500*time.Millisecond))
			for _, m := range s.memberList {
				state[m.Member] = m.State
			}
			require.Equal(t, cluster.StateDead, state[oldMember], "after it, dead")
			require.NoError(t, s.Run(7*sw+sw/2)) // mid-epoch, window refilled since
			e := s.cfg.Tracker.Epoch(s.Now())
			for i := range nodes {
				require.False(t, s.nodes[i].dead)
				for _, d := range ScaleDests(3, nodes) {
					require.Equal(t, s.unionView(d.Name, e), s.Fleet(i).ViewCounts(d.Name, s.Now()), "node %d, %s", i, d.Name)
				}
			}
			require.NoError(t, s.err)
		})
	}
}

// TestLateJoinValidate checks that bad late joins are refused.
func TestLateJoinValidate(t *testing.T) {
	cfg := DefaultConfig(3)
	cfg.LateJoins = []LateJoin{{Node: 3, At: time.Second}, {Node: 1, At: 0}, {Node: 2, At: time.Second}, {Node: 2, At: 2 * time.Second}}
	err := cfg.Validate()
	require.ErrorContains(t, err, "{Node:3")
	require.ErrorContains(t, err, "{Node:1")
	require.ErrorContains(t, err, "{Node:2 At:2s}")
	require.NotContains(t, err.Error(), "{Node:2 At:1s}")
}
