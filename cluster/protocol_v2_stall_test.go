package cluster

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runStalled is runCutOff with the nodes of stalled not running: they
// neither tick nor handle a message, which the network holds for them (a
// loop stalled by the scheduler or a long pause). What they hold is
// handled once they run again, after their first tick.
func runStalled(t *testing.T, s *scenario, T time.Duration, stalled ...string) {
	t.Helper()
	live := slices.DeleteFunc(slices.Clone(s.nodes), func(n *snode) bool { return slices.Contains(stalled, n.name) })
	at := func(n *snode) time.Time { return s.start.Add(s.now).Add(n.skew) }
	deliver := func() {
		for range 100 {
			var batch []Message
			var senders []string
			for i := 0; i < len(s.pending); {
				if !slices.Contains(stalled, s.receiver(s.pending[i]).name) {
					batch, senders = append(batch, s.pending[i]), append(senders, s.from[i])
					s.pending, s.from = slices.Delete(s.pending, i, i+1), slices.Delete(s.from, i, i+1)
					continue
				}
				i++
			}
			if len(batch) == 0 {
				return
			}
			for i, m := range batch {
				rcv := s.receiver(m)
				_ = senders[i]
				_, out := rcv.p.Receive(m.Payload, at(rcv))
				s.send(rcv.name, out, "")
			}
			s.out.Reset()
		}
		t.Fatalf("messages still pending after 100 deliveries at %v", s.now)
	}
	tick := func(all bool) {
		for _, n := range live {
			if all || !n.p.Next().After(at(n)) {
				s.send(n.name, n.p.Tick(at(n)), "")
			}
		}
		s.out.Reset()
		deliver()
	}
	tick(true) // those that ran again: a tick first, then what they hold
	for {
		next := time.Duration(1 << 62)
		for _, n := range live {
			if nx := n.p.Next(); !nx.IsZero() {
				next = min(next, nx.Add(-n.skew).Sub(s.start))
			}
		}
		if next > T {
			break
		}
		s.now = max(s.now, next)
		tick(false)
	}
	if s.now < T {
		s.now = T
		tick(true)
	}
}

// stallCase is one stall or clock jump of the tests below.
type stallCase struct {
	grid  string        // the scenario's grid and timing (init's arguments)
	who   string        // the node stalled ("" with every node: a jump)
	from  time.Duration // when it stops running
	until time.Duration // when it runs again
	alone bool          // who is db's only owner: no view of it until who runs again
}

// Two grids: the default (6 s sub-windows of a 60 s window), and that of
// the in-process integration tests (500 ms sub-windows of a 127.5 s
// window, 100 ms seal jitter: the publish 300 ms into an epoch, the
// failover 125 ms later).
var stallGrids = map[string]string{
	"6s":    "",
	"500ms": "window=127.5s sub-windows=255 jitter=100ms",
}

// runStallCase drives nodes a, b, c and d, every one calling db in every
// epoch (8/10 into it: a 1, b 3, c 2, d 4 samples), through c's stall
// (every node's with c.who ""), and checks each node's view of db every
// tenth of a sub-window: from the second epoch after the stall's end on
// (the next two epochs' publishes, a fifth into the epoch, past the
// failover) the exact merge of the window's records, before that never
// empty (for a node that runs) while the window holds records, except
// while db's only owner stands still. A node whose clock stood still
// records in the epoch it stood in.
func runStallCase(t *testing.T, c stallCase, owners int) {
	s := startScenario(t, fmt.Sprintf("init nodes=(a,b,c,d) v2 ae=1m bulk-peers=0 owners=%d %s", owners, c.grid))
	sw := s.trk.SubWindow()
	step := sw / 10
	counts := map[string]int{"a": 1, "b": 3, "c": 2, "d": 4}
	recorded := map[int64]int{} // epoch (from the start) → samples
	record := func() {
		for _, n := range s.nodes {
			scenarioStep(t, s, fmt.Sprintf("record n=%s dest=db ms=%d count=%d", n.name, 10*counts[n.name], counts[n.name]))
		}
		recorded[int64(s.now/sw)] += 10
	}
	want := func(at time.Duration) int { // the window's records at a view read at at: aggregate E−1
		e := int64(at / sw)
		n := 0
		for ep, k := range recorded {
			if ep >= e-int64(s.trk.SubWindows)+1 && ep <= e-1 {
				n += k
			}
		}
		return n
	}
	bound := (c.until/sw + 2) * sw // the start of the second epoch after the stall's end
	end := bound + 3*sw
	for at := step; at <= end; at += step {
		stalled := []string{}
		if at > c.from && at <= c.until {
			if c.who == "" { // every clock stands still: nothing runs, time does not pass
				if at == c.from+step {
					record() // at the instant the clocks stand still at
				}
				continue
			}
			stalled = append(stalled, c.who)
		}
		runStalled(t, s, at, stalled...)
		if at%sw == 8*step {
			record()
		}
		for _, n := range s.nodes {
			if slices.Contains(stalled, n.name) {
				continue
			}
			e, err := n.fleet.Estimate("db", 0.99, s.start.Add(s.now))
			require.NoError(t, err)
			w := want(s.now)
			if s.now >= bound && s.now%sw == 9*step { // past the round's publish and failover on either grid
				require.Equal(t, w, int(e.Samples), "%s's view of db at %v: the window's samples", n.name, s.now)
			} else if w > 0 && s.now > 2*sw && (!c.alone || s.now > c.until+2*step) {
				require.NotZero(t, e.Samples, "%s's view of db at %v is empty; the window holds %d samples", n.name, s.now, w)
			}
		}
	}
	t.Log(scenarioStep(t, s, "stats"))
}

