package cluster

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// TestProtocolScenarios runs the protocol scenarios of testdata/protocol:
// a few Protocols, each over its own tracker and fleet view, on a fake
// clock and a fake network that holds every message until a command
// delivers or drops it. Each command prints what the protocols did: the
// messages they sent (type, from, to, keys) with what the receivers made
// of them, and when each next needs a tick. A behaviour change shows as a
// diff of those files; regenerate them with
//
//	go test -run TestProtocolScenarios ./cluster/ -rewrite
//
// and read the diff. Commands (t is a duration since the start, which is
// the start of epoch e0 on the default grid of 6 s sub-windows):
//
//	init nodes=(a,b,c) [members=(a,b)] [jitter=500ms] [ae=2s]
//	     [bulk-peers=3] [bulk-delay=800ms] [max-dests=0] [max-buckets=0]
//	     [skew=(c:-20s)] [old=(c)] [v2] [v1=(c)] [owners=2]
//	     [level4=(a,b)] [relay-from=100] [window=60s] [sub-windows=10]
//	    the nodes (boot IDs 1, 2, …), each ticked once at t=0 to start its
//	    schedule; members are those every node of them lists alive at the
//	    start (default all); a node outside lists only itself; an old node
//	    seals as a node older than timed-out counts: its batches carry none
//	    and decode with censoring unknown. The nodes speak protocol v1
//	    only, or with v2 protocol v2 (destination-owned aggregation) but
//	    those of v1= (as a node of an older release); v2 nodes
//	    advertise Level3 (as the release before packed aggregates and
//	    relays) but those of level4=; relay-from is ProtocolConfig.RelayFrom;
//	    window and sub-windows set the grid (tracker.Config)
//	owners [n=(a,b)] dest=db   each node's owners of dest (protocol v2)
//	record n=a dest=db ms=12 [count=1] [timed-out]   samples in a's local
//	    tracker, now; timed-out records attempts that timed out at ms
//	tick [n=(a,b)] [t=6.5s]   tick the nodes (default all) at t, or else
//	    at the earliest of their next ticks, only the nodes due then
//	deliver [from=a] [to=b] [all]   deliver the matching messages held, in
//	    the order sent; with all, their answers too until none is left
//	drop [from=a] [to=b]     lose the matching messages held
//	member [n=(a,b)] c=dead [d=alive]    set a member's state (alive,
//	    suspect, dead, left, or gone) in the views of the nodes (default
//	    every node but the member), each then given to SetMembers
//	join n=c        c joins: every node lists it alive, it lists every member
//	inject from=a to=b epoch=+2 [dest=x]   deliver a batch of a's made by
//	    hand, its epoch relative to b's current one (an origin that is no
//	    node has boot 99)
//	view [n=(a,b)] dest=db [censored]   each node's fleet view of dest:
//	    samples, peers; with censored also its timed-out samples, M
//	    (max-completed), and what a timeout decision reads: failing, or the
//	    value and the view it comes from
//	keys [n=(a,b)]           the batch keys each node holds
//	stats [n=(a,b)]          each node's ProtocolStats
//	warnings [n=(a,b)]       each node's clock_skew warnings
//
// init's skew=(c:-20s) runs c's clock that far from the scenario's: every
// command gives c its own time, and "next:" shows the scenario's.
func TestProtocolScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/protocol", func(t *testing.T, path string) {
		var s *scenario
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd == "init" {
				s = newScenario(t, d)
			} else if s == nil {
				t.Fatalf("%s: init first", d.Pos)
			}
			return s.run(t, d)
		})
	})
}

// scenario is the state of one scenario file.
type scenario struct {
	trk     tracker.Config
	start   time.Time
	e0      int64
	now     time.Duration
	nodes   []*snode
	byName  map[string]*snode
	cluster []string  // the nodes that list each other
	pending []Message // held by the network, in the order sent
	from    []string  // the sender of each pending message
	dec     *codec.Decoder
	out     strings.Builder
}

// snode is one node of a scenario.
type snode struct {
	name  string
	boot  uint64
	proto uint8 // the protocol it runs
	level uint8 // the level it advertises
	p     *Protocol
	local *tracker.SyncTracker[string]
	fleet *tracker.Fleet
	owned *tracker.Owned
	view  map[string]Member // member name → member, as this node lists them
	skew  time.Duration     // its clock minus the scenario's
}

