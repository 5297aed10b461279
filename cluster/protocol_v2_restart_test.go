package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// scenarioLine parses a scenario command, "cmd k=v k=(a,b) flag", into a
// TestData as a scenario file's line is (datadriven.ParseLine), so that a
// Go test can drive a scenario step by step.
func scenarioLine(t *testing.T, line string) *datadriven.TestData {
	t.Helper()
	cmd, args, err := datadriven.ParseLine(line)
	require.NoError(t, err, line)
	return &datadriven.TestData{Pos: "go test", Cmd: cmd, CmdArgs: args}
}

// startScenario makes the scenario of an init command.
func startScenario(t *testing.T, line string) *scenario {
	s := newScenario(t, scenarioLine(t, line))
	t.Log(s.run(t, scenarioLine(t, line)))
	return s
}

// scenarioStep runs one command and returns (and logs) its output.
func scenarioStep(t *testing.T, s *scenario, line string) string {
	out := s.run(t, scenarioLine(t, line))
	t.Logf("> %s\n%s", line, out)
	return out
}

// restartNode replaces node name by a new boot with empty stores; every
// other node forgets the old boot and lists the new one alive.
func restartNode(t *testing.T, s *scenario, name string, boot uint64) {
	old := s.byName[name]
	n := &snode{name: name, boot: boot, view: map[string]Member{}, proto: old.proto, level: old.level}
	var err error
	n.local, err = tracker.NewSync[string](s.trk)
	require.NoError(t, err)
	fc := tracker.DefaultFleetConfig()
	fc.Tracker, fc.Self, fc.MaxOriginShare = s.trk, name, 0
	n.fleet, err = tracker.NewFleet(fc, n.local)
	require.NoError(t, err)
	n.owned, err = tracker.NewOwned(fc)
	require.NoError(t, err)
	n.p, err = NewProtocol(ProtocolConfig{
		Name: name, BootID: boot, Tracker: s.trk, Gossip: old.p.cfg.Gossip, Store: n.fleet, BulkSyncDelay: old.p.cfg.BulkSyncDelay,
		Seal:  func(e int64, now time.Time) []tracker.DestCounts { return tracker.SealedSubWindow(n.local, e, now) },
		Owned: n.owned, Aggregates: n.fleet, Level: n.level,
	})
	require.NoError(t, err)
	now := s.start.Add(s.now)
	for i, x := range s.nodes {
		if x == old {
			s.nodes[i] = n
		}
	}
	s.byName[name] = n
	for _, x := range s.nodes {
		if x == n {
			continue
		}
		delete(x.view, old.member())
		x.see(n, StateAlive)
		n.see(x, StateAlive)
		x.p.SetMembers(x.members(), now)
	}
	n.see(n, StateAlive)
	n.p.SetMembers(n.members(), now)
	// pending messages to the old boot are lost
	for i := 0; i < len(s.pending); {
		if s.pending[i].To == old.member() {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			s.from = append(s.from[:i], s.from[i+1:]...)
			continue
		}
		i++
	}
	s.send(name, n.p.Tick(now), "")
}

// runScenarioUntil ticks every due node and delivers everything until
// scenario time T (logging it all when verbose).
func runScenarioUntil(t *testing.T, s *scenario, T time.Duration, verbose bool) {
	for {
		next := time.Duration(1 << 62)
		for _, n := range s.nodes {
			if nx := n.p.Next(); !nx.IsZero() {
				next = min(next, nx.Add(-n.skew).Sub(s.start))
			}
		}
		if next > T {
			break
		}
		out := s.run(t, scenarioLine(t, "tick"))
		out += s.run(t, scenarioLine(t, "deliver all"))
		if verbose {
			t.Logf("%s", out)
		}
	}
	if s.now < T {
		s.run(t, scenarioLine(t, fmt.Sprintf("tick t=%v", T)))
		s.run(t, scenarioLine(t, "deliver all"))
	}
}

