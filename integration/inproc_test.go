package integration

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/internal/memtransport"
	"github.com/adaptivetimeout/adaptivetimeout/node"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// The in-process grid: 500 ms sub-windows, so an epoch seals twice a
// second. The exact-union tests run on unionWindow, the longest window of
// that sub-window (255 of them, 127.5 s): an epoch they record must stay
// in the fleet views through every wait that follows it (up to waitWide
// each; the partition test has four after its recording, 120 s), or the
// union can no longer be reached and the wait fails for that alone. On a
// 12 s window a loaded machine (load 10 on 2 cores, under -race) let the
// partition test's epoch slide out before the heal's wait ended. memWindow
// (N = 24, an epoch in the view for 11.5 s) is for the tests that need a
// clock off by more than the window (TestClockBehindReported: 20 s).
const (
	memSubWindow = 500 * time.Millisecond
	memWindow    = 12 * time.Second
	unionWindow  = 255 * memSubWindow
)

// memTiming is the in-process clusters' memberlist timing:
// cluster.FastTiming with a failure detector slow enough for a loaded
// machine. FastTiming's (100 ms probe timeout, a suspect declared dead
// after 600 ms) declared live members dead over and over on a 2-core
// machine at load 10 under -race, and every false death changes the v2
// owners and takes the origin out of the views until it is back: the
// exact unions were not reached within waitWide. Here a member must miss
// a probe's ack for 300 ms and then fail to refute its suspicion for
// SuspicionMult × ProbeInterval = 1.5 s (up to 9 s without a confirmation)
// before it is declared dead; a partition is still detected within a few
// seconds (each member probed once in N − 1 probe intervals, then the
// suspicion confirmed by the side's other members).
func memTiming() cluster.Timing {
	t := cluster.FastTiming()
	t.ProbeInterval, t.ProbeTimeout, t.SuspicionMult = 500*time.Millisecond, 300*time.Millisecond, 3
	return t
}

// memNode is a node on an in-memory network, with its clock's offset
// from the wall clock.
type memNode struct {
	*node.Node
	tr    *memtransport.Transport
	skew  time.Duration
	clock func(skew time.Duration) time.Time // its cluster's (memCluster.clock)
}

// now is the node's clock (its Config.Clock).
func (m *memNode) now() time.Time { return m.clock(m.skew) }

// epoch is the node's current epoch.
func (m *memNode) epoch(cfg tracker.Config) int64 { return cfg.Epoch(m.now()) }

// gossip returns the node's dissemination counters.
func (m *memNode) gossip() cluster.GossipStats { return m.Cluster().GossipStats() }

// memCluster is a fleet of nodes on one in-memory network; node 0 is every
// other node's seed.
type memCluster struct {
	t      *testing.T
	nw     *memtransport.Network
	cfg    tracker.Config // the nodes' tracker configuration
	nodes  []*memNode
	seed   uint64
	proto  int           // the dissemination protocol every node runs (Gossip.Protocol)
	window time.Duration // the nodes' Tracker.Window (unionWindow unless a test needs less)

	// While a recording holds the nodes' clocks (hold), the wall clock
	// instant it started at; zero: not held.
	clockMu sync.RWMutex
	held    time.Time
	grid    tracker.Config // cfg when held (the nodes read it while the test adds nodes)
}

// clock returns the clock of a node skew off the wall clock: time.Now
// plus skew, except that while held it stops at the last instant of the
// node's epoch at the held instant.
func (c *memCluster) clock(skew time.Duration) time.Time {
	c.clockMu.RLock()
	defer c.clockMu.RUnlock()
	now := time.Now().Add(skew)
	if c.held.IsZero() {
		return now
	}
	last := c.grid.EpochStart(c.grid.Epoch(c.held.Add(skew)) + 1).Add(-time.Nanosecond)
	if now.After(last) {
		return last
	}
	return now
}

