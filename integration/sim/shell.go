package sim

// This file is the shell around each node's cluster.Protocol on simulated
// time, as package cluster's memberlist shell (gossip.go, sendqueue.go) is
// on real time. It decides nothing the protocol decides — when to seal, the
// seal jitter, anti-entropy, bulk sync and their random streams are the
// protocol's own — and keeps only what a shell owns:
//
//   - tick: one pending tick event per node, at the protocol's Next; its
//     messages (the seal's batches addressed to every other member,
//     digests) are sent;
//   - receive: each message's payload goes to the receiver's
//     Protocol.Receive, and the messages it returns are sent;
//   - send: each node queues messages per member (FIFO, at most one send in
//     flight per member, at most Gossip.SendQueue waiting in all, more are
//     dropped and counted) and sends them with Gossip.SendWorkers workers.
//     A send is a memberlist SendReliable: a TCP connect (the network's
//     handshake trips) holds the worker, then the payload leaves on the
//     node's egress link and arrives one trip later. Bytes count at the
//     sender when the payload leaves, lost or not. A send holds its worker
//     for slowAfter at most; a member whose send failed (across a cut) or
//     ran past slowAfter (a connect that stalls) is backed off until a send
//     to it succeeds: its sends hold no worker and at most backoffKeep of
//     its messages wait, the oldest dropped and counted; a backed-off
//     member's send still running after setAsideAfter is set aside (it
//     runs on, and the member's next message goes out as a new probe), at
//     most backoffSends in flight per member. A message that expired
//     while it waited (cluster.Message.Expires) is dropped and counted when
//     its turn comes, and a member the node's member list shows down loses
//     what waits for it (cluster's sendQueue and gossiper).
//
// Every member is alive from the start unless Sim.Kill stops it or it
// joins late (Config.LateJoins): a killed node no longer ticks, receives
// or sends, and the others are given the member list again, with it dead,
// after its detection delay (what ScaleConfig.KillOwners measures).
// Sim.Restart brings a killed node back under its name with a new boot
// ID, empty stores and a new Protocol, and a late node starts the same
// way; every member up lists the new boot alive at once. Messages on
// their way to a boot that is gone are lost (each is stamped with the
// boot it was addressed to), and a send completion of a killed boot frees
// nothing. A partition (Sim.Partition, partition.go) drops the messages
// between its sides, and gives each side's members its side's member
// list.

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// MsgKind names the protocol's messages, for byte counters.
type MsgKind uint8

const (
	// MsgBatch is a batch part pushed by its origin at seal time.
	MsgBatch MsgKind = iota
	// MsgDigest is an anti-entropy or bulk-sync digest of held keys, sent
	// on the node's own schedule or in reply to a peer's digest.
	MsgDigest
	// MsgPull asks a digest's sender for the keys the receiver lacks.
	MsgPull
	// MsgPulledBatch is a batch sent in answer to a pull.
	MsgPulledBatch
	// MsgRecords is an origin's records for an owner (protocol v2), and
	// MsgRecordPull an owner's pull of them.
	MsgRecords
	MsgRecordPull
	// MsgAggregates is an owner's aggregates (pushed or pulled).
	MsgAggregates
	// MsgAggDigest, MsgAggList and MsgAggPull are the anti-entropy of
	// aggregates.
	MsgAggDigest
	MsgAggList
	MsgAggPull
	numMsgKinds
)

// kindNames are the kinds' names, in snake_case.
var kindNames = [numMsgKinds]string{
	MsgBatch: "batch", MsgDigest: "digest", MsgPull: "pull", MsgPulledBatch: "pulled_batch",
	MsgRecords: "records", MsgRecordPull: "record_pull", MsgAggregates: "aggregates",
	MsgAggDigest: "agg_digest", MsgAggList: "agg_list", MsgAggPull: "agg_pull",
}