// TestRestartedOwnerGetsTheWindowAgain: db's only owner restarts (same
// name, new boot, empty stores) in e4. Owners go by peer name, so they do
// not change, but the restarted owner holds none of the window's records:
// the origins send them again, and the aggregate of e5 covers the whole
// window (it held 15 of the 30 samples when only the manifests of e4 and
// e5 brought records back).
func TestRestartedOwnerGetsTheWindowAgain(t *testing.T) {
	s := startScenario(t, "init nodes=(a,b,c) v2 ae=1m bulk-peers=0 owners=1")
	for k := 0; k < 6; k++ { // b and c call db in e0..e5; a (db's owner) does not
		runScenarioUntil(t, s, time.Duration(k)*6*time.Second+5*time.Second, false)
		scenarioStep(t, s, "record n=b dest=db ms=12 count=3")
		scenarioStep(t, s, "record n=c dest=db ms=40 count=2")
		if k == 4 { // in e4, after e3's aggregate is out: db's owner restarts
			owner := s.byName["b"].p.Owners("db", s.start.Add(s.now))
			t.Logf("owners of db: %v", owner)
			require.Equal(t, []string{"a"}, owner)
			scenarioStep(t, s, "view dest=db")
			restartNode(t, s, "a", 7)
			scenarioStep(t, s, "deliver all")
		}
	}
	runScenarioUntil(t, s, 39*time.Second, true) // e6: the aggregate of e5 (window e0..e5) is out
	resent := s.byName["b"].p.Stats().V2.Resent + s.byName["c"].p.Stats().V2.Resent
	t.Logf("records resent by the origins: %d", resent)
	// 6 epochs x (3 + 2) samples, 12 records, every one sealed and sent.
	require.Equal(t, "a: db samples=30 peers=2 local=0\nb: db samples=30 peers=2 local=18\nc: db samples=30 peers=2 local=12\n", scenarioStep(t, s, "view dest=db"))
}

// TestRefusedAggregatesNameNoDestination: aggregates the store refuses (a
// far-future epoch here, from a member up) do not add their names to the
// destinations the owners are computed over, which would grow without end
// and never age out.
func TestRefusedAggregatesNameNoDestination(t *testing.T) {
	s := startScenario(t, "init nodes=(a,b,c) v2 ae=1m bulk-peers=0 owners=1")
	for _, d := range []string{"db", "cache", "auth", "search"} {
		scenarioStep(t, s, "record n=a dest="+d+" ms=12")
	}
	runScenarioUntil(t, s, 8*time.Second, false)
	a, b := s.byName["a"], s.byName["b"]
	now := s.start.Add(s.now)
	ownersOf := func(n *snode) []string {
		var out []string
		for _, d := range []string{"db", "cache", "auth", "search"} {
			out = append(out, fmt.Sprint(n.p.Owners(d, s.start.Add(s.now))))
		}
		return out
	}
	t.Logf("known before: %d; owners %v", len(b.p.v2.known), ownersOf(b))
	// a (a member up) sends b aggregates of an epoch far ahead: every one is
	// refused as future_epoch.
	far := s.trk.Epoch(now) + 1_000_000
	var aggs []tracker.Aggregate
	for i := range 4000 {
		aggs = append(aggs, tracker.Aggregate{Dest: fmt.Sprintf("bogus-%d", i), Epoch: far, Newest: far, Layout: s.trk.Layout(),
			Total: 1, Buckets: []tracker.Bucket{{Index: 7, Count: 1}}, Peers: 1, Coverage: tracker.Coverage{Records: 1}})
	}
	msg, err := codec.AppendAggregates(nil, codec.Aggregates{Sender: a.member(), Layout: s.trk.Layout(), Aggregates: aggs})
	require.NoError(t, err)
	r, _ := b.p.Receive(msg, now)
	t.Logf("receipt: reject=%q outcome=%v new=%d", r.Reject, r.Outcome, len(r.NewAggregates))
	require.NotContains(t, b.fleet.AggregateDestinations(now), "bogus-0")
	// 30 epochs later (3 windows), with records flowing again.
	for k := 2; k < 32; k++ {
		scenarioStep(t, s, "record n=a dest=db ms=12")
		runScenarioUntil(t, s, time.Duration(k)*6*time.Second, false)
	}
	t.Logf("known after 30 epochs: %d; owners %v", len(b.p.v2.known), ownersOf(b))
	require.LessOrEqual(t, len(b.p.v2.known), 4, "refused aggregates must not enter the destinations the owners are computed over")
}
