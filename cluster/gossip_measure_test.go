package cluster

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
)

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
