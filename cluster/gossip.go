package cluster

import (
	"errors"
	"log/slog"
	"sync"
	"time"
)

// gossiper is the shell around the cluster's SyncProtocol: one timer set
// to the protocol's next tick, the member list fed to it whenever it
// changed, received messages handed to it, and what it returns sent from a
// bounded queue by a pool of workers. It decides nothing itself.
type gossiper struct {
	c     *Cluster
	proto *SyncProtocol
	clock func() time.Time
	log   *slog.Logger
	kick  chan struct{} // wakes the loop to re-arm its timer after SetMembers

	memMu   sync.Mutex // serializes syncMembers
	members uint64     // guarded by memMu: the member table's version last given to the protocol

	q     *sendQueue
	stats *gossipCounters

	// sendFn sends one message: Cluster.SendReliable; tests replace it
	// before Start to inject message faults.
	sendFn func(to string, payload []byte) error
}

func newGossiper(c *Cluster) (*gossiper, error) {
	cfg := c.cfg
	g := &gossiper{
		c:     c,
		clock: cfg.Clock,
		log:   c.log,
		kick:  make(chan struct{}, 1),
		q:     newSendQueue(cfg.Gossip.SendQueue, cfg.Gossip.SendWorkers, cfg.Timing.ProbeTimeout, cfg.Timing.StreamTimeout),
		stats: newGossipCounters(),
	}
	if g.clock == nil {
		g.clock = time.Now
	}
	g.sendFn = c.SendReliable
	p, err := NewSyncProtocol(ProtocolConfig{
		Name:          cfg.Name,
		BootID:        c.boot,
		Tracker:       cfg.Tracker,
		Gossip:        cfg.Gossip,
		Store:         cfg.Store,
		Seal:          cfg.Seal,
		SealLimits:    cfg.SealLimits,
		BulkSyncDelay: 4 * cfg.Timing.GossipInterval,
		Logger:        c.log,
		Owned:         cfg.Owned,
		Aggregates:    aggregatesOf(cfg),
	})
	if err != nil {
		return nil, err
	}
	g.proto = p
	return g, nil
}

// start launches the loop and the sender; they end when stop closes.
func (g *gossiper) start(wg *sync.WaitGroup, stop <-chan struct{}) {
	g.proto.drive(true)
	wg.Add(2)
	go g.loop(wg, stop)
	go g.sender(wg)
}

// loop ticks the protocol whenever it is due, until stop closes.
func (g *gossiper) loop(wg *sync.WaitGroup, stop <-chan struct{}) {
	defer wg.Done()
	defer g.proto.drive(false)
	g.tick()
	t := time.NewTimer(g.untilNext())
	defer t.Stop()
	for {
		select {
		case <-stop:
			if n := g.q.close(); n > 0 {
				g.stats.add(func(s *GossipStats) { s.SendDrops += uint64(n) })
			}
			return
		case <-t.C:
			g.tick()
		case <-g.kick:
		}
		t.Reset(g.untilNext())
	}
}

// untilNext is how long to wait for the protocol's next tick (at least a
// millisecond, so a clock that stands still cannot spin the loop).
func (g *gossiper) untilNext() time.Duration {
	return max(g.proto.Next().Sub(g.clock()), time.Millisecond)
}

// tick ticks the protocol, then refreshes the clock_skew warnings.
func (g *gossiper) tick() {
	g.syncMembers()
	now := g.clock()
	g.send(g.proto.Tick(now))
	g.c.warn.replace(WarnClockSkew, g.proto.clockWarnings(now), time.Now())
}

// syncMembers gives the protocol the member table (protocolMembers: a
// member refused for its settings as dead) if it changed since the last
// time. The table (Cluster.Members) is exact even when events are
// dropped; it is synced before every tick and every message received, so
// the protocol never judges a message on a stale table.
func (g *gossiper) syncMembers() {
	v := g.c.memberVersion.Load()
	g.memMu.Lock()
	defer g.memMu.Unlock()
	if v == g.members {
		return
	}
	members := g.c.protocolMembers()
	g.proto.SetMembers(members, g.clock())
	g.members = v
	select { // the schedule may have moved (a bulk sync armed): re-arm the timer
	case g.kick <- struct{}{}:
	default:
	}
}

