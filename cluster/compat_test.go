package cluster

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/internal/memtransport"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// previousDecodeMeta is what the previous release (the last before
// metadata version 2) accepts as member metadata, copied from it: version
// 1 exactly, and nothing else. A member whose metadata it refuses is
// counted as malformed there, its boot unknown, and its batches refused as
// unknown_origin.
func previousDecodeMeta(member string, meta []byte) (name string, boot uint64, leaving bool, err error) {
	const metaVersion = 1
	if len(meta) < metaHeaderLen || meta[0] != metaVersion || meta[9]&^flagLeaving != 0 {
		return "", 0, false, errBadMeta
	}
	boot = binary.BigEndian.Uint64(meta[1:9])
	name = string(meta[metaHeaderLen:])
	if validName(name) != nil || MemberName(name, boot) != member {
		return "", 0, false, errBadMeta
	}
	return name, boot, meta[9]&flagLeaving != 0, nil
}

// metaLog keeps metadata byte strings with the member they belong to,
// and the latest of each member; safe for concurrent use.
type metaLog struct {
	mu     sync.Mutex
	metas  []seenMeta
	latest map[string][]byte
}

type seenMeta struct {
	member string
	meta   []byte
}

func (l *metaLog) add(member string, meta []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.metas = append(l.metas, seenMeta{member, slices.Clone(meta)})
	if l.latest == nil {
		l.latest = map[string][]byte{}
	}
	l.latest[member] = slices.Clone(meta)
}

// held returns the latest metadata of every member other than c's self
// that c lists as up: what c's memberlist holds for them, read from the
// events (memberlist's Members would race with its updates).
func (l *metaLog) held(c *Cluster) []seenMeta {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []seenMeta
	for _, m := range c.Members() {
		if m.Member != c.self && m.State.Up() {
			out = append(out, seenMeta{m.Member, slices.Clone(l.latest[m.Member])})
		}
	}
	return out
}

func (l *metaLog) all() []seenMeta {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.metas)
}

// requireOldReadable fails unless the previous release accepts every
// metadata in ms.
func requireOldReadable(t *testing.T, ms []seenMeta, what string) {
	t.Helper()
	require.NotEmpty(t, ms, what)
	for _, m := range ms {
		_, _, _, err := previousDecodeMeta(m.member, m.meta)
		require.NoError(t, err, "%s: %s advertised % x", what, m.member, m.meta)
	}
}

// advertisingDelegate records every metadata a member advertises
// (NodeMeta's result: at Create and at every UpdateNode).
type advertisingDelegate struct {
	memberlist.Delegate
	member string
	log    *metaLog
}

func (d advertisingDelegate) NodeMeta(limit int) []byte {
	b := d.Delegate.NodeMeta(limit)
	d.log.add(d.member, b)
	return b
}

// recordingEvents records every metadata memberlist shows the member
// table. With previous set it gives the table the previous release's
// reading of it: what that decoder refuses arrives as none, so it is
// counted as malformed and the member's boot stays unknown, as there.
type recordingEvents struct {
	inner    memberlist.EventDelegate
	log      *metaLog
	previous bool
}

func (e recordingEvents) read(n *memberlist.Node) *memberlist.Node {
	e.log.add(n.Name, n.Meta)
	if _, _, _, err := previousDecodeMeta(n.Name, n.Meta); err != nil && e.previous {
		c := *n
		c.Meta = nil
		return &c
	}
	return n
}

func (e recordingEvents) NotifyJoin(n *memberlist.Node)   { e.inner.NotifyJoin(e.read(n)) }
func (e recordingEvents) NotifyUpdate(n *memberlist.Node) { e.inner.NotifyUpdate(e.read(n)) }
func (e recordingEvents) NotifyLeave(n *memberlist.Node)  { e.inner.NotifyLeave(e.read(n)) }

