package cluster

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// protoNode is a Protocol with its own fleet, for driving the pure core
// without memberlist. Its Seal returns sealed[epoch].
type protoNode struct {
	*Protocol
	fleet  *tracker.Fleet
	sealed map[int64][]tracker.DestCounts
}

// aliveMembers returns members alive since the zero time, one per member
// name.
func aliveMembers(names ...string) []Member {
	var out []Member
	for _, m := range names {
		i := strings.LastIndexByte(m, '-')
		boot, err := strconv.ParseUint(m[i+1:], 16, 64)
		if err != nil {
			panic(err)
		}
		out = append(out, Member{Name: m[:i], Member: m, BootID: boot, State: StateAlive})
	}
	return out
}

// testFleet returns a fleet view on the gossip tests' grid for self, with
// the default fleet config changed by set (may be nil).
func testFleet(t *testing.T, self string, set func(*tracker.FleetConfig)) *tracker.Fleet {
	t.Helper()
	fc := tracker.DefaultFleetConfig()
	fc.Tracker, fc.Self = gossipTracker(), self
	if set != nil {
		set(&fc)
	}
	fleet, err := tracker.NewFleet(fc, nil)
	require.NoError(t, err)
	return fleet
}

func newProtoNode(t *testing.T, name string, boot uint64, g Gossip, known map[string]bool) protoNode {
	t.Helper()
	cfg := gossipTracker()
	fleet := testFleet(t, name, func(fc *tracker.FleetConfig) { fc.MaxOriginShare = 0 })
	n := protoNode{fleet: fleet, sealed: map[int64][]tracker.DestCounts{}}
	var err error
	n.Protocol, err = NewProtocol(ProtocolConfig{
		Name: name, BootID: boot, Tracker: cfg, Gossip: g, Store: fleet,
		Seal: func(e int64, _ time.Time) []tracker.DestCounts { return n.sealed[e] },
	})
	require.NoError(t, err)
	n.SetMembers(aliveMembers(slices.Sorted(maps.Keys(known))...), time.UnixMilli(1_700_000_000_000))
	return n
}

func destCounts(n int, count uint32) []tracker.DestCounts {
	out := make([]tracker.DestCounts, n)
	for i := range out {
		out[i] = tracker.DestCounts{Dest: fmt.Sprintf("d%04d", i), Total: uint64(count) * 2,
			Buckets: []tracker.Bucket{{Index: 3, Count: count}, {Index: uint16(10 + i%500), Count: count}}}
	}
	return out
}

// deliver hands msgs to their receivers and what they answer, until no
// message is left; it returns the receipts.
func deliver(nodes map[string]protoNode, msgs []Message, now time.Time) []Receipt {
	var rs []Receipt
	for len(msgs) > 0 {
		m := msgs[0]
		msgs = msgs[1:]
		r, out := nodes[m.To].Receive(m.Payload, now)
		rs = append(rs, r)
		msgs = append(msgs, out...)
	}
	return rs
}

func TestProtocolSealSplitsInsertsAndAddresses(t *testing.T) {
	g := DefaultGossip()
	g.MaxPartBytes = 1024
	g.BulkSyncPeers = 0 // only the seal's messages
	known := map[string]bool{MemberName("a", 1): true, MemberName("b", 2): true}
	a := newProtoNode(t, "a", 1, g, known)
	now := time.UnixMilli(1_700_000_000_250)
	e := gossipTracker().Epoch(now) - 1

	require.Empty(t, a.Tick(now), "an empty sub-window sends nothing")

	a.sealed[e+1] = destCounts(200, 2)
	now = gossipTracker().EpochStart(e + 2).Add(a.Jitter())
	msgs := a.Tick(now)
	require.Greater(t, len(msgs), 1, "split into parts")
	require.Equal(t, uint64(1), a.Stats().Seals)
	e++
	keys := a.fleet.Keys(now)
	require.Len(t, keys, len(msgs), "every part stored, and sent to b only")
	for i, m := range msgs {
		require.Equal(t, MemberName("b", 2), m.To)
		require.LessOrEqual(t, len(m.Payload), 1024)
		require.Equal(t, codec.TypeBatch, m.Type)
		require.Equal(t, tracker.BatchKey{Origin: "a", Boot: 1, Epoch: e, Part: uint16(i)}, keys[i])
	}

	b := newProtoNode(t, "b", 2, g, known)
	for _, r := range deliver(map[string]protoNode{"b-00000002": b}, msgs, now) {
		require.Empty(t, r.Reject)
		require.Equal(t, tracker.InsertNew, r.Outcome)
	}
	require.Equal(t, a.fleet.ViewCounts("d0007", now.Add(time.Second)), b.fleet.ViewCounts("d0007", now.Add(time.Second)))
}