// hold holds the nodes' clocks in their epochs of the current instant, if
// at(now) holds, and returns that instant and whether it did: a recording
// that outlasts a node's epoch (a loaded machine stalls the test for
// longer than the quarter sub-window midEpoch leaves: load 10 on 2 cores,
// under -race) still falls into that one epoch, its clock waiting at the
// epoch's end; release lets it run on to where the real one is by then,
// as if the node had stalled meanwhile. Every reading before hold was at
// or before the instant (clock reads time.Now under the lock hold takes),
// so no node's clock goes back.
func (c *memCluster) hold(at func(now time.Time) bool) (time.Time, bool) {
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	now := time.Now()
	if !c.held.IsZero() || !at(now) {
		return now, false
	}
	c.held, c.grid = now, c.cfg
	return now, true
}

// release lets the nodes' clocks run on.
func (c *memCluster) release() {
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	c.held = time.Time{}
}

// newMemCluster starts n nodes n0…n(n−1) with the given clock offsets (nil:
// none) and waits until every node lists all of them alive.
func newMemCluster(t *testing.T, seed uint64, n int, skew func(i int) time.Duration) *memCluster {
	t.Helper()
	return newMemClusterProto(t, seed, n, skew, cluster.ProtocolV2)
}

// newMemClusterProto is newMemCluster with every node on protocol proto (1
// or 2).
func newMemClusterProto(t *testing.T, seed uint64, n int, skew func(i int) time.Duration, proto int) *memCluster {
	t.Helper()
	return newMemClusterWindow(t, seed, n, skew, proto, unionWindow)
}

// newMemClusterWindow is newMemClusterProto with a window of window (a
// whole number of memSubWindow) in place of unionWindow.
func newMemClusterWindow(t *testing.T, seed uint64, n int, skew func(i int) time.Duration, proto int, window time.Duration) *memCluster {
	t.Helper()
	c := &memCluster{t: t, nw: memtransport.New(seed), seed: seed, proto: proto, window: window}
	t.Cleanup(c.nw.Close) // runs after the nodes' cleanup below
	var closeMu sync.Mutex
	t.Cleanup(func() { // close every node at once: each leave waits up to a second
		closeMu.Lock()
		defer closeMu.Unlock()
		var wg sync.WaitGroup
		for _, m := range c.nodes {
			wg.Go(func() { _ = m.Close() })
		}
		wg.Wait()
	})
	for i := range n {
		var d time.Duration
		if skew != nil {
			d = skew(i)
		}
		c.add(fmt.Sprintf("n%d", i), d)
	}
	c.waitMembers(c.nodes...)
	return c
}

// add starts a node named name, joined to node 0.
func (c *memCluster) add(name string, skew time.Duration) *memNode {
	t := c.t
	t.Helper()
	tr := c.nw.NewTransport()
	cfg := node.DefaultConfig()
	cfg.Name = name
	cfg.HTTP = ""
	cfg.Tracker.Window, cfg.SubWindow = c.window, memSubWindow
	if len(c.nodes) > 0 {
		cfg.Cluster.Seeds = cluster.AddrList{c.nodes[0].tr.Addr()}
	}
	m := &memNode{tr: tr, skew: skew, clock: c.clock}
	cfg.Clock = m.now
	cfg.Cluster.Transport = tr
	cfg.Cluster.Timing = memTiming()
	cfg.Cluster.BootID = c.seed<<16 | uint64(len(c.nodes)+1)
	cfg.Cluster.Gossip.AntiEntropyInterval = 500 * time.Millisecond
	cfg.Cluster.Gossip.SealJitter = 100 * time.Millisecond
	cfg.Cluster.Gossip.Protocol = c.proto
	n, err := node.New(cfg, testLogger(t).With("node", name), nil)
	require.NoError(t, err)
	m.Node = n
	c.nodes = append(c.nodes, m)
	require.NoError(t, n.Start(t.Context()))
	c.cfg = cfg.TrackerConfig()
	return m
}

// upMembers returns the member names m lists alive or suspect, sorted.
func upMembers(m *memNode) []string {
	var out []string
	for _, mem := range m.Cluster().Members() {
		if mem.State.Up() {
			out = append(out, mem.Member)
		}
	}
	slices.Sort(out)
	return out
}