// watch records the metadata memberlist shows g (its held method is what
// g holds); call it before Start.
func watch(g *gnode) *metaLog {
	held := &metaLog{}
	prev := g.configure
	g.configure = func(mc *memberlist.Config) {
		if prev != nil {
			prev(mc)
		}
		mc.Events = recordingEvents{inner: mc.Events, log: held}
	}
	return held
}

// upgradingCluster starts, on a fresh network of seed, a member of the
// previous release named old (boot oldBoot, newPreviousNode) and two of
// this release, new0 and new1 (boots newBoot and newBoot+1), that join it,
// and waits until all see each other. It returns the network, the old
// member and all three, the old one first.
func upgradingCluster(t *testing.T, seed, oldBoot, newBoot uint64, o gossipOpts) (*memtransport.Network, *gnode, []*gnode) {
	t.Helper()
	nw := newNetwork(t, seed)
	old, _ := newPreviousNode(t, nw, "old", oldBoot, o)
	require.NoError(t, old.Start(context.Background()))
	nodes := []*gnode{old}
	for i := range uint64(2) {
		nodes = append(nodes, startGossipNode(t, nw, fmt.Sprintf("new%d", i), newBoot+i, o, old.tr.Addr()))
	}
	eventually(t, "all members see each other", func() bool { return allSee(nodes, nodes) })
	return nw, old, nodes
}

// newPreviousNode is a member that behaves as the previous release does
// at the membership level: it advertises version 1 metadata and no level
// (memberlist's delegate protocol versions all 0), judges nobody, sends
// and reads no push/pull state, and reads others' metadata with the
// previous release's decoder. It disseminates batches like any member.
// seen records every metadata it was shown.
func newPreviousNode(t *testing.T, nw *memtransport.Network, name string, boot uint64, o gossipOpts, seeds ...string) (*gnode, *metaLog) {
	t.Helper()
	g := newGossipNode(t, nw, name, boot, o, seeds...)
	g.settings = nil
	seen := &metaLog{}
	g.configure = func(mc *memberlist.Config) {
		mc.DelegateProtocolMax = 0
		mc.Alive, mc.Merge = nil, nil
		mc.Events = recordingEvents{inner: mc.Events, log: seen, previous: true}
	}
	return g, seen
}

// newRecordedNode is newGossipNode whose advertised metadata is recorded
// in log.
func newRecordedNode(t *testing.T, nw *memtransport.Network, name string, boot uint64, o gossipOpts, log *metaLog, seeds ...string) *gnode {
	t.Helper()
	g := newGossipNode(t, nw, name, boot, o, seeds...)
	member := g.MemberName()
	g.configure = func(mc *memberlist.Config) {
		mc.Delegate = advertisingDelegate{Delegate: mc.Delegate, member: member, log: log}
	}
	return g
}

// advertise reports whether every node advertises metadata version v.
func advertise(nodes []*gnode, v uint32) bool {
	for _, n := range nodes {
		if n.metaVersion.Load() != v {
			return false
		}
	}
	return true
}

// holdsVersion reports whether every node holds version v metadata for
// every other node in of; held[i] watches nodes[i].
func holdsVersion(nodes []*gnode, held []*metaLog, of []*gnode, v byte) bool {
	for i, n := range nodes {
		got := map[string][]byte{}
		for _, m := range held[i].held(n.Cluster) {
			got[m.member] = m.meta
		}
		for _, o := range of {
			if o != n && (len(got[o.MemberName()]) == 0 || got[o.MemberName()][0] != v) {
				return false
			}
		}
	}
	return true
}

