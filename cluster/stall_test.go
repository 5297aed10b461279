package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/codec"

	"github.com/stretchr/testify/require"
)

// TestGossipStalledPeerNeverBlocks stalls one of five members: it stays
// alive (packets flow) and sends as usual, but accepts streams and never
// reads them, so every send to it hangs until the 20 s stream timeout.
// With only two send workers per node, the other four must still seal on
// schedule and converge on the exact union, every epoch, well within the
// stream timeout: a slow member holds at most one worker and delays only
// its own messages.
func TestGossipStalledPeerNeverBlocks(t *testing.T) {
	t.Parallel()
	// A send blocked on the stalled member shows as a wait of about the
	// stream timeout; the others must converge within half of it. With
	// 10 s that was too tight: under -race at several times the cores'
	// load, with live members declared dead for a second meanwhile, an
	// epoch took 5.03 s (0.6 s for the two before it).
	const streamTimeout = 20 * time.Second
	o := defaultGossipOpts()
	o.gossip.SendWorkers = 2
	o.tune = func(c *Config) { c.Timing.StreamTimeout = streamTimeout }
	nw, nodes := gossipCluster(t, 18, 5, o)
	rest, stalled := nodes[:4], nodes[4]
	nw.Stall(stalled.tr.Addr(), true)

	u := newUnion(t, o.tracker)
	dests := testDests(4)
	const epochs = 3
	for k := range epochs {
		e := recordEpoch(t, u.cfg, nodes, u.ref, dests, randomSamples(uint64(40+k), 30))
		u.epochs = append(u.epochs, e)
		// Far within the stream timeout: a send blocked on the stalled
		// member would show up as a wait of about streamTimeout.
		start := time.Now()
		for !holdsEpoch(rest, nodes, e) {
			require.Less(t, time.Since(start), streamTimeout/2, "epoch %d: the others did not converge", e)
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("epoch %d: all 5 batches on the 4 others %v after recording", e, time.Since(start))
		eventuallyUnionOf(t, nodes, rest, dests, u.counts(t))
	}
	require.Positive(t, nw.Stats().StreamsStalled, "sends to the stalled member hung")
	for _, n := range nodes {
		s := n.GossipStats()
		require.Equal(t, uint64(epochs), s.Seals, "%s sealed every epoch", n.Name())
		require.Zero(t, s.SealErrors, n.Name())
	}
	for _, n := range rest {
		h := n.GossipStats().SealToReceive
		require.Equal(t, uint64(4*epochs), h.Count, "%s: a new batch from each of the 4 others, every epoch", n.Name())
		for i, b := range h.Bounds {
			if b > streamTimeout.Seconds()/2 {
				require.Zero(t, h.Counts[i], "%s: no batch waited for the stream timeout", n.Name())
			}
		}
		require.Zero(t, h.Counts[len(h.Bounds)], n.Name())
		require.True(t, allSee([]*gnode{n}, nodes), "%s: the stalled member is still alive", n.Name())
	}
}

// TestSendQueueBacksOffUnansweredMembers runs the send path on a fake clock
// with 2 workers and 10 members, 6 of them cut off: a send to one of those
// waits for the 10 s stream timeout and fails (a connect nobody answers).
// Every second each member is sent a message, the cut-off ones first. Each
// cut-off member may hold a worker for slowAfter once, after which it is
// backed off: from the third second on, every message to the 4 members up
// is sent within 10 ms of being queued (without back-off they wait behind
// 10 s sends, longer every round), and at most backoffKeep messages wait
// per member cut off, the older ones dropped and counted. Once the cut-off
// members answer, the first send to each succeeds, they are normal again
// and their next messages go out at once.
func TestSendQueueBacksOffUnansweredMembers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			workers       = 2
			streamTimeout = 10 * time.Second
			slowAfter     = 500 * time.Millisecond
			rounds        = 30
			cut, up       = 6, 4
		)
		var mu sync.Mutex
		answer := false                 // the cut-off members answer
		late := map[int]time.Duration{} // the longest wait of a message to a member up, by round
		sentTo := map[string]int{}
		start := time.Now()
		g := &gossiper{
			clock: time.Now,
			q:     newSendQueue(4096, workers, slowAfter, streamTimeout),
			stats: newGossipCounters(),
			log:   slog.New(slog.DiscardHandler),
			sendFn: func(to string, payload []byte) error {
				mu.Lock()
				a := answer
				mu.Unlock()
				if to[0] == 'c' && !a {
					time.Sleep(streamTimeout)
					return errors.New("i/o timeout")
				}
				time.Sleep(time.Millisecond)
				mu.Lock()
				defer mu.Unlock()
				sentTo[to]++
				if to[0] == 'u' {
					round := int(payload[0])
					late[round] = max(late[round], time.Since(start.Add(time.Duration(round)*time.Second)))
				}
				return nil
			},
		}
		var members []string
		for i := range cut {
			members = append(members, fmt.Sprintf("cut-%d", i))
		}
		for i := range up {
			members = append(members, fmt.Sprintf("up-%d", i))
		}
		round := func(k int) {
			msgs := make([]Message, 0, len(members))
			for _, m := range members {
				msgs = append(msgs, Message{To: m, Type: codec.TypeDigest, Payload: []byte{byte(k)}})
			}
			g.send(msgs)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go g.sender(&wg)
		for k := range rounds {
			time.Sleep(time.Until(start.Add(time.Duration(k) * time.Second)))
			round(k)
			synctest.Wait()
			require.LessOrEqual(t, g.q.len(), cut*backoffKeep+up, "round %d: bounded", k)
		}
		time.Sleep(time.Until(start.Add(rounds * time.Second)))
		mu.Lock()
		for i := range up {
			require.Equal(t, rounds, sentTo[fmt.Sprintf("up-%d", i)], "every message to the members up sent")
		}
		for k := range rounds {
			bound := 10 * time.Millisecond
			if time.Duration(k)*time.Second < cut/workers*slowAfter {
				// The first rounds: the 6 members cut off hold the 2
				// workers for 0.5 s each before they are backed off.
				bound += cut / workers * slowAfter
			}
			require.LessOrEqual(t, late[k], bound, "round %d: the members up waited", k)
		}
		mu.Unlock()
		require.Equal(t, cut, g.q.backedOff())
		s := g.stats.snapshot()
		require.Positive(t, s.SendDrops, "the oldest messages of members backed off were dropped")
		require.Positive(t, s.SendErrors)

		time.Sleep(250 * time.Millisecond) // off the probes' schedule
		mu.Lock()
		answer = true
		mu.Unlock()
		// The probes in flight end within the stream timeout; then each
		// cut-off member's next send succeeds and the rest follow.
		time.Sleep(streamTimeout + time.Second)
		synctest.Wait()
		require.Zero(t, g.q.backedOff(), "back to normal")
		require.Zero(t, g.q.len())
		mu.Lock()
		sentCut := 0
		for i := range cut {
			// The newest waited, but for the probe that failed as they
			// answered.
			n := sentTo[fmt.Sprintf("cut-%d", i)]
			require.GreaterOrEqual(t, n, backoffKeep-1, "the newest messages waited")
			sentCut += n
		}
		n0 := make([]int, cut)
		for i := range cut {
			n0[i] = sentTo[fmt.Sprintf("cut-%d", i)]
		}
		mu.Unlock()
		round(rounds)
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		mu.Lock()
		for i := range cut {
			require.Equal(t, 1, sentTo[fmt.Sprintf("cut-%d", i)]-n0[i], "sent at once")
		}
		mu.Unlock()
		s = g.stats.snapshot()
		require.Equal(t, uint64(cut*rounds), uint64(sentCut)+s.SendDrops+s.SendErrors,
			"every message to the members cut off was sent, dropped or failed")
		g.q.close()
		wg.Wait()
	})
}

