package cluster

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
)

// runCutOff is runScenarioUntil with node cut off (unless ""): every
// message to or from it is lost, as to a member that cannot be reached.
func runCutOff(t *testing.T, s *scenario, T time.Duration, cut string) {
	t.Helper()
	deliver := func() {
		for range 100 {
			if cut != "" {
				s.run(t, scenarioLine(t, "drop to="+cut))
				s.run(t, scenarioLine(t, "drop from="+cut))
			}
			if len(s.pending) == 0 {
				return
			}
			s.run(t, scenarioLine(t, "deliver"))
		}
		t.Fatalf("messages still pending after 100 deliveries at %v", s.now)
	}
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
		s.run(t, scenarioLine(t, "tick"))
		deliver()
	}
	if s.now < T {
		s.run(t, scenarioLine(t, fmt.Sprintf("tick t=%v", T)))
		deliver()
	}
}

// listAs makes every node but name list it in state st, as the member
// list does at a death or a return: Since moves to now. Each is then given
// to SetMembers.
func listAs(s *scenario, name string, st State) {
	now := s.start.Add(s.now)
	m := s.byName[name]
	for _, x := range s.nodes {
		if x == m {
			continue
		}
		x.see(m, st)
		e := x.view[m.member()]
		e.Since = now
		x.view[m.member()] = e
		x.p.SetMembers(x.members(), now)
	}
}

// TestFlappedOwnerGetsTheWindowAgain: db's first owner a cannot be reached
// from 19 s (e3) to 37 s (e6), so the records b and c seal of e3, e4 and
// e5 are lost on their way to it; then it is listed dead and comes back
// with the same boot. When the origins list it dead at 25 s and alive at
// 37 s, the owners change twice and they send it the window's records
// again. When the death and the return fall between two member lists
// (the list only shows it alive again, with a new Since), the owners never
// change: without sending the window again, a's aggregate of e5 held 15
// of the 30 samples, and those of e3 and e4 (10 samples) stayed missing
// until they slid out of the window (the manifests of e5 and e6 brought
// e5 back). With one owner every view missed them; with two the second
// owner's takeover covered them, but only from its failover on, a second
// into every round (25 of 35 samples at 43.5 s).
func TestFlappedOwnerGetsTheWindowAgain(t *testing.T) {
	for _, owners := range []int{1, 2} {
		for _, death := range []string{"seen", "between-lists"} {
			t.Run(fmt.Sprintf("owners=%d/death-%s", owners, death), func(t *testing.T) {
				s := startScenario(t, fmt.Sprintf("init nodes=(a,b,c) v2 ae=1m bulk-peers=0 owners=%d", owners))
				for k := 0; k < 9; k++ { // b and c call db in every epoch; a does not
					cut := ""
					if k >= 3 && k < 6 {
						cut = "a"
					}
					switch k {
					case 3:
						runCutOff(t, s, 19*time.Second, "")
						require.Equal(t, "a", s.byName["b"].p.Owners("db", s.start.Add(s.now))[0])
					case 4:
						if death == "seen" {
							runCutOff(t, s, 25*time.Second, cut)
							listAs(s, "a", StateDead)
						}
					case 6:
						runCutOff(t, s, 37*time.Second, "a")
						listAs(s, "a", StateAlive)
					}
					// Between the first owner's publish (0.9 s) and the
					// second's failover (1.9 s), and late in the epoch.
					for _, at := range []time.Duration{1500 * time.Millisecond, 5 * time.Second} {
						runCutOff(t, s, time.Duration(k)*6*time.Second+at, cut)
						view := scenarioStep(t, s, "view dest=db")
						if k == 7 || k == 8 || k == 6 && at == 5*time.Second {
							n := 5 * k // 5 samples in each of e0..e(k-1)
							want := fmt.Sprintf("a: db samples=%d peers=2 local=0\nb: db samples=%d peers=2 local=%d\nc: db samples=%d peers=2 local=%d\n", n, n, 3*k, n, 2*k)
							require.Equal(t, want, view, "view at %v", s.now)
						}
					}
					scenarioStep(t, s, "record n=b dest=db ms=12 count=3")
					scenarioStep(t, s, "record n=c dest=db ms=40 count=2")
				}
				t.Log(scenarioStep(t, s, "stats"))
			})
		}
	}
}

