package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// DoHedged runs fn against the replicas in dests, any of which will do, and
// returns the destination that answered and fn's error: Tail at Scale's
// hedged request, with the hedge delay taken from the fleet view, so a node
// that rarely calls a replica still hedges at the right moment.
//
// Order. Replicas are tried in order of their fleet median (q = 0.5):
// failing ones last, ones without an estimate after those with one, ties
// in the caller's order (timeout.OrderReplicas). "An estimate" is a
// trusted one (the tracker's MinSamples); a replica with one is ordered by
// its median whatever that median's sample count, and medians equal at
// the tracker's bucket resolution are ties. The median is the deciding
// view's, as for timeouts, with the hedge delay's exception to the local
// guard (timeout.HedgeView), estimated correctly under censoring: a
// censored sample (an attempt our timeout ended, or a hedge's loser
// superseded at its elapsed time) says the latency was above that, so the
// median is the Kaplan–Meier one over the view's buckets
// (tracker.Fleet.Median), not the quantile that would count those samples
// as latencies; with nothing censored the two are equal. A replica whose
// median is above every completed latency (too much censored) comes after
// those with a median and before those without a trusted estimate.
//
// Hedges. When an attempt has not answered after its destination's hedge
// delay, DoHedged starts the next replica, and after that one's delay the
// next, while replicas remain and the budget allows; an attempt whose fn
// has returned by the time the coordinator handles the delay's passing is
// handled first, so an answer in hand wins without a hedge (no token
// spent, none counted). The delay is the destination's estimate at
// quantile 1 − Config.HedgeBudget under censoring, taken strictly above
// its bucket (timeout.HedgeDelay): the Kaplan–Meier quantile at that q of
// the view the estimate decides from (timeout.HedgeView,
// tracker.Fleet.Survival), which reads a hedge's superseded loser, or an
// attempt our timeout ended, as "slower than this" rather than as a
// latency; with nothing censored it is that estimate
// exactly. About that share of attempts hedges by construction. Without a
// trusted estimate, for a failing destination, or where the survival
// never falls to the budget's share (so much censored above what
// completed that the quantile is above every completed latency, by an
// unknown amount), there is no hedge. One token bucket per node
// (timeout.HedgeBudget) keeps hedges within HedgeBudget of DoHedged calls
// plus a burst of timeout.HedgeBurst over any minute. HedgeBudget 0
// disables hedging, not the ordering or the failover.
//
// Failover. An attempt that times out (our adaptive timeout) or fails
// (Config.Classify says timeout.Failed) fails over to the next replica at
// once, without spending budget, unless another attempt is still running
// within its timeout. A failover is not a hedge.
//
// Each attempt is decided as Do decides (its own adaptive timeout for
// attempt, caller probes included: an attempt that goes on as a probe past
// its timeout still fails over at the timeout, and may still win) and runs
// fn on a goroutine of its own. The first completion wins: fn returned nil,
// or an error Config.Classify calls neither timeout.Failed nor
// timeout.TimedOut (the replica answered; it is learned as Classify says,
// nothing recorded for timeout.Canceled). The others are cancelled, their contexts reporting
// context.Canceled as context.Cause, and are recorded as superseded,
// censored at their elapsed time (never as timed out or failed); DoHedged
// does not wait for them to return. The context an attempt's fn sees
// reports ErrTimeout as its context.Cause when our timeout ended it. A
// DoHedged or Do inside fn sees an end of that context as its caller's
// deadline: an enclosing call's timeout ends a nested call's attempts as
// canceled, not timed out.
//
// When fn returned, not when the coordinator handles its return, decides
// and measures, as in Do: the attempt's goroutine reads the node's clock
// (Config.Clock) as fn returns. A completion is learned at the time fn
// took; an error fn returned before its context's deadline (our timeout's
// or the caller's, whichever is first; for a caller probe not reserved,
// before its timeout) is fn's own, learned as Config.Classify says, though
// the coordinator reads it after that deadline; one returned after our
// timeout ended the context is a timeout, one after the caller's end the
// caller's (as is any error once the caller cancelled, which has no time
// to compare with). A loser whose fn had returned before its timeout is
// superseded at its elapsed time, not timed out. The returns in hand when
// the coordinator sees the caller's context end are handled before it,
// as they are before the timer's firing, so which of the two Go's select
// takes first does not matter; and once ctx has ended, neither a failover
// nor a hedge starts an attempt.
//
// When every attempt fails, DoHedged returns "" and their errors joined
// (errors.Join, in the order tried), matching ErrTimeout if any timed out.
// When ctx ends first, every attempt is cancelled, nothing is recorded
// for the attempts it ended, and DoHedged returns "" and ctx.Err(). No
// destinations is ErrNoDestinations, an attempt below 1 ErrAttempt; fn is
// not run then.
//
// Counted in atnode_hedged_calls_total, atnode_hedges_sent_total,
// atnode_hedges_won_total and atnode_hedges_refused_total, and each
// attempt as Do's are in atnode_outcomes_total.
func (n *Node) DoHedged(ctx context.Context, dests []string, attempt int, fn func(ctx context.Context, dest string) error) (string, error) {
	switch {
	case len(dests) == 0:
		return "", ErrNoDestinations
	case attempt < 1:
		return "", fmt.Errorf("%w, got %d", ErrAttempt, attempt)
	}
	n.met.hedgedCalls.Inc()
	n.hedge.Deposit()
	now := n.clock()
	n.poll(now)
	h := newHedgeRun(len(dests))
	h.n, h.ctx, h.fn, h.attempt = n, ctx, fn, attempt
	h.order = n.replicaOrderIn(dests, now, h)
	dest, err := h.run()
	h.release()
	return dest, err
}