// TestSendQueueBackedOffMemberBackPromptly cuts one member off the send
// path on a fake clock: a send to it stalls for the 10 s stream timeout
// and fails (a connect nobody answers), and a send begun before it is
// reachable again stalls so to its end (as a connect whose SYNs were
// lost). Every 100 ms a message is queued for it and for a member up.
// It becomes reachable 12.3 s in, in the middle of its probe's stall: the
// messages waiting then must leave within a set-aside interval
// (StreamTimeout / backoffSends) of that, not behind the stalled probe,
// with at most backoffSends sends in flight to it at any time, and the
// member up never waits.
func TestSendQueueBackedOffMemberBackPromptly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			streamTimeout = 10 * time.Second
			slowAfter     = 500 * time.Millisecond
			reachable     = 12300 * time.Millisecond
			end           = 20 * time.Second
		)
		restartAfter := streamTimeout / backoffSends
		var mu sync.Mutex
		start := time.Now()
		inFlight, maxInFlight := 0, 0
		var waited time.Duration // the longest wait of a message to the member up
		var firstBack time.Time  // the first message to the cut member sent
		var stuck time.Duration  // when it was found backed off or with messages waiting, too late
		g := &gossiper{
			clock: time.Now,
			q:     newSendQueue(4096, 2, slowAfter, streamTimeout),
			stats: newGossipCounters(),
			log:   slog.New(slog.DiscardHandler),
			sendFn: func(to string, payload []byte) error {
				queued := start.Add(time.Duration(payload[0]) * 100 * time.Millisecond)
				if to == "up" {
					time.Sleep(time.Millisecond)
					mu.Lock()
					waited = max(waited, time.Since(queued))
					mu.Unlock()
					return nil
				}
				mu.Lock()
				inFlight++
				maxInFlight = max(maxInFlight, inFlight)
				began := time.Since(start)
				mu.Unlock()
				defer func() {
					mu.Lock()
					inFlight--
					mu.Unlock()
				}()
				if began < reachable {
					time.Sleep(streamTimeout)
					return errors.New("i/o timeout")
				}
				time.Sleep(time.Millisecond)
				mu.Lock()
				if firstBack.IsZero() {
					firstBack = time.Now()
				}
				mu.Unlock()
				return nil
			},
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go g.sender(&wg)
		for k := 0; time.Duration(k)*100*time.Millisecond < end; k++ {
			time.Sleep(time.Until(start.Add(time.Duration(k) * 100 * time.Millisecond)))
			g.send([]Message{
				{To: "cut", Type: codec.TypeDigest, Payload: []byte{byte(k)}},
				{To: "up", Type: codec.TypeDigest, Payload: []byte{byte(k)}},
			})
			synctest.Wait()
			at := time.Since(start)
			if at > reachable+restartAfter+10*time.Millisecond && (g.q.backedOff() > 0 || g.q.len() > 0) && stuck == 0 {
				stuck = at
			}
		}
		time.Sleep(streamTimeout) // the stalled sends end
		synctest.Wait()
		g.q.close()
		wg.Wait()
		require.Zero(t, stuck, "still backed off, or messages waiting, a set-aside interval after the return")
		mu.Lock()
		defer mu.Unlock()
		require.False(t, firstBack.IsZero(), "sent once reachable")
		t.Logf("first message to the member back %v after its return; %d sends to it in flight at most",
			firstBack.Sub(start.Add(reachable)), maxInFlight)
		require.LessOrEqual(t, firstBack.Sub(start.Add(reachable)), restartAfter+10*time.Millisecond,
			"the waiting messages left within a set-aside interval of the member's return")
		require.LessOrEqual(t, maxInFlight, backoffSends, "sends in flight to the member cut off")
		require.LessOrEqual(t, waited, 3*slowAfter, "the member up never waited for the other")
	})
}