// TestCompatMixedCluster: new nodes that join a member of the previous
// release advertise only what it reads (version 1: it never counts a
// malformed metadata), every batch counts in every view, theirs in its and
// its in theirs (the exact union); once it is gone they switch to version
// 2, and a joiner with another sub-window is refused at join.
func TestCompatMixedCluster(t *testing.T) {
	t.Parallel()
	o := defaultGossipOpts()
	nw := newNetwork(t, 70)
	old, seen := newPreviousNode(t, nw, "old", 0x01d0, o)
	require.NoError(t, old.Start(context.Background()))
	advertised := &metaLog{}
	nodes := []*gnode{old}
	var held []*metaLog
	for i := range 2 {
		n := newRecordedNode(t, nw, fmt.Sprintf("new%d", i), uint64(0x2e00+i), o, advertised, old.tr.Addr())
		held = append(held, watch(n))
		require.NoError(t, n.Start(context.Background()))
		nodes = append(nodes, n)
	}
	eventually(t, "all members see each other", func() bool { return allSee(nodes, nodes) })
	dests := testDests(4)
	converge(t, newUnion(t, o.tracker), nodes, nodes, dests, 1)

	require.True(t, advertise(nodes[1:], metaVersion1), "version 1 while a member of the previous release is up")
	requireOldReadable(t, advertised.all(), "every metadata a new node advertised")
	requireOldReadable(t, seen.all(), "every metadata the old member was shown")
	requireOldReadable(t, seen.held(old.Cluster), "the metadata the old member holds")
	require.Zero(t, old.Stats().BadMetadata)
	for _, n := range nodes {
		require.Empty(t, warningsButClock(n.Cluster), n.MemberName())
		for _, m := range n.Members() {
			require.NotZero(t, m.BootID, "%s knows %s's boot", n.MemberName(), m.Member)
		}
	}
	require.Equal(t, Level1, ClusterLevel(nodes[1].Members()))

	require.NoError(t, old.Close())
	news := nodes[1:]
	eventually(t, "the new nodes switch to version 2 once the old one is gone", func() bool {
		return advertise(news, metaVersion2) && holdsVersion(news, held, news, metaVersion2)
	})
	require.Equal(t, Level2, ClusterLevel(news[0].Members()))

	ot := o
	ot.tracker.SubWindows = 8 // 1 s sub-windows against the cluster's 500 ms
	odd := newGossipNode(t, nw, "odd", 0x0dd, ot, news[0].tr.Addr())
	err := odd.Start(context.Background())
	require.ErrorIs(t, err, ErrJoinRefused)
	require.ErrorContains(t, err, "-sub-window 1s differs from the cluster's 500ms")
	eventually(t, "the seed reports the refused joiner", func() bool {
		return hasWarning(news[0].Cluster, WarnConfigMismatch, "member "+odd.MemberName(), "refused at join")
	})
	eventually(t, "nobody lists it", func() bool { return allSee(news, news) })
}

// TestCompatOldMemberJoins: a member of the previous release joining a
// cluster that advertises version 2 makes every member fall back to
// version 1 with one metadata update; it then knows every member's boot,
// and every batch counts in every view (the exact union). When it leaves,
// the others switch to version 2 again.
func TestCompatOldMemberJoins(t *testing.T) {
	t.Parallel()
	o := defaultGossipOpts()
	nw := newNetwork(t, 71)
	var nodes []*gnode
	var held []*metaLog
	for i := range 3 {
		var seeds []string
		if i > 0 {
			seeds = []string{nodes[0].tr.Addr()}
		}
		n := newGossipNode(t, nw, fmt.Sprintf("g%d", i), uint64(0x60550000+i), o, seeds...)
		held = append(held, watch(n))
		require.NoError(t, n.Start(context.Background()))
		nodes = append(nodes, n)
	}
	eventually(t, "a cluster of new nodes advertises version 2", func() bool {
		return allSee(nodes, nodes) && advertise(nodes, metaVersion2) && holdsVersion(nodes, held, nodes, metaVersion2)
	})

	old, seen := newPreviousNode(t, nw, "old", 0x01d1, o, nodes[1].tr.Addr())
	require.NoError(t, old.Start(context.Background()))
	all := append([]*gnode{old}, nodes...)
	eventually(t, "everyone falls back to version 1, and the old member reads every boot", func() bool {
		if !advertise(nodes, metaVersion1) || !allSee(all, all) {
			return false
		}
		for _, m := range old.Members() {
			if m.BootID == 0 {
				return false
			}
		}
		return true
	})
	t.Logf("the old member counted %d malformed metadata, the version 2 it was shown at join (%d metadata seen)",
		old.Stats().BadMetadata, len(seen.all()))
	requireOldReadable(t, seen.held(old.Cluster), "the metadata the old member holds after the fall back")
	dests := testDests(4)
	u := newUnion(t, o.tracker)
	converge(t, u, all, all, dests, 2)
	for _, n := range all {
		// Only what a falsely declared death makes a node refuse (see
		// converge): the old member's batches and digests are taken.
		rejected := n.GossipStats().Rejected
		delete(rejected, RejectUnknownSender)
		require.Empty(t, rejected, n.MemberName())
	}

	require.NoError(t, old.Close())
	eventually(t, "version 2 again once it left", func() bool {
		return advertise(nodes, metaVersion2) && holdsVersion(nodes, held, nodes, metaVersion2)
	})
}

