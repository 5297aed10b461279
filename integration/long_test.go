package integration

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
	"github.com/adaptivetimeout/adaptivetimeout/node"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// countingTransport counts every byte a member puts on the wire: packets
// it writes, and both directions of the streams it dials (what the other
// end writes back on them is the other member's, but the fleet's total is
// the same).
type countingTransport struct {
	memberlist.Transport
	bytes *atomic.Uint64
}

func (c countingTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	c.bytes.Add(uint64(len(b)))
	return c.Transport.WriteTo(b, addr)
}

func (c countingTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	conn, err := c.Transport.DialTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: conn, bytes: c.bytes}, nil
}

type countingConn struct {
	net.Conn
	bytes *atomic.Uint64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.bytes.Add(uint64(n))
	return n, err
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.bytes.Add(uint64(n))
	return n, err
}

// bindLoopback binds memberlist's UDP+TCP transport on 127.0.0.1 with a
// port the kernel picks (retrying when the UDP port is taken).
func bindLoopback(t testing.TB) *memberlist.NetTransport {
	t.Helper()
	var err error
	for range 10 {
		var nt *memberlist.NetTransport
		nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}, BindPort: 0})
		if err == nil {
			return nt
		}
	}
	require.NoError(t, err)
	return nil
}

// percentile returns the q-quantile of ds (nearest rank).
func percentile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := max(int(float64(len(s))*q+0.999999)-1, 0)
	return s[min(i, len(s)-1)]
}

