package cluster

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/internal/memtransport"
)

// TestGossipFloodOverflowsQueues floods both bounded queues and checks
// that every message is accounted for and the views still converge.
//
// A flooder queues 200 digests to one receiver at once into a send queue
// of 8 while its sends are held: all but the 8 waiting (and the one being
// sent) are dropped and counted in SendDrops. The receiver's message
// queue holds 4 and its handler is held (as a slow handler would be)
// while the flood and the epoch's batch pushes arrive: what does not fit
// is dropped and counted in QueueDrops and Rejected["queue_full"]. Once
// the handler is released, anti-entropy repairs the lost batches: every
// view is the exact union, with repairs on the receiver. At rest, every
// message sent was handled or dropped at the receiving queue.
func TestGossipFloodOverflowsQueues(t *testing.T) {
	t.Parallel()
	const (
		flood     = 200
		sendQueue = 8
		msgQueue  = 4
	)
	o := defaultGossipOpts()
	nw := newNetwork(t, 16)
	g0 := startGossipNode(t, nw, "g0", 0x60560000, o)
	g1 := startGossipNode(t, nw, "g1", 0x60560001, o, g0.tr.Addr())

	var held atomic.Bool
	release := make(chan struct{})
	fo := o
	fo.gossip.SendQueue = sendQueue
	fo.wrap = func(send func(string, []byte) error) func(string, []byte) error {
		return func(to string, p []byte) error {
			if held.Load() {
				<-release
			}
			return send(to, p)
		}
	}
	flooder := startGossipNode(t, nw, "flooder", 0x60560002, fo, g0.tr.Addr())

	ro := o
	ro.tune = func(c *Config) { c.Limits.MessageQueue = msgQueue }
	recv := startGossipNode(t, nw, "recv", 0x60560003, ro, g0.tr.Addr())
	nodes := []*gnode{g0, g1, flooder, recv}
	eventually(t, "all members see each other", func() bool { return allSee(nodes, nodes) })

	u := newUnion(t, o.tracker)
	// Hold the receiver's handler: the first message taken from its queue
	// waits for the protocol's lock, the next msgQueue wait in the queue.
	recv.gossip.proto.mu.Lock()
	locked := true
	unlock := func() {
		if locked {
			locked = false
			recv.gossip.proto.mu.Unlock()
		}
	}
	defer unlock()
	e := recordEpoch(t, u.cfg, nodes, u.ref, testDests(4), randomSamples(9, 30))
	u.epochs = append(u.epochs, e)

	held.Store(true)
	flooder.gossip.proto.mu.Lock()
	digest := flooder.gossip.proto.p.digests(recv.MemberName(), time.Now())
	flooder.gossip.proto.mu.Unlock()
	require.Len(t, digest, 1)
	msgs := make([]Message, flood)
	for i := range msgs {
		msgs[i] = digest[0]
	}
	flooder.gossip.send(msgs)
	fs := flooder.GossipStats()
	require.GreaterOrEqual(t, fs.SendDrops, uint64(flood-sendQueue-1), "a full send queue drops")
	held.Store(false)
	close(release)

	// The flood and the epoch's pushes reach the receiver while its
	// handler is held.
	eventually(t, "the other three pushed the epoch to every peer", func() bool {
		for _, n := range nodes[:3] {
			if n.GossipStats().MessagesOut["batch"] < 3 {
				return false
			}
		}
		return true
	})
	eventually(t, "the flood reached the receiver", func() bool {
		st := recv.Stats()
		return st.MessagesReceived+st.MessagesDropped >= sendQueue+1+3
	})
	unlock()

	took := eventually(t, "every node holds every batch", func() bool { return holdsEpoch(nodes, nodes, e) })
	t.Logf("flood: every batch everywhere %v after the handler was released", took)
	eventuallyUnion(t, nodes, testDests(4), u.counts(t))

	rs := recv.GossipStats()
	require.Positive(t, rs.QueueDrops, "a full message queue drops")
	require.Equal(t, rs.QueueDrops, rs.Rejected[RejectQueueFull])
	require.Equal(t, rs.QueueDrops, recv.Stats().MessagesDropped)
	require.Positive(t, rs.Repairs, "batches lost to the full queue came back by anti-entropy")
	t.Logf("receiver: queue drops %d, repairs %d; flooder: send drops %d", rs.QueueDrops, rs.Repairs, fs.SendDrops)

	// Digests keep flowing: wait for a moment with none in flight. Then
	// every message sent was handled or dropped at the receiving queue,
	// and every message queued was handled.
	eventually(t, "every message accounted for", func() bool {
		var out, in uint64
		for _, n := range nodes {
			s := n.GossipStats()
			out += sumCounts(s.MessagesOut)
			in += sumCounts(s.MessagesIn) + s.QueueDrops
			if n.Stats().MessagesReceived != sumCounts(s.MessagesIn) {
				return false
			}
		}
		return out == in
	})
	for _, n := range nodes {
		s := n.GossipStats()
		require.Zero(t, s.SendErrors, n.Name())
		require.Zero(t, s.QueueDiscards, n.Name())
		requireBytesByType(t, n.MemberName(), s)
	}
}

// TestEventsDropped holds the event handler on this member's own join
// while three members join: one event waits (EventQueue is 1), the others
// are dropped and counted, and Members stays exact.
func TestEventsDropped(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 32)
	release := make(chan struct{})
	cfg := memConfig(t, "slow", 1, nw.NewTransport())
	cfg.Limits.EventQueue = 1
	cfg.OnEvent = func(Event) { <-release }
	c, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	slow := &node{Cluster: c, rec: &recorder{}, tr: cfg.Transport.(*memtransport.Transport)}
	t.Cleanup(func() { _ = c.Close() })
	t.Cleanup(func() { close(release) }) // runs first: Close waits for the handler

	nodes := []*node{slow}
	for i := range 3 {
		nodes = append(nodes, startNode(t, memConfig(t, string(rune('a'+i)), uint64(10+i), nw.NewTransport(), slow.tr.Addr())))
	}
	eventually(t, "join", func() bool { return sees(nodes, names(nodes)...) })
	eventually(t, "events dropped", func() bool { return slow.Stats().EventsDropped >= 2 })
	require.Equal(t, 4, slow.NumAlive(), "Members is exact though events were dropped")
}