// TestProtocolKnownOrigin: a batch origin is known when a member carries
// its name and boot and its member name is theirs; a member whose member
// name disagrees with its metadata names no origin, and a member gone
// from the list is forgotten.
func TestProtocolKnownOrigin(t *testing.T) {
	a := newProtoNode(t, "a", 1, DefaultGossip(), map[string]bool{MemberName("a", 1): true, MemberName("b", 2): true})
	now := time.UnixMilli(1_700_000_000_000)
	require.True(t, a.knownOrigin("b", 2))
	require.False(t, a.knownOrigin("b", 3), "another boot")
	require.False(t, a.knownOrigin("c", 2), "another name")

	members := aliveMembers(MemberName("a", 1), MemberName("b", 2))
	members = append(members, Member{Name: "c", Member: MemberName("d", 4), BootID: 4, State: StateAlive})
	members[1].State = StateDead
	a.SetMembers(members, now)
	require.True(t, a.knownOrigin("b", 2), "dead within retention is still known")
	require.False(t, a.knownOrigin("c", 4), "member name not MemberName(Name, BootID)")
	require.False(t, a.knownOrigin("d", 4))

	a.SetMembers(aliveMembers(MemberName("a", 1)), now)
	require.False(t, a.knownOrigin("b", 2), "forgotten")
}

func TestProtocolAntiEntropyConverges(t *testing.T) {
	g := DefaultGossip()
	g.AntiEntropyInterval = 100 * time.Millisecond // 8 rounds stay within the epoch's view
	known := map[string]bool{}
	var names []string
	for i := range 4 {
		names = append(names, fmt.Sprintf("n%d", i))
		known[MemberName(names[i], uint64(i+1))] = true
	}
	nodes := map[string]protoNode{}
	for i, n := range names {
		nodes[MemberName(n, uint64(i+1))] = newProtoNode(t, n, uint64(i+1), g, known)
	}
	now := time.UnixMilli(1_700_000_000_250)
	e := gossipTracker().Epoch(now) - 1
	// Each node seals, but every batch is lost: only digests repair.
	for i, n := range names {
		_, err := nodes[MemberName(n, uint64(i+1))].seal(e, destCounts(3, uint32(i+1)), now)
		require.NoError(t, err)
	}
	// A ring of digest exchanges: n0→n1, n1→n2, n2→n3, n3→n0, twice.
	var rs []Receipt
	for range 2 {
		for i := range names {
			from, to := MemberName(names[i], uint64(i+1)), MemberName(names[(i+1)%4], uint64((i+1)%4+1))
			now = now.Add(g.AntiEntropyInterval) // requested keys expire between rounds
			rs = append(rs, deliver(nodes, nodes[from].digests(to, now), now)...)
		}
	}
	repairs := 0
	for _, r := range rs {
		require.Empty(t, r.Reject)
		if r.Repair {
			repairs++
		}
	}
	require.Equal(t, 12, repairs, "each node pulled the 3 batches it lacked, once each")
	want := nodes[MemberName("n0", 1)].fleet.ViewCounts("d0001", now)
	require.NotNil(t, want)
	for _, n := range nodes {
		require.Len(t, n.fleet.Keys(now), 4)
		require.Equal(t, want, n.fleet.ViewCounts("d0001", now))
	}
}

