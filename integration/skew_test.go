package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// holdAtOffset waits until the wall clock is between off and off+50ms
// into an epoch and holds the nodes' clocks in their epochs of that
// instant (memCluster.hold) for the next record.
func (c *memCluster) holdAtOffset(off time.Duration) {
	for {
		in := func(now time.Time) time.Duration { return now.Sub(c.cfg.EpochStart(c.cfg.Epoch(now))) }
		now, ok := c.hold(func(now time.Time) bool { return in(now) >= off && in(now) < off+50*time.Millisecond })
		if ok {
			return
		}
		wait := off - in(now)
		if wait <= 0 {
			wait += c.cfg.SubWindow()
		}
		time.Sleep(wait)
	}
}

// TestFaultClockSkewWithin skews five nodes' clocks by −200…+200 ms (less
// than one 500 ms sub-window apart) and records twice, just before and just
// after an epoch boundary, so that the same instant falls in different
// epochs on different nodes. Every batch is within the accepted epochs:
// no batch is refused, each (origin, epoch) batch is stored once, and every
// node's fleet view converges to the exact union.
func TestFaultClockSkewWithin(t *testing.T) {
	t.Parallel()
	skews := []time.Duration{-200 * time.Millisecond, -100 * time.Millisecond, 0, 100 * time.Millisecond, 200 * time.Millisecond}
	c := newMemCluster(t, 23, len(skews), func(i int) time.Duration { return skews[i] })
	u := newUnion(c.cfg)
	batches := map[string]map[int64]bool{} // origin → epochs it recorded in
	for round, off := range []time.Duration{c.cfg.SubWindow() - 100*time.Millisecond, 50 * time.Millisecond} {
		c.holdAtOffset(off)
		epochs := c.record(u, c.nodes, testDests, latencies(uint64(30+round), 30))
		require.NotEqual(t, epochs[0], epochs[len(epochs)-1], "round %d: the skew put one instant in two epochs: %v", round, epochs)
		for i, e := range epochs {
			if batches[c.nodes[i].Name()] == nil {
				batches[c.nodes[i].Name()] = map[int64]bool{}
			}
			batches[c.nodes[i].Name()][e] = true
		}
	}
	took := waitUnion(t, c.nodes, u, 5)
	t.Logf("skew ±200ms: exact union on every node %v after recording; batches %v", took, batches)

	total := 0
	for _, es := range batches {
		total += len(es)
	}
	for _, m := range c.nodes {
		want := uint64(total - len(batches[m.Name()]))
		requireStoredOnce(t, m, want, "%s: every peer batch stored once", m.Name())
		requireNoRefusedData(t, m)
	}
}

