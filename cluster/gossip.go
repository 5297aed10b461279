package cluster

import (
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// gossiper is the shell around a Protocol: it seals at epoch boundaries,
// runs anti-entropy and bulk sync, feeds received messages and membership
// changes to the Protocol, and sends what it returns from a bounded pool.
type gossiper struct {
	c      *Cluster
	g      Gossip
	trk    tracker.Config
	seal   func(int64, time.Time) []tracker.DestCounts
	clock  func() time.Time
	jitter time.Duration // this node's delay after each epoch boundary
	log    *slog.Logger

	mu         sync.Mutex // guards the fields below; never held while sending
	proto      *Protocol
	rng        *mrand.Rand
	bulkDue    bool  // exchange digests with BulkSyncPeers members at the next check
	lastSealed int64 // newest epoch sealed

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
		g:     cfg.Gossip,
		trk:   cfg.Tracker,
		seal:  cfg.Seal,
		clock: cfg.Clock,
		log:   c.log,
		rng:   mrand.New(mrand.NewPCG(c.boot, 0x6055)),
		q:     newSendQueue(cfg.Gossip.SendQueue),
		stats: newGossipCounters(),
	}
	if g.clock == nil {
		g.clock = time.Now
	}
	g.sendFn = c.SendReliable
	// A fixed per-node delay in [0, SealJitter), capped at half a
	// sub-window, drawn from the boot ID.
	maxJitter := min(g.g.SealJitter, cfg.Tracker.SubWindow()/2)
	u := float64(mrand.New(mrand.NewPCG(c.boot, 0x5ea1)).Uint64()>>11) / (1 << 53)
	g.jitter = time.Duration(u * float64(maxJitter))
	p, err := NewProtocol(ProtocolConfig{
		Name:        cfg.Name,
		BootID:      c.boot,
		Tracker:     cfg.Tracker,
		Gossip:      cfg.Gossip,
		Store:       cfg.Store,
		KnownOrigin: c.knownOrigin,
		Up:          c.up,
	})
	if err != nil {
		return nil, err
	}
	g.proto = p
	return g, nil
}

// start launches the loop and the send workers; they end when stop closes.
func (g *gossiper) start(wg *sync.WaitGroup, stop <-chan struct{}) {
	now := g.clock()
	g.mu.Lock()
	g.lastSealed = g.trk.Epoch(now) - int64(g.trk.SubWindows) // seal what the tracker already holds at the first boundary
	g.bulkDue = g.g.BulkSyncPeers > 0
	g.mu.Unlock()
	wg.Add(1 + g.g.SendWorkers)
	go g.loop(wg, stop)
	for range g.g.SendWorkers {
		go g.worker(wg)
	}
}

func (g *gossiper) loop(wg *sync.WaitGroup, stop <-chan struct{}) {
	defer wg.Done()
	sealT := time.NewTimer(g.untilSeal(g.clock()))
	defer sealT.Stop()
	aeT := time.NewTimer(g.antiEntropyWait())
	defer aeT.Stop()
	bulkCheck := 4 * g.c.cfg.Timing.GossipInterval
	bulkT := time.NewTimer(bulkCheck)
	defer bulkT.Stop()
	for {
		select {
		case <-stop:
			if n := g.q.close(); n > 0 {
				g.stats.add(func(s *GossipStats) { s.SendDrops += uint64(n) })
			}
			return
		case <-sealT.C:
			g.sealDue()
			sealT.Reset(g.untilSeal(g.clock()))
		case <-aeT.C:
			g.antiEntropy()
			aeT.Reset(g.antiEntropyWait())
		case <-bulkT.C:
			g.bulkSync()
			bulkT.Reset(bulkCheck)
		}
	}
}

// untilSeal returns how long to wait before the next seal is due.
func (g *gossiper) untilSeal(now time.Time) time.Duration {
	g.mu.Lock()
	last := g.lastSealed
	g.mu.Unlock()
	e := g.trk.Epoch(now)
	at := g.trk.EpochStart(e).Add(g.jitter)
	if last >= e-1 || now.Before(at) {
		if last >= e-1 {
			at = g.trk.EpochStart(e + 1).Add(g.jitter)
		}
		return max(at.Sub(now), time.Millisecond)
	}
	return 0
}

