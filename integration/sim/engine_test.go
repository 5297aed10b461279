package sim

import (
	"cmp"
	"math"
	"slices"
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

// TestProtocolAgreesWithFleet runs every node as an observer under message
// loss and checks the model's bookkeeping against the real Fleet: each
// node's held bits are exactly Fleet.Keys, Fleet.Missing against a peer's
// keys is exactly what the bits say is missing, and once anti-entropy has
// repaired the losses every fleet view is bucket-identical.
func TestProtocolAgreesWithFleet(t *testing.T) {
	const nodes = 8
	cfg := DefaultConfig(nodes)
	cfg.Seed, cfg.Observers = 5, nodes
	cfg.Network.Loss = 0.03
	dests := ScaleDests(5, 20)
	cfg.Workload = &scaleWorkload{seed: 5, dests: dests, per: 30}
	s, err := New(cfg)
	require.NoError(t, err)
	sw := cfg.Tracker.SubWindow()
	keysOf := func(i int) []tracker.BatchKey {
		var ks []tracker.BatchKey
		for slot := range s.store {
			for o, sb := range s.store[slot] {
				if sb != nil && s.nodes[i].held.has(s.bit(slot, int32(o))) {
					ks = append(ks, sb.key)
				}
			}
		}
		if len(ks) == 0 {
			return []tracker.BatchKey{}
		}
		return codec.SortKeys(ks)
	}
	identical := 0
	for k := range 16 {
		// Check mid-epoch (losses pending) and just before the next boundary.
		for _, at := range []time.Duration{sw / 3, sw - time.Millisecond} {
			require.NoError(t, s.Run(time.Duration(k)*sw+at))
			now := s.Now()
			for i := range nodes {
				fk := append([]tracker.BatchKey{}, codec.SortKeys(s.Fleet(i).Keys(now))...)
				require.Equal(t, keysOf(i), fk, "node %d at %v", i, s.Elapsed())
				j := (i + 1) % nodes
				var want []tracker.BatchKey
				for _, key := range keysOf(j) {
					if _, ok := slices.BinarySearchFunc(fk, key, codec.CompareKeys); !ok {
						want = append(want, key)
					}
				}
				got := s.Fleet(i).Missing(keysOf(j), now)
				if len(want) == 0 {
					require.Empty(t, got)
				} else {
					require.Equal(t, want, codec.SortKeys(got))
				}
			}
			if at == sw-time.Millisecond && s.Unconverged(0, s.Elapsed()) == 0 {
				identical++
				for _, d := range dests {
					v0 := s.Fleet(0).ViewCounts(d.Name, now)
					for i := 1; i < nodes; i++ {
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

// TestBitset covers the small set type.
func TestBitset(t *testing.T) {
	b := newBitset(200)
	for _, i := range []int{0, 63, 64, 199} {
		b.set(i)
	}
	require.Equal(t, 4, b.count())
	require.True(t, b.has(63))
	b.clearRange(60, 70)
	require.False(t, b.has(63))
	require.False(t, b.has(64))
	require.True(t, b.has(0))
	c := b.clone()
	c.set(100)
	require.False(t, b.has(100))
}

// TestConfigValidate checks that bad configurations are refused with every
// problem named.
func TestConfigValidate(t *testing.T) {
	cfg := DefaultConfig(3)
	cfg.Observers = 4
	cfg.Network.Loss = 1
	cfg.Protocol.SealJitter = -1
	err := cfg.Validate()
	require.ErrorContains(t, err, "Observers")
	require.ErrorContains(t, err, "Loss")
	require.ErrorContains(t, err, "SealJitter")
	_, err = New(cfg)
	require.Error(t, err)
	require.NoError(t, DefaultConfig(3).Validate())
}
