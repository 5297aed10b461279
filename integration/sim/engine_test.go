package sim

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
	"github.com/stretchr/testify/require"
)

// TestEventQueueOrder checks the heap against a stable sort by time.
func TestEventQueueOrder(t *testing.T) {
	r := newRand(1, 1)
	var q eventQueue
	var want []event
	for i := range 5000 {
		ev := event{at: time.Duration(r.IntN(300)), epoch: int64(i)}
		q.push(ev)
		want = append(want, ev)
		if i%7 == 0 { // interleave pops with pushes
			slices.SortStableFunc(want, func(a, b event) int { return cmp.Compare(a.at, b.at) })
			got := q.pop()
			require.Equal(t, want[0].epoch, got.epoch)
			want = want[1:]
		}
	}
	slices.SortStableFunc(want, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	for _, w := range want {
		require.Equal(t, w.epoch, q.pop().epoch)
	}
	require.Zero(t, q.Len())
}

// TestDistQuantile checks Quantile against the CDF and against a large
// sample, with and without the stall mode.
func TestDistQuantile(t *testing.T) {
	for _, d := range []Dist{
		{MedianMillis: 10, Sigma: 0.4},
		{MedianMillis: 10, Sigma: 0.4, StallProb: 0.001, StallFactor: 20},
		{MedianMillis: 20, Sigma: 1},
	} {
		for _, q := range []float64{0.5, 0.99, 0.999, 0.9999} {
			x := d.Quantile(q)
			require.InDelta(t, q, d.CDF(x), 1e-9)
		}
		r := newRand(3, 3)
		xs := make([]float64, 400_000)
		for i := range xs {
			xs[i] = d.SampleMillis(r)
		}
		slices.Sort(xs)
		for _, q := range []float64{0.5, 0.99, 0.999, 0.9999} {
			// The share of samples at or below the exact quantile is q,
			// within 4 binomial standard deviations.
			below, _ := slices.BinarySearch(xs, d.Quantile(q))
			sd := math.Sqrt(q * (1 - q) / float64(len(xs)))
			require.InDelta(t, q, float64(below)/float64(len(xs)), 4*sd, "q=%v dist=%+v", q, d)
		}
	}
	require.Equal(t, uint64(math.Floor(Dist{MedianMillis: 10}.Quantile(0.9999))), Dist{MedianMillis: 10}.TrueQuantileMillis(0.9999))
}

// TestLinkLatency checks the per-link latency stays in its bounds and is a
// fixed property of the link.
func TestLinkLatency(t *testing.T) {
	n := network{cfg: DefaultNetworkConfig(), seed: 9}
	var sum time.Duration
	for i := range int32(50) {
		for j := range int32(50) {
			l := n.linkLatency(i, j)
			require.GreaterOrEqual(t, l, n.cfg.LatencyMin)
			require.LessOrEqual(t, l, n.cfg.LatencyMax)
			require.Equal(t, l, n.linkLatency(i, j))
			sum += l
		}
	}
	mean := sum / 2500
	require.Greater(t, mean, 400*time.Microsecond)
	require.Less(t, mean, 800*time.Microsecond)
}

// TestProtocolAgreesWithFleet runs real Protocols over observers' Fleets
// and other nodes' shared stores under message loss, and checks the two
// Stores against each other through the protocol: each node's Keys are its
// own sealed batches plus what it received, Missing against a peer's keys is
// exactly the set difference, and once anti-entropy has repaired the
// losses every node holds the same keys and every fleet view is
// bucket-identical.
func TestProtocolAgreesWithFleet(t *testing.T) {
	const nodes, observers = 8, 4
	cfg := DefaultConfig(nodes)
	cfg.Seed, cfg.Observers = 5, observers
	cfg.Network.Loss = 0.03
	dests := ScaleDests(5, 20)
	cfg.Workload = newScaleWorkload(5, dests, 30)
	cfg.Gossip.Protocol = 1 // batch stores: protocol v1
	s, err := New(cfg)
	require.NoError(t, err)
	sw := cfg.Tracker.SubWindow()
	keysOf := func(i int, now time.Time) []tracker.BatchKey {
		return append([]tracker.BatchKey{}, codec.SortKeys(s.nodes[i].store.Keys(now))...)
	}
	identical := 0
	for k := range 16 {
		// Check mid-epoch (losses pending) and just before the next boundary.
		for _, at := range []time.Duration{sw / 3, sw - time.Millisecond} {
			require.NoError(t, s.Run(time.Duration(k)*sw+at))
			now := s.Now()
			for i := range nodes {
				mine := keysOf(i, now)
				require.Equal(t, s.NodeStats(i).Held, len(mine))
				j := (i + 1) % nodes
				var want []tracker.BatchKey
				for _, key := range keysOf(j, now) {
					if _, ok := slices.BinarySearchFunc(mine, key, codec.CompareKeys); !ok {
						want = append(want, key)
					}
				}
				got := s.nodes[i].store.Missing(keysOf(j, now), now)
				if len(want) == 0 {
					require.Empty(t, got)
				} else {
					require.Equal(t, want, codec.SortKeys(got), "node %d missing from %d at %v", i, j, s.Elapsed())
				}
			}
			if at == sw-time.Millisecond && s.Unconverged(0, s.Elapsed()) == 0 {
				identical++
				for i := 1; i < nodes; i++ {
					require.Equal(t, keysOf(0, now), keysOf(i, now), "node %d", i)
				}
				for _, d := range dests {
					v0 := s.Fleet(0).ViewCounts(d.Name, now)
					for i := 1; i < observers; i++ {
						require.Equal(t, v0, s.Fleet(i).ViewCounts(d.Name, now), "dest %s node %d", d.Name, i)
					}
				}
			}
		}
	}
	t.Logf("%d of 16 epochs ended converged", identical)
	require.GreaterOrEqual(t, identical, 8, "most epochs end with every batch everywhere")
	var lost uint64
	for i := range nodes {
		lost += s.NodeStats(i).Lost
	}
	require.Greater(t, lost, uint64(0), "the network did drop messages")
	require.Zero(t, s.Unconverged(0, 14*sw), "anti-entropy repaired every loss of older epochs")
}

// TestParallelReceiveIsSequential checks that receiving bursts of
// deliveries on several goroutines gives exactly the events, bytes and
// convergence of receiving them one by one.
func TestParallelReceiveIsSequential(t *testing.T) {
	for _, proto := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", proto), func(t *testing.T) { testParallelReceive(t, proto) })
	}
}