// seeExactly reports whether every node of from lists exactly want up.
func seeExactly(from, want []*memNode) (bool, string) {
	var names []string
	for _, w := range want {
		names = append(names, w.MemberName())
	}
	slices.Sort(names)
	for _, m := range from {
		if got := upMembers(m); !slices.Equal(got, names) {
			return false, fmt.Sprintf("%s sees %v, want %v", m.MemberName(), got, names)
		}
	}
	return true, ""
}

// waitMembers waits until every node of nodes lists exactly nodes up.
func (c *memCluster) waitMembers(nodes ...*memNode) {
	c.t.Helper()
	eventually(c.t, "membership agreed", func() (bool, string) { return seeExactly(nodes, nodes) })
}

// midEpoch waits until the wall clock's epoch has at least half of it left.
func (c *memCluster) midEpoch() {
	sw := c.cfg.SubWindow()
	for {
		now := time.Now()
		e := c.cfg.Epoch(now)
		if now.Sub(c.cfg.EpochStart(e)) < sw/2 {
			return
		}
		time.Sleep(c.cfg.EpochStart(e + 1).Sub(now))
	}
}

// record has every node of nodes record its samples (samples(i, dest) for
// the i-th) into u, and returns the epoch each node recorded in, by its own
// clock: its epoch at the instant the clocks are held at (hold; now, if
// not held already), the clocks held until every node recorded. Without
// the hold a loaded machine took longer than the rest of an epoch to
// record one node's 120 samples, or the flooder's 15 000, and the batch
// fell into two epochs. It fails the test if a node's epoch changed while
// it recorded.
func (c *memCluster) record(u *union, nodes []*memNode, dests []string, samples func(i int, dest string) []uint64) []int64 {
	c.t.Helper()
	c.hold(func(time.Time) bool { return true }) // unless held already
	defer c.release()
	epochs := make([]int64, len(nodes))
	for i, m := range nodes {
		e := m.epoch(c.cfg)
		for _, d := range dests {
			ms := samples(i, d)
			for _, v := range ms {
				m.Record(d, time.Duration(v)*time.Millisecond)
			}
			u.add(m.Name(), d, ms...)
		}
		require.Equal(c.t, e, m.epoch(c.cfg), "%s: recording crossed an epoch boundary", m.Name())
		epochs[i] = e
	}
	return epochs
}

// viewsMatch reports whether every node of nodes has, for every
// destination of u, a fleet view bucket-identical to want(dest) and an
// estimate equal to u's at every checked quantile with peers peers.
func viewsMatch(t testing.TB, nodes []*memNode, u *union, want func(dest string) []uint64, peers int) (bool, string) {
	for _, m := range nodes {
		for _, d := range u.dests() {
			if got, w := m.Fleet().ViewCounts(d, m.now()), want(d); !slices.Equal(got, w) {
				return false, fmt.Sprintf("%s: fleet view of %s is not the union: %d samples, want %d (members up: %v%s)", m.Name(), d, sumSlice(got), sumSlice(w), upMembers(m), v2Held(m, d, u.cfg))
			}
			if ok, why := checkEstimate(t, u, d, func(q float64) (tracker.Estimate, error) { return m.Estimate(d, q) }, peers); !ok {
				return false, m.Name() + ": " + why
			}
		}
	}
	return true, ""
}

// v2Held says, on protocol v2, which aggregates of dest m holds (those
// of the epochs its fleet view reads, the newest of E−H … E−1, H the
// cfg.AggregateHorizon, and of E and E+1), with their sample counts, and
// what m published and pulled: what a view short of the union lacks.
func v2Held(m *memNode, dest string, cfg tracker.Config) string {
	if !m.Cluster().Protocol().V2() {
		return ""
	}
	e := m.epoch(cfg)
	var held []string
	for ep := e - cfg.AggregateHorizon(); ep <= e+1; ep++ {
		if a, ok := m.Fleet().LookupAggregate(dest, ep); ok {
			held = append(held, fmt.Sprintf("E%+d: %d", ep-e, a.Total))
		}
	}
	v := m.Cluster().Protocol().Stats().V2
	return fmt.Sprintf("; aggregates held %v; published %d, taken over %d, pulled %d", held, v.Published+v.Republished, v.Takeovers, v.AggPulls)
}