// TestSendQueueSetAside checks the bookkeeping of sends set aside: a
// backed-off member's send still running after setAsideAfter is set
// aside and its next message goes out as a new probe (holding no worker),
// at most backoffSends sends are in flight to one member (a send due
// beyond that is set aside once one of the others ends), a send set aside
// that fails changes nothing, one that succeeds makes the member normal,
// and a member dropped with sends set aside is forgotten once they end.
func TestSendQueueSetAside(t *testing.T) {
	q := newSendQueue(100, 1, time.Second, 4*time.Second)
	require.Equal(t, time.Second, q.setAsideAfter, "StreamTimeout / backoffSends")
	for k := range 2 * backoffSends {
		require.Zero(t, q.push(Message{To: "a", Payload: []byte{byte(k)}}))
	}
	first, ok := q.pop()
	require.True(t, ok)
	require.True(t, first.worker)
	require.Zero(t, q.setAside("a", first.seq), "set aside: a is backed off, its worker free")
	require.Equal(t, 1, q.backedOff())
	sends := []outgoing{first}
	for range backoffSends - 1 {
		m, ok := q.pop()
		require.True(t, ok)
		require.False(t, m.worker, "a probe")
		require.Equal(t, []byte{byte(len(sends))}, m.Payload)
		sends = append(sends, m)
		q.setAside("a", m.seq)
	}
	// backoffSends in flight: the last one's set-aside is overdue.
	require.Zero(t, q.push(Message{To: "b"}))
	mb, ok := q.pop()
	require.True(t, ok)
	require.Equal(t, "b", mb.To, "nothing for a: its sends are all in flight")
	require.True(t, mb.worker, "the worker a held is free")
	q.done("b", mb.seq, sendOK)
	require.Zero(t, q.done("a", sends[0].seq, sendFailed), "a set-aside send fails")
	require.Equal(t, 1, q.backedOff(), "still backed off")
	m, ok := q.pop()
	require.True(t, ok)
	require.Equal(t, "a", m.To, "the overdue send set aside: a new probe")
	require.False(t, m.worker)
	require.Equal(t, []byte{backoffSends}, m.Payload)
	// A send set aside that succeeds makes a normal; the probe in flight
	// still runs, then ends.
	q.done("a", sends[1].seq, sendOK)
	require.Zero(t, q.backedOff())
	q.done("a", m.seq, sendOK)
	m, ok = q.pop()
	require.True(t, ok)
	require.True(t, m.worker, "a is normal again")
	q.done("a", m.seq, sendOK)
	// Dropped with sends set aside: forgotten once the last ends.
	require.Equal(t, backoffSends-2, q.drop("a"), "2×backoffSends pushed, backoffSends+2 sent")
	q.done("a", sends[2].seq, sendFailed)
	require.Contains(t, q.peers, "a", "a send set aside still runs")
	q.done("a", sends[3].seq, sendFailed)
	require.Empty(t, q.peers)
	require.Zero(t, q.aside)
	require.Zero(t, q.len())
}