func TestProtocolPullAnswerBudgetNewestFirst(t *testing.T) {
	g := DefaultGossip()
	g.BulkSyncBytes = 1 // at least one batch per answer
	known := map[string]bool{MemberName("a", 1): true, MemberName("b", 2): true}
	a := newProtoNode(t, "a", 1, g, known)
	now := time.UnixMilli(1_700_000_000_250)
	e := gossipTracker().Epoch(now)
	for ep := e - 3; ep < e; ep++ {
		_, err := a.seal(ep, destCounts(2, 1), now)
		require.NoError(t, err)
	}
	keys := codec.SortKeys(a.fleet.Keys(now))
	pull, err := codec.AppendPull(nil, codec.Pull{Sender: MemberName("b", 2), Keys: keys})
	require.NoError(t, err)
	r, msgs := a.Receive(pull, now)
	require.Empty(t, r.Reject)
	require.Len(t, msgs, 1, "one batch fits the budget")
	dec, err := codec.NewDecoder(gossipTracker().Layout())
	require.NoError(t, err)
	b, err := dec.DecodeBatch(msgs[0].Payload)
	require.NoError(t, err)
	require.Equal(t, e-1, b.Key.Epoch, "newest first")
	require.Equal(t, gossipTracker().EpochStart(e-1+int64(gossipTracker().SubWindows)+2), msgs[0].Expires)
}

func TestProtocolDigestRepliesOnlyWhenSenderLacks(t *testing.T) {
	g := DefaultGossip()
	known := map[string]bool{MemberName("a", 1): true, MemberName("b", 2): true}
	a := newProtoNode(t, "a", 1, g, known)
	b := newProtoNode(t, "b", 2, g, known)
	now := time.UnixMilli(1_700_000_000_250)
	e := gossipTracker().Epoch(now) - 1
	_, err := b.seal(e, destCounts(2, 1), now)
	require.NoError(t, err)

	// a (empty) → b: b has nothing to pull, but a lacks b's batch.
	_, out := b.Receive(a.digests(MemberName("b", 2), now)[0].Payload, now)
	require.Len(t, out, 1)
	require.Equal(t, codec.TypeDigest, out[0].Type)
	// b's reply digest → a: a pulls, and does not reply with a digest (it just sent one).
	_, out = a.Receive(out[0].Payload, now)
	require.Len(t, out, 1)
	require.Equal(t, codec.TypePull, out[0].Type)
	// Once a holds everything, b's digest gets no digest back.
	deliver(map[string]protoNode{MemberName("a", 1): a, MemberName("b", 2): b}, out, now)
	_, out = a.Receive(b.digests(MemberName("a", 1), now.Add(time.Hour))[0].Payload, now)
	require.Empty(t, out)
}

func TestProtocolMembership(t *testing.T) {
	g := DefaultGossip()
	known := map[string]bool{}
	for _, m := range []string{MemberName("a", 1), MemberName("b", 2), MemberName("b", 3), MemberName("c", 4), MemberName("a", 9)} {
		known[m] = true
	}
	a := newProtoNode(t, "a", 1, g, known)
	now := time.UnixMilli(1_700_000_000_250)
	e := gossipTracker().Epoch(now) - 1
	for _, k := range []tracker.BatchKey{{Origin: "b", Boot: 2}, {Origin: "b", Boot: 3}, {Origin: "c", Boot: 4}, {Origin: "a", Boot: 9}} {
		k.Epoch = e
		_, err := codec.AppendBatch(nil, tracker.Batch{Key: k, Layout: gossipTracker().Layout(), Dests: destCounts(1, 1)})
		require.NoError(t, err)
		require.Equal(t, tracker.InsertNew, a.fleet.Insert(tracker.Batch{Key: k, Layout: gossipTracker().Layout(), Dests: destCounts(1, 1)}, now))
	}
	t0 := now.Add(-time.Minute)
	members := []Member{
		{Name: "a", Member: MemberName("a", 1), BootID: 1, State: StateAlive, Since: t0},
		{Name: "a", Member: MemberName("a", 9), BootID: 9, State: StateAlive, Since: now}, // another process with our name: not ours
		{Name: "b", Member: MemberName("b", 2), BootID: 2, State: StateAlive, Since: t0},  // restarted as boot 3
		{Name: "b", Member: MemberName("b", 3), BootID: 3, State: StateAlive, Since: now},
		{Name: "c", Member: MemberName("c", 4), BootID: 4, State: StateDead, Since: now},
	}
	a.SetMembers(members, now)
	later := now.Add(time.Second)
	// Only b's boot 3 counts: 2 samples of d0000.
	require.Equal(t, uint64(2), sum(a.fleet.ViewCounts("d0000", later)))
	require.Equal(t, 3, a.fleet.MinPeers(), "4 up members: auto MinPeers = 3")

	members[4].State = StateAlive // c refuted its death
	a.SetMembers(members, later)
	require.Equal(t, uint64(4), sum(a.fleet.ViewCounts("d0000", later)))
}

