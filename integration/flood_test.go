package integration

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// TestFaultFloodingPeer has one of five nodes record 100 times more
// samples than each other node, all slow. With the default share cap
// (0.25) its counts are scaled down, every bucket by the same factor, until
// it holds a quarter of the view (rounded down): every node's fleet view must equal that
// capped union exactly, the flooder's share must be at most 0.25, and the
// median must be the honest nodes', not the flooder's. No data is refused:
// flooding is bounded by the cap, not by dropping data.
//
// This is a flood of samples. A flood of messages (a peer sending faster
// than a receiver handles, overflowing its send and receive queues) is
// cluster's TestGossipFloodOverflowsQueues: the queues drop and count, and
// anti-entropy repairs what they dropped.
func TestFaultFloodingPeer(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t, 26, 5, nil)
	flooder, honest := c.nodes[0], c.nodes[1:]
	var slow []uint64 // 10 values 50 ms apart: each its own bucket
	for v := uint64(600); v < 1100; v += 50 {
		slow = append(slow, v)
	}
	const perValue = 500 // 5000 samples per destination: 100 × the honest 50
	honestSamples := latencies(50, 50)
	all := newUnion(c.cfg)
	c.midEpoch()
	c.record(all, c.nodes, testDests, func(i int, d string) []uint64 {
		if i == 0 {
			var out []uint64
			for _, v := range slow {
				out = append(out, slices.Repeat([]uint64{v}, perValue)...)
			}
			return out
		}
		return honestSamples(i, d)
	})

	// The capped union by the share cap (docs/design.md, Fleet view): the
	// honest peers hold R = 200 samples, so the flooder's n = 5000 are
	// scaled to t = floor(R/3) = 66 (t/(t+R) = 1/4, rounded down), every
	// bucket by the same factor t/n with the cumulative counts rounded down
	// (the tracker's rule: bucket i keeps floor(C_i·t/n) − floor(C_{i−1}·t/n)).
	capped := all.only(names(honest)...)
	const n = perValue * 10
	var floodKept uint64
	for _, d := range testDests {
		r := capped.total(d)
		require.Equal(t, uint64(200), r)
		tc := r / 3
		var cum, kept uint64
		for _, v := range slow {
			cum += perValue
			k := cum * tc / n
			capped.add(flooder.Name(), d, slices.Repeat([]uint64{v}, int(k-kept))...)
			kept = k
		}
		require.Equal(t, tc, kept)
		floodKept = kept
	}
	took := eventually(t, "every fleet view is the capped union", func() (bool, string) {
		return viewsMatch(t, c.nodes, capped, capped.counts, 5)
	})
	t.Logf("flood: capped union on every node %v after recording", took)

	// Each node's median estimate of the capped union. The views keep
	// moving after the wait (each round reads the owners' newest
	// aggregate; on a loaded machine one came late and a view was empty
	// for a moment, its share 0/0): an estimate of another view than the
	// capped union is read again, one of it is checked.
	honestTotal := func(d string) uint64 { return capped.only(names(honest)...).total(d) }
	for _, d := range testDests {
		for _, m := range c.nodes {
			var e tracker.Estimate
			eventually(t, m.Name()+" "+d+": an estimate of the capped union", func() (bool, string) {
				var err error
				e, err = m.Estimate(d, 0.5)
				require.NoError(t, err)
				return e.Samples == capped.total(d), fmt.Sprintf("%d samples, want %d", e.Samples, capped.total(d))
			})
			share := float64(e.Samples-honestTotal(d)) / float64(e.Samples)
			require.LessOrEqual(t, share, 0.25, "%s %s: the flooder's share after the cap", m.Name(), d)
			require.Greater(t, share, 0.2)
			require.Less(t, e.ValueMillis, uint64(600), "%s %s: the median is the honest nodes'", m.Name(), d)
			sum := float64(floodKept + 200)
			require.InDelta(t, sum*sum/float64(floodKept*floodKept+4*50*50), e.EffectivePeers, 1e-9)
		}
		require.GreaterOrEqual(t, all.quantile(t, d, 0.5), uint64(600), "without the cap the flooder would own the median")
	}
	for _, m := range c.nodes {
		requireStoredOnce(t, m, 4, m.Name())
		requireNoRefusedData(t, m)
	}
}