// TestStaleDeathKeepsQueuedSends: a member's death event handled after
// the member table (and with it the protocol) already shows it back
// drops nothing queued for it: the protocol queued the window's records
// for it on its return. Once the table shows it dead, the event drops its
// sends, as does one for a member refused for its settings.
func TestStaleDeathKeepsQueuedSends(t *testing.T) {
	c := newIdleCluster(t, "a", 1)
	g := c.gossip
	b := MemberName("b", 2)
	list := func(st State, refused bool) { // b as the member table lists it
		c.mu.Lock()
		c.members[b] = &entry{Member: Member{Name: "b", Member: b, BootID: 2, State: st, Since: time.Now()}, refused: refused}
		c.memberVersion.Add(1)
		c.mu.Unlock()
	}
	dead := Event{Type: EventDead, Member: Member{Name: "b", Member: b, BootID: 2, State: StateDead}}
	list(StateAlive, false) // dead and back before the event is handled
	require.Zero(t, g.q.push(Message{To: b, Type: codec.TypeRecords}))
	g.onEvent(dead)
	require.Equal(t, 1, g.q.len(), "a stale death drops nothing")
	list(StateDead, false)
	g.onEvent(dead)
	require.Zero(t, g.q.len(), "a death drops what is queued")
	list(StateAlive, true)
	require.Zero(t, g.q.push(Message{To: b, Type: codec.TypeRecords}))
	g.onEvent(dead)
	require.Zero(t, g.q.len(), "a refused member's death drops what is queued")
}

// flapEvent is a change of a member's state in the member lists of some
// nodes: at tenths of a sub-window from the start, the nodes of at list
// who (y when "") as st (with a new Since, as the member list does at a
// death and a return).
type flapEvent struct {
	tenths int
	at     []string
	st     State
	who    string
}

// flapPattern is a test case of TestFlappingMemberLosesNoRecords: the
// member lists' changes, and while cut lasts (tenths of a sub-window,
// (from, until]) every message to or from y is lost, as to a member
// that cannot be reached.
type flapPattern struct {
	events []flapEvent
	cut    [2]int
}

// listAt makes the nodes of at list name as st (Since moves to now), each
// then given to SetMembers.
func listAt(s *scenario, at []string, name string, st State) {
	now := s.start.Add(s.now)
	m := s.byName[name]
	for _, n := range at {
		x := s.byName[n]
		x.see(m, st)
		e := x.view[m.member()]
		e.Since = now
		x.view[m.member()] = e
		x.p.SetMembers(x.members(), now)
	}
}

