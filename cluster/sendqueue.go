package cluster

import (
	"sync"
	"time"
)

// sendQueue holds messages waiting to be sent: a FIFO per member and at
// most one send in flight per member. At most workers sends hold a worker
// at once; a send holds its worker until it returns or for slowAfter,
// whichever is first. A member whose send failed or still runs after
// slowAfter is backed off: its sends hold no worker (a probe each, one at
// a time as always), at most backoffKeep of its messages wait (the oldest
// is dropped), and the first of its sends that succeeds makes it normal
// again. So a member that does not answer holds a worker for slowAfter
// once, not for every message, and delays nobody else's messages after
// that. A backed-off member's probe still running after setAsideAfter is
// set aside: it runs on, and the member's next message goes out as a new
// probe, so a member reachable again gets its messages within about
// setAsideAfter, not at the end of a connect that stalled before (which
// ends only at the stream timeout). A member has at most backoffSends
// sends in flight, and at most limit sends are set aside in all. At most
// limit messages wait in all; push refuses more.
type sendQueue struct {
	mu            sync.Mutex
	cond          sync.Cond
	limit         int
	slowAfter     time.Duration
	setAsideAfter time.Duration
	n             int // messages waiting
	idle          int // free workers
	aside         int // sends set aside and still running
	peers         map[string]*peerQueue
	ready         []*peerQueue // normal members with messages waiting and none in flight, FIFO
	probes        []*peerQueue // backed-off members with messages waiting and none in flight, FIFO
	closed        bool
	// seq numbers the sends, across members: a member forgotten and
	// queued again numbers on, so slow or setAside called late for a send
	// that has ended (its timer fired as it returned) never takes a new
	// send to the member for it.
	seq uint64
}

// backoffKeep is how many messages may wait for a backed-off member; a
// push beyond it drops the oldest. The protocol repairs what is dropped
// (records by the manifests and the gap's pull, batches and aggregates by
// anti-entropy), and the newest messages are the ones a member back up
// needs first.
const backoffKeep = 16

// backoffSends is how many sends may be in flight to a backed-off member:
// its probe and those set aside. With sends set aside every
// StreamTimeout / backoffSends (setAsideAfter), a member cut off by
// connects that stall for the stream timeout always has a fresh probe
// within that of its return, for backoffSends stalled connects per member
// cut off (4 instead of 1).
const backoffSends = 4

type peerQueue struct {
	to        string
	msgs      []Message
	busy      bool   // a send to it is in flight
	worker    bool   // the send in flight holds a worker
	seq       uint64 // the send in flight's number (sendQueue.seq)
	backedOff bool   // its last send failed or ran past slowAfter
	ready     bool   // in sendQueue.ready or sendQueue.probes
	setAside  int    // its sends set aside and still running
	// overdue: the send in flight ran past setAsideAfter while no more
	// could be set aside; it is set aside once one of those ends.
	overdue bool
	// dropped: drop forgot the member while sends to it were in flight
	// (the probe, or sends set aside), or a send to it ended sendGone;
	// done removes it once the last ends and nothing waits, whatever the
	// result, unless a push made it a member again meanwhile.
	dropped bool
}

// outgoing is a message taken for sending: done, slow (while it holds a
// worker) and setAside identify the send by to and seq.
type outgoing struct {
	Message
	seq    uint64
	worker bool // the send holds a worker: call slow after slowAfter
}

// newSendQueue returns a queue of at most limit messages served by
// workers workers; a send holds its worker for slowAfter at most, and a
// backed-off member's send is set aside after max(slowAfter,
// streamTimeout / backoffSends).
func newSendQueue(limit, workers int, slowAfter, streamTimeout time.Duration) *sendQueue {
	q := &sendQueue{
		limit: limit, idle: workers, slowAfter: slowAfter,
		setAsideAfter: max(slowAfter, streamTimeout/backoffSends),
		peers:         make(map[string]*peerQueue),
	}
	q.cond.L = &q.mu
	return q
}

