package sim

import (
	"testing"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/stretchr/testify/require"
)

// churnSim is a small scale-workload simulation of protocol proto with
// every node an observer.
func churnSim(t *testing.T, nodes, proto int) *Sim {
	t.Helper()
	cfg := DefaultConfig(nodes)
	cfg.Seed, cfg.Observers = 3, nodes
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
	s := churnSim(t, 4, cluster.ProtocolV2)
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