// TestFaultClockSkewBeyond gives one of five nodes a clock an hour ahead
// (or behind): its batches fall outside every other node's accepted epochs
// [E−N−1, E+1] and theirs outside its own. The four others' views converge
// to the exact union of their own samples (4 peers); the skewed node sees
// only itself (1 peer, so its estimate falls back to its local view); and
// the counters explain every refusal: each batch message the skewed node
// sent was refused by a receiver, as from the future when the skewed clock
// is ahead and as stale when it is behind, and vice versa.
func TestFaultClockSkewBeyond(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		skew     time.Duration
		theirs   string // how the others classify the skewed node's batches
		skewedAs string // how the skewed node classifies theirs
		// The rejection reasons those outcomes are counted under.
		theirsWhy, skewedWhy string
	}{
		{"ahead", time.Hour, "too_new", "too_old", cluster.RejectFutureEpoch, cluster.RejectStaleEpoch},
		{"behind", -time.Hour, "too_old", "too_new", cluster.RejectStaleEpoch, cluster.RejectFutureEpoch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seed := uint64(24)
			if tc.skew < 0 {
				seed = 25
			}
			// On protocol v1: every message here is a batch, and the
			// skewed node's own batches are in its fleet view. On v2 its
			// records reach its fleet view only through the destinations'
			// owners, which refuse them as it refuses theirs.
			c := newMemClusterProto(t, seed, 5, func(i int) time.Duration {
				if i == 4 {
					return tc.skew
				}
				return 0
			}, 1)
			normal, skewed := c.nodes[:4], c.nodes[4]
			all := newUnion(c.cfg)
			c.midEpoch()
			epochs := c.record(all, c.nodes, testDests, latencies(40, 30))
			u := all.only(names(normal)...)
			took := waitUnion(t, normal, u, 4)
			t.Logf("the four in-range nodes converged %v after recording", took)

			for _, m := range normal {
				require.False(t, holds(m, skewed, epochs[4]))
				require.False(t, holds(skewed, m, epochs[0]))
			}
			own := all.only(skewed.Name())
			eventually(t, "the skewed node's view holds itself alone", func() (bool, string) {
				for _, d := range testDests {
					e, err := skewed.Estimate(d, 0.99)
					require.NoError(t, err)
					want := own.quantile(t, d, 0.99)
					if e.Peers != 1 || e.Samples != own.total(d) || e.Source != tracker.SourceLocal || e.ValueMillis != want {
						return false, fmt.Sprintf("%s: %d peers, %d samples, %s value %d; want 1 peer, %d samples, local value %d",
							d, e.Peers, e.Samples, e.Source, e.ValueMillis, own.total(d), want)
					}
				}
				return true, ""
			})

			eventually(t, "every batch message is accounted for", func() (bool, string) {
				sk := skewed.gossip()
				var refusedByNormal, normalOut, stored uint64
				for _, m := range normal {
					s := m.gossip()
					if s.Rejected[tc.theirsWhy] != s.Outcomes[tc.theirs] {
						return false, fmt.Sprintf("%s: %d %s, %d %s", m.Name(), s.Rejected[tc.theirsWhy], tc.theirsWhy, s.Outcomes[tc.theirs], tc.theirs)
					}
					refusedByNormal += s.Outcomes[tc.theirs]
					normalOut += s.BatchesOut
					stored += s.Outcomes["new"] + s.Outcomes["duplicate"]
				}
				switch {
				case sk.BatchesOut < 4 || refusedByNormal != sk.BatchesOut:
					return false, fmt.Sprintf("skewed node sent %d batches, the others refused %d as %s", sk.BatchesOut, refusedByNormal, tc.theirs)
				case sk.Outcomes[tc.skewedAs] == 0 || sk.Rejected[tc.skewedWhy] != sk.Outcomes[tc.skewedAs] || sumMap(sk.Outcomes) != sk.Outcomes[tc.skewedAs]:
					return false, fmt.Sprintf("skewed node: outcomes %v, rejected %v", sk.Outcomes, sk.Rejected)
				case normalOut != stored+sk.Outcomes[tc.skewedAs]:
					return false, fmt.Sprintf("the others sent %d batches: %d stored by them, %d refused by the skewed node", normalOut, stored, sk.Outcomes[tc.skewedAs])
				}
				return true, ""
			})
			for _, m := range normal {
				require.Equal(t, uint64(3), m.gossip().Outcomes["new"], "%s: one batch from each in-range peer", m.Name())
			}
			// And it is said: the skewed node warns about its own clock,
			// each other node about the skewed node's, naming the refusal.
			dir := "ahead of"
			if tc.skew < 0 {
				dir = "behind"
			}
			eventually(t, "the skew is reported", func() (bool, string) {
				if !warned(t, skewed, cluster.WarnClockSkew, "this node's clock is ~1h0m0s "+dir+" its peers' median",
					"it refuses every peer batch as "+tc.skewedWhy) {
					return false, "skewed: " + strings.Join(messages(statusWarnings(t, skewed)), "; ")
				}
				for _, m := range normal {
					if !warned(t, m, cluster.WarnClockSkew, "the clock of peer n4", "~1h0m0s "+dir, "this node refuses its batches as "+tc.theirsWhy) {
						return false, m.Name() + ": " + strings.Join(messages(statusWarnings(t, m)), "; ")
					}
				}
				return true, ""
			})
		})
	}
}
