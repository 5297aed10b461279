package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/internal/memtransport"
)

var testDests = []string{"db-1", "db-2", "cache-7"}

// TestFaultLossDuplicationReordering runs five nodes on a network that
// loses 20 % of streams silently (the sender's SendReliable succeeds),
// replays 20 % of them, and loses, duplicates and jitters packets (the
// jitter also delays dials, so messages arrive out of order). Over three
// epochs every node's fleet view must still be bucket for bucket the exact
// union, each batch counted once; anti-entropy must have repaired losses and
// the fleet must have recognised duplicates; and the message counters must
// account for every message: none missing beyond the streams the network
// dropped, none extra beyond those it replayed. On protocol v1 and v2: on
// v2 the repairs are record pulls (an owner lacking what an origin's
// manifest says) and aggregate pulls (anti-entropy of aggregates).
func TestFaultLossDuplicationReordering(t *testing.T) {
	t.Parallel()
	for _, proto := range protocols { // one after the other: each is load enough
		t.Run(fmt.Sprintf("v%d", proto), func(t *testing.T) { testFaultLoss(t, proto) })
	}
}

func testFaultLoss(t *testing.T, proto int) {
	c := newMemClusterProto(t, 21, 5, nil, proto)
	c.nw.SetFaults(memtransport.Faults{
		Drop: 0.05, Duplicate: 0.1, Jitter: 20 * time.Millisecond,
		StreamDrop: 0.2, StreamDuplicate: 0.2,
	})
	u := newUnion(c.cfg)
	const epochs = 3
	for k := range epochs {
		c.midEpoch()
		c.record(u, c.nodes, testDests, latencies(uint64(100+k), 40))
		took := waitUnion(t, c.nodes, u, 5)
		t.Logf("epoch %d: exact union on every node %v after recording", k, took)
	}

	for _, m := range c.nodes {
		s := m.gossip()
		if proto == 1 {
			require.Equal(t, uint64(4*epochs), s.Outcomes["new"], "%s: each peer's batch of each epoch stored once", m.Name())
		}
		if proto == 1 {
			requireNoRefusedData(t, m)
		} else {
			// On v2 a replayed or late message (a duplicated stream, a pull
			// answered after its repair came another way) can carry an
			// epoch already read and slid out: it is refused as
			// stale_epoch. The exact-union checks above show the views
			// lost nothing by it; anything else refused fails the test.
			requireNoRefusedData(t, m, cluster.RejectStaleEpoch)
		}
		require.Zero(t, s.QueueDrops)
	}
	ns := c.nw.Stats()
	require.Positive(t, ns.StreamsDropped)
	require.Positive(t, ns.StreamsDuplicated)
	require.Positive(t, ns.PacketsDropped)
	require.Positive(t, ns.PacketsDuplicated)
	repairs := sumStats(c.nodes, func(s cluster.GossipStats) uint64 { return s.Repairs })
	if proto == cluster.ProtocolV2 {
		requireV2(t, c.nodes)
		repairs = v2Stats(c.nodes, func(s cluster.V2Stats) uint64 { return s.RecordPulls + s.AggPulls })
	}
	dups := sumStats(c.nodes, func(s cluster.GossipStats) uint64 { return s.Outcomes["duplicate"] })
	require.Positive(t, repairs, "lost batches (v1), records or aggregates (v2) came back through anti-entropy")
	require.Positive(t, dups, "replayed and re-pulled messages were recognised as duplicates")

	// Every message sent and never received was on a stream the network
	// dropped; every message received twice was on one it replayed. Digests
	// keep flowing, so wait for a moment with none in flight.
	eventually(t, "the message counters account for every loss and copy", func() (bool, string) {
		out := sumStats(c.nodes, func(s cluster.GossipStats) uint64 { return sumMap(s.MessagesOut) })
		in := sumStats(c.nodes, func(s cluster.GossipStats) uint64 { return sumMap(s.MessagesIn) + s.QueueDrops })
		ns := c.nw.Stats()
		ok := out <= in+ns.StreamsDropped && in <= out+ns.StreamsDuplicated
		return ok, fmt.Sprintf("sent %d, received %d, streams dropped %d, replayed %d", out, in, ns.StreamsDropped, ns.StreamsDuplicated)
	})
	t.Logf("network %+v; repairs %d, duplicates %d", ns, repairs, dups)
}