// TestLongLoopback50 (opt-in: ATNODE_LONG=1) runs 50 nodes in this process
// on real 127.0.0.1 UDP and TCP sockets, encrypted and labelled, with
// memberlist's LAN timing and the default dissemination settings (protocol
// v2), on the default 60 s window of 6 s sub-windows. Every node records
// into 20 destinations all the time. For 10 epochs it measures the
// seal-to-convergence time: from the end of an epoch until every node holds
// the same aggregate of it for every destination, all 50 nodes' records
// merged (the seal jitter, up to 500 ms, and the publish delay included);
// and the bytes each node puts on the wire per second (memberlist's probes
// and gossip included). It checks that every epoch converges and that the
// fleet views are then bucket for bucket identical on every node.
//
// ATNODE_LONG_PROTOCOL=1 runs protocol v1 instead, for comparison, on a
// 10 s window of 1 s sub-windows and 30 epochs: under v1 every node holds
// the whole fleet's window, so 50 nodes in one process hold 50 times that
// (at 60 s and 50 destinations about 1.7 GB, and the garbage collector
// then stalls every node at once).
//
// Budgets come from the protocols' periods, with room for a machine shared
// by other work (2 cores, several processes): the join is given two
// minutes (memberlist's suspicion timeout at 50 members is about 25 s),
// and an epoch as long as the views hold it (v2: an aggregate three
// sub-windows after its epoch ends; v1: a batch for the window), less
// half a sub-window for the failure report. Beyond that an epoch cannot
// converge any more: on a machine too loaded to carry the messages (in a
// failed run the process got 0.3 of a core, and messages waited 10–30 s
// in the send queues) the test fails, saying so.
func TestLongLoopback50(t *testing.T) {
	if os.Getenv("ATNODE_LONG") != "1" {
		t.Skip("opt-in: set ATNODE_LONG=1 (about a minute; reports convergence and bandwidth)")
	}
	const (
		nodes = 50
		dests = 20
	)
	v1 := os.Getenv("ATNODE_LONG_PROTOCOL") == "1"
	measure := int64(10) // epochs
	if v1 {
		measure = 30
	}
	key, err := cluster.GenerateKey()
	require.NoError(t, err)
	keyFile := filepath.Join(t.TempDir(), "cluster.key")
	require.NoError(t, os.WriteFile(keyFile, []byte(key+"\n"), 0o600))

	logBuf := &testutil.SyncBuffer{}
	longLog := slog.New(slog.NewTextHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	defer func() { // warnings and errors are part of the report
		if out := logBuf.String(); out != "" {
			t.Logf("%d bytes of warnings and errors; the first:\n%s", len(out), out[:min(len(out), 4000)])
		}
	}()
	var wire atomic.Uint64
	var ns []*node.Node
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, n := range ns {
			wg.Go(func() { _ = n.Close() })
		}
		wg.Wait()
	})
	start := time.Now()
	for i := range nodes {
		tr := countingTransport{Transport: bindLoopback(t), bytes: &wire}
		cfg := node.DefaultConfig()
		cfg.Name = fmt.Sprintf("n%02d", i)
		cfg.HTTP = ""
		cfg.Cluster.Bind = "127.0.0.1:0"
		cfg.Cluster.KeyFile, cfg.Cluster.Label = keyFile, "long"
		if i > 0 {
			cfg.Cluster.Seeds = cluster.AddrList{ns[0].GossipAddr()}
		}
		cfg.Cluster.Transport = tr
		if v1 {
			cfg.Cluster.Gossip.Protocol = 1
			cfg.Tracker.Window, cfg.SubWindow = 10*time.Second, time.Second
		}
		n, err := node.New(cfg, longLog, nil)
		require.NoError(t, err)
		ns = append(ns, n)
		require.NoError(t, n.Start(t.Context()))
	}
	eventuallyWithin(t, 2*time.Minute, "all 50 see each other", func() (bool, string) {
		for _, n := range ns {
			if a := n.Cluster().NumAlive(); a != nodes {
				return false, fmt.Sprintf("%s sees %d", n.Name(), a)
			}
		}
		return true, ""
	})
	t.Logf("50 nodes up and agreed in %v", time.Since(start))
	tc := ns[0].Fleet().Config().Tracker

	// Record all the time: every 50 ms one sample per node and destination
	// (50 nodes × 20 destinations × 20 samples a second), for as long as
	// the measurement and the checks after it may last.
	rng := newRand(50, 50)
	ticks := int((time.Duration(measure+3)*tc.SubWindow() + tc.Window + 2*testutil.WaitWide) / (50 * time.Millisecond))
	stop := testutil.Every(50*time.Millisecond, ticks, func(int) {
		for i, n := range ns {
			for d := range dests {
				base := 5 + float64(d%10)*3 + float64(i%5)
				n.Record(fmt.Sprintf("dest-%02d", d), time.Duration((base+rng.ExpFloat64()*base)*float64(time.Millisecond)))
			}
		}
	})
	defer stop()

	// Protocol v1: every node holds every node's batch of e. Protocol v2:
	// every node holds, for every destination, the aggregate of e with the
	// same coverage, and it merged one record of e from every node.
	v2 := ns[0].Cluster().Protocol().V2()
	t.Logf("protocol v2: %v", v2)
	require.Equal(t, !v1, v2, "every member up speaks v2: the cluster runs it")
	// An epoch must converge while the views still hold it: an aggregate
	// three sub-windows after its epoch ends (v2), a batch a window (v1);
	// the failure report needs half a sub-window of that.
	limit := 3*tc.SubWindow() - tc.SubWindow()/2
	if v1 {
		limit = tc.Window - tc.SubWindow()/2
	}
	holdsAll := func(e int64) bool {
		if v2 {
			for d := range dests {
				dest := fmt.Sprintf("dest-%02d", d)
				want, ok := ns[0].Fleet().AggregateCoverage(dest, e)
				if !ok {
					return false
				}
				if a, ok := ns[0].Fleet().LookupAggregate(dest, e); !ok || a.Peers != nodes {
					return false
				}
				for _, n := range ns[1:] {
					if c, ok := n.Fleet().AggregateCoverage(dest, e); !ok || c != want {
						return false
					}
				}
			}
			return true
		}
		for _, n := range ns {
			for _, o := range ns {
				if _, ok := n.Fleet().Lookup(tracker.BatchKey{Origin: o.Name(), Boot: o.BootID(), Epoch: e}); !ok {
					return false
				}
			}
		}
		return true
	}
	// Measure from the first whole epoch recorded on.
	first := tc.Epoch(time.Now()) + 2
	time.Sleep(time.Until(tc.EpochStart(first)))
	wire0, t0 := wire.Load(), time.Now()
	var payload0 uint64
	for _, n := range ns {
		payload0 += n.Cluster().GossipStats().BytesOut
	}
	var conv []time.Duration
	pending := map[int64]bool{}
	for next := first; int64(len(conv)) < measure; {
		now := time.Now()
		for ; next < first+measure && !now.Before(tc.EpochStart(next+1)); next++ {
			pending[next] = true
		}
		for e := range pending {
			if holdsAll(e) {
				conv = append(conv, time.Since(tc.EpochStart(e+1)))
				delete(pending, e)
			} else if time.Since(tc.EpochStart(e+1)) > limit {
				if v2 {
					t.Logf("epoch %d: %s", e, aggregateSpread(ns, dests, e, nodes))
				} else {
					missing := map[string]int{}
					for _, n := range ns {
						for _, o := range ns {
							if _, ok := n.Fleet().Lookup(tracker.BatchKey{Origin: o.Name(), Boot: o.BootID(), Epoch: e}); !ok {
								missing[n.Name()+"<-"+o.Name()]++
							}
						}
					}
					t.Logf("missing %d: %v", len(missing), missing)
				}
				t.Logf("all nodes: %s", gossipTotals(ns))
				t.Fatalf("epoch %d did not converge within %v", e, limit)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(t0)
	wireBytes := wire.Load() - wire0
	var payload uint64
	for _, n := range ns {
		payload += n.Cluster().GossipStats().BytesOut
	}
	payload -= payload0

	perNode := func(b uint64) float64 { return float64(b) / nodes / elapsed.Seconds() / 1024 }
	t.Logf("50 nodes × %d destinations, %d epochs of %v: seal-to-convergence p50 %v, p99 %v, max %v (seal jitter ≤ 500 ms included)",
		dests, measure, tc.SubWindow(), percentile(conv, 0.5).Round(time.Millisecond), percentile(conv, 0.99).Round(time.Millisecond), slices.Max(conv).Round(time.Millisecond))
	t.Logf("bytes per node per second: %.1f KiB on the wire (memberlist included, encrypted), %.1f KiB of gossip payload",
		perNode(wireBytes), perNode(payload))
	t.Logf("all nodes: %s", gossipTotals(ns))

	// Once the epoch before the current one converged, every node's view
	// (of the same instant) is bucket for bucket the same.
	var at time.Time
	eventually(t, "an instant with every epoch in view converged", func() (bool, string) {
		at = time.Now()
		e := tc.Epoch(at)
		return holdsAll(e-1) && tc.Epoch(time.Now()) == e, "not yet"
	})
	for d := range dests {
		dest := fmt.Sprintf("dest-%02d", d)
		want := ns[0].Fleet().ViewCounts(dest, at)
		require.NotNil(t, want)
		for _, n := range ns[1:] {
			require.Equal(t, want, n.Fleet().ViewCounts(dest, at), "%s: view of %s", n.Name(), dest)
		}
	}
	est, err := ns[7].Estimate("dest-03", 0.99)
	require.NoError(t, err)
	require.Equal(t, nodes, est.Peers)
	t.Logf("estimate of dest-03 on n07: %d ms from %d samples, %d peers, effective %.1f", est.ValueMillis, est.Samples, est.Peers, est.EffectivePeers)
}

// aggregateSpread says, per destination, how many nodes hold the
// aggregate of epoch e, in how many coverages, and the largest peer count
// (protocol v2): what a failed convergence lacked.
func aggregateSpread(ns []*node.Node, dests int, e int64, peers int) string {
	var b strings.Builder
	for d := range dests {
		dest := fmt.Sprintf("dest-%02d", d)
		held, top := 0, 0
		covs := map[tracker.Coverage]int{}
		for _, n := range ns {
			if a, ok := n.Fleet().LookupAggregate(dest, e); ok {
				held++
				covs[a.Coverage]++
				top = max(top, a.Peers)
			}
		}
		if held != len(ns) || len(covs) != 1 || top != peers {
			fmt.Fprintf(&b, "%s held by %d, %d coverages, peers %d; ", dest, held, len(covs), top)
		}
	}
	return b.String()
}

// gossipTotals sums the nodes' gossip counters that explain a failed
// convergence: messages out by type, drops, refusals, seal-to-receive.
func gossipTotals(ns []*node.Node) string {
	out, rejected := map[string]uint64{}, map[string]uint64{}
	var drops, errs uint64
	var recv cluster.Histogram
	for _, n := range ns {
		g := n.Cluster().GossipStats()
		for k, v := range g.MessagesOut {
			out[k] += v
		}
		for k, v := range g.Rejected {
			rejected[k] += v
		}
		drops += g.SendDrops
		errs += g.SendErrors
		if recv.Counts == nil {
			recv = g.SealToReceive
			recv.Counts = slices.Clone(recv.Counts)
		} else {
			for i, c := range g.SealToReceive.Counts {
				recv.Counts[i] += c
			}
		}
	}
	return fmt.Sprintf("messages out %v, send drops %d, send errors %d, rejected %v, seal to receive (s) bounds %v counts %v",
		out, drops, errs, rejected, recv.Bounds, recv.Counts)
}
