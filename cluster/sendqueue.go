package cluster

import "sync"

// sendQueue holds messages waiting for a send worker: a FIFO per member
// and at most one send in flight per member, so a slow or dead member
// delays only its own messages and holds at most one worker. At most limit
// messages wait in all; push refuses more.
type sendQueue struct {
	mu     sync.Mutex
	cond   sync.Cond
	limit  int
	n      int // messages waiting
	peers  map[string]*peerQueue
	ready  []*peerQueue // members with messages waiting and none in flight, FIFO
	closed bool
}

type peerQueue struct {
	to    string
	msgs  []Message
	busy  bool // a worker is sending one of its messages
	ready bool // in sendQueue.ready
}

func newSendQueue(limit int) *sendQueue {
	q := &sendQueue{limit: limit, peers: make(map[string]*peerQueue)}
	q.cond.L = &q.mu
	return q
}

// push queues m; it reports false (and drops m) when the queue is full or
// closed. It never blocks.
func (q *sendQueue) push(m Message) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.n >= q.limit {
		return false
	}
	p := q.peers[m.To]
	if p == nil {
		p = &peerQueue{to: m.To}
		q.peers[m.To] = p
	}
	p.msgs = append(p.msgs, m)
	q.n++
	if !p.busy && !p.ready {
		p.ready = true
		q.ready = append(q.ready, p)
		q.cond.Signal()
	}
	return true
}

// pop waits for a message whose member has none in flight and marks the
// member busy; ok is false once the queue is closed. The caller must call
// done with the member after sending.
func (q *sendQueue) pop() (m Message, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.ready) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return Message{}, false
	}
	p := q.ready[0]
	q.ready[0] = nil
	q.ready = q.ready[1:]
	p.ready, p.busy = false, true
	m = p.msgs[0]
	p.msgs[0] = Message{}
	p.msgs = p.msgs[1:]
	q.n--
	return m, true
}

// done ends the send in flight to member to.
func (q *sendQueue) done(to string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.peers[to]
	if p == nil {
		return
	}
	p.busy = false
	switch {
	case len(p.msgs) > 0:
		p.ready = true
		q.ready = append(q.ready, p)
		q.cond.Signal()
	default:
		delete(q.peers, to)
	}
}

// drop discards the messages waiting for member to and returns how many.
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
		i := 0
		for _, r := range q.ready {
			if r != p {
				q.ready[i] = r
				i++
			}
		}
		clear(q.ready[i:])
		q.ready = q.ready[:i]
	}
	if !p.busy {
		delete(q.peers, to)
	}
	return n
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