// replicaOrder returns dests in the order DoHedged tries them.
func (n *Node) replicaOrder(dests []string, now time.Time) []string {
	return slices.Clone(n.replicaOrderIn(dests, now, &hedgeRun{}))
}

// replicaOrderIn is replicaOrder in h's buffers: the result is dests itself
// for one destination, else h.orderBuf.
func (n *Node) replicaOrderIn(dests []string, now time.Time, h *hedgeRun) []string {
	if len(dests) == 1 {
		return dests
	}
	h.rs = slices.Grow(h.rs[:0], len(dests))[:len(dests)]
	h.idx = slices.Grow(h.idx[:0], len(dests))[:len(dests)]
	for i, d := range dests {
		h.idx[i] = i
		r := &h.rs[i]
		if err := n.fleet.EstimateTo(&r.Estimate, d, timeout.MedianQuantile, now); err != nil {
			r.Estimate = tracker.Estimate{Dest: d}
		}
		r.Estimate.Failing = r.Estimate.Failing || n.dec.Failing(d)
		r.Median = n.fleet.Median(d, timeout.HedgeView(&r.Estimate), now)
	}
	timeout.OrderReplicas(h.rs, h.idx)
	h.orderBuf = h.orderBuf[:0]
	for _, k := range h.idx {
		h.orderBuf = append(h.orderBuf, dests[k])
	}
	clear(h.rs) // no estimate kept alive by the pool
	return h.orderBuf
}

// hedgeDelay returns dest's hedge delay at now, false when it has none or
// hedging is off.
func (n *Node) hedgeDelay(dest string, now time.Time) (time.Duration, bool) {
	if n.cfg.HedgeBudget <= 0 {
		return 0, false
	}
	q := timeout.HedgeQuantile(n.cfg.HedgeBudget)
	e, err := n.fleet.Estimate(dest, q, now)
	if err != nil {
		return 0, false
	}
	if e.Failing = e.Failing || n.dec.Failing(dest); !e.Trusted() || e.Failing {
		return 0, false
	}
	return timeout.HedgeDelay(&e, n.fleet.Survival(dest, timeout.HedgeView(&e), q, now))
}