// String returns the kind in snake_case.
func (k MsgKind) String() string {
	if k < numMsgKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// typeKinds are the byte counters of every message type but the batch's.
var typeKinds = map[codec.MessageType]MsgKind{
	codec.TypeDigest: MsgDigest, codec.TypePull: MsgPull, codec.TypeRecords: MsgRecords,
	codec.TypeRecordPull: MsgRecordPull, codec.TypeAggregates: MsgAggregates, codec.TypePackedAggregates: MsgAggregates,
	codec.TypeAggDigest: MsgAggDigest, codec.TypeAggList: MsgAggList, codec.TypeAggPull: MsgAggPull,
}

// kindOf is the byte counter of a message the protocol returned; pushed is
// true for the messages of Protocol.Tick (whose batches are seals' pushes).
func kindOf(t codec.MessageType, pushed bool) MsgKind {
	if k, ok := typeKinds[t]; ok {
		return k
	}
	if pushed {
		return MsgBatch
	}
	return MsgPulledBatch
}

// outMsg is a message waiting in a node's send queue, to boot gen of node
// to.
type outMsg struct {
	to      int32
	gen     uint32
	kind    MsgKind
	expires time.Time // cluster.Message.Expires: zero for never
	payload []byte
}

// peerQueue is one member's FIFO in a node's send queue.
type peerQueue struct {
	msgs      []outMsg
	busy      bool  // a send to it is in flight
	worker    bool  // the send in flight holds a worker
	seq       int64 // the send in flight's number
	backedOff bool  // its last send failed or ran past slowAfter
	ready     bool  // in shellNode.ready or shellNode.probes
	setAside  int   // its sends set aside and still running
	overdue   bool  // the send in flight is due to be set aside
	dropped   bool  // listed down while sends to it ran: forgotten when they end
}

// slowAfter, setAsideAfter, backoffKeep and backoffSends are cluster's:
// a send holds its worker for a memberlist probe timeout at most, a
// backed-off member keeps 16 messages, and its send still running after
// a quarter of the stream timeout is set aside, at most 4 in flight.
var (
	slowAfter     = cluster.DefaultTiming().ProbeTimeout
	setAsideAfter = max(slowAfter, cluster.DefaultTiming().StreamTimeout/backoffSends)
)

const (
	backoffKeep  = 16
	backoffSends = 4
)

// shellNode is the shell's state for one node.
type shellNode struct {
	proto  *cluster.Protocol
	tickAt time.Duration // the pending tick event's time; -1 for none

	queued     int // messages waiting in all
	aside      int // sends set aside and still running
	peers      map[int32]*peerQueue
	ready      []int32 // normal members with messages waiting and none in flight, FIFO
	probes     []int32 // backed-off members with messages waiting and none in flight, FIFO
	idle       int     // free workers
	egressFree time.Duration
}

// bulkSyncDelay is the cluster shell's: 4 memberlist gossip intervals
// (cluster.ProtocolConfig.BulkSyncDelay).
var bulkSyncDelay = 4 * cluster.DefaultTiming().GossipInterval

// newShell makes node i's Protocol over store, gives it the member list,
// and sets up its shell state.
func (s *Sim) newShell(i int, store cluster.Store) error {
	n := s.nodes[i]
	pc := cluster.ProtocolConfig{
		Name: n.name, BootID: n.boot, Tracker: s.cfg.Tracker, Gossip: s.cfg.Gossip, Store: store,
		Seal:          s.sealFunc(int32(i)),
		SealLimits:    cluster.SealLimits{MaxDestinations: s.cfg.Fleet.MaxDestinations, MaxBuckets: s.cfg.Fleet.MaxEpochBuckets},
		BulkSyncDelay: bulkSyncDelay,
		RelayFrom:     s.cfg.RelayFrom,
	}
	if n.owned != nil {
		pc.Owned, pc.Aggregates = n.owned, n.aggs
	}
	p, err := cluster.NewProtocol(pc)
	if err != nil {
		return err
	}
	p.SetMembers(s.membersOf(int32(i)), s.Now())
	n.sh = shellNode{
		proto:  p,
		tickAt: -1,
		peers:  map[int32]*peerQueue{},
		idle:   s.cfg.Gossip.SendWorkers,
	}
	return nil
}

// startShells schedules every node's first tick, at the start.
func (s *Sim) startShells() {
	for i, n := range s.nodes {
		if !n.dead {
			s.schedule(int32(i))
		}
	}
}

// schedule makes node i's pending tick the one its protocol asks for
// (Protocol.Next); a tick event that is no longer pending is ignored when
// it fires.
func (s *Sim) schedule(i int32) {
	n := s.nodes[i]
	at := s.now
	if next := n.sh.proto.Next(); !next.IsZero() {
		at = max(next.Sub(s.start), s.now)
	}
	if at != n.sh.tickAt {
		n.sh.tickAt = at
		s.q.push(event{at: at, kind: evTick, to: i})
	}
}

// sealFunc is node i's cluster.ProtocolConfig.Seal: an observer's sealed
// sub-window from its tracker, another node's from the workload. A boot
// holds nothing of the epochs that started before it did (the first boots:
// before the first epoch). It notes the epochs it returns
// data for, so tick can register the batches sealed.
func (s *Sim) sealFunc(i int32) func(int64, time.Time) []tracker.DestCounts {
	return func(e int64, now time.Time) []tracker.DestCounts {
		n := s.nodes[i]
		if s.cfg.Tracker.EpochStart(e).Before(s.start.Add(n.upAt)) {
			return nil // before this boot started (before the run: e < s.first)
		}
		s.sealMu.Lock()
		defer s.sealMu.Unlock()
		var dests []tracker.DestCounts
		if n.tr != nil {
			if s.beforeSeal != nil {
				s.beforeSeal(int(i))
			}
			dests = tracker.SealedSubWindow(n.tr, e, now)
		} else if s.cfg.Workload != nil {
			dests = s.syntheticSeal(i, e)
		}
		if len(dests) > 0 {
			s.sealing = append(s.sealing, e)
			s.addUnion(n, e, dests)
		}
		return dests
	}
}

// tick runs node i's protocol at the pending tick: it registers the batches
// it sealed for convergence and sends what it returned.
func (s *Sim) tick(i int32, at time.Duration) {
	n := s.nodes[i]
	if at != n.sh.tickAt || n.dead {
		return // superseded by an earlier tick, or killed
	}
	n.sh.tickAt = -1
	s.sealing = s.sealing[:0]
	errs := n.sh.proto.Stats().SealErrors
	msgs := n.sh.proto.Tick(s.Now())
	if n.sh.proto.Stats().SealErrors != errs {
		s.fail(fmt.Errorf("sim: node %s: a seal failed (encoding, or its own store refused it)", n.name))
		return
	}
	// The origin holds its parts now: register them for convergence.
	for _, e := range s.sealing {
		for part := uint16(0); ; part++ {
			key := tracker.BatchKey{Origin: n.name, Boot: n.boot, Epoch: e, Part: part}
			b, ok := n.store.Lookup(key)
			if !ok {
				break
			}
			sb, err := s.table.register(b)
			if err != nil {
				s.fail(err)
				return
			}
			sb.sealAt = s.now
			s.hold(sb)
		}
	}
	s.enqueue(i, msgs, true)
	s.schedule(i)
}

// received is what a node's Protocol.Receive returned for one message.
type received struct {
	r    cluster.Receipt
	msgs []cluster.Message
}

// receive hands a message that arrived at node to to its Protocol.
func (s *Sim) receive(ev *event) {
	if !s.deliverable(ev) {
		return
	}
	var rc received
	rc.r, rc.msgs = s.nodes[ev.to].sh.proto.Receive(ev.payload, s.Now())
	s.apply(ev.to, rc)
}

// deliverable reports whether delivery ev reaches its receiver: the boot
// it was addressed to is up (not killed, not replaced by a restart), and
// no cut lies between them (Sim.Partition).
func (s *Sim) deliverable(ev *event) bool {
	n := s.nodes[ev.to]
	return !n.dead && ev.gen == n.gen && !s.cutOff(ev.from, ev.to)
}

// receiveBurst handles first, a delivery, and the deliveries and send
// completions right behind it in the queue that fall within the lookahead
// and not after until: the receivers' Protocol.Receive calls run in
// parallel (each node's in event order, on one worker), then every event's
// effects are applied in event order. This is handling the events one by
// one: a Receive touches only its node's Protocol and Store, which nothing
// else in the burst touches (a send completion only moves its node's send
// queue), and nothing an applied event schedules can fall within the
// lookahead (the shortest connect).
func (s *Sim) receiveBurst(first event, until time.Duration) {
	burst := append(s.burst[:0], first)
	limit := min(first.at+s.lookahead, until+1)
	deliveries := 1
	for s.q.Len() > 0 && s.q.h[0].at < limit {
		switch s.q.h[0].kind {
		case evDeliver:
			deliveries++
		case evSent, evSlow, evSetAside:
		default:
			limit = 0
			continue
		}
		burst = append(burst, s.q.pop())
	}
	s.burst = burst
	out := slices.Grow(s.results[:0], len(burst))[:len(burst)]
	s.results = out
	receive := func(k int) {
		if ev := &burst[k]; ev.kind == evDeliver && s.deliverable(ev) {
			out[k].r, out[k].msgs = s.nodes[ev.to].sh.proto.Receive(ev.payload, s.start.Add(ev.at))
		}
	}
	workers := min(s.workers, deliveries/s.perWorker)
	if workers < 2 {
		for k := range burst {
			receive(k)
		}
	} else {
		s.parallelBursts++
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for k := range burst {
					if int(burst[k].to)%workers == w {
						receive(k)
					}
				}
			})
		}
		wg.Wait()
	}
	for k := range burst {
		if s.err != nil {
			return
		}
		ev := &burst[k]
		s.now = ev.at
		if k > 0 {
			s.events++
		}
		switch {
		case ev.kind == evSent:
			s.sent(ev)
		case ev.kind == evSlow:
			s.slow(ev)
		case ev.kind == evSetAside:
			s.setAside(ev)
		case s.deliverable(ev):
			s.apply(ev.to, out[k])
		}
		burst[k], out[k] = event{}, received{}
	}
}