func sum(c []uint64) uint64 {
	var s uint64
	for _, v := range c {
		s += v
	}
	return s
}

func TestDecodeReason(t *testing.T) {
	dec, err := codec.NewDecoder(gossipTracker().Layout())
	require.NoError(t, err)
	for _, tc := range []struct {
		msg  []byte
		want string
	}{
		{[]byte{0x92, 0x02, 0x01}, RejectDecodeVersion},
		{[]byte{0x92, 0x01, 0x0b}, RejectDecodeType}, // 4–10 are protocol v2's
		{[]byte{0xc1}, RejectDecodeMalformed},
		{make([]byte, codec.MaxMessageBytes+1), RejectDecodeTooLarge},
	} {
		_, err := dec.Type(tc.msg)
		require.Error(t, err)
		require.Equal(t, tc.want, decodeReason(err))
	}
}

func TestSendQueue(t *testing.T) {
	q := newSendQueue(3, 8, time.Second, 10*time.Second)
	require.Zero(t, q.push(Message{To: "a", Payload: []byte{1}}))
	require.Zero(t, q.push(Message{To: "a", Payload: []byte{2}}))
	require.Zero(t, q.push(Message{To: "b", Payload: []byte{3}}))
	require.Equal(t, 1, q.push(Message{To: "c"}), "full")

	ma, ok := q.pop()
	require.True(t, ok)
	require.Equal(t, []byte{1}, ma.Payload)
	// a is in flight: the next message goes to b, not a's second one.
	mb, ok := q.pop()
	require.True(t, ok)
	require.Equal(t, "b", mb.To)
	q.done("b", mb.seq, sendOK)
	q.done("a", ma.seq, sendOK)
	m, ok := q.pop()
	require.True(t, ok)
	require.Equal(t, []byte{2}, m.Payload)
	q.done("a", m.seq, sendOK)
	require.Zero(t, q.len())

	require.Zero(t, q.push(Message{To: "d"}))
	require.Zero(t, q.push(Message{To: "d"}))
	require.Equal(t, 2, q.drop("d"))
	require.Zero(t, q.len())
	require.Zero(t, q.push(Message{To: "e"}))
	require.Equal(t, 1, q.close())
	_, ok = q.pop()
	require.False(t, ok)
	require.Equal(t, 1, q.push(Message{To: "e"}))
}

// TestSendQueueBackOff checks the back-off's bookkeeping: with one worker,
// a member whose send failed is backed off, its sends hold no worker (the
// worker stays free for another member), at most backoffKeep of its
// messages wait (a push beyond drops the oldest), a send past slowAfter
// frees its worker at once and backs its member off (a late slow call for
// a send already done changes nothing), and a send that succeeds makes the
// member normal again.
func TestSendQueueBackOff(t *testing.T) {
	q := newSendQueue(100, 1, time.Second, 10*time.Second)
	require.Zero(t, q.push(Message{To: "a", Payload: []byte{0}}))
	m, ok := q.pop()
	require.True(t, ok)
	require.True(t, m.worker)
	require.Zero(t, q.done("a", m.seq, sendFailed))
	require.Equal(t, 1, q.backedOff())
	for k := range backoffKeep {
		require.Zero(t, q.push(Message{To: "a", Payload: []byte{byte(k + 1)}}))
	}
	require.Equal(t, 1, q.push(Message{To: "a", Payload: []byte{backoffKeep + 1}}), "the oldest dropped")
	require.Equal(t, backoffKeep, q.len())
	// A probe: it holds no worker, so b's message takes the one worker.
	m, ok = q.pop()
	require.True(t, ok)
	require.False(t, m.worker)
	require.Equal(t, []byte{2}, m.Payload, "the oldest kept")
	require.Zero(t, q.push(Message{To: "b"}))
	mb, ok := q.pop()
	require.True(t, ok)
	require.True(t, mb.worker)
	require.Equal(t, "b", mb.To)
	// b's send runs past slowAfter: the worker is free for c meanwhile.
	require.Zero(t, q.push(Message{To: "c"}))
	q.slow("b", mb.seq)
	require.Equal(t, 2, q.backedOff())
	mc, ok := q.pop()
	require.True(t, ok)
	require.True(t, mc.worker)
	require.Equal(t, "c", mc.To)
	q.done("c", mc.seq, sendOK)
	q.slow("c", mc.seq) // too late: nothing changes
	require.Equal(t, 2, q.backedOff())
	// b's send succeeds after all, and so does a's probe: both normal.
	q.done("b", mb.seq, sendOK)
	require.Zero(t, q.done("a", m.seq, sendOK))
	require.Zero(t, q.backedOff())
	m, ok = q.pop()
	require.True(t, ok)
	require.True(t, m.worker, "a is normal again")
	require.Equal(t, []byte{3}, m.Payload)
	q.done("a", m.seq, sendSkipped)
	require.Zero(t, q.backedOff(), "an expired message changes nothing")
	require.Equal(t, backoffKeep-2, q.drop("a"))
	require.Zero(t, q.len())
}