// hedgeRun is one DoHedged call: the coordinator, on the caller's
// goroutine, and its attempts. One timer serves the whole call: it wakes
// the coordinator at the earliest of the hedge delay of the latest attempt
// and the timeouts of the attempts still live, so an attempt costs its
// context and the goroutine running fn, nothing more, and one channel
// carries every event. A run whose attempts have all returned goes back
// to a pool with its buffers; one that leaves an attempt running is left
// to the collector (that attempt's goroutine still writes its try). The
// channel and the timer are made per call: pooled, they would cross
// testing/synctest bubbles.
type hedgeRun struct {
	n       *Node
	ctx     context.Context
	fn      func(ctx context.Context, dest string) error
	attempt int
	order   []string   // replicas in the order tried
	tries   []hedgeTry // in the order started; never reallocated during the call
	// events carries the index of a try whose fn returned (its err, end
	// and ret set before), or timerEvent; it has room for every event a call can
	// leave unread, so it never blocks a sender, and no sender touches h.
	events  chan int
	live    int         // tries that neither reached their timeout nor failed
	running int         // tries whose fn has not returned
	timer   *time.Timer // the one timer, nil until first armed
	wake    time.Time   // when the timer fires (zero: stopped)
	hedgeAt time.Time   // when the latest try's hedge delay passes (zero: no hedge)

	// Buffers kept across pooled runs.
	rs       []timeout.Replica
	idx      []int
	orderBuf []string
}

// hedgeTry is one attempt of a DoHedged call; only the coordinator touches
// it, but for its goroutine, which reads ctx and dest and writes err, end
// and ret (hedgeCall).
type hedgeTry struct {
	dest  string
	a     timeout.Attempt // Probe set once the probe is reserved
	start time.Time       // on the node's clock
	due   time.Time       // when it reaches its timeout, on the timer's clock
	ctx   context.Context
	// cancel ends ctx (cause context.Canceled); cancelCause, set for a
	// caller probe only, ends it with a cause.
	cancel      context.CancelFunc
	cancelCause context.CancelCauseFunc
	probing     bool // the context runs to the probe timeout
	hedge       bool // started as a hedge
	reached     bool // reached its timeout or failed: no longer live
	done        bool // fn returned
	ended       bool // observed, as outcome
	outcome     timeout.Outcome
	// Written by the try's goroutine before it sends the try's index:
	// fn's error, and when fn returned, on the node's clock (end) and on
	// the clock of the contexts' deadlines and the timer (ret; end itself
	// when the node's clock is that clock).
	err      error
	end, ret time.Time
}

// timerEvent is the event of the run's timer.
const timerEvent = -1

// maxPooledReplicas is the most replicas a pooled hedgeRun's buffers may
// hold; larger calls' runs are not kept.
const maxPooledReplicas = 16

var hedgeRuns = sync.Pool{New: func() any { return new(hedgeRun) }}

// newHedgeRun returns a run for a call over replicas replicas, its tries
// sized so that they never move.
func newHedgeRun(replicas int) *hedgeRun {
	h := hedgeRuns.Get().(*hedgeRun)
	h.tries = slices.Grow(h.tries[:0], replicas)
	// Every fn's return, and the timer's firings left unread: one for each
	// Reset the coordinator makes without reading one (at most one per fn
	// return it reads), and one more.
	h.events = make(chan int, 2*replicas+2)
	return h
}

// release returns h to the pool when no attempt's goroutine can still
// touch it, cleared of everything the call referenced.
func (h *hedgeRun) release() {
	if h.running > 0 || cap(h.tries) > maxPooledReplicas {
		return
	}
	clear(h.tries[:cap(h.tries)])
	clear(h.orderBuf)
	*h = hedgeRun{rs: h.rs[:0], idx: h.idx[:0], tries: h.tries[:0], orderBuf: h.orderBuf[:0]}
	hedgeRuns.Put(h)
}

// ours reports whether our timeout ended t (endedByUs: not an enclosing
// call's timeout passed down through h's context).
func (h *hedgeRun) ours(t *hedgeTry) bool {
	return endedByUs(h.ctx, t.ctx)
}

// returnedInTime reports whether t's fn, which has returned, did so before
// our timeout or the caller's deadline could end its context: before its
// deadline, or for a caller probe not reserved, before its timeout (when
// the coordinator ends it, at the earliest; the caller's deadline leaves
// room for the probe). What fn returned then is fn's own, though the
// context has ended by the time the coordinator reads it.
func (t *hedgeTry) returnedInTime() bool {
	if t.probing && !t.a.Probe {
		return t.ret.Before(t.due)
	}
	return returnedBefore(t.ctx, t.ret)
}