// push queues m. It returns how many messages it dropped: m itself when
// the queue is full or closed, or the oldest message waiting for m's
// member when that member is backed off and has backoffKeep waiting. It
// never blocks.
func (q *sendQueue) push(m Message) (dropped int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 1
	}
	p := q.peers[m.To]
	if p != nil && p.backedOff && len(p.msgs) >= backoffKeep {
		p.msgs[0] = Message{}
		p.msgs = p.msgs[1:]
		q.n--
		dropped++
	}
	if q.n >= q.limit {
		return dropped + 1
	}
	if p == nil {
		p = &peerQueue{to: m.To}
		q.peers[m.To] = p
	}
	p.dropped = false
	p.msgs = append(p.msgs, m)
	q.n++
	if !p.busy && !p.ready {
		q.makeReady(p)
	}
	return dropped
}

// makeReady puts p, not busy and with messages waiting, on the ready list
// of its kind and wakes a taker.
func (q *sendQueue) makeReady(p *peerQueue) {
	p.ready = true
	if p.backedOff {
		q.probes = append(q.probes, p)
	} else {
		q.ready = append(q.ready, p)
	}
	q.cond.Signal()
}

// pop waits for a message to send and marks its member busy: a backed-off
// member's next message (a probe, holding no worker), else a ready
// member's while a worker is free (taking it). ok is false once the queue
// is closed. The caller must call done after sending, slow if the send
// holds a worker and is still running after slowAfter, and setAside if it
// is still running after setAsideAfter.
func (q *sendQueue) pop() (m outgoing, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for !q.closed && len(q.probes) == 0 && (len(q.ready) == 0 || q.idle == 0) {
		q.cond.Wait()
	}
	if q.closed {
		return outgoing{}, false
	}
	var p *peerQueue
	if len(q.probes) > 0 {
		p = q.probes[0]
		q.probes[0] = nil
		q.probes = q.probes[1:]
	} else {
		p = q.ready[0]
		q.ready[0] = nil
		q.ready = q.ready[1:]
		q.idle--
		p.worker = true
	}
	p.ready, p.busy, p.overdue = false, true, false
	q.seq++
	p.seq = q.seq
	m = outgoing{Message: p.msgs[0], seq: p.seq, worker: p.worker}
	p.msgs[0] = Message{}
	p.msgs = p.msgs[1:]
	q.n--
	return m, true
}

// slow frees the worker of send seq to member to, still running after
// slowAfter, and backs the member off.
func (q *sendQueue) slow(to string, seq uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.peers[to]
	if p == nil || !p.busy || p.seq != seq || !p.worker {
		return // done already
	}
	p.worker, p.backedOff = false, true
	q.idle++
	q.cond.Signal()
}

// setAside sets send seq to member to aside, still running after
// setAsideAfter: the member is backed off (a send that ran so long holds
// no worker) and its next message may go out as a new probe, unless
// backoffSends sends to it are in flight or limit are set aside in all
// (then it is set aside when one of the member's sends set aside ends, or
// else runs to its end as without a set-aside). It returns
// how many messages waiting for the member it dropped (the oldest beyond
// backoffKeep).
func (q *sendQueue) setAside(to string, seq uint64) (dropped int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.peers[to]
	if p == nil || !p.busy || p.seq != seq {
		return 0 // done already
	}
	if p.worker {
		p.worker = false
		q.idle++
		q.cond.Signal()
	}
	p.backedOff = true
	return q.setAsideNow(p)
}

// setAsideNow sets p's send in flight aside if it may, else marks it
// overdue; it returns how many messages it dropped (trim, when p is
// backed off).
func (q *sendQueue) setAsideNow(p *peerQueue) (dropped int) {
	if p.setAside+1 >= backoffSends || q.aside >= q.limit {
		p.overdue = true
		return 0
	}
	p.busy, p.overdue = false, false
	p.setAside++
	q.aside++
	if len(p.msgs) > 0 {
		if p.backedOff {
			dropped = q.trim(p)
		}
		q.makeReady(p)
	}
	return dropped
}

// sendResult is how a message taken by pop ended.
type sendResult uint8