// receive handles one message taken from the message queue.
func (g *gossiper) receive(msg []byte) {
	g.syncMembers()
	now := g.clock()
	r, msgs := g.proto.Receive(msg, now)
	var end time.Time
	if r.Inserted {
		end = g.c.cfg.Tracker.EpochStart(r.Key.Epoch + 1)
	}
	g.stats.received(len(msg), r, end, now)
	g.send(msgs)
}

// onEvent applies a membership change: the protocol gets the member table,
// and a member gone drops its queued sends, unless it is up again by now
// (the event is older than the table: what the protocol queued for it on
// its return, the window's records among them, must go).
func (g *gossiper) onEvent(ev Event) {
	if (ev.Type == EventDead || ev.Type == EventLeft) && !g.c.memberUp(ev.Member.Member) {
		if dropped := g.q.drop(ev.Member.Member); dropped > 0 {
			g.stats.add(func(s *GossipStats) { s.SendDrops += uint64(dropped) })
		}
	}
	g.syncMembers()
}

// send queues msgs; what does not fit is dropped and counted.
func (g *gossiper) send(msgs []Message) {
	dropped := 0
	for _, m := range msgs {
		dropped += g.q.push(m)
	}
	g.dropped(dropped)
}

// dropped counts n messages dropped from the send queue.
func (g *gossiper) dropped(n int) {
	if n > 0 {
		g.stats.add(func(s *GossipStats) { s.SendDrops += uint64(n) })
	}
}

// sender starts each send the queue hands out (sendQueue.pop: at most
// SendWorkers holding a worker, and the probes of backed-off members) on
// its own goroutine, until the queue closes.
func (g *gossiper) sender(wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		m, ok := g.q.pop()
		if !ok {
			return
		}
		wg.Add(1)
		go g.sendOne(wg, m)
	}
}

// sendOne sends one message taken from the queue: dropped if it expired
// while waiting; a send that holds a worker gives it back after slowAfter,
// and one still running after setAsideAfter is set aside. A send that
// fails because its member is listed down or unknown has the queue forget
// the member (sendGone): it was queued after the member's death dropped
// what waited for it.
func (g *gossiper) sendOne(wg *sync.WaitGroup, m outgoing) {
	defer wg.Done()
	if !m.Expires.IsZero() && !g.clock().Before(m.Expires) {
		g.dropped(1 + g.q.done(m.To, m.seq, sendSkipped))
		return
	}
	if m.worker {
		t := time.AfterFunc(g.q.slowAfter, func() { g.q.slow(m.To, m.seq) })
		defer t.Stop()
	}
	t := time.AfterFunc(g.q.setAsideAfter, func() { g.dropped(g.q.setAside(m.To, m.seq)) })
	defer t.Stop()
	err := g.sendFn(m.To, m.Payload)
	r := sendOK
	switch {
	case errors.Is(err, ErrMemberDown) || errors.Is(err, ErrUnknownMember):
		r = sendGone // queued after its death dropped what waited: forget it
	case err != nil:
		r = sendFailed
	}
	g.dropped(g.q.done(m.To, m.seq, r))
	g.stats.sent(m.Message, err)
	if err != nil {
		g.log.Debug("cluster: gossip send failed", "to", m.To, "type", m.Type, "err", err)
	}
}

// aggregatesOf is the Store as an AggregateStore when it is one and the
// node has an OwnedStore: what protocol v2 needs besides it.
func aggregatesOf(cfg Config) AggregateStore {
	if cfg.Owned == nil {
		return nil
	}
	a, _ := cfg.Store.(AggregateStore)
	return a
}

// advertisedLevel is the protocol level this member advertises:
// CurrentLevel (Level4: protocol v2, packed aggregates, relays) when it
// can run protocol v2 (see Config.Owned), else Level2.
func advertisedLevel(cfg Config) uint8 {
	if cfg.Store != nil && cfg.Gossip.Protocol >= ProtocolV2 && aggregatesOf(cfg) != nil {
		return CurrentLevel
	}
	return Level2
}