// timedOut reports whether our timeout ended t before its fn returned: its
// context says so, and fn is still running, or returned after that.
func (h *hedgeRun) timedOut(t *hedgeTry) bool {
	return h.ours(t) && !(t.done && t.returnedInTime())
}

// stop ends t's context as a loser's: context.Canceled.
func (t *hedgeTry) stop() {
	if t.cancelCause != nil {
		t.cancelCause(context.Canceled)
	}
	t.cancel()
}

func (h *hedgeRun) run() (string, error) {
	defer h.cleanup()
	h.launch(false)
	for {
		h.schedule()
		select {
		case <-h.ctx.Done():
			// The attempts that returned by the time the caller's end is
			// seen come first, each decided by when its fn returned.
			for len(h.events) > 0 {
				if i := <-h.events; i != timerEvent {
					if end, dest, err := h.returned(i); end {
						return dest, err
					}
				}
			}
			return h.canceled()
		case i := <-h.events:
			if i != timerEvent {
				if end, dest, err := h.returned(i); end {
					return dest, err
				}
				continue
			}
			// The attempts that returned by the time the timer fired come
			// first: an answer already in wins without a hedge, a failover
			// or a probe being started for it. Only the coordinator
			// receives, so these receives never block; a firing among them
			// needs nothing of its own, the fire below handles all that is
			// due.
			for len(h.events) > 0 {
				if i := <-h.events; i != timerEvent {
					if end, dest, err := h.returned(i); end {
						return dest, err
					}
				}
			}
			// Perhaps a firing a Reset overtook: fire handles only what is
			// due.
			now := time.Now()
			if !h.wake.After(now) {
				h.wake = time.Time{}
			}
			h.fire(now)
		}
	}
}

// returned handles the return of try i's fn, decided as Do decides, by
// when fn returned: an answer ends the call with it, a timeout or a
// failure fails over, and the call ends when that was the last attempt. An
// error fn returned before its context's deadline (our timeout's or the
// caller's) is its own, whatever the contexts say by now; one returned
// after the caller's end is the caller's. end reports whether the call
// ends, with dest and err.
func (h *hedgeRun) returned(i int) (end bool, dest string, err error) {
	t := &h.tries[i]
	t.done = true
	h.running--
	o := timeout.Completed
	if t.err != nil {
		first := t.returnedInTime()
		ours := !first && h.ours(t)
		switch cerr := h.ctx.Err(); {
		case cerr != nil && !ours && !(first && errors.Is(cerr, context.DeadlineExceeded)):
			dest, err = h.canceled()
			return true, dest, err
		case ours:
			o = timeout.TimedOut
		default:
			o = h.n.classify(t.err)
		}
	}
	if o != timeout.Failed && o != timeout.TimedOut {
		dest, err = h.win(i, o) // the replica answered
		return true, dest, err
	}
	h.observe(t, o, t.end)
	if !t.reached {
		t.reached = true
		h.live--
	}
	h.failover()
	if h.running == 0 && len(h.tries) == len(h.order) {
		return true, "", h.failed()
	}
	return false, "", nil
}

// schedule arms the timer for the earliest of the hedge delay and the
// live attempts' timeouts, or stops it when nothing is due.
func (h *hedgeRun) schedule() {
	next := h.hedgeAt
	for k := range h.tries {
		if t := &h.tries[k]; !t.reached && !t.ended && (next.IsZero() || t.due.Before(next)) {
			next = t.due
		}
	}
	switch {
	case next.Equal(h.wake):
	case next.IsZero():
		h.timer.Stop()
		h.wake = time.Time{}
	case h.timer == nil:
		events := h.events
		h.timer = time.AfterFunc(time.Until(next), func() { events <- timerEvent })
		h.wake = next
	default:
		h.timer.Reset(time.Until(next))
		h.wake = next
	}
}