func newScenario(t *testing.T, d *datadriven.TestData) *scenario {
	s := &scenario{trk: tracker.DefaultConfig(), byName: map[string]*snode{}}
	d.MaybeScanArgs(t, "window", &s.trk.Window)
	d.MaybeScanArgs(t, "sub-windows", &s.trk.SubWindows)
	require.NoError(t, s.trk.Validate(), d.Pos)
	s.e0 = s.trk.Epoch(time.UnixMilli(1_700_000_000_000)) + 1
	s.start = s.trk.EpochStart(s.e0)
	var err error
	s.dec, err = codec.NewDecoder(s.trk.Layout())
	require.NoError(t, err)
	g := DefaultGossip()
	delay := 800 * time.Millisecond
	d.MaybeScanArgs(t, "jitter", &g.SealJitter)
	d.MaybeScanArgs(t, "ae", &g.AntiEntropyInterval)
	d.MaybeScanArgs(t, "bulk-delay", &delay)
	d.MaybeScanArgs(t, "bulk-peers", &g.BulkSyncPeers)
	d.MaybeScanArgs(t, "owners", &g.Owners)
	var v1, level4 []string
	if d.HasArg("v1") {
		v1 = argList(t, d, "v1")
	}
	if d.HasArg("level4") {
		level4 = argList(t, d, "level4")
	}
	relayFrom := 0
	d.MaybeScanArgs(t, "relay-from", &relayFrom)
	var lim SealLimits
	d.MaybeScanArgs(t, "max-dests", &lim.MaxDestinations)
	d.MaybeScanArgs(t, "max-buckets", &lim.MaxBuckets)
	names := argList(t, d, "nodes")
	s.cluster = names
	if d.HasArg("members") {
		s.cluster = argList(t, d, "members")
	}
	var old []string
	if d.HasArg("old") {
		old = argList(t, d, "old")
	}
	for i, name := range names {
		n := &snode{name: name, boot: uint64(i + 1), view: map[string]Member{}, proto: ProtocolV2}
		n.local, err = tracker.NewSync[string](s.trk)
		require.NoError(t, err)
		fc := tracker.DefaultFleetConfig()
		fc.Tracker, fc.Self, fc.MaxOriginShare = s.trk, name, 0
		n.fleet, err = tracker.NewFleet(fc, n.local)
		require.NoError(t, err)
		n.owned, err = tracker.NewOwned(fc)
		require.NoError(t, err)
		ng := g
		if !d.HasArg("v2") || slices.Contains(v1, name) {
			ng.Protocol, n.proto = 1, 1
		}
		n.level = levelOf(n.proto)
		if n.proto >= ProtocolV2 && slices.Contains(level4, name) {
			n.level = Level4
		}
		seal := func(e int64, now time.Time) []tracker.DestCounts { return tracker.SealedSubWindow(n.local, e, now) }
		if slices.Contains(old, name) {
			seal = func(e int64, now time.Time) []tracker.DestCounts {
				return withoutCensoring(tracker.SealedSubWindow(n.local, e, now))
			}
		}
		n.p, err = NewProtocol(ProtocolConfig{
			Name: name, BootID: n.boot, Tracker: s.trk, Gossip: ng, Store: n.fleet, BulkSyncDelay: delay, SealLimits: lim,
			Seal:  seal,
			Owned: n.owned, Aggregates: n.fleet, RelayFrom: relayFrom, Level: n.level,
		})
		require.NoError(t, err)
		s.nodes = append(s.nodes, n)
		s.byName[name] = n
	}
	if d.HasArg("skew") {
		for _, v := range argList(t, d, "skew") {
			name, off, ok := strings.Cut(v, ":")
			require.True(t, ok, "%s: skew=(node:duration)", d.Pos)
			n, known := s.byName[name]
			require.True(t, known, "%s: no node %q", d.Pos, name)
			n.skew, err = time.ParseDuration(off)
			require.NoError(t, err, d.Pos)
		}
	}
	for _, n := range s.nodes {
		n.see(n, StateAlive)
		if slices.Contains(s.cluster, n.name) {
			for _, m := range s.cluster {
				n.see(s.byName[m], StateAlive)
			}
		}
		n.p.SetMembers(n.members(), s.start.Add(n.skew))
	}
	return s
}

// see sets m's state in n's view.
func (n *snode) see(m *snode, st State) {
	n.view[m.member()] = Member{Name: m.name, Member: m.member(), BootID: m.boot, State: st, Level: m.level}
}