// stallLengths are the stalls and jumps tried, in sub-windows: a few, and
// as long as a loaded machine stalls a loop of the integration tests' grid
// (several seconds).
var stallLengths = []int{1, 2, 3, 5, 8}

// TestStalledNodeConverges: one node's loop stops for one to eight
// sub-windows (starting just after a boundary, before its seal and its
// publish, or late in the epoch) and runs again after that round's
// publish, with the messages sent to it meanwhile held for it. Each node
// in turn: db's first owner, its second, and an origin only.
func TestStalledNodeConverges(t *testing.T) {
	for _, grid := range []string{"6s", "500ms"} {
		for _, owners := range []int{1, 2} {
			s := startScenario(t, fmt.Sprintf("init nodes=(a,b,c,d) v2 ae=1m bulk-peers=0 owners=%d", owners))
			scenarioStep(t, s, "record n=a dest=db ms=10")
			runScenarioUntil(t, s, 7*time.Second, false)
			of := s.byName["a"].p.Owners("db", s.start.Add(s.now))
			require.Len(t, of, owners)
			roles := map[string]string{of[0]: "first-owner"}
			if owners > 1 {
				roles[of[1]] = "second-owner"
			}
			for _, n := range []string{"a", "b", "c", "d"} {
				if _, ok := roles[n]; !ok {
					roles[n] = "origin-only"
					break
				}
			}
			for _, who := range slices.Sorted(maps.Keys(roles)) {
				role := roles[who]
				for _, k := range stallLengths {
					for _, phase := range []int{0, 6} { // tenths of a sub-window
						sw := gridSubWindow(t, grid)
						from := 5*sw + time.Duration(phase+1)*sw/10
						c := stallCase{grid: stallGrids[grid], who: who, from: from, until: from + time.Duration(k)*sw + 4*sw/10,
							alone: owners == 1 && role == "first-owner"}
						t.Run(fmt.Sprintf("sw=%s/owners=%d/%s/%d-sub-windows/at-%d-tenths", grid, owners, role, k, phase+1), func(t *testing.T) { runStallCase(t, c, owners) })
					}
				}
			}
		}
	}
}

// gridSubWindow is the sub-window of one of stallGrids.
func gridSubWindow(t *testing.T, grid string) time.Duration {
	return newScenario(t, scenarioLine(t, "init nodes=(a) "+stallGrids[grid])).trk.SubWindow()
}

// TestClockJumpConverges: every node's clock stands still for one to
// eight sub-windows (while the nodes record, at that one instant) and then
// jumps forward to where it should be, as after a suspend or a stall of
// the whole process.
func TestClockJumpConverges(t *testing.T) {
	for _, grid := range []string{"6s", "500ms"} {
		sw := gridSubWindow(t, grid)
		for _, owners := range []int{1, 2} {
			for _, k := range stallLengths {
				for _, phase := range []int{1, 7} {
					from := 5*sw + time.Duration(phase)*sw/10
					c := stallCase{grid: stallGrids[grid], from: from, until: from + time.Duration(k)*sw}
					t.Run(fmt.Sprintf("sw=%s/owners=%d/%d-sub-windows/at-%d-tenths", grid, owners, k, phase), func(t *testing.T) { runStallCase(t, c, owners) })
				}
			}
		}
	}
}