// minBurstPerWorker is the fewest deliveries per worker worth starting
// goroutines for (Sim.perWorker).
const minBurstPerWorker = 4

// apply counts what node to's Protocol did with a message and sends what
// it returned.
func (s *Sim) apply(to int32, rc received) {
	n := s.nodes[to]
	r := rc.r
	switch {
	case r.Inserted && r.Outcome == tracker.InsertNew && r.Type == codec.TypeBatch:
		_, sb, _ := s.table.bit(r.Key)
		if sb == nil {
			s.fail(fmt.Errorf("sim: node %s inserted %v, which no origin sealed", n.name, r.Key))
			return
		}
		s.hold(sb)
	case r.Inserted && r.Outcome == tracker.InsertDuplicate:
		n.stats.Duplicates++
	case r.Reject == cluster.RejectStaleEpoch || r.Reject == cluster.RejectFutureEpoch:
		n.stats.Late++
	case (r.Reject == cluster.RejectUnknownSender || r.Reject == cluster.RejectUnknownOrigin) && (s.alive() < len(s.nodes) || s.partitioned()):
		n.stats.Refused++ // in flight from a member killed since, or one the receiver's side lists dead
	case r.Reject != "":
		s.fail(fmt.Errorf("sim: node %s refused a %v: %s", n.name, r.Type, r.Reject))
		return
	}
	for _, a := range r.NewAggregates {
		s.aggTable.hold(to, a.Dest, a.Epoch, a.Coverage, s.now)
	}
	s.enqueue(to, rc.msgs, false)
	s.schedule(to)
}