func (n *snode) member() string { return MemberName(n.name, n.boot) }

// members is n's view as Cluster.Members lists it: sorted by name, then
// member name.
func (n *snode) members() []Member {
	out := make([]Member, 0, len(n.view))
	for _, m := range n.view {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Member, b.Member)) })
	return out
}

func argList(t *testing.T, d *datadriven.TestData, key string) []string {
	arg, ok := d.Arg(key)
	require.True(t, ok, "%s: %s needs %s=", d.Pos, d.Cmd, key)
	return arg.Vals
}

// chosen returns the nodes named by n=, or every node.
func (s *scenario) chosen(t *testing.T, d *datadriven.TestData) []*snode {
	if !d.HasArg("n") {
		return s.nodes
	}
	var out []*snode
	for _, name := range argList(t, d, "n") {
		n, ok := s.byName[name]
		require.True(t, ok, "%s: no node %q", d.Pos, name)
		out = append(out, n)
	}
	return out
}

func (s *scenario) printf(format string, args ...any) { fmt.Fprintf(&s.out, format, args...) }

// at formats a time as the duration since the start, to the millisecond.
func (s *scenario) at(tm time.Time) string {
	if tm.IsZero() {
		return "now"
	}
	return tm.Sub(s.start).Round(time.Millisecond).String()
}