// TestWorkerDropsExpiredBatches checks the send worker: a message whose
// expiry has passed while it waited is dropped and counted in SendDrops,
// never sent; a message without expiry (a digest) or not yet expired is sent.
func TestWorkerDropsExpiredBatches(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	var mu sync.Mutex
	var sent []string
	g := &gossiper{
		clock: func() time.Time { return now },
		q:     newSendQueue(8, 8, time.Second, 10*time.Second),
		stats: newGossipCounters(),
		log:   slog.New(slog.DiscardHandler),
		sendFn: func(to string, _ []byte) error {
			mu.Lock()
			defer mu.Unlock()
			sent = append(sent, to)
			return nil
		},
	}
	for _, m := range []Message{
		{To: "expired", Type: codec.TypeBatch, Expires: now.Add(-time.Nanosecond)},
		{To: "at-expiry", Type: codec.TypeBatch, Expires: now},
		{To: "fresh", Type: codec.TypeBatch, Expires: now.Add(time.Nanosecond)},
		{To: "digest", Type: codec.TypeDigest},
	} {
		require.Zero(t, g.q.push(m))
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go g.sender(&wg)
	testutil.Eventually(t, "queue drained", func() bool {
		s := g.stats.snapshot()
		return s.SendDrops+s.MessagesOut["batch"]+s.MessagesOut["digest"] == 4
	})
	g.q.close()
	wg.Wait()
	s := g.stats.snapshot()
	require.Equal(t, uint64(2), s.SendDrops)
	require.ElementsMatch(t, []string{"fresh", "digest"}, sent)
}

func TestGossipConfigValidate(t *testing.T) {
	base := DefaultConfig()
	base.Name = "n"
	fleet, err := tracker.NewFleet(tracker.DefaultFleetConfig(), nil)
	require.NoError(t, err)
	base.Store = fleet
	require.NoError(t, base.Validate())
	for _, tc := range []struct {
		name string
		mut  func(c *Config)
		want string
	}{
		{"on message", func(c *Config) { c.OnMessage = func([]byte) {} }, "OnMessage must be nil"},
		{"interval", func(c *Config) { c.Gossip.AntiEntropyInterval = 0 }, "anti-entropy interval"},
		{"jitter", func(c *Config) { c.Gossip.SealJitter = time.Second }, "seal jitter"},
		{"workers", func(c *Config) { c.Gossip.SendWorkers = 0 }, "send workers"},
		{"queue", func(c *Config) { c.Gossip.SendQueue = 0 }, "send queue"},
		{"bulk peers", func(c *Config) { c.Gossip.BulkSyncPeers = -1 }, "bulk sync peers"},
		{"bulk bytes", func(c *Config) { c.Gossip.BulkSyncBytes = 0 }, "bulk sync bytes"},
		{"part bytes", func(c *Config) { c.Gossip.MaxPartBytes = 2 << 20 }, "max part bytes"},
		{"tracker", func(c *Config) { c.Tracker.SubWindows = 0 }, "tracker"},
		{"tracker not the store's", func(c *Config) { c.Tracker.SubWindows = 20 }, "differs from the Store's"},
		{"long name", func(c *Config) { c.Name = string(make([]byte, 250)) }, "at most 247"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.mut(&c)
			require.ErrorContains(t, c.Validate(), tc.want)
		})
	}
}

