package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// TestSealCutToFleetCaps: a node's own sealed sub-window is cut where the
// protocol seals it to what the fleet accepts from one member per epoch, by
// destinations and by buckets, keeping the destinations with the most
// samples (otherwise the whole batch would be refused by this node's fleet
// and by every peer's), and every destination left out is counted. Until
// the cut moved into the protocol the node kept the first names instead.
func TestSealCutToFleetCaps(t *testing.T) {
	for _, tc := range []struct {
		name            string
		maxDests        int
		maxEpochBuckets int
		want            []string
	}{
		{"under both caps", 10, 18, []string{"d0", "d1", "d2", "d3", "d4", "d5"}},
		{"destination cap", 4, 100, []string{"d2", "d3", "d4", "d5"}},
		{"bucket cap", 10, 8, []string{"d4", "d5"}}, // 3 + 3 fit in 8, a third would make 9
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &testClock{now: epochStart(e0)}
			n := newAlone(t, clk, nil)
			fc := n.fleet.Config()
			fc.MaxDestinations, fc.MaxEpochBuckets = tc.maxDests, tc.maxEpochBuckets
			f, err := tracker.NewFleet(fc, n.local)
			require.NoError(t, err)
			n.fleet = f
			n.proto, err = cluster.NewSyncProtocol(n.protocolConfig())
			require.NoError(t, err)
			for i := range 6 {
				dest := fmt.Sprintf("d%d", i)
				for range i + 1 { // d5 has the most samples
					for _, ms := range []time.Duration{1, 20, 300} { // 3 distinct buckets per destination
						n.Record(dest, ms*time.Millisecond)
					}
				}
			}
			clk.Set(epochStart(e0 + 1))
			_, err = n.Estimate("d0", 0) // the query path seals e0
			require.NoError(t, err)
			now := clk.Now()
			var names []string
			for i := range 6 {
				if dest := fmt.Sprintf("d%d", i); f.ViewCounts(dest, now) != nil {
					names = append(names, dest)
				}
			}
			require.Equal(t, tc.want, names)
			s := n.proto.Stats()
			require.Equal(t, uint64(1), s.Seals)
			require.Zero(t, s.SealErrors, "the cut batch is accepted")
			require.Equal(t, uint64(6-len(tc.want)), s.DestinationsDropped)
		})
	}
}

// TestNeverStartedSealsLazily: a node that was never started decides,
// seals its own sub-windows and answers lazily, with gossip configured or
// not: the query path polls the protocol core, which seals at the boundary
// (no peers, no jitter).
func TestNeverStartedSealsLazily(t *testing.T) {
	for _, gossip := range []bool{false, true} {
		t.Run(fmt.Sprint("gossip ", gossip), func(t *testing.T) {
			clk := &testClock{now: epochStart(e0)}
			cfg := DefaultConfig()
			cfg.Name, cfg.HTTP, cfg.Clock, cfg.DisableGossip = "n0", "", clk.Now, !gossip
			cfg.Cluster.Bind = "127.0.0.1:0"
			n, err := New(cfg, testLogger(t), nil)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, n.Close()) })
			for range 5 {
				n.Record("db", 12*time.Millisecond)
			}
			clk.Set(epochStart(e0 + 1))
			e, err := n.Estimate("db", 0)
			require.NoError(t, err)
			require.Equal(t, uint64(5), e.Samples, "the fleet view holds the epoch sealed at the boundary")
			require.Equal(t, uint64(1), n.proto.Stats().Seals)
		})
	}
}