// hold counts one more holder of sb and records its convergence.
func (s *Sim) hold(sb *sharedBatch) {
	sb.holders++
	if int(sb.holders) == len(s.nodes) {
		s.converged = append(s.converged, Convergence{Epoch: sb.b.Key.Epoch, SealAt: sb.sealAt, Took: s.now - sb.sealAt})
	}
}

// enqueue puts msgs in node i's send queue, dropping what does not fit,
// and starts sends on idle workers.
func (s *Sim) enqueue(i int32, msgs []cluster.Message, pushed bool) {
	n := s.nodes[i]
	if n.dead {
		return
	}
	for _, m := range msgs {
		if (m.Type == codec.TypeAggregates || m.Type == codec.TypePackedAggregates) && s.v2 {
			s.registerAggregates(i, m.Type, m.Payload)
		}
		ref, ok := s.byMember[m.To]
		to := ref.node
		if !ok {
			s.fail(fmt.Errorf("sim: node %s addressed unknown member %q", n.name, m.To))
			return
		}
		p := n.sh.peers[to]
		if p != nil && p.backedOff && len(p.msgs) >= backoffKeep {
			p.msgs[0] = outMsg{}
			p.msgs = p.msgs[1:]
			n.sh.queued--
			n.stats.SendDrops++
		}
		if n.sh.queued >= s.cfg.Gossip.SendQueue {
			n.stats.SendDrops++
			continue
		}
		if p == nil {
			p = &peerQueue{}
			n.sh.peers[to] = p
		}
		p.dropped = false
		p.msgs = append(p.msgs, outMsg{to: to, gen: ref.gen, kind: kindOf(m.Type, pushed), expires: m.Expires, payload: m.Payload})
		n.sh.queued++
		if !p.busy && !p.ready {
			n.sh.makeReady(to, p)
		}
	}
	s.dispatch(i)
}