// sealDue seals every epoch that ended (and is past this node's jitter)
// since the last seal and is still in the tracker's ring.
func (g *gossiper) sealDue() {
	now := g.clock()
	e := g.trk.Epoch(now)
	if now.Before(g.trk.EpochStart(e).Add(g.jitter)) {
		e-- // within the jitter of a new epoch: the one before it is not due
	}
	g.mu.Lock()
	from := max(g.lastSealed+1, e-int64(g.trk.SubWindows)+1)
	g.lastSealed = max(g.lastSealed, e-1)
	g.mu.Unlock()
	if g.seal == nil {
		return
	}
	peers := g.upPeers()
	for ep := from; ep <= e-1; ep++ {
		dests := g.seal(ep, now)
		if len(dests) == 0 {
			continue
		}
		g.mu.Lock()
		msgs, err := g.proto.Seal(ep, dests, peers, now)
		g.mu.Unlock()
		g.stats.add(func(s *GossipStats) {
			s.Seals++
			if err != nil {
				s.SealErrors++
			}
		})
		if err != nil {
			g.log.Warn("cluster: seal", "epoch", ep, "err", err)
		}
		g.send(msgs)
	}
}

// upPeers returns the member names of the other members alive or suspect.
func (g *gossiper) upPeers() []string {
	var out []string
	for _, m := range g.c.Members() {
		if m.State.Up() && m.Member != g.c.self {
			out = append(out, m.Member)
		}
	}
	return out
}

func (g *gossiper) antiEntropyWait() time.Duration {
	g.mu.Lock()
	u := g.rng.Float64()
	g.mu.Unlock()
	return time.Duration(float64(g.g.AntiEntropyInterval) * (0.75 + 0.5*u))
}

// antiEntropy re-applies membership to the Store (in case an event was
// dropped) and sends a digest to one random alive member.
func (g *gossiper) antiEntropy() {
	now := g.clock()
	members := g.c.Members()
	peers := g.upPeers()
	g.mu.Lock()
	g.proto.Membership(members, now)
	var msgs []Message
	if len(peers) > 0 {
		msgs = g.proto.Digests(peers[g.rng.IntN(len(peers))], now)
	} else {
		g.bulkDue = g.g.BulkSyncPeers > 0 // alone: catch up when members appear
	}
	g.mu.Unlock()
	g.send(msgs)
}

// bulkSync exchanges digests with BulkSyncPeers random members when due
// (after Start, or after this node was alone) and members are there.
func (g *gossiper) bulkSync() {
	peers := g.upPeers()
	g.mu.Lock()
	if !g.bulkDue || len(peers) == 0 {
		g.mu.Unlock()
		return
	}
	g.bulkDue = false
	now := g.clock()
	g.rng.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
	var msgs []Message
	for _, p := range peers[:min(len(peers), g.g.BulkSyncPeers)] {
		msgs = append(msgs, g.proto.Digests(p, now)...)
	}
	g.mu.Unlock()
	g.send(msgs)
}

// receive handles one message taken from the message queue.
func (g *gossiper) receive(msg []byte) {
	now := g.clock()
	g.mu.Lock()
	r, msgs := g.proto.Receive(msg, now)
	g.mu.Unlock()
	var end time.Time
	if r.Inserted {
		end = g.trk.EpochStart(r.Key.Epoch + 1)
	}
	g.stats.received(len(msg), r, end, now)
	g.send(msgs)
}

// onEvent applies a membership change: the Store's exclusions and live
// count follow the member table; a member gone drops its queued sends.
func (g *gossiper) onEvent(ev Event) {
	now := g.clock()
	members := g.c.Members()
	alone := g.c.NumAlive() <= 1
	dropped := 0
	if ev.Type == EventDead || ev.Type == EventLeft {
		dropped = g.q.drop(ev.Member.Member)
	}
	g.mu.Lock()
	g.proto.Membership(members, now)
	if ev.Type == EventDead || ev.Type == EventLeft {
		g.proto.Forget(ev.Member.Member)
	}
	if alone {
		g.bulkDue = g.g.BulkSyncPeers > 0
	}
	g.mu.Unlock()
	if dropped > 0 {
		g.stats.add(func(s *GossipStats) { s.SendDrops += uint64(dropped) })
	}
}

// send queues msgs; what does not fit is dropped and counted.
func (g *gossiper) send(msgs []Message) {
	dropped := 0
	for _, m := range msgs {
		if !g.q.push(m) {
			dropped++
		}
	}
	if dropped > 0 {
		g.stats.add(func(s *GossipStats) { s.SendDrops += uint64(dropped) })
	}
}

func (g *gossiper) worker(wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		m, ok := g.q.pop()
		if !ok {
			return
		}
		if !m.Expires.IsZero() && !g.clock().Before(m.Expires) {
			g.q.done(m.To)
			g.stats.add(func(s *GossipStats) { s.SendDrops++ })
			continue
		}
		err := g.sendFn(m.To, m.Payload)
		g.q.done(m.To)
		g.stats.sent(m, err)
		if err != nil {
			g.log.Debug("cluster: gossip send failed", "to", m.To, "type", m.Type, "err", err)
		}
	}
}