// TestFaultPartitionHeal cuts six nodes into two sides of three. While cut,
// each side's views are the exact union of its own side with 3 peers and
// nothing crosses; after the heal every view is the exact union of all six
// with 6 peers, the other side's batches having come by anti-entropy (each
// node repaired at least the three it never got pushed). During the cut and
// after the heal, every message sent was received: what the cut lost, the
// senders counted as failed or dropped sends.
func TestFaultPartitionHeal(t *testing.T) {
	t.Parallel()
	c := newMemCluster(t, 22, 6, nil)
	a, b := c.nodes[:3], c.nodes[3:]
	addrs := func(ns []*memNode) []string {
		var out []string
		for _, m := range ns {
			out = append(out, m.tr.Addr())
		}
		return out
	}
	c.nw.Partition(addrs(a), addrs(b))
	took := eventually(t, "each side sees only itself", func() (bool, string) {
		if ok, why := seeExactly(a, a); !ok {
			return false, why
		}
		return seeExactly(b, b)
	})
	t.Logf("partition: each side sees only itself after %v", took)

	all := newUnion(c.cfg)
	c.midEpoch()
	epochs := c.record(all, c.nodes, testDests, latencies(7, 40))
	e := epochs[0]
	require.Equal(t, []int64{e, e, e, e, e, e}, epochs)
	ua, ub := all.only(names(a)...), all.only(names(b)...)
	took = eventually(t, "each side's views are its own side's union", func() (bool, string) {
		if ok, why := viewsMatch(t, a, ua, ua.counts, 3); !ok {
			return false, why
		}
		return viewsMatch(t, b, ub, ub.counts, 3)
	})
	t.Logf("partition: each side converged %v after recording", took)
	for _, m := range a {
		for _, o := range b {
			require.False(t, holds(m, o, e), "%s holds %s's batch across the cut", m.Name(), o.Name())
			require.False(t, holds(o, m, e), "%s holds %s's batch across the cut", o.Name(), m.Name())
		}
	}
	for _, m := range c.nodes {
		requireStoredOnce(t, m, 2, "%s: only its own side's two batches", m.Name())
	}
	// What the cut lost is what the senders counted: every message sent
	// (SendReliable succeeded) was received, so every message that never
	// arrived is a failed send (SendErrors) or one never sent (SendDrops).
	cut := waitAccounted(t, c.nodes)
	t.Logf("partition: %s", cut)
	// Anti-entropy picks the other side ~3 times in 5 until the failure
	// detector splits the members: some of those sends failed.
	require.Positive(t, sumStats(c.nodes, func(s cluster.GossipStats) uint64 { return s.SendErrors }), "the cut lost sends: %s", cut)

	c.nw.Heal()
	took = eventually(t, "after the heal every node sees all six", func() (bool, string) { return seeExactly(c.nodes, c.nodes) })
	took += waitUnion(t, c.nodes, all, 6)
	t.Logf("heal: exact union of all six on every node %v after the heal", took)
	for _, m := range c.nodes {
		requireStoredOnce(t, m, 5, "%s: each peer's batch stored once", m.Name())
		if m.Cluster().Protocol().V2() {
			// The owners changed with the members: origins sent their
			// window's records again to the new owners, or these pulled.
			v := m.Cluster().Protocol().Stats().V2
			require.Positive(t, v.Resent+v.RecordPulls+v.AggPulls, "%s: the other side's records or aggregates came after the heal", m.Name())
		} else {
			require.GreaterOrEqual(t, m.gossip().Repairs, uint64(3), "%s: the other side's three batches were pulled", m.Name())
		}
		requireNoRefusedData(t, m)
	}
	t.Logf("after the heal: %s", waitAccounted(t, c.nodes))
}

// waitAccounted waits for a moment with no message in flight (digests keep
// flowing) at which every message the nodes sent was received: handled,
// or dropped at the full receive queue. Messages lost on the way are then
// exactly those the senders counted as failed (SendErrors) or never sent
// (SendDrops); the network here loses no stream silently. It returns the
// totals.
func waitAccounted(t *testing.T, nodes []*memNode) string {
	t.Helper()
	var why string
	eventually(t, "every message sent was received", func() (bool, string) {
		var out, in, errs, drops uint64
		for _, m := range nodes {
			s := m.gossip()
			out += sumMap(s.MessagesOut)
			in += sumMap(s.MessagesIn) + s.QueueDrops
			errs += s.SendErrors
			drops += s.SendDrops
		}
		why = fmt.Sprintf("sent %d, received %d; lost: %d send errors, %d send drops", out, in, errs, drops)
		return out == in, why
	})
	return why
}

func names(ns []*memNode) []string {
	var out []string
	for _, m := range ns {
		out = append(out, m.Name())
	}
	return out
}
