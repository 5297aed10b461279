package cluster

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/internal/memtransport"
	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

func testDests(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("dest-%03d", i)
	}
	return out
}

// union is the exact union of what recorders recorded: a reference
// tracker that records every sample, and the epochs recorded.
type union struct {
	cfg    tracker.Config
	ref    *tracker.Tracker[string]
	epochs []int64
}

func newUnion(t *testing.T, cfg tracker.Config) *union {
	ref, err := tracker.New[string](cfg)
	require.NoError(t, err)
	return &union{cfg: cfg, ref: ref}
}

func (u *union) counts(t *testing.T) func(dest string, now time.Time) []uint64 {
	return func(d string, now time.Time) []uint64 { return unionCounts(t, u.cfg, u.ref, u.epochs, d, now) }
}

// converge records one epoch of samples on recorders (also into u), waits
// until every node in nodes holds every recorder's batch of it, and checks
// that every node's view of every destination is bucket-identical to the
// exact union. It returns the epoch.
//
// The views are compared once every node sees every other up: a node
// excludes from its view a member it declared dead, and on a starved
// machine (-race, twice the cores' load) the failure detector declares a
// live member dead for a second or so now and then, until it refutes. The
// views must then come back to the union, not merely hold the batches.
func converge(t *testing.T, u *union, nodes, recorders []*gnode, dests []string, seed uint64) int64 {
	t.Helper()
	e := recordEpoch(t, u.cfg, recorders, u.ref, dests, randomSamples(seed, 50))
	u.epochs = append(u.epochs, e)
	took := eventuallyHolds(t, "every node holds every batch of the epoch", nodes, recorders, e)
	t.Logf("epoch %d: all %d batches on all %d nodes %v after recording", e, len(recorders), len(nodes), took)
	eventuallyUnion(t, nodes, dests, u.counts(t))
	return e
}

// eventuallyUnion waits until every node sees every other up and every
// node's view of every dest equals want (see converge).
func eventuallyUnion(t *testing.T, nodes []*gnode, dests []string, want func(dest string, now time.Time) []uint64) {
	t.Helper()
	eventuallyUnionOf(t, nodes, nodes, dests, want)
}

// eventuallyUnionOf is eventuallyUnion for the views of viewers only, each
// seeing every member of all up.
func eventuallyUnionOf(t *testing.T, all, viewers []*gnode, dests []string, want func(dest string, now time.Time) []uint64) {
	t.Helper()
	var why string
	testutil.EventuallyWhy(t, "every node's view is the exact union", func() bool {
		var ok bool
		if ok = allSee(viewers, all); !ok {
			why = "members: a node does not see every other up"
		} else {
			ok, why = viewsEqual(viewers, dests, want)
		}
		return ok
	}, func() string { return why })
}

func TestGossipViewsEqualExactUnion(t *testing.T) {
	t.Parallel()
	o := longLived(defaultGossipOpts())
	_, nodes := gossipCluster(t, 11, 5, o)
	dests := testDests(8)
	converge(t, newUnion(t, o.tracker), nodes, nodes, dests, 1)

	for _, n := range nodes {
		s := n.GossipStats()
		require.Equal(t, uint64(4), s.Outcomes["new"], "%s: one new batch from each of 4 peers", n.MemberName())
		// A digest or pull from a member this node had declared dead is
		// refused as unknown_sender (see converge); nothing else is.
		delete(s.Rejected, RejectUnknownSender)
		require.Empty(t, s.Rejected, n.MemberName())
		require.Equal(t, uint64(1), s.Seals)
		require.GreaterOrEqual(t, s.BatchesOut, uint64(4))
		require.Equal(t, uint64(4), s.SealToReceive.Count)
		require.Positive(t, s.BytesOut)
		require.Positive(t, s.BytesIn)
		require.Positive(t, s.MessagesOut["batch"])
		requireBytesByType(t, n.MemberName(), s)
	}
}

// requireBytesByType checks the per-type byte counts: they sum to the
// totals, and a type has bytes exactly when it has messages.
func requireBytesByType(t *testing.T, who string, s GossipStats) {
	t.Helper()
	require.Equal(t, s.BytesIn, sumCounts(s.BytesInByType), "%s: bytes in by type sum to the total", who)
	require.Equal(t, s.BytesOut, sumCounts(s.BytesOutByType), "%s: bytes out by type sum to the total", who)
	require.ElementsMatch(t, slices.Collect(maps.Keys(s.MessagesIn)), slices.Collect(maps.Keys(s.BytesInByType)), who)
	require.ElementsMatch(t, slices.Collect(maps.Keys(s.MessagesOut)), slices.Collect(maps.Keys(s.BytesOutByType)), who)
	for typ, n := range s.BytesOutByType {
		require.Positive(t, n, "%s: %s", who, typ)
	}
}