// TestProtocolBatchExpiry checks that a batch message expires exactly when
// receivers start refusing it as stale, so a sender that drops expired
// messages never drops one a receiver would still take.
func TestProtocolBatchExpiry(t *testing.T) {
	known := map[string]bool{MemberName("a", 1): true, MemberName("b", 2): true}
	a := newProtoNode(t, "a", 1, DefaultGossip(), known)
	cfg := gossipTracker()
	now := time.UnixMilli(1_700_000_000_250)
	e := cfg.Epoch(now) - 1
	msgs, err := a.seal(e, destCounts(3, 2), now)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	exp := msgs[0].Expires
	require.Equal(t, cfg.EpochStart(e+int64(cfg.SubWindows)+2), exp)

	late := newProtoNode(t, "b", 2, DefaultGossip(), known)
	r, _ := late.Receive(msgs[0].Payload, exp.Add(-time.Millisecond))
	require.Empty(t, r.Reject, "still accepted just before it expires")
	require.Equal(t, tracker.InsertNew, r.Outcome)

	tooLate := newProtoNode(t, "b", 2, DefaultGossip(), known)
	r, _ = tooLate.Receive(msgs[0].Payload, exp)
	require.Equal(t, RejectStaleEpoch, r.Reject, "refused from the moment it expires")

	// Answers to pulls expire the same way; digests never do.
	for _, m := range a.digests(MemberName("b", 2), now) {
		require.True(t, m.Expires.IsZero())
	}
}

// TestProtocolSchedule walks one protocol's schedule: the first Tick seals
// what the tracker holds; a node without peers seals at the boundary, one
// with peers after its jitter; the bulk sync is armed BulkSyncDelay after
// peers appear, runs once, and is due again after the node was alone;
// anti-entropy rounds come every interval ±25 %.
func TestProtocolSchedule(t *testing.T) {
	cfg := gossipTracker()
	fleet := testFleet(t, "a", nil)
	const delay = 800 * time.Millisecond
	p, err := NewProtocol(ProtocolConfig{
		Name: "a", BootID: 1, Tracker: cfg, Gossip: DefaultGossip(), Store: fleet, BulkSyncDelay: delay,
		Seal: func(int64, time.Time) []tracker.DestCounts { return destCounts(1, 1) },
	})
	require.NoError(t, err)
	require.Less(t, p.Jitter(), cfg.SubWindow()/2, "capped at half a sub-window")
	require.Positive(t, p.Jitter())
	e := cfg.Epoch(time.UnixMilli(1_700_000_000_000))
	start := cfg.EpochStart(e)
	require.True(t, p.Next().IsZero(), "before the first tick: at once")

	require.Empty(t, p.Tick(start), "alone: nothing to send")
	require.Equal(t, uint64(cfg.SubWindows-1), p.Stats().Seals, "the first tick seals every sub-window the tracker holds")
	require.Equal(t, cfg.EpochStart(e+1), p.Next(), "alone, the next seal is at the boundary")
	ae := p.aeNext
	require.GreaterOrEqual(t, ae.Sub(start), 1500*time.Millisecond)
	require.Less(t, ae.Sub(start), 2500*time.Millisecond)

	members := aliveMembers(MemberName("a", 1), MemberName("b", 2))
	joined := start.Add(100 * time.Millisecond)
	p.SetMembers(members, joined)
	require.Equal(t, cfg.EpochStart(e+1).Add(p.Jitter()), p.Next(), "with a peer, the seal waits for the jitter")
	require.Empty(t, p.Tick(cfg.EpochStart(e+1)), "not due yet")
	msgs := p.Tick(p.Next())
	require.Len(t, msgs, 1)
	require.Equal(t, codec.TypeBatch, msgs[0].Type)
	require.Equal(t, MemberName("b", 2), msgs[0].To)

	require.Equal(t, joined.Add(delay), p.Next(), "the bulk sync, armed when the peer appeared")
	msgs = p.Tick(p.Next())
	require.Len(t, msgs, 1)
	require.Equal(t, codec.TypeDigest, msgs[0].Type)
	require.Equal(t, cfg.EpochStart(e+2).Add(p.Jitter()), p.Next(), "the bulk sync ran once")

	// Alone, then a peer again: another bulk sync, BulkSyncDelay later.
	later := cfg.EpochStart(e + 1).Add(400 * time.Millisecond)
	p.SetMembers(members[:1], later)
	p.SetMembers(members, later)
	require.True(t, p.bulkDue)
	require.Equal(t, later.Add(delay), p.bulkAt)

	// Anti-entropy: a digest to the one peer, then the next round.
	p.bulkDue = false
	for now := p.Next(); now.Before(ae); now = p.Next() {
		p.Tick(now)
	}
	require.Equal(t, ae, p.Next())
	msgs = p.Tick(ae)
	require.Len(t, msgs, 1)
	require.Equal(t, codec.TypeDigest, msgs[0].Type)
	require.Greater(t, p.aeNext.Sub(ae), 1500*time.Millisecond-time.Nanosecond)
}