// TestFlappingMemberLosesNoRecords: a, b, c and y call x0..x5 in every
// epoch (one sample each); x3's only owner is a while y is up, b while y
// is down (the bounds of AssignOwners move it when y's destinations go to
// others). Through e3 and e4 y is listed dead and alive again, at
// different nodes at different times, as memberlist does to a member it
// suspects on a loaded machine, and from e5 on every node lists it alive.
// Whenever a listed y dead for more than a sub-window it dropped its
// records of x3 (given to b), and when it listed y alive again the
// origins whose owners had not changed since (y always; b and c once
// they had sent a the window again) sent none of them again: the views
// of x3 missed those records of e0..e2 (the manifests of e3 and e4
// brought those epochs back) until they slid out of the window (15 of 24
// samples at e6 on either grid). Cut off for 1.8 sub-windows while a
// and b list it dead and alive again, y's records of e2 and e3 are lost
// on their way; a forgot the newest epoch it had heard of y when it
// listed y dead, so y's return pulled no gap (e3 came back with the
// manifests): 23 of 24 samples, and 26 of 28 when y's first records
// after the cut came while a still listed it dead (heard then, they
// closed the gap, their manifests unchecked). From the second epoch after
// the member lists agree again, every view is the exact merge.
func TestFlappingMemberLosesNoRecords(t *testing.T) {
	patterns := map[string]flapPattern{
		// Only the owner sees y die, for 1.4 sub-windows.
		"owner-only": {events: []flapEvent{{33, []string{"a"}, StateDead, ""}, {47, []string{"a"}, StateAlive, ""}}},
		// Every node but y sees it die, and come back.
		"origins-only": {events: []flapEvent{{31, []string{"b", "c"}, StateDead, ""}, {47, []string{"b", "c"}, StateAlive, ""}}},
		// Deaths and returns at a, b and c at different times.
		"staggered": {events: []flapEvent{
			{31, []string{"a"}, StateDead, ""}, {33, []string{"b"}, StateDead, ""}, {36, []string{"b"}, StateAlive, ""},
			{38, []string{"a"}, StateAlive, ""}, {40, []string{"a"}, StateDead, ""}, {42, []string{"c"}, StateDead, ""},
			{44, []string{"c"}, StateAlive, ""}, {48, []string{"b"}, StateDead, ""}, {49, []string{"b"}, StateAlive, ""},
			{53, []string{"a"}, StateAlive, ""},
		}},
		// y cannot be reached for 1.8 sub-windows (what it sends and what
		// is sent to it lost) while a and b list it dead and alive again.
		"cut-off": {cut: [2]int{30, 48}, events: []flapEvent{
			{33, []string{"b"}, StateDead, ""}, {35, []string{"a"}, StateDead, ""}, {39, []string{"b"}, StateAlive, ""},
			{41, []string{"b"}, StateDead, ""}, {49, []string{"a", "b"}, StateAlive, ""},
		}},
		// So, and the owner lists it alive again only after its records
		// of e4, the first since the cut, came.
		"cut-off-late-return": {cut: [2]int{30, 48}, events: []flapEvent{
			{33, []string{"b"}, StateDead, ""}, {35, []string{"a"}, StateDead, ""}, {39, []string{"b"}, StateAlive, ""},
			{41, []string{"b"}, StateDead, ""}, {49, []string{"b"}, StateAlive, ""}, {53, []string{"a"}, StateAlive, ""},
		}},
		// The owner itself flaps in the others' lists.
		"owner-flaps": {events: []flapEvent{
			{31, []string{"b", "y"}, StateDead, "a"}, {34, []string{"c"}, StateDead, "a"}, {36, []string{"b"}, StateAlive, "a"},
			{40, []string{"b"}, StateDead, "a"}, {43, []string{"y"}, StateAlive, "a"}, {47, []string{"b", "c"}, StateAlive, "a"},
		}},
	}
	dests := []string{"x0", "x1", "x2", "x3", "x4", "x5"}
	for _, grid := range []string{"6s", "500ms"} {
		for _, name := range slices.Sorted(maps.Keys(patterns)) {
			t.Run(fmt.Sprintf("sw=%s/%s", grid, name), func(t *testing.T) {
				s := startScenario(t, "init nodes=(a,b,c,y) v2 ae=1m bulk-peers=0 owners=1 "+stallGrids[grid])
				sw := s.trk.SubWindow()
				step := sw / 10
				events := patterns[name].events
				cut := patterns[name].cut
				last := events[len(events)-1].tenths
				bound := (time.Duration(last)*step/sw + 2) * sw // the start of the second epoch after the lists agree
				recorded := map[int64]int{}                     // epoch → samples of each destination
				for at := step; at <= bound+4*sw; at += step {
					who := ""
					if at > time.Duration(cut[0])*step && at <= time.Duration(cut[1])*step {
						who = "y"
					}
					runCutOff(t, s, at, who)
					for _, ev := range events {
						if time.Duration(ev.tenths)*step == at {
							listAt(s, ev.at, cmp.Or(ev.who, "y"), ev.st)
						}
					}
					if at == 25*step {
						for _, n := range s.nodes {
							require.Equal(t, []string{"a"}, n.p.Owners("x3", s.start.Add(s.now)), "x3's owners at %s", n.name)
						}
						require.Equal(t, []string{"b"}, AssignOwners([]string{"a", "b", "c"}, dests, 1).Of("x3"), "x3's owner without y")
					}
					if at%sw == 8*step {
						for _, n := range s.nodes {
							for _, d := range dests {
								scenarioStep(t, s, fmt.Sprintf("record n=%s dest=%s ms=12", n.name, d))
							}
						}
						recorded[int64(at/sw)] += len(s.nodes)
					}
					if at < bound || at%sw != 9*step { // past the round's publish and failover on either grid
						continue
					}
					e := int64(at / sw)
					want := 0
					for ep, k := range recorded {
						if ep >= e-int64(s.trk.SubWindows)+1 && ep <= e-1 {
							want += k
						}
					}
					for _, n := range s.nodes {
						for _, d := range dests {
							est, err := n.fleet.Estimate(d, 0.99, s.start.Add(s.now))
							require.NoError(t, err)
							require.Equal(t, want, int(est.Samples), "%s's view of %s at %v (e%d): the window's samples", n.name, d, s.now, e)
						}
					}
				}
				t.Log(scenarioStep(t, s, "stats"))
			})
		}
	}
}