func (s *scenario) run(t *testing.T, d *datadriven.TestData) string {
	s.out.Reset()
	now := func() time.Time { return s.start.Add(s.now) }
	at := func(n *snode) time.Time { return now().Add(n.skew) } // n's clock
	switch d.Cmd {
	case "init":
		for _, n := range s.nodes {
			s.printf("%s: boot %d, jitter %v", n.name, n.boot, n.p.Jitter().Round(time.Millisecond))
			if n.skew != 0 {
				s.printf(", clock %v off", n.skew)
			}
			s.printf("\n")
			s.send(n.name, n.p.Tick(at(n)), "") // starts its schedule
		}
	case "record":
		n := s.chosen(t, d)[0]
		var dest string
		var ms uint64
		count := 1
		d.ScanArgs(t, "dest", &dest)
		d.ScanArgs(t, "ms", &ms)
		d.MaybeScanArgs(t, "count", &count)
		for range count {
			if d.HasArg("timed-out") {
				n.local.RecordTimeoutMillis(dest, ms, at(n))
			} else {
				n.local.RecordMillis(dest, ms, at(n))
			}
		}
		return ""
	case "tick":
		nodes := s.chosen(t, d)
		if d.HasArg("t") {
			var at time.Duration
			d.ScanArgs(t, "t", &at)
			require.GreaterOrEqual(t, at, s.now, "%s: time goes forward", d.Pos)
			s.now = at
		} else {
			next := nodes[0].p.Next().Add(-nodes[0].skew) // on the scenario's clock
			for _, n := range nodes[1:] {
				if nx := n.p.Next().Add(-n.skew); nx.Before(next) {
					next = nx
				}
			}
			if t := next.Sub(s.start); t > s.now {
				s.now = t
			}
			nodes = slices.DeleteFunc(slices.Clone(nodes), func(n *snode) bool { return n.p.Next().After(at(n)) })
		}
		s.printf("t=%v\n", s.now.Round(time.Millisecond))
		for _, n := range nodes {
			before := n.p.Stats()
			msgs := n.p.Tick(at(n))
			after := n.p.Stats()
			if after.Seals > before.Seals {
				s.printf("%s: sealed %d epoch(s)\n", n.name, after.Seals-before.Seals)
			}
			s.send(n.name, msgs, "")
		}
	case "deliver":
		from, to := s.filters(d)
		for first := true; first || d.HasArg("all"); first = false {
			var batch []Message
			var senders []string
			for i := 0; i < len(s.pending); {
				if (from == "" || s.from[i] == from) && (to == "" || s.pending[i].To == s.byName[to].member()) {
					batch, senders = append(batch, s.pending[i]), append(senders, s.from[i])
					s.pending, s.from = slices.Delete(s.pending, i, i+1), slices.Delete(s.from, i, i+1)
					continue
				}
				i++
			}
			if len(batch) == 0 {
				break
			}
			for i, m := range batch {
				rcv := s.receiver(m)
				r, out := rcv.p.Receive(m.Payload, at(rcv))
				s.printf("%s: %s\n", s.describe(senders[i], m), receipt(r))
				s.send(rcv.name, out, "  ")
			}
		}
	case "drop":
		from, to := s.filters(d)
		for i := 0; i < len(s.pending); {
			if (from == "" || s.from[i] == from) && (to == "" || s.pending[i].To == s.byName[to].member()) {
				s.printf("%s: lost\n", s.describe(s.from[i], s.pending[i]))
				s.pending, s.from = slices.Delete(s.pending, i, i+1), slices.Delete(s.from, i, i+1)
				continue
			}
			i++
		}
	case "member":
		var changes []datadriven.CmdArg
		for _, a := range d.CmdArgs {
			if a.Key != "n" {
				changes = append(changes, a)
			}
		}
		for _, n := range s.chosen(t, d) {
			changed := false
			for _, c := range changes {
				m, ok := s.byName[c.Key]
				require.True(t, ok, "%s: no node %q", d.Pos, c.Key)
				if m == n && !d.HasArg("n") {
					continue // a node's view of itself changes only when named
				}
				if c.SingleVal(t) == "gone" {
					delete(n.view, m.member())
				} else {
					var st State
					require.NoError(t, st.UnmarshalText([]byte(c.SingleVal(t))), d.Pos)
					n.see(m, st)
				}
				changed = true
			}
			if changed {
				n.p.SetMembers(n.members(), at(n))
			}
		}
	case "join":
		j := s.chosen(t, d)[0]
		for _, name := range s.cluster {
			m := s.byName[name]
			m.see(j, StateAlive)
			j.see(m, StateAlive)
			m.p.SetMembers(m.members(), at(m))
		}
		j.p.SetMembers(j.members(), at(j))
		s.cluster = append(s.cluster, j.name)
	case "inject":
		var from, to, dest string
		var rel int64
		dest = "x"
		d.ScanArgs(t, "from", &from)
		d.ScanArgs(t, "to", &to)
		d.ScanArgs(t, "epoch", &rel)
		d.MaybeScanArgs(t, "dest", &dest)
		rcv := s.byName[to]
		boot := uint64(99) // an origin that is no node
		if o, ok := s.byName[from]; ok {
			boot = o.boot
		}
		e := s.trk.Epoch(at(rcv)) + rel
		payload, err := codec.AppendBatch(nil, tracker.Batch{
			Key:    tracker.BatchKey{Origin: from, Boot: boot, Epoch: e},
			Layout: s.trk.Layout(),
			Dests:  []tracker.DestCounts{{Dest: dest, Total: 1, Buckets: []tracker.Bucket{{Index: 7, Count: 1}}}},
		})
		require.NoError(t, err)
		m := Message{To: rcv.member(), Type: codec.TypeBatch, Payload: payload}
		r, _ := rcv.p.Receive(payload, at(rcv))
		s.printf("%s: %s\n", s.describe(from, m), receipt(r))
	case "view":
		var dest string
		d.ScanArgs(t, "dest", &dest)
		for _, n := range s.chosen(t, d) {
			e, err := n.fleet.Estimate(dest, 0.99, at(n))
			require.NoError(t, err)
			s.printf("%s: %s samples=%d peers=%d local=%d\n", n.name, dest, e.Samples, e.Peers, e.LocalSamples)
			if d.HasArg("censored") {
				s.printf("  censored=%d local-censored=%d max-completed=%s decision=%s\n",
					e.Censored, e.LocalCensored, optMillis(e.MaxCompletedMillis, e.HasMaxCompleted), decision(e))
			}
		}
		return s.out.String()
	case "keys":
		for _, n := range s.chosen(t, d) {
			s.printf("%s: %s\n", n.name, s.keys(codec.SortKeys(n.fleet.Keys(at(n)))))
		}
		return s.out.String()
	case "stats":
		for _, n := range s.chosen(t, d) {
			st := n.p.Stats()
			s.printf("%s: seals=%d seal_errors=%d destinations_dropped=%d\n", n.name, st.Seals, st.SealErrors, st.DestinationsDropped)
			if v := st.V2; v != (V2Stats{}) {
				s.printf("%s: v2 %+v\n", n.name, v)
			}
		}
		return s.out.String()
	case "owners":
		var dest string
		d.ScanArgs(t, "dest", &dest)
		for _, n := range s.chosen(t, d) {
			mode := "v1"
			if n.p.V2() {
				mode = "v2"
			}
			s.printf("%s: %s owners %v\n", n.name, mode, n.p.ownersNow(now()).Of(dest))
		}
		return s.out.String()
	case "warnings":
		for _, n := range s.chosen(t, d) {
			ws := n.p.clockWarnings(at(n))
			if len(ws) == 0 {
				s.printf("%s: none\n", n.name)
			}
			for _, k := range slices.Sorted(maps.Keys(ws)) {
				s.printf("%s: %s: %s\n", n.name, k, ws[k].Message)
			}
		}
		return s.out.String()
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
	s.printf("next:")
	for _, n := range s.nodes {
		next := n.p.Next()
		if !next.IsZero() {
			next = next.Add(-n.skew)
		}
		s.printf(" %s=%s", n.name, s.at(next))
	}
	s.printf("\n")
	return s.out.String()
}

func (s *scenario) filters(d *datadriven.TestData) (from, to string) {
	if a, ok := d.Arg("from"); ok {
		from = a.Vals[0]
	}
	if a, ok := d.Arg("to"); ok {
		to = a.Vals[0]
	}
	return from, to
}

// send holds msgs from node from on the network and prints them.
func (s *scenario) send(from string, msgs []Message, indent string) {
	for _, m := range msgs {
		s.pending, s.from = append(s.pending, m), append(s.from, from)
		s.printf("%s%s\n", indent, s.describe(from, m))
	}
}

func (s *scenario) receiver(m Message) *snode {
	for _, n := range s.nodes {
		if n.member() == m.To {
			return n
		}
	}
	panic("no member " + m.To)
}

func timedOut(dc tracker.DestCounts) uint64 {
	var n uint64
	for _, c := range dc.TimedOut {
		n += uint64(c.Count)
	}
	return n
}

// describe prints a message: sender → receiver, type, and its keys (a
// batch's key with its destinations, their samples, and how many of them
// timed out, or that the record does not say).
func (s *scenario) describe(from string, m Message) string {
	to := s.receiver(m).name
	switch m.Type {
	case codec.TypeBatch:
		b, err := s.dec.DecodeBatch(m.Payload)
		if err != nil {
			return fmt.Sprintf("%s→%s batch (undecodable: %v)", from, to, err)
		}
		dests := bracketed(b.Dests, func(dc tracker.DestCounts) string {
			d := fmt.Sprintf("%s:%d", dc.Dest, dc.Total)
			if dc.CensoringUnknown {
				d += "(censoring unknown)"
			} else if n := timedOut(dc); n > 0 {
				d += fmt.Sprintf("(%d timed out)", n)
			}
			return d
		})
		return fmt.Sprintf("%s→%s batch %s %s", from, to, s.key(b.Key), dests)
	case codec.TypeDigest:
		dg, err := s.dec.DecodeDigest(m.Payload)
		if err != nil {
			return fmt.Sprintf("%s→%s digest (undecodable: %v)", from, to, err)
		}
		return fmt.Sprintf("%s→%s digest %s", from, to, s.keys(dg.Keys))
	case codec.TypePull:
		pl, err := s.dec.DecodePull(m.Payload)
		if err != nil {
			return fmt.Sprintf("%s→%s pull (undecodable: %v)", from, to, err)
		}
		return fmt.Sprintf("%s→%s pull %s", from, to, s.keys(pl.Keys))
	}
	return s.describeV2(from, to, m)
}

// describeV2 prints a protocol v2 message: records with their keys,
// destinations and manifests (epoch:records); aggregates as
// dest/epoch:samples (peers, coverage records); digests as epoch:count;
// lists and pulls as dest/epoch (coverage records).
func (s *scenario) describeV2(from, to string, m Message) string {
	head := fmt.Sprintf("%s→%s %s", from, to, m.Type)
	fail := func(err error) string { return fmt.Sprintf("%s (undecodable: %v)", head, err) }
	ep := func(e int64) string { return fmt.Sprintf("e%d", e-s.e0) }
	switch m.Type {
	case codec.TypeRecords:
		r, err := s.dec.DecodeRecords(m.Payload)
		if err != nil {
			return fail(err)
		}
		dests := bracketed(r.Batch.Dests, func(dc tracker.DestCounts) string { return fmt.Sprintf("%s:%d", dc.Dest, dc.Total) })
		ms := bracketed(r.Manifests, func(x codec.EpochManifest) string { return fmt.Sprintf("%s:%d", ep(x.Epoch), x.Manifest.Records) })
		return fmt.Sprintf("%s %s %s manifests %s", head, s.key(r.Batch.Key), dests, ms)
	case codec.TypeAggregates, codec.TypePackedAggregates:
		decode := s.dec.DecodeAggregates
		if m.Type == codec.TypePackedAggregates {
			decode = s.dec.DecodePackedAggregates
		}
		a, err := decode(m.Payload)
		if err != nil {
			return fail(err)
		}
		return head + " " + bracketed(a.Aggregates, func(x tracker.Aggregate) string {
			return fmt.Sprintf("%s/%s:%d (peers %d, cov %d)", x.Dest, ep(x.Epoch), x.Total, x.Peers, x.Coverage.Records)
		})
	case codec.TypeAggDigest:
		g, err := s.dec.DecodeAggDigest(m.Payload)
		if err != nil {
			return fail(err)
		}
		return head + " " + bracketed(g.Epochs, func(x tracker.AggregateDigest) string {
			n := uint32(0)
			for _, sl := range x.Slices {
				n += sl.Count
			}
			return fmt.Sprintf("%s:%d", ep(x.Epoch), n)
		})
	case codec.TypeAggList, codec.TypeAggPull:
		e, err := s.dec.DecodeAggEntries(m.Payload, m.Type)
		if err != nil {
			return fail(err)
		}
		return head + " " + bracketed(e.Entries, func(x tracker.AggregateEntry) string {
			return fmt.Sprintf("%s/%s (cov %d)", x.Dest, ep(x.Epoch), x.Coverage.Records)
		})
	case codec.TypeRecordPull:
		pl, err := s.dec.DecodeRecordPull(m.Payload)
		if err != nil {
			return fail(err)
		}
		return head + " " + bracketed(pl.Epochs, ep)
	}
	return head
}

// key prints a batch key as origin/epoch, the epoch relative to e0, with
// the part when it is not 0 and the boot when it is not the node's.
func (s *scenario) key(k tracker.BatchKey) string {
	out := fmt.Sprintf("%s/e%d", k.Origin, k.Epoch-s.e0)
	if n, ok := s.byName[k.Origin]; !ok || n.boot != k.Boot {
		out = fmt.Sprintf("%s@%d/e%d", k.Origin, k.Boot, k.Epoch-s.e0)
	}
	if k.Part > 0 {
		out += fmt.Sprintf("#%d", k.Part)
	}
	return out
}

func (s *scenario) keys(ks []tracker.BatchKey) string { return bracketed(ks, s.key) }

// bracketed prints xs as "[f(x0) f(x1) …]".
func bracketed[T any](xs []T, f func(T) string) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return "[" + strings.Join(out, " ") + "]"
}