// TestCompatMismatchedJoinerDuringUpgrade: while a member of the previous
// release is up everyone advertises version 1, so no metadata shows
// settings. A joiner whose seed is of this release is still refused at
// join (the seed's push/pull state carries its settings); so is one whose
// seed is the old member (Start then pushes and pulls with a member of this
// release the join taught it). One that could reach no member of this
// release at Start is judged later: the push/pull syncs show its settings
// to the others, which report config_mismatch, stop listing it, and
// exclude its batches from their views.
func TestCompatMismatchedJoinerDuringUpgrade(t *testing.T) {
	t.Parallel()
	o := defaultGossipOpts()
	o.tune = func(c *Config) { c.Timing.PushPullInterval = 200 * time.Millisecond }
	nw, old, nodes := upgradingCluster(t, 72, 0x01d2, 0x2e10, o)
	require.True(t, advertise(nodes[1:], metaVersion1))

	// The same sub-window, another window: its batches would be accepted
	// and count, so only the refusal keeps them out.
	ot := o
	ot.tracker.Window, ot.tracker.SubWindows = 4*time.Second, 8
	refused := newGossipNode(t, nw, "odd", 0x0dd1, ot, nodes[1].tr.Addr())
	err := refused.Start(context.Background())
	require.ErrorIs(t, err, ErrJoinRefused, "a seed of this release sends its settings in the join's push/pull state")
	require.ErrorContains(t, err, "seed "+nodes[1].tr.Addr()+": -window 4s differs from the cluster's 8s (member new0-00002e10 at ")

	viaOld := newGossipNode(t, nw, "odd1", 0x0dd3, ot, old.tr.Addr())
	err = viaOld.Start(context.Background())
	require.ErrorIs(t, err, ErrJoinRefused, "Start checks with a member of this release the old seed showed")
	require.ErrorContains(t, err, "member "+nodes[1].tr.Addr()+": -window 4s differs from the cluster's 8s (member new0-00002e10 at ")
	require.Zero(t, viaOld.Stats().JoinFailures, "the check is no seed join")

	odd := newGossipNode(t, nw, "odd2", 0x0dd2, ot, old.tr.Addr())
	news := []string{nodes[1].tr.Addr(), nodes[2].tr.Addr()}
	nw.Partition([]string{odd.tr.Addr()}, news)
	require.NoError(t, odd.Start(context.Background()), "no member of this release reachable: nobody could judge it at join")
	nw.Heal()
	eventually(t, "every new node reports it and stops listing it", func() bool {
		for _, n := range nodes[1:] {
			if !hasWarning(n.Cluster, WarnConfigMismatch, "member "+odd.MemberName(), "advertises -window 4s (this node's is 8s)") {
				return false
			}
		}
		return allSee(nodes[1:], nodes)
	})
	for _, n := range nodes[1:] {
		t.Logf("%s: %v", n.MemberName(), n.Warnings())
	}
	require.True(t, hasWarning(odd.Cluster, WarnConfigMismatch, "advertises -window 8s (this node's is 4s)"), "it says so too")

	// It records beside the others, in the same epoch; the new nodes'
	// views hold the union of the others only. (The old member counts its
	// batches, as it did.)
	dests := testDests(4)
	u := newUnion(t, o.tracker)
	e := recordEpoch(t, o.tracker, nodes, u.ref, dests, randomSamples(3, 50))
	u.epochs = append(u.epochs, e)
	for d, dest := range dests {
		for _, ms := range randomSamples(4, 50)(0, d) {
			odd.local.RecordMillis(dest, ms, o.tracker.EpochStart(e))
		}
	}
	require.Equal(t, e, o.tracker.Epoch(time.Now()), "recording took longer than half a sub-window")
	eventually(t, "every new node holds every batch of the epoch", func() bool {
		return holdsEpoch(nodes[1:], nodes, e) && holdsEpoch([]*gnode{old}, []*gnode{odd}, e)
	})
	ok, why := viewsEqual(nodes[1:], dests, u.counts(t))
	require.True(t, ok, why)
}