func sumCounts(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

func TestGossipRepairsLossDuplicationDelay(t *testing.T) {
	t.Parallel()
	o := longLived(defaultGossipOpts())
	faults := &faultySender{rng: rand.New(rand.NewPCG(7, 7)), drop: 0.3, dup: 0.3, maxDelay: 50 * time.Millisecond}
	o.wrap = faults.wrap
	nw, nodes := gossipCluster(t, 12, 5, o)
	// memberlist's own packets are duplicated and jittered too.
	nw.SetFaults(memtransport.Faults{Duplicate: 0.2, Jitter: 10 * time.Millisecond})
	faults.set(true)
	dests := testDests(8)
	u := newUnion(t, o.tracker)
	for i := range 3 {
		converge(t, u, nodes, nodes, dests, uint64(100+i))
	}
	var repairs, dups uint64
	for _, n := range nodes {
		s := n.GossipStats()
		repairs += s.Repairs
		dups += s.Outcomes["duplicate"]
		require.Zero(t, s.Rejected[RejectConflict])
		requireBytesByType(t, n.MemberName(), s) // digests and pulls too
	}
	t.Logf("repairs %d, duplicates %d", repairs, dups)
	require.Positive(t, repairs, "lost batches came back through anti-entropy")
	require.Positive(t, dups, "duplicated batches were recognised")
}

func TestGossipPartitionHeals(t *testing.T) {
	t.Parallel()
	o := longLived(defaultGossipOpts())
	nw, nodes := gossipCluster(t, 13, 6, o)
	a, b := nodes[:3], nodes[3:]
	partition(nw, a, b)
	eventually(t, "each side sees only itself", func() bool { return allSee(a, a) && allSee(b, b) })

	cfg := o.tracker
	ref, err := tracker.New[string](cfg)
	require.NoError(t, err)
	dests := testDests(4)
	e := recordEpoch(t, cfg, nodes, ref, dests, randomSamples(3, 40))
	eventually(t, "each side holds its own side's batches", func() bool { return holdsEpoch(a, a, e) && holdsEpoch(b, b, e) })
	// Anti-entropy has had a few rounds while each side converged; just
	// before the heal, no node holds anything from across the cut.
	for _, m := range a {
		for _, o := range b {
			require.False(t, holdsEpoch([]*gnode{m}, []*gnode{o}, e), "%s holds %s's batch across the cut", m.Name(), o.Name())
			require.False(t, holdsEpoch([]*gnode{o}, []*gnode{m}, e), "%s holds %s's batch across the cut", o.Name(), m.Name())
		}
	}
	for _, n := range nodes {
		require.Equal(t, uint64(2), n.GossipStats().Outcomes["new"], "%s: only its own side's two batches", n.Name())
	}

	nw.Heal()
	took := testutil.EventuallyWhy(t, "after the heal every node holds every batch", func() bool {
		return allSee(nodes, nodes) && holdsEpoch(nodes, nodes, e)
	}, func() string {
		if !allSee(nodes, nodes) {
			return "members: a node does not see every other up"
		}
		_, why := holdsEpochWhy(nodes, nodes, e)
		return why
	})
	t.Logf("partition heal: converged %v after the heal", took)
	eventuallyUnion(t, nodes, dests, func(d string, now time.Time) []uint64 { return unionCounts(t, cfg, ref, []int64{e}, d, now) })
}

func TestGossipCrashedOriginExcluded(t *testing.T) {
	t.Parallel()
	o := defaultGossipOpts()
	// 1 s sub-windows in a 32 s window: the epoch must stay in view and
	// held for as long as failure detection takes on a loaded machine
	// (8 s with the default grid was too short once, under -race at twice
	// the cores' load).
	o.tracker.Window, o.tracker.SubWindows = 32*time.Second, 32
	nw, nodes := gossipCluster(t, 14, 5, o)
	cfg := o.tracker
	ref, err := tracker.New[string](cfg)
	require.NoError(t, err)
	rest, victim := nodes[:4], nodes[4]
	dests := testDests(4)
	// The survivors' samples go into ref; the victim's do not. Both in
	// one epoch: recorded one after the other, the victim's could fall
	// into the next epoch on a loaded machine, and its batch of e would
	// never exist.
	e := recordEpochs(t, cfg, dests,
		recording{nodes: rest, ref: ref, samples: randomSamples(4, 40)},
		recording{nodes: []*gnode{victim}, samples: randomSamples(5, 40)})
	eventuallyHolds(t, "every batch everywhere", nodes, nodes, e)

	require.True(t, nw.Crash(victim.tr.Addr()))
	took := eventually(t, "the crashed origin is out of every view", func() bool {
		ok, _ := viewsEqual(rest, dests, func(d string, now time.Time) []uint64 { return unionCounts(t, cfg, ref, []int64{e}, d, now) })
		return ok
	})
	t.Logf("crash: origin excluded everywhere %v after the crash", took)
	for _, n := range rest {
		_, ok := n.fleet.Lookup(tracker.BatchKey{Origin: victim.Name(), Boot: victim.BootID(), Epoch: e})
		require.True(t, ok, "a dead origin's batches are kept until they age out")
	}
}

func TestGossipJoinerCatchesUp(t *testing.T) {
	t.Parallel()
	o := longLived(defaultGossipOpts())
	o.gossip.AntiEntropyInterval = time.Hour // only the bulk sync can catch the joiner up
	nw, nodes := gossipCluster(t, 15, 4, o)
	cfg := o.tracker
	ref, err := tracker.New[string](cfg)
	require.NoError(t, err)
	dests := testDests(6)
	var epochs []int64
	for i := range 3 {
		e := recordEpoch(t, cfg, nodes, ref, dests, randomSamples(uint64(20+i), 30))
		epochs = append(epochs, e)
		eventually(t, "the epoch everywhere", func() bool { return holdsEpoch(nodes, nodes, e) })
	}

	joiner := startGossipNode(t, nw, "joiner", 0x10111, o, nodes[0].tr.Addr())
	all := append(append([]*gnode(nil), nodes...), joiner)
	took := eventually(t, "the joiner holds the whole window", func() bool {
		for _, e := range epochs {
			if !holdsEpoch([]*gnode{joiner}, nodes, e) {
				return false
			}
		}
		return true
	})
	t.Logf("bulk sync: joiner caught up on %d batches in %v", len(epochs)*len(nodes), took)
	eventuallyUnion(t, all, dests, func(d string, now time.Time) []uint64 { return unionCounts(t, cfg, ref, epochs, d, now) })
	require.GreaterOrEqual(t, joiner.GossipStats().Repairs, uint64(len(epochs)*len(nodes)))
}

// TestGossipConvergenceFigures runs a cluster whose every node records
// latencies to 100 destinations all the time, and measures, for 20
// consecutive epochs, the time from the end of the epoch until every node
// holds every node's batch of it (its fleet view is then bucket-identical
// everywhere), and the gossip bytes each node sends per second. It fails if
// more than one epoch ages out of the fleets (≈ 5 s at this grid) before
// every node held it — one is tolerated, as a starved machine under -race
// can miss the anti-entropy rounds of one epoch — unless the run shows the
// cluster fell behind the grid (batches refused as stale_epoch), which
// happens at several times the cores' load and measures the machine; with
// ATNODE_LONG=1 the bound holds regardless. The views' exactness is tested
// elsewhere. The figures are logged (run with -v). 5 nodes always; 20
// nodes with ATNODE_LONG=1.
func TestGossipConvergenceFigures(t *testing.T) {
	t.Parallel()
	sizes := []int{5}
	if os.Getenv("ATNODE_LONG") == "1" {
		sizes = append(sizes, 20)
	}
	for _, n := range sizes {
		t.Run(fmt.Sprintf("%d_nodes", n), func(t *testing.T) {
			measureConvergence(t, n, 100, 20)
		})
	}
}

func measureConvergence(t *testing.T, n, ndest, epochs int) {
	o := defaultGossipOpts()
	o.tracker.Window, o.tracker.SubWindows = 5*time.Second, 20 // 250 ms sub-windows
	o.gossip.SealJitter = 100 * time.Millisecond
	o.gossip.AntiEntropyInterval = time.Second
	_, nodes := gossipCluster(t, 17, n, o)
	cfg := o.tracker
	dests := testDests(ndest)

	// Every node records to every destination, all the time: every 20 ms
	// for as long as the measurement may last (its deadline below). Each
	// round is stamped with one instant and no node seals during it
	// (gnode.recording), so every node has a batch of each epoch recorded
	// in; an epoch with no round at all (a recorder starved for a whole
	// sub-window) has no batch anywhere and is not measured.
	rng := rand.New(rand.NewPCG(1, 2))
	var recMu sync.Mutex
	recorded := map[int64]bool{}
	ticks := int((time.Duration(epochs+3)*cfg.SubWindow() + 2*testutil.WaitWide) / (20 * time.Millisecond))
	stop := testutil.Every(20*time.Millisecond, ticks, func(int) {
		for _, nd := range nodes {
			nd.recording.Lock()
		}
		now := time.Now()
		recMu.Lock()
		recorded[cfg.Epoch(now)] = true
		recMu.Unlock()
		for i, nd := range nodes {
			for d, dest := range dests {
				nd.local.RecordMillis(dest, uint64(5+i+d/4)+uint64(rng.ExpFloat64()*20), now)
			}
		}
		for _, nd := range nodes {
			nd.recording.Unlock()
		}
	})
	defer stop()
	wasRecorded := func(e int64) bool {
		recMu.Lock()
		defer recMu.Unlock()
		return recorded[e]
	}

	first := cfg.Epoch(time.Now()) + 2
	bytesAt := func() uint64 {
		var b uint64
		for _, nd := range nodes {
			b += nd.GossipStats().BytesOut
		}
		return b
	}
	var b0 uint64
	var t0 time.Time
	conv := make(map[int64]time.Duration)
	var lost []int64                      // aged out before every node held them
	var lostWhy []string                  // what was missing of each, when it aged out
	var unrecorded []int64                // epochs the recorder never ran in
	accepted := int64(cfg.SubWindows) + 1 // a fleet accepts epoch e until E = e+N+1
	deadline := time.Now().Add(time.Duration(epochs)*cfg.SubWindow() + testutil.WaitWide)
	for len(conv)+len(lost)+len(unrecorded) < epochs {
		now := time.Now()
		if !now.Before(deadline) {
			var agg GossipStats
			agg.Rejected, agg.Outcomes = map[string]uint64{}, map[string]uint64{}
			for _, nd := range nodes {
				g := nd.GossipStats()
				agg.Seals += g.Seals
				agg.BatchesIn += g.BatchesIn
				agg.SendDrops += g.SendDrops
				agg.SendErrors += g.SendErrors
				for k, v := range g.Rejected {
					agg.Rejected[k] += v
				}
				for k, v := range g.Outcomes {
					agg.Outcomes[k] += v
				}
			}
			require.Failf(t, "not converged", "epochs converged: %d of %d, lost %v; gossip totals: seals %d, batches in %d, outcomes %v, rejected %v, send drops %d, send errors %d",
				len(conv), epochs, lost, agg.Seals, agg.BatchesIn, agg.Outcomes, agg.Rejected, agg.SendDrops, agg.SendErrors)
		}
		if t0.IsZero() && !now.Before(cfg.EpochStart(first)) {
			b0, t0 = bytesAt(), now
		}
		for e := first; e < first+int64(epochs); e++ {
			end := cfg.EpochStart(e + 1)
			if _, done := conv[e]; done || slices.Contains(lost, e) || slices.Contains(unrecorded, e) || now.Before(end) {
				continue
			}
			if !wasRecorded(e) {
				unrecorded = append(unrecorded, e)
			} else if holdsEpoch(nodes, nodes, e) {
				conv[e] = time.Since(end)
			} else if cfg.Epoch(now) >= e+accepted {
				_, why := holdsEpochWhy(nodes, nodes, e)
				lost = append(lost, e)
				lostWhy = append(lostWhy, why)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Batches that arrived after their epoch had left the accepted range:
	// the cluster ran behind the grid (on a machine at several times its
	// cores' load, under -race, the nodes' send queues back up by seconds).
	// Such a run measures the machine, not dissemination: its lost epochs
	// are logged, and the bound is kept for runs that kept up, and for
	// every ATNODE_LONG=1 run (a measurement, on a quiet machine).
	var late uint64
	for _, nd := range nodes {
		late += nd.GossipStats().Rejected[RejectStaleEpoch]
	}
	if len(lost) > 1 && late > 0 && os.Getenv("ATNODE_LONG") != "1" {
		t.Logf("machine too slow for the grid: %d of %d epochs aged out before every node held them, %d batches arrived too late to be accepted; lost: %s",
			len(lost), epochs, late, strings.Join(lostWhy, " | "))
	} else {
		require.LessOrEqual(t, len(lost), 1, "epochs %v aged out before every node held them: %s", lost, strings.Join(lostWhy, " | "))
	}
	if len(conv) == 0 {
		return // nothing to measure
	}
	elapsed := time.Since(t0)
	perNode := float64(bytesAt()-b0) / float64(n) / elapsed.Seconds()

	var ds []time.Duration
	for _, d := range conv {
		ds = append(ds, d)
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	var s GossipStats
	for _, nd := range nodes {
		g := nd.GossipStats()
		s.SendDrops += g.SendDrops
		s.Repairs += g.Repairs
		s.BatchesOut += g.BatchesOut
	}
	t.Logf("%d nodes × %d destinations, %v sub-windows, jitter < %v: seal-to-convergence over %d epochs p50 %v p99 %v max %v; "+
		"gossip sent %.0f B/s per node (%.0f B per node per epoch); repairs %d, send drops %d; epochs lost %d, not recorded in %d",
		n, ndest, cfg.SubWindow(), o.gossip.SealJitter, len(ds), q(0.5), q(0.99), ds[len(ds)-1],
		perNode, perNode*cfg.SubWindow().Seconds(), s.Repairs, s.SendDrops, len(lost), len(unrecorded))
}