func testParallelReceive(t *testing.T, proto int) {
	run := func(workers int) (*Sim, []NodeStats) {
		cfg := DefaultConfig(60)
		cfg.Seed, cfg.Observers = 3, 2
		cfg.Gossip.Protocol = proto
		cfg.Network.Loss = 0.02
		cfg.Workload = newScaleWorkload(3, ScaleDests(3, 30), 20)
		s, err := New(cfg)
		require.NoError(t, err)
		s.workers, s.perWorker = workers, 1
		require.NoError(t, s.Run(4*cfg.Tracker.SubWindow()))
		var st []NodeStats
		for i := range s.Nodes() {
			st = append(st, s.NodeStats(i))
		}
		return s, st
	}
	seq, seqStats := run(1)
	par, parStats := run(4)
	require.Zero(t, seq.parallelBursts)
	require.Greater(t, par.parallelBursts, 0, "some bursts were received in parallel")
	require.Equal(t, seq.Events(), par.Events())
	require.Equal(t, seqStats, parStats)
	if proto == 1 {
		require.Equal(t, seq.Converged(), par.Converged())
		require.NotEmpty(t, seq.Converged())
		return
	}
	conv := func(s *Sim) []aggResult {
		rs := s.aggregateConvergence()
		slices.SortFunc(rs, func(a, b aggResult) int {
			return cmp.Or(cmp.Compare(a.slot.epoch, b.slot.epoch), strings.Compare(a.slot.dest, b.slot.dest))
		})
		return rs
	}
	require.Equal(t, conv(seq), conv(par))
	require.NotEmpty(t, conv(seq))
}

// TestBitset covers the small set type.
func TestBitset(t *testing.T) {
	b := newBitset(200)
	for _, i := range []int{0, 63, 64, 199} {
		b.set(i)
	}
	require.Equal(t, 4, b.count())
	require.True(t, b.has(63))
	b.clear(63)
	require.False(t, b.has(63))
	require.True(t, b.has(64))
	require.True(t, b.has(0))
	require.Equal(t, 3, b.count())
}

// TestConfigValidate checks that bad configurations are refused with every
// problem named.
func TestConfigValidate(t *testing.T) {
	cfg := DefaultConfig(3)
	cfg.Observers = 4
	cfg.Network.Loss = 1
	cfg.Gossip.SealJitter = -1
	err := cfg.Validate()
	require.ErrorContains(t, err, "Observers")
	require.ErrorContains(t, err, "Loss")
	require.ErrorContains(t, err, "seal jitter")
	_, err = New(cfg)
	require.Error(t, err)
	require.NoError(t, DefaultConfig(3).Validate())
}
