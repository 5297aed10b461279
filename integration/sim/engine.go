package sim

import "time"

// eventKind says what an event does when it fires.
type eventKind uint8

const (
	// evFunc calls fn.
	evFunc eventKind = iota
	// evDeliver hands payload, sent by node from, to node to's boot gen.
	evDeliver
	// evSent ends the send (number epoch) of node from's boot gen to node
	// to, failed or not.
	evSent
	// evSlow frees the worker of send number epoch of node from's boot gen
	// to node to, still running after the shell's slowAfter.
	evSlow
	// evSetAside sets send number epoch of node from's boot gen to node to
	// aside, still running after the shell's setAsideAfter.
	evSetAside
	// evTick ticks node to's protocol, if it is still the node's pending
	// tick.
	evTick
	// evEpoch marks the start of epoch on the shared grid.
	evEpoch
)

// event is one entry of the discrete-event queue. Events fire in order of
// at, then of seq (the order they were scheduled), so a run is deterministic.
type event struct {
	at      time.Duration // since the simulation's start
	seq     uint64
	kind    eventKind
	failed  bool   // evSent: the send failed
	gen     uint32 // the boot (simNode.gen) of to (evDeliver) or from (evSent)
	from    int32
	to      int32
	epoch   int64
	payload []byte
	fn      func(now time.Time)
}

// eventQueue is a binary min-heap of events by (at, seq). It is written out
// rather than built on container/heap to avoid boxing every event in an
// interface: a 1000-node run moves about a million events per epoch.
type eventQueue struct {
	h   []event
	seq uint64
}

func (q *eventQueue) Len() int { return len(q.h) }

func less(a, b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

// push schedules ev, stamping its sequence number.
func (q *eventQueue) push(ev event) {
	q.seq++
	ev.seq = q.seq
	q.h = append(q.h, ev)
	i := len(q.h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(&q.h[i], &q.h[p]) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

// peek returns the earliest event's time; the queue must not be empty.
func (q *eventQueue) peek() time.Duration { return q.h[0].at }

// pop removes and returns the earliest event; the queue must not be empty.
func (q *eventQueue) pop() event {
	top := q.h[0]
	last := len(q.h) - 1
	q.h[0] = q.h[last]
	q.h[last] = event{}
	q.h = q.h[:last]
	i, n := 0, last
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && less(&q.h[r], &q.h[l]) {
			m = r
		}
		if !less(&q.h[m], &q.h[i]) {
			break
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
	if cap(q.h) > 1024 && len(q.h) < cap(q.h)/4 {
		q.h = append([]event(nil), q.h...)
	}
	return top
}
