package cluster

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSendQueueRandomOps drives the send queue with seeded random pushes,
// pops, slow and setAside calls (for sends in flight and, late, for sends
// that ended), ends in any order with any result, and drops, checking
// its accounting after every step against what the test handed out: the
// messages waiting, the free workers, the sends set aside (per member and
// in all), at most backoffSends in flight per member, every member with
// messages waiting and none in flight on the ready list of its kind, and
// no member kept for nothing; once every send ended and every member is
// dropped, nothing is left.
func TestSendQueueRandomOps(t *testing.T) {
	names := []string{"a", "b", "c"}
	for seed := range uint64(500) {
		r := rand.New(rand.NewPCG(seed, 1))
		workers := 1 + r.IntN(3)
		q := newSendQueue(4+r.IntN(30), workers, time.Second, 4*time.Second)
		inFlight := map[string][]outgoing{} // sends handed out and not ended
		ended := map[string][]uint64{}
		var steps []string
		check := func() {
			t.Helper()
			fail := func(f string, a ...any) {
				t.Helper()
				t.Fatalf("seed %d after %v: %s", seed, steps[max(0, len(steps)-20):], fmt.Sprintf(f, a...))
			}
			n, aside, held := 0, 0, 0
			for name, p := range q.peers {
				n += len(p.msgs)
				aside += p.setAside
				if p.worker {
					held++
				}
				in := p.setAside
				if p.busy {
					in++
				}
				if in != len(inFlight[name]) {
					fail("%s: %d sends in flight, %d handed out and not ended", name, in, len(inFlight[name]))
				}
				if in > backoffSends {
					fail("%s: %d sends in flight", name, in)
				}
				if !p.busy && len(p.msgs) > 0 && !p.ready {
					fail("%s: messages waiting, none in flight, not ready", name)
				}
				if p.ready && slices.Contains(q.probes, p) != p.backedOff {
					fail("%s: on the wrong ready list (backed off %v)", name, p.backedOff)
				}
				if !p.busy && p.setAside == 0 && len(p.msgs) == 0 && (!p.backedOff || p.dropped) {
					fail("%s: kept for nothing", name)
				}
			}
			for name, l := range inFlight {
				if len(l) > 0 && q.peers[name] == nil {
					fail("%s: forgotten with %d sends in flight", name, len(l))
				}
			}
			if n != q.n || aside != q.aside || aside > q.limit || q.idle+held != workers {
				fail("waiting %d (sum %d), set aside %d (sum %d, limit %d), free workers %d + held %d of %d",
					q.n, n, q.aside, aside, q.limit, q.idle, held, workers)
			}
		}
		for range 400 {
			to := names[r.IntN(len(names))]
			l := inFlight[to]
			switch k := r.IntN(10); {
			case k < 3:
				q.push(Message{To: to})
				steps = append(steps, "push "+to)
			case k < 5:
				q.mu.Lock()
				can := len(q.probes) > 0 || len(q.ready) > 0 && q.idle > 0
				q.mu.Unlock()
				if can {
					m, ok := q.pop()
					require.True(t, ok)
					inFlight[m.To] = append(inFlight[m.To], m)
					steps = append(steps, fmt.Sprintf("pop %s %d", m.To, m.seq))
				}
			case k == 5 && len(l) > 0:
				m := l[r.IntN(len(l))]
				q.slow(to, m.seq)
				steps = append(steps, fmt.Sprintf("slow %s %d", to, m.seq))
			case k == 6 && len(l) > 0:
				m := l[r.IntN(len(l))]
				q.setAside(to, m.seq)
				steps = append(steps, fmt.Sprintf("setAside %s %d", to, m.seq))
			case k == 7 && len(ended[to]) > 0:
				// A timer that fired as its send ended: changes nothing.
				seq := ended[to][r.IntN(len(ended[to]))]
				before := fmt.Sprint(q.idle, q.aside, q.backedOff())
				q.slow(to, seq)
				q.setAside(to, seq)
				if after := fmt.Sprint(q.idle, q.aside, q.backedOff()); after != before {
					t.Fatalf("seed %d: late slow and setAside of %s %d changed %s to %s", seed, to, seq, before, after)
				}
				steps = append(steps, fmt.Sprintf("late %s %d", to, seq))
			case k == 8 && len(l) > 0:
				i := r.IntN(len(l))
				m, res := l[i], sendResult(r.IntN(4))
				q.done(to, m.seq, res)
				ended[to] = append(ended[to], m.seq)
				inFlight[to] = slices.Delete(l, i, i+1)
				steps = append(steps, fmt.Sprintf("done %s %d %d", to, m.seq, res))
			case k == 9:
				q.drop(to)
				steps = append(steps, "drop "+to)
			}
			check()
		}
		for _, to := range names {
			for _, m := range inFlight[to] {
				q.drop(to)
				q.done(to, m.seq, sendFailed)
			}
			inFlight[to] = nil
			q.drop(to)
		}
		check()
		require.Empty(t, q.peers, "seed %d", seed)
		require.Zero(t, q.len())
		require.Equal(t, workers, q.idle)
	}
}