// TestMetaVersionFor: version 2 needs settings, another member of this
// project up, every member up at Level2 and no older member dead (it may
// come back); left members, refused ones (not in Members) and members
// whose metadata is not ours do not count.
func TestMetaVersionFor(t *testing.T) {
	t.Parallel()
	self := Member{Member: "a-00000001", State: StateAlive, Level: CurrentLevel}
	m := func(name string, s State, lvl uint8) Member { return Member{Member: name, State: s, Level: lvl} }
	for _, tc := range []struct {
		name    string
		members []Member
		noStore bool
		want    uint32
	}{
		{"alone", []Member{self}, false, metaVersion1},
		{"alone, nobody listed", nil, false, metaVersion1},
		{"with a new member", []Member{self, m("b", StateAlive, Level2)}, false, metaVersion2},
		{"with a suspect new member", []Member{self, m("b", StateSuspect, Level2)}, false, metaVersion2},
		{"with an old member", []Member{self, m("b", StateAlive, Level2), m("c", StateAlive, Level1)}, false, metaVersion1},
		{"the old member dead: it may be back", []Member{self, m("b", StateAlive, Level2), m("c", StateDead, Level1)}, false, metaVersion1},
		{"a new member dead", []Member{self, m("b", StateAlive, Level2), m("c", StateDead, Level2)}, false, metaVersion2},
		{"a foreign member dead", []Member{self, m("b", StateAlive, Level2), m("x", StateDead, 0)}, false, metaVersion2},
		{"the old member left", []Member{self, m("b", StateAlive, Level2), m("c", StateLeft, Level1)}, false, metaVersion2},
		{"only a foreign member", []Member{self, m("x", StateAlive, 0)}, false, metaVersion1},
		{"a foreign member beside", []Member{self, m("b", StateAlive, Level2), m("x", StateAlive, 0)}, false, metaVersion2},
		{"a later release", []Member{self, m("b", StateAlive, 3)}, false, metaVersion2},
		{"no store", []Member{self, m("b", StateAlive, Level2)}, true, metaVersion1},
	} {
		require.Equal(t, tc.want, metaVersionFor(tc.members, self.Member, !tc.noStore), tc.name)
	}
	require.Equal(t, uint8(0), ClusterLevel(nil))
	require.Equal(t, uint8(0), ClusterLevel([]Member{m("x", StateAlive, 0), m("c", StateDead, Level1)}))
	require.Equal(t, Level1, ClusterLevel([]Member{self, m("c", StateSuspect, Level1)}))
	require.Equal(t, Level2, ClusterLevel([]Member{self, m("b", StateAlive, Level2)}), "the lowest: a member that cannot run protocol v2")
	require.Equal(t, CurrentLevel, ClusterLevel([]Member{self, m("b", StateAlive, CurrentLevel+1)}), "a later release does not raise it above ours")
	require.Equal(t, Level1, memberLevel(0), "a release before the levels advertises 0")
	require.Equal(t, Level2, memberLevel(2))
}