// TestSendQueueLateTimerOfForgottenMember checks that slow and setAside
// called late for a send that has ended (their timer fired as the send
// returned) change nothing, also once the member was forgotten (normal
// with nothing waiting) and queued again: its new send must not be taken
// for the old one. Numbered per member, the numbers started again with
// the member, and the old send's timer freed the new send's worker,
// backed the member off and set its send aside.
func TestSendQueueLateTimerOfForgottenMember(t *testing.T) {
	q := newSendQueue(100, 1, time.Second, 4*time.Second)
	require.Zero(t, q.push(Message{To: "a"}))
	old, ok := q.pop()
	require.True(t, ok)
	require.Zero(t, q.done("a", old.seq, sendOK))
	require.Empty(t, q.peers, "normal with nothing waiting: forgotten")
	require.Zero(t, q.push(Message{To: "a"}))
	m, ok := q.pop()
	require.True(t, ok)
	require.True(t, m.worker)
	q.slow("a", old.seq)
	require.Zero(t, q.setAside("a", old.seq))
	require.Zero(t, q.backedOff(), "the old send's timers back nobody off")
	require.Zero(t, q.idle, "the new send keeps its worker")
	require.Zero(t, q.aside, "nothing set aside")
	require.Zero(t, q.done("a", m.seq, sendOK))
	require.Empty(t, q.peers)
	require.Equal(t, 1, q.idle)
}

// TestSendQueueSetAsideSuccessMakesNormal checks that a send set aside
// that succeeds while the member's next message waits for its probe
// makes that message a normal one: it goes out holding a worker (so at
// most SendWorkers such sends run, and one that stalls backs the member
// off at slowAfter), not as a probe of a member no longer backed off.
func TestSendQueueSetAsideSuccessMakesNormal(t *testing.T) {
	q := newSendQueue(100, 1, time.Second, 4*time.Second)
	require.Zero(t, q.push(Message{To: "a", Payload: []byte{0}}))
	require.Zero(t, q.push(Message{To: "a", Payload: []byte{1}}))
	first, ok := q.pop()
	require.True(t, ok)
	require.Zero(t, q.setAside("a", first.seq))
	require.Equal(t, 1, q.backedOff())
	// The set-aside send succeeds before the probe is taken.
	require.Zero(t, q.done("a", first.seq, sendOK))
	require.Zero(t, q.backedOff())
	m, ok := q.pop()
	require.True(t, ok)
	require.Equal(t, []byte{1}, m.Payload)
	require.True(t, m.worker, "a normal member's send holds a worker")
	require.Zero(t, q.idle)
	require.Zero(t, q.done("a", m.seq, sendOK))
	require.Equal(t, 1, q.idle)
	require.Empty(t, q.peers)
}