// fire handles what is due at now: attempts reaching their timeout (a
// caller probe goes on if it can be reserved, else its context ends with
// ErrTimeout; either way DoHedged fails over), then the hedge delay. Once
// the caller's context has ended, neither starts an attempt.
func (h *hedgeRun) fire(now time.Time) {
	for k := range h.tries {
		t := &h.tries[k]
		if t.reached || t.ended || t.due.After(now) {
			continue
		}
		if t.probing && (h.ctx.Err() != nil || !h.n.Probe(&t.a, h.n.clock())) {
			t.cancelCause(ErrTimeout)
		}
		t.reached = true
		h.live--
		h.failover()
	}
	if h.hedgeAt.IsZero() || h.hedgeAt.After(now) {
		return
	}
	h.hedgeAt = time.Time{}
	if len(h.tries) == len(h.order) || h.ctx.Err() != nil {
		return // no replica left, or the caller's end is in hand too
	}
	if !h.n.hedge.Spend() {
		h.n.met.hedgesRefused.Inc()
		return
	}
	h.n.met.hedgesSent.Inc()
	h.launch(true)
}

// launch starts the next replica's attempt (a hedge when hedge is set)
// and arms the hedge delay for it.
func (h *hedgeRun) launch(hedge bool) {
	n, i := h.n, len(h.tries)
	dest := h.order[i]
	start := n.clock()
	d := n.decide([]string{dest}, 1, h.attempt, start)
	n.met.observe(d)
	a := attemptOf(dest, d)
	t := hedgeTry{dest: dest, a: a, start: start, due: time.Now().Add(a.Timeout), hedge: hedge}
	// As in Do: the context ends at the timeout, or for a caller probe at
	// the probe timeout unless the probe cannot be reserved at the timeout.
	if t.probing = a.ProbeTimeout > a.Timeout && probeRoom(h.ctx, a.ProbeTimeout); t.probing {
		var base context.Context
		base, t.cancel = context.WithTimeoutCause(h.ctx, a.ProbeTimeout, ErrTimeout)
		t.ctx, t.cancelCause = context.WithCancelCause(base)
	} else {
		t.ctx, t.cancel = context.WithTimeoutCause(h.ctx, a.Timeout, ErrTimeout)
	}
	h.tries = append(h.tries, t)
	h.live++
	h.running++
	go hedgeCall(n, h.fn, &h.tries[i], h.events, i)
	h.arm(dest, start)
}

// hedgeCall runs fn for try i, t, stores its error and when it returned in
// t (err, end, ret) and sends i. The try stays where it is (tries never
// grow past their capacity), and the coordinator reads those fields only
// once it has the index; it reads none the goroutine writes before that.
func hedgeCall(n *Node, fn func(context.Context, string) error, t *hedgeTry, events chan<- int, i int) {
	err := fn(t.ctx, t.dest)
	// When fn returned, as Do reads it: on the clock of the contexts'
	// deadlines first, then on the node's, when that is another clock.
	var ret time.Time
	if n.cfg.Clock != nil {
		ret = time.Now()
	}
	end := n.clock()
	if ret.IsZero() {
		ret = end
	}
	t.err, t.end, t.ret = err, end, ret
	events <- i
}

// arm sets the hedge delay for the attempt to dest started at start, or
// clears it when no hedge can follow.
func (h *hedgeRun) arm(dest string, start time.Time) {
	h.hedgeAt = time.Time{}
	if len(h.tries) == len(h.order) {
		return
	}
	if delay, ok := h.n.hedgeDelay(dest, start); ok {
		h.hedgeAt = time.Now().Add(delay)
	}
}

// failover starts the next replica when no attempt is live any more and
// the caller's context has not ended (an attempt that failed before the
// caller's deadline may be read after it).
func (h *hedgeRun) failover() {
	if h.live == 0 && len(h.tries) < len(h.order) && h.ctx.Err() == nil {
		h.launch(false)
	}
}

// observe learns how t ended at now, on the node's clock: when its fn
// returned, or for an attempt still running, when the coordinator ends it.
func (h *hedgeRun) observe(t *hedgeTry, o timeout.Outcome, now time.Time) {
	h.n.Observe(t.a, o, max(since(now, t.start), 0), now)
	t.ended, t.outcome = true, o
}