// makeReady puts member to's queue p, not busy and with messages waiting,
// on the ready list of its kind.
func (sh *shellNode) makeReady(to int32, p *peerQueue) {
	p.ready = true
	if p.backedOff {
		sh.probes = append(sh.probes, to)
	} else {
		sh.ready = append(sh.ready, to)
	}
}

// dispatch starts the probes of node i's backed-off members, and sends on
// its idle workers while normal members are ready.
func (s *Sim) dispatch(i int32) {
	n := s.nodes[i]
	for len(n.sh.probes) > 0 || (n.sh.idle > 0 && len(n.sh.ready) > 0) {
		var to int32
		worker := len(n.sh.probes) == 0
		if worker {
			to = n.sh.ready[0]
			n.sh.ready = n.sh.ready[1:]
			n.sh.idle--
		} else {
			to = n.sh.probes[0]
			n.sh.probes = n.sh.probes[1:]
		}
		p := n.sh.peers[to]
		p.ready, p.busy, p.worker, p.overdue = false, true, worker, false
		p.seq++
		m := p.msgs[0]
		p.msgs[0] = outMsg{}
		p.msgs = p.msgs[1:]
		n.sh.queued--
		if !m.expires.IsZero() && !s.Now().Before(m.expires) {
			// Expired while it waited: dropped, the member's state as it was.
			n.stats.SendDrops++
			s.endSend(i, to, p, sendSkipped)
			continue
		}
		s.transmit(i, m, p.seq, worker)
	}
	if len(n.sh.ready) == 0 {
		n.sh.ready = nil // let the backing array go after a burst
	}
	if len(n.sh.probes) == 0 {
		n.sh.probes = nil
	}
}

// transmit sends m from node from as one SendReliable, send number seq
// (on a worker or not): the connect takes the handshake trips, the payload
// then waits for the egress link and arrives one trip after leaving,
// unless lost. The send ends once the payload has left; a worker is freed
// then or slowAfter after the start, whichever is first. Across a cut the
// send fails; one that stalls (Cut.Stall) ends that long after the start,
// and nothing leaves.
func (s *Sim) transmit(from int32, m outMsg, seq int64, worker bool) {
	n := s.nodes[from]
	size := len(m.payload)
	if s.cutOff(from, m.to) && s.part.stall > 0 {
		// A connect nobody answers: the send waits, nothing leaves.
		n.stats.Cut++
		s.sendEnds(from, m.to, seq, worker, s.now+s.part.stall, true)
		return
	}
	n.stats.Bytes[m.kind] += uint64(size)
	n.stats.Messages[m.kind]++
	handshake, trip, lost := s.net.transit(from, m.to)
	depart := max(s.now+handshake, n.sh.egressFree) + s.net.serialize(size)
	n.sh.egressFree = depart
	cut := s.cutOff(from, m.to)
	s.sendEnds(from, m.to, seq, worker, depart, cut)
	if lost {
		n.stats.Lost++
		return
	}
	if cut {
		n.stats.Cut++
		return
	}
	s.q.push(event{at: depart + trip, kind: evDeliver, from: from, to: m.to, gen: m.gen, payload: m.payload})
}