// waitUnion waits until viewsMatch holds with the exact union, and returns
// how long that took.
func waitUnion(t testing.TB, nodes []*memNode, u *union, peers int) time.Duration {
	t.Helper()
	return eventually(t, "every fleet view is the exact union", func() (bool, string) {
		return viewsMatch(t, nodes, u, u.counts, peers)
	})
}

// holds reports whether m holds the batch (part 0) of origin o's epoch e.
func holds(m, o *memNode, e int64) bool {
	_, ok := m.Fleet().Lookup(tracker.BatchKey{Origin: o.Name(), Boot: o.BootID(), Epoch: e})
	return ok
}

// sumStats sums f over the nodes' gossip counters.
func sumStats(nodes []*memNode, f func(s cluster.GossipStats) uint64) uint64 {
	var n uint64
	for _, m := range nodes {
		n += f(m.gossip())
	}
	return n
}

func sumSlice(s []uint64) uint64 {
	var n uint64
	for _, v := range s {
		n += v
	}
	return n
}

func sumMap(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

// latencies returns count samples for node i and dest, seeded: each
// (node, dest) has its own base latency and an exponential tail.
func latencies(seed uint64, count int) func(i int, dest string) []uint64 {
	return func(i int, dest string) []uint64 {
		h := uint64(len(dest))*31 + uint64(dest[len(dest)-1])
		rng := newRand(seed, uint64(i)<<32|h)
		base := 5 + 7*uint64(i) + h%13
		out := make([]uint64, count)
		for k := range out {
			out[k] = base + uint64(rng.ExpFloat64()*float64(base))
			if rng.IntN(100) == 0 {
				out[k] *= 20
			}
		}
		return out
	}
}

// requireNoRefusedData checks that m refused nothing but digests and pulls
// from members it believed dead (cluster.RejectUnknownSender): under load
// the fast failure detector of these tests can suspect a live member for a
// moment, and around a heal a member's digest can arrive before the news
// that it is alive again. Every such refusal costs one anti-entropy round,
// no data; any other reason (a batch refused, a conflict, a decode error)
// fails the test.
// also names further reasons a test allows, saying why.
func requireNoRefusedData(t testing.TB, m *memNode, also ...string) {
	t.Helper()
	allowed := append([]string{cluster.RejectUnknownSender}, also...)
	for reason, n := range m.gossip().Rejected {
		require.Contains(t, allowed, reason, "%s refused %d messages as %s", m.Name(), n, reason)
	}
}

// protocols are the dissemination protocols the fault tests run on: v1
// (every node holds every origin's batches; still spoken during a rolling
// upgrade) and v2 (destination-owned aggregation, the default).
var protocols = []int{1, cluster.ProtocolV2}

// v2Stats sums f over the nodes' protocol v2 counters.
func v2Stats(nodes []*memNode, f func(s cluster.V2Stats) uint64) uint64 {
	var n uint64
	for _, m := range nodes {
		n += f(m.Cluster().Protocol().Stats().V2)
	}
	return n
}

// requireV2 checks that every node of nodes runs protocol v2.
func requireV2(t testing.TB, nodes []*memNode) {
	t.Helper()
	for _, m := range nodes {
		require.True(t, m.Cluster().Protocol().V2(), "%s runs v2", m.Name())
	}
}

// requireStoredOnce checks that node m stored want peer batches, each once,
// on protocol v1, where a node holds every origin's batches. On v2 a node
// holds records only as an owner and an aggregate per destination and
// epoch instead, so there is no batch count to check: that each record
// counts once is what the exact-union checks show (a record counted twice
// would break them); it checks that m runs v2.
func requireStoredOnce(t testing.TB, m *memNode, want uint64, msgAndArgs ...any) {
	t.Helper()
	if m.Cluster().Protocol().V2() {
		return
	}
	require.Equal(t, want, m.gossip().Outcomes["new"], msgAndArgs...)
}