// TestJudgeState: a push/pull state with other settings refuses its
// sender (marked refused if listed: out of Members and NumAlive, dead to
// the protocol) and warns; the same settings, this node's own state, none,
// and a node without settings judge nothing; a malformed state is counted.
func TestJudgeState(t *testing.T) {
	t.Parallel()
	nw, g, same := newJudge(t, 73, 0x1d6f)
	other := same
	other.window = 4 * time.Second
	g.observe(&memberlist.Node{Name: MemberName("odd", 4), Addr: []byte{127, 0, 0, 9}, Port: 7946,
		Meta: encodeMeta("odd", 4, false, nil), DMax: CurrentLevel}, EventJoin, false)
	require.Len(t, g.Members(), 1)
	require.Equal(t, 1, g.NumAlive())

	g.judgeState(encodeMeta("judge", 0x1d6f, false, &other), true)
	g.judgeState(encodeMeta("same", 1, false, &same), true)
	g.judgeState(nil, true)
	require.Empty(t, g.Warnings())
	require.Zero(t, g.Stats().BadMetadata)
	g.judgeState(encodeMeta("v1", 2, false, nil), false)
	g.judgeState([]byte{2, 0}, false)
	require.Equal(t, uint64(2), g.Stats().BadMetadata, "a state without settings or unreadable")

	g.judgeState(encodeMeta("odd", 4, false, &other), false)
	require.Equal(t, []Warning{{WarnConfigMismatch,
		"member odd-00000004 (127.0.0.9:7946) advertises -window 4s (this node's is 8s): refused as a member"}}, g.Warnings())
	require.Empty(t, g.Members(), "a refused member is no member")
	require.Zero(t, g.NumAlive())
	pm := g.protocolMembers()
	require.Len(t, pm, 1)
	require.Equal(t, StateDead, pm[0].State, "the protocol excludes it")
	g.judgeState(encodeMeta("stranger", 5, false, &other), true)
	require.True(t, hasWarning(g.Cluster, WarnConfigMismatch, "member stranger-00000005 advertises -window 4s (this node's is 8s): refused at join"))

	// During Start's initial joins, only the state of the address dialled
	// judges the join: equal settings judge it, other ones refuse it.
	for i, name := range []string{"seed", "seed2"} {
		g.observe(&memberlist.Node{Name: MemberName(name, uint64(7+i)), Addr: []byte{127, 0, 0, byte(10 + i)}, Port: 7946,
			Meta: encodeMeta(name, uint64(7+i), false, nil), DMax: CurrentLevel}, EventJoin, false)
	}
	g.dial(netip.MustParseAddrPort("127.0.0.10:7946"))
	g.judgeState(encodeMeta("seed2", 8, false, &other), true)
	rs, judged := g.dial(netip.MustParseAddrPort("127.0.0.10:7946"))
	require.Empty(t, rs, "another member's state, as when it joins this node meanwhile")
	require.False(t, judged)
	g.judgeState(encodeMeta("seed", 7, false, &same), true)
	rs, judged = g.dial(netip.MustParseAddrPort("127.0.0.11:7946"))
	require.Empty(t, rs)
	require.True(t, judged, "the seed's settings are this node's")
	g.judgeState(encodeMeta("seed2", 8, false, &other), true)
	rs, judged = g.dial(netip.AddrPort{})
	require.Equal(t, []string{"-window 8s differs from the cluster's 4s (member seed2-00000008 at 127.0.0.11:7946)"}, rs)
	require.True(t, judged)

	plain, err := New(memConfig(t, "plain", 6, nw.NewTransport()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = plain.Close() })
	plain.judgeState(encodeMeta("odd", 4, false, &other), true)
	require.Empty(t, plain.Warnings(), "no Store, no settings to judge by")
	require.Nil(t, plain.localState())
	require.Equal(t, g.meta[1][0], g.localState(), "the state is the version 2 metadata")
}

var updateGolden = flag.Bool("update", false, "rewrite testdata/meta")

