package cluster

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGossipStalledPeerNeverBlocks stalls one of five members: it stays
// alive (packets flow) and sends as usual, but accepts streams and never
// reads them, so every send to it hangs until the 20 s stream timeout.
// With only two send workers per node, the other four must still seal on
// schedule and converge on the exact union, every epoch, well within the
// stream timeout: a slow member holds at most one worker and delays only
// its own messages.
func TestGossipStalledPeerNeverBlocks(t *testing.T) {
	t.Parallel()
	// A send blocked on the stalled member shows as a wait of about the
	// stream timeout; the others must converge within half of it. With
	// 10 s that was too tight: under -race at several times the cores'
	// load, with live members declared dead for a second meanwhile, an
	// epoch took 5.03 s (0.6 s for the two before it).
	const streamTimeout = 20 * time.Second
	o := defaultGossipOpts()
	o.gossip.SendWorkers = 2
	o.tune = func(c *Config) { c.Timing.StreamTimeout = streamTimeout }
	nw, nodes := gossipCluster(t, 18, 5, o)
	rest, stalled := nodes[:4], nodes[4]
	nw.Stall(stalled.tr.Addr(), true)

	u := newUnion(t, o.tracker)
	dests := testDests(4)
	const epochs = 3
	for k := range epochs {
		e := recordEpoch(t, u.cfg, nodes, u.ref, dests, randomSamples(uint64(40+k), 30))
		u.epochs = append(u.epochs, e)
		// Far within the stream timeout: a send blocked on the stalled
		// member would show up as a wait of about streamTimeout.
		start := time.Now()
		for !holdsEpoch(rest, nodes, e) {
			require.Less(t, time.Since(start), streamTimeout/2, "epoch %d: the others did not converge", e)
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("epoch %d: all 5 batches on the 4 others %v after recording", e, time.Since(start))
		eventuallyUnionOf(t, nodes, rest, dests, u.counts(t))
	}
	require.Positive(t, nw.Stats().StreamsStalled, "sends to the stalled member hung")
	for _, n := range nodes {
		s := n.GossipStats()
		require.Equal(t, uint64(epochs), s.Seals, "%s sealed every epoch", n.Name())
		require.Zero(t, s.SealErrors, n.Name())
	}
	for _, n := range rest {
		h := n.GossipStats().SealToReceive
		require.Equal(t, uint64(4*epochs), h.Count, "%s: a new batch from each of the 4 others, every epoch", n.Name())
		for i, b := range h.Bounds {
			if b > streamTimeout.Seconds()/2 {
				require.Zero(t, h.Counts[i], "%s: no batch waited for the stream timeout", n.Name())
			}
		}
		require.Zero(t, h.Counts[len(h.Bounds)], n.Name())
		require.True(t, allSee([]*gnode{n}, nodes), "%s: the stalled member is still alive", n.Name())
	}
}