// withoutCensoring is a sealed sub-window as a node older than timed-out
// counts seals it: its timeouts are plain samples, and the codec writes
// its destinations without timed-out pairs, the bytes such a node sends.
func withoutCensoring(dests []tracker.DestCounts) []tracker.DestCounts {
	out := slices.Clone(dests)
	for i := range out {
		out[i].TimedOut, out[i].CensoringUnknown = nil, true
	}
	return out
}

func optMillis(ms uint64, ok bool) string {
	if !ok {
		return "none"
	}
	return fmt.Sprintf("%dms", ms)
}

// decision prints what a timeout decision reads from e.
func decision(e tracker.Estimate) string {
	if e.Failing {
		return "failing"
	}
	v, ok := e.DecisionValue()
	if !ok {
		return "none"
	}
	return fmt.Sprintf("%dms from %s (q %dms)", v, e.DecisionSource(), e.DecisionQuantileMillis())
}

// receipt prints what Receive did.
func receipt(r Receipt) string {
	switch {
	case r.Reject != "":
		return "refused: " + r.Reject
	case r.Inserted && r.Repair:
		return r.Outcome.String() + " (repair)"
	case r.Inserted && len(r.NewAggregates) > 0:
		return fmt.Sprintf("new (%d)", len(r.NewAggregates))
	case r.Inserted:
		return r.Outcome.String()
	}
	return "ok"
}

// levelOf is the level a scenario node of protocol proto advertises.
func levelOf(proto uint8) uint8 {
	if proto >= ProtocolV2 {
		return Level3
	}
	return Level2
}