// sendEnds schedules the end of send seq from node from to member to at
// end (failed or not), the release of its worker at slowAfter if it holds
// one and ends later, and its set-aside at setAsideAfter if it ends later.
func (s *Sim) sendEnds(from, to int32, seq int64, worker bool, end time.Duration, failed bool) {
	gen := s.nodes[from].gen
	if worker && end > s.now+slowAfter {
		s.q.push(event{at: s.now + slowAfter, kind: evSlow, from: from, to: to, gen: gen, epoch: seq})
	}
	if end > s.now+setAsideAfter {
		s.q.push(event{at: s.now + setAsideAfter, kind: evSetAside, from: from, to: to, gen: gen, epoch: seq})
	}
	s.q.push(event{at: end, kind: evSent, from: from, to: to, gen: gen, epoch: seq, failed: failed})
}

// slow frees the worker of node ev.from's send to member ev.to, still
// running after slowAfter, and backs the member off, unless that boot has
// been killed since.
func (s *Sim) slow(ev *event) {
	n := s.nodes[ev.from]
	if n.dead || ev.gen != n.gen {
		return
	}
	p := n.sh.peers[ev.to]
	if p == nil || !p.busy || p.seq != ev.epoch || !p.worker {
		return
	}
	p.worker, p.backedOff = false, true
	n.sh.idle++
	s.dispatch(ev.from)
}

// setAside sets node ev.from's send to member ev.to aside, still running
// after setAsideAfter (cluster's sendQueue.setAside), unless that boot
// has been killed since or the send has ended.
func (s *Sim) setAside(ev *event) {
	n := s.nodes[ev.from]
	if n.dead || ev.gen != n.gen {
		return
	}
	p := n.sh.peers[ev.to]
	if p == nil || !p.busy || p.seq != ev.epoch {
		return
	}
	if p.worker {
		p.worker = false
		n.sh.idle++
	}
	p.backedOff = true
	s.setAsideNow(ev.from, ev.to, p)
	s.dispatch(ev.from)
}

// setAsideNow sets the send in flight of node from to member to aside if
// it may (fewer than backoffSends in flight to the member, fewer than
// Gossip.SendQueue set aside in all), else marks it overdue.
func (s *Sim) setAsideNow(from, to int32, p *peerQueue) {
	n := s.nodes[from]
	if p.setAside+1 >= backoffSends || n.sh.aside >= s.cfg.Gossip.SendQueue {
		p.overdue = true
		return
	}
	p.busy, p.overdue = false, false
	p.setAside++
	n.sh.aside++
	if len(p.msgs) > 0 {
		if p.backedOff {
			s.trim(from, p)
		}
		n.sh.makeReady(to, p)
	}
}

// sendResult is how a send ended (cluster's, but for its sendGone: a
// send addressed to a boot the sender lists down succeeds here, its
// payload lost on the way, so the member's queue is forgotten then as a
// normal member's is, as cluster's is when that send fails).
type sendResult uint8

const (
	sendSkipped sendResult = iota // expired while waiting: not sent
	sendOK
	sendFailed
)

// sent ends node ev.from's send to member ev.to, unless that boot has been
// killed since (its shell's queues are gone): endSend, or the end of a
// send set aside (a success makes the member normal, a failure changes
// nothing).
func (s *Sim) sent(ev *event) {
	from, to := ev.from, ev.to
	n := s.nodes[from]
	if n.dead || ev.gen != n.gen {
		return
	}
	p := n.sh.peers[to]
	r := sendOK
	if ev.failed {
		r = sendFailed
	}
	if p.busy && p.seq == ev.epoch {
		s.endSend(from, to, p, r)
	} else {
		p.setAside--
		n.sh.aside--
		if r == sendOK && p.backedOff {
			p.backedOff = false
			if p.ready { // waiting for a probe: for a worker now
				n.sh.probes = slices.DeleteFunc(n.sh.probes, func(k int32) bool { return k == to })
				n.sh.ready = append(n.sh.ready, to)
			}
		}
		switch {
		case p.busy:
			if p.overdue {
				s.setAsideNow(from, to, p)
			}
		case len(p.msgs) > 0: // ready already
		case p.setAside == 0 && (!p.backedOff || p.dropped):
			delete(n.sh.peers, to)
		}
	}
	s.dispatch(from)
}