const (
	// sendSkipped: not sent (it expired while waiting); the member's state
	// stays as it was.
	sendSkipped sendResult = iota
	// sendOK: sent; a backed-off member is normal again.
	sendOK
	// sendFailed: the send failed; the member is backed off.
	sendFailed
	// sendGone: the send failed because the member is listed down or
	// unknown (ErrMemberDown, ErrUnknownMember): as sendFailed, and the
	// member is forgotten once its sends end, as after drop, unless a
	// push queues to it again meanwhile. A message queued after drop (built
	// on a member list from before the death) ends so: the member's
	// back-off would otherwise be kept until a send succeeds, never for a
	// dead boot, and every restart is a new member.
	sendGone
)

// done ends send seq to member to and returns how many messages waiting
// for it it dropped (the oldest beyond backoffKeep, when the member is
// backed off now). A send set aside that succeeds makes the member normal;
// one that fails says nothing new (it began before the send in flight, if
// any, or the last to end) and changes nothing, but for sendGone, which
// has the member forgotten once its sends end.
func (q *sendQueue) done(to string, seq uint64, r sendResult) (dropped int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.peers[to]
	if p == nil {
		return 0
	}
	if !p.busy || p.seq != seq {
		return q.doneSetAside(p, r)
	}
	if p.worker {
		p.worker = false
		q.idle++
		q.cond.Signal()
	}
	p.busy = false
	switch r {
	case sendOK:
		p.backedOff = false
	case sendFailed:
		p.backedOff = true
	case sendGone:
		p.backedOff, p.dropped = true, true
	}
	switch {
	case len(p.msgs) > 0:
		if p.backedOff {
			dropped = q.trim(p)
		}
		q.makeReady(p)
	case p.setAside == 0 && (!p.backedOff || p.dropped):
		// A backed-off member stays so until a send succeeds, unless it
		// was dropped meanwhile (listed dead: a member that may never
		// come back).
		delete(q.peers, to)
	}
	return dropped
}

// doneSetAside ends one of p's sends set aside.
func (q *sendQueue) doneSetAside(p *peerQueue, r sendResult) (dropped int) {
	p.setAside--
	q.aside--
	if r == sendGone {
		p.dropped = true
	}
	if r == sendOK && p.backedOff {
		p.backedOff = false
		if p.ready {
			// Its next message waited for a probe: it now waits for a
			// worker, as a normal member's does.
			q.probes = without(q.probes, p)
			q.ready = append(q.ready, p)
			q.cond.Signal()
		}
	}
	switch {
	case p.busy:
		if p.overdue {
			return q.setAsideNow(p)
		}
	case len(p.msgs) > 0:
		// Ready already (set aside or pushed with its send in flight
		// aside); a member normal again keeps every message.
	case p.setAside == 0 && (!p.backedOff || p.dropped):
		delete(q.peers, p.to)
	}
	return 0
}

// trim drops the oldest messages of backed-off p beyond backoffKeep (those
// queued while it was normal).
func (q *sendQueue) trim(p *peerQueue) int {
	n := len(p.msgs) - backoffKeep
	if n <= 0 {
		return 0
	}
	clear(p.msgs[:n])
	p.msgs = p.msgs[n:]
	q.n -= n
	return n
}

// drop discards the messages waiting for member to and returns how many;
// the member's back-off is forgotten.
func (q *sendQueue) drop(to string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.peers[to]
	if p == nil {
		return 0
	}
	n := len(p.msgs)
	q.n -= n
	p.msgs = nil
	if p.ready {
		p.ready = false
		q.ready = without(q.ready, p)
		q.probes = without(q.probes, p)
	}
	if p.busy || p.setAside > 0 {
		p.dropped = true // forgotten when its sends end (done)
	} else {
		delete(q.peers, to)
	}
	return n
}

// without removes p from list in place.
func without(list []*peerQueue, p *peerQueue) []*peerQueue {
	i := 0
	for _, r := range list {
		if r != p {
			list[i] = r
			i++
		}
	}
	clear(list[i:])
	return list[:i]
}

// close wakes every waiting worker; pop then returns false and push
// refuses. It returns the number of messages discarded.
func (q *sendQueue) close() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.cond.Broadcast()
	return q.n
}

// len returns the number of messages waiting.
func (q *sendQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// backedOff returns the number of members backed off.
func (q *sendQueue) backedOff() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, p := range q.peers {
		if p.backedOff {
			n++
		}
	}
	return n
}