// goldenMetas are the pinned metadata of both versions, with and without
// the leaving flag: a member db-1 of boot 0x0123456789abcdef, with a 60 s
// window of 6 s sub-windows and a 1 ms–1 h layout of 2 digits.
func goldenMetas() map[string][]byte {
	st := settings{window: time.Minute, subWindow: 6 * time.Second,
		layout: tracker.Layout{Lowest: 1, Highest: 3_600_000, SignificantDigits: 2}}
	out := map[string][]byte{}
	for _, leaving := range []bool{false, true} {
		suffix := ""
		if leaving {
			suffix = "-leaving"
		}
		out["v1"+suffix] = encodeMeta("db-1", 0x0123456789abcdef, leaving, nil)
		out["v2"+suffix] = encodeMeta("db-1", 0x0123456789abcdef, leaving, &st)
	}
	return out
}

// TestMetaGolden pins the bytes of both metadata versions
// (testdata/meta/*.hex, rewritten with -update): version 1 is what the
// previous release reads, and it reads it as this release does; version 2
// it refuses, which is why a member advertises version 2 only once every
// member up speaks Level2.
func TestMetaGolden(t *testing.T) {
	t.Parallel()
	for name, b := range goldenMetas() {
		path := filepath.Join("testdata", "meta", name+".hex")
		if *updateGolden {
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
			require.NoError(t, os.WriteFile(path, []byte(hex.EncodeToString(b)+"\n"), 0o644))
		}
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		want, err := hex.DecodeString(strings.TrimSpace(string(raw)))
		require.NoError(t, err)
		require.Equal(t, hex.EncodeToString(want), hex.EncodeToString(b),
			"%s: metadata changed: a format change needs a new version (see member.go); regenerate with -update only if it is intended", name)

		m, err := decodeMeta("db-1-89abcdef", want)
		require.NoError(t, err, name)
		require.Equal(t, strings.HasSuffix(name, "-leaving"), m.leaving, name)
		pname, pboot, pleaving, perr := previousDecodeMeta("db-1-89abcdef", want)
		if strings.HasPrefix(name, "v1") {
			require.NoError(t, perr, "%s: the previous release reads version 1", name)
			require.Equal(t, [3]any{m.name, m.boot, m.leaving}, [3]any{pname, pboot, pleaving}, name)
			require.Nil(t, m.settings, name)
		} else {
			require.ErrorIs(t, perr, errBadMeta, "%s: the previous release refuses version 2", name)
			require.Equal(t, goldenMetas()["v2"][11:], want[11:], "%s: the settings follow the name", name)
			require.NotNil(t, m.settings, name)
		}
	}
}

// TestCompatOldMemberCrashes: a member of the previous release that
// crashes holds the others at version 1 while it is dead in their tables
// (it may be back), and they switch to version 2 once it is forgotten
// (Timing.DeadRetention, here 2 s).
func TestCompatOldMemberCrashes(t *testing.T) {
	t.Parallel()
	o := defaultGossipOpts()
	o.tune = func(c *Config) { c.Timing.DeadRetention = 2 * time.Second }
	nw, old, nodes := upgradingCluster(t, 74, 0x01d4, 0x2e40, o)
	news := nodes[1:]
	require.True(t, advertise(news, metaVersion1))

	require.True(t, nw.Crash(old.tr.Addr()))
	// Closed now, cut off (its leave never arrives), so that its probes in
	// flight end long before the test does.
	require.NoError(t, old.Close())
	eventually(t, "the new nodes list the old one as dead", func() bool {
		for _, n := range news {
			if !slices.ContainsFunc(n.Members(), func(m Member) bool { return m.Member == old.MemberName() && m.State == StateDead }) {
				return false
			}
		}
		return true
	})
	require.True(t, advertise(news, metaVersion1), "a dead older member may be back: still version 1")
	eventually(t, "version 2 once it is forgotten", func() bool { return advertise(news, metaVersion2) })
	for _, n := range news {
		require.NotContains(t, upMembers(n.Cluster), old.MemberName())
	}
}