// endSend ends node from's send in flight to member to, whose queue is p:
// its worker freed if it still holds one; a success makes a backed-off
// member normal, a failure backs it off.
func (s *Sim) endSend(from, to int32, p *peerQueue, r sendResult) {
	n := s.nodes[from]
	if p.worker {
		p.worker = false
		n.sh.idle++
	}
	p.busy = false
	switch r {
	case sendOK:
		p.backedOff = false
	case sendFailed:
		p.backedOff = true
	}
	switch {
	case len(p.msgs) > 0:
		if p.backedOff {
			s.trim(from, p)
		}
		n.sh.makeReady(to, p)
	case p.setAside == 0 && (!p.backedOff || p.dropped):
		delete(n.sh.peers, to)
	}
}

// trim drops the oldest messages of node from's backed-off member queue p
// beyond backoffKeep, counted.
func (s *Sim) trim(from int32, p *peerQueue) {
	n := s.nodes[from]
	if k := len(p.msgs) - backoffKeep; k > 0 {
		clear(p.msgs[:k])
		p.msgs = p.msgs[k:]
		n.sh.queued -= k
		n.stats.SendDrops += uint64(k)
	}
}

// dropDown drops what waits in node i's send queue for the members its
// member list shows down (cluster's gossiper on a dead or left event), and
// counts it: a member's queue is forgotten, at once or once its sends end.
func (s *Sim) dropDown(i int32) {
	n := s.nodes[i]
	if len(n.sh.peers) == 0 {
		return
	}
	var down map[memberRef]bool
	for _, m := range s.membersOf(i) {
		if !m.State.Up() {
			if down == nil {
				down = map[memberRef]bool{}
			}
			down[s.byMember[m.Member]] = true
		}
	}
	if down == nil {
		return
	}
	for to, p := range n.sh.peers {
		kept := p.msgs[:0]
		for _, m := range p.msgs {
			if down[memberRef{node: m.to, gen: m.gen}] {
				n.stats.SendDrops++
				n.sh.queued--
				continue
			}
			kept = append(kept, m)
		}
		clear(p.msgs[len(kept):])
		p.msgs = kept
		if len(kept) > 0 {
			continue
		}
		if p.ready {
			p.ready = false
			n.sh.ready = slices.DeleteFunc(n.sh.ready, func(k int32) bool { return k == to })
			n.sh.probes = slices.DeleteFunc(n.sh.probes, func(k int32) bool { return k == to })
		}
		switch {
		case !down[memberRef{node: to, gen: s.nodes[to].gen}] && (p.backedOff || p.busy || p.setAside > 0):
			// Up (only an old boot's messages went): the queue stays.
		case p.busy || p.setAside > 0:
			p.dropped = true
		default:
			delete(n.sh.peers, to)
		}
	}
}

// registerAggregates keeps the aggregates of a message node i sends (once
// per payload: one payload goes to every member) and notes that i holds
// them: it published them, or holds them to answer a pull.
func (s *Sim) registerAggregates(i int32, t codec.MessageType, payload []byte) {
	if len(payload) == 0 || &payload[0] == s.lastAgg {
		return
	}
	s.lastAgg = &payload[0]
	decode := s.aggDec.DecodeAggregates
	if t == codec.TypePackedAggregates {
		decode = s.aggDec.DecodePackedAggregates
	}
	m, err := decode(payload)
	if err != nil {
		s.fail(fmt.Errorf("sim: node %s sent undecodable aggregates: %w", s.nodes[i].name, err))
		return
	}
	for _, a := range m.Aggregates {
		s.aggTable.register(a)
		s.aggTable.hold(i, a.Dest, a.Epoch, a.Coverage, s.now)
	}
}
