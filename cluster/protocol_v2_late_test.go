package cluster

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runLate is runScenarioUntil on a network that takes lag to deliver
// every message (a loaded machine's send queues and loops).
func runLate(t *testing.T, s *scenario, T, lag time.Duration, sent map[int]time.Duration) {
	t.Helper()
	at := func(n *snode) time.Time { return s.start.Add(s.now).Add(n.skew) }
	for {
		next := time.Duration(1 << 62)
		for _, n := range s.nodes {
			if nx := n.p.Next(); !nx.IsZero() {
				next = min(next, nx.Add(-n.skew).Sub(s.start))
			}
		}
		for i := range s.pending {
			next = min(next, sent[i]+lag)
		}
		if next > T {
			break
		}
		s.now = max(s.now, next)
		for _, n := range s.nodes {
			if !n.p.Next().After(at(n)) {
				k := len(s.pending)
				s.send(n.name, n.p.Tick(at(n)), "")
				for i := k; i < len(s.pending); i++ {
					sent[i] = s.now
				}
			}
		}
		for i := 0; i < len(s.pending); {
			if sent[i]+lag > s.now {
				i++
				continue
			}
			m := s.pending[i]
			s.pending, s.from = slices.Delete(s.pending, i, i+1), slices.Delete(s.from, i, i+1)
			for j := i; j < len(s.pending); j++ {
				sent[j] = sent[j+1]
			}
			delete(sent, len(s.pending))
			rcv := s.receiver(m)
			k := len(s.pending)
			_, out := rcv.p.Receive(m.Payload, at(rcv))
			s.send(rcv.name, out, "")
			for j := k; j < len(s.pending); j++ {
				sent[j] = s.now
			}
		}
		s.out.Reset()
	}
	s.now = max(s.now, T)
}

// TestLateMessagesKeepTheViews: every message takes one to four
// sub-windows to arrive (on the in-process tests' grid, 0.5 to 2 s: a
// machine loaded ten times over its cores). The nodes record in e0..e5;
// the views are then the exact merge of those records (all in the window)
// once the last of them can have arrived (at the owners one lag after
// its seal, published in the next round, at the readers a lag later), and
// stay so while the lag lasts. A reader's view was its aggregate of E−1,
// else E−2, and it kept none older than E−3: with every lag tried the
// views were empty (0 of 60 samples) at the first check, an aggregate
// that arrives as E−2 or older being read only until the boundary, or
// not at all.
func TestLateMessagesKeepTheViews(t *testing.T) {
	for _, owners := range []int{1, 2} {
		for _, lag := range []int{0, 2, 4, 6, 8} { // halves of a sub-window
			t.Run(fmt.Sprintf("owners=%d/lag-%d-halves", owners, lag), func(t *testing.T) {
				s := startScenario(t, fmt.Sprintf("init nodes=(a,b,c,d) v2 ae=1m bulk-peers=0 owners=%d %s", owners, stallGrids["500ms"]))
				sw := s.trk.SubWindow()
				delay := time.Duration(lag) * sw / 2
				sent := map[int]time.Duration{}
				defer func() {
					t.Log(scenarioStep(t, s, "stats"))
					for _, n := range s.nodes {
						t.Logf("%s: aggregate inserts %v", n.name, n.fleet.Stats().AggregateInserts)
					}
				}()
				total := 0
				for k := 0; k < 20; k++ {
					for step := range 10 {
						at := time.Duration(k)*sw + time.Duration(step)*sw/10
						runLate(t, s, at, delay, sent)
						if k < 6 && step == 8 {
							for i, n := range s.nodes {
								scenarioStep(t, s, fmt.Sprintf("record n=%s dest=db ms=%d count=%d", n.name, 10*(i+1), i+1))
								total += i + 1
							}
						}
						if time.Duration(k)*sw < 6*sw+2*delay+2*sw { // the records' way to the owners, the publish, the aggregates' way
							continue
						}
						for _, n := range s.nodes {
							e, err := n.fleet.Estimate("db", 0.99, s.start.Add(s.now))
							require.NoError(t, err)
							require.Equal(t, total, int(e.Samples), "%s's view of db at %v", n.name, s.now)
						}
					}
				}
			})
		}
	}
}
