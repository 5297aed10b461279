package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
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
	cfg := DefaultConfig()
	cfg.Name, cfg.BootID = "a", 1
	cfg.Logger = testLogger(t)
	fleet, err := tracker.NewFleet(tracker.DefaultFleetConfig(), nil)
	require.NoError(t, err)
	cfg.Store = fleet
	c, err := New(cfg)
	require.NoError(t, err)
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