// TestSyncProtocolPoll checks the lazy path: Poll seals when no shell
// drives the protocol and does nothing while one does; Tick before Next
// does nothing.
func TestSyncProtocolPoll(t *testing.T) {
	cfg := gossipTracker()
	fleet := testFleet(t, "a", nil)
	sealed := map[int64]int{}
	s, err := NewSyncProtocol(ProtocolConfig{
		Name: "a", BootID: 1, Tracker: cfg, Gossip: DefaultGossip(), Store: fleet,
		Seal: func(e int64, _ time.Time) []tracker.DestCounts { sealed[e]++; return destCounts(1, 1) },
	})
	require.NoError(t, err)
	e := cfg.Epoch(time.UnixMilli(1_700_000_000_000))
	now := cfg.EpochStart(e).Add(time.Millisecond)
	s.Poll(now)
	require.Equal(t, 1, sealed[e-1])
	require.Nil(t, s.Tick(now.Add(time.Millisecond)), "not due")
	s.drive(true)
	s.Poll(cfg.EpochStart(e + 1))
	require.Zero(t, sealed[e], "a shell drives it: Poll does nothing")
	s.drive(false)
	s.Poll(cfg.EpochStart(e + 1))
	require.Equal(t, 1, sealed[e], "sealed at the boundary, once")
	s.Poll(cfg.EpochStart(e + 1).Add(time.Millisecond))
	require.Equal(t, 1, sealed[e])
	require.Equal(t, uint64(cfg.SubWindows), s.Stats().Seals)
}

// TestSendQueueForgetsDroppedMember checks that a member dropped (listed
// dead) while a send to it is in flight leaves nothing behind when that
// send then fails or runs slow: a backed-off member otherwise stays in
// the queue's table until a send succeeds, and members that never come
// back (every restart is a new member) would pile up there.
func TestSendQueueForgetsDroppedMember(t *testing.T) {
	q := newSendQueue(100, 2, time.Second, 10*time.Second)
	for _, to := range []string{"a", "b"} {
		require.Zero(t, q.push(Message{To: to}))
		require.Zero(t, q.push(Message{To: to}))
	}
	ma, ok := q.pop()
	require.True(t, ok)
	mb, ok := q.pop()
	require.True(t, ok)
	require.Equal(t, 1, q.drop("a"))
	require.Equal(t, 1, q.drop("b"))
	q.slow("a", ma.seq)
	require.Zero(t, q.done("a", ma.seq, sendFailed))
	require.Zero(t, q.done("b", mb.seq, sendFailed))
	require.Empty(t, q.peers, "dropped members forgotten")
	require.Zero(t, q.backedOff())

	// A member dropped in flight and pushed to again before its send
	// ends is a member again: what it gets next is kept.
	require.Zero(t, q.push(Message{To: "c"}))
	mc, ok := q.pop()
	require.True(t, ok)
	require.Zero(t, q.drop("c"))
	require.Zero(t, q.push(Message{To: "c", Payload: []byte{1}}))
	require.Zero(t, q.done("c", mc.seq, sendFailed))
	require.Equal(t, 1, q.backedOff())
	m, ok := q.pop()
	require.True(t, ok)
	require.Equal(t, mc.To, m.To)
	require.Equal(t, []byte{1}, m.Payload)
}