// collect takes the returns already in hand without handling them: the
// call is ending, and the tries they name are decided by when their fn
// returned (timedOut).
func (h *hedgeRun) collect() {
	for len(h.events) > 0 {
		if i := <-h.events; i != timerEvent {
			h.tries[i].done = true
			h.running--
		}
	}
}

// endedAt is when t ended for the coordinator ending the call, on the
// node's clock: when its fn returned, if it has, else now, read once per
// call into *now.
func (h *hedgeRun) endedAt(t *hedgeTry, now *time.Time) time.Time {
	if t.done {
		return t.end
	}
	if now.IsZero() {
		*now = h.n.clock()
	}
	return *now
}

// win ends the call with try w's answer, learned as o (Completed, or what
// Config.Classify said of its error): every other attempt is cancelled
// and superseded at its elapsed time (when its fn returned, if it has), or
// timed out if our timeout had ended it before its fn returned.
func (h *hedgeRun) win(w int, o timeout.Outcome) (string, error) {
	t := &h.tries[w]
	h.observe(t, o, t.end)
	if t.hedge {
		h.n.met.hedgesWon.Inc()
	}
	h.collect()
	var now time.Time
	for k := range h.tries {
		o := &h.tries[k]
		if o.ended {
			continue
		}
		o.stop()
		if h.timedOut(o) {
			h.observe(o, timeout.TimedOut, h.endedAt(o, &now))
		} else {
			h.observe(o, timeout.Superseded, h.endedAt(o, &now))
		}
	}
	return t.dest, t.err
}

// canceled ends the call when the caller's context ended: the other
// attempts are observed as canceled (nothing recorded), or timed out if
// our timeout had ended them before their fn returned.
func (h *hedgeRun) canceled() (string, error) {
	h.collect()
	var now time.Time
	for k := range h.tries {
		t := &h.tries[k]
		if t.ended {
			continue
		}
		if h.timedOut(t) {
			h.observe(t, timeout.TimedOut, h.endedAt(t, &now))
		} else {
			h.observe(t, timeout.Canceled, h.endedAt(t, &now))
		}
	}
	return "", h.ctx.Err()
}

// failed joins every attempt's error, in the order tried; a timed-out one
// matches ErrTimeout.
func (h *hedgeRun) failed() error {
	errs := make([]error, 0, len(h.tries))
	for k := range h.tries {
		t := &h.tries[k]
		err := t.err
		if t.outcome == timeout.TimedOut && !errors.Is(err, ErrTimeout) {
			limit := t.a.Timeout
			if t.a.Probe {
				limit = t.a.ProbeTimeout
			}
			err = fmt.Errorf("%w after %v: %w", ErrTimeout, limit, err)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// cleanup stops the timer and releases every attempt's context; attempts
// still running see context.Canceled.
func (h *hedgeRun) cleanup() {
	if h.timer != nil {
		h.timer.Stop()
	}
	h.wake = time.Time{}
	for k := range h.tries {
		h.tries[k].stop()
	}
}

// HedgeDelay implements timeout.Hedger for transports that hedge a request
// to one destination (timeouthttp, timeoutgrpc): it counts the request in
// atnode_hedged_calls_total and deposits HedgeBudget of a token into the
// node's bucket, and returns dest's hedge delay by DoHedged's rule.
func (n *Node) HedgeDelay(dest string, now time.Time) (time.Duration, bool) {
	n.met.hedgedCalls.Inc()
	n.hedge.Deposit()
	n.poll(now)
	return n.hedgeDelay(dest, now)
}

// SpendHedge implements timeout.Hedger: it spends a token of the node's
// bucket, counted in atnode_hedges_sent_total, or counts the refusal in
// atnode_hedges_refused_total.
func (n *Node) SpendHedge(time.Time) bool {
	if !n.hedge.Spend() {
		n.met.hedgesRefused.Inc()
		return false
	}
	n.met.hedgesSent.Inc()
	return true
}

var _ timeout.Hedger = (*Node)(nil)
