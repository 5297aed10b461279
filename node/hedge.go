package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// DoHedged runs fn against the replicas in dests, any of which will do, and
// returns the destination that answered and fn's error: Tail at Scale's
// hedged request, with the hedge delay taken from the fleet view, so a node
// that rarely calls a replica still hedges at the right moment.
//
// Order. Replicas are tried in order of their fleet median (q = 0.5, the
// deciding view's as for timeouts): failing ones last, ones without a
// trusted estimate after those with one, ties in the caller's order
// (timeout.OrderReplicas).
//
// Hedges. When an attempt has not answered after its destination's hedge
// delay, DoHedged starts the next replica, and after that one's delay the
// next, while replicas remain and the budget allows. The delay is the
// destination's estimate at quantile 1 − Config.HedgeBudget taken strictly
// above its bucket (timeout.HedgeDelay): about that share of attempts
// hedges by construction; without a trusted estimate, or for a failing
// destination, there is no hedge. One token bucket per node
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
// or an error Config.Classify does not call timeout.Failed (the replica
// answered). The others are cancelled, their contexts reporting
// context.Canceled as context.Cause, and are recorded as superseded,
// censored at their elapsed time (never as timed out or failed); DoHedged
// does not wait for them to return. The context an attempt's fn sees
// reports ErrTimeout as its context.Cause when our timeout ended it.
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
	h := &hedgeRun{n: n, ctx: ctx, fn: fn, attempt: attempt, order: n.replicaOrder(dests, now),
		events: make(chan hedgeEvent, 2*len(dests))}
	return h.run()
}

// replicaOrder returns dests in the order DoHedged tries them.
func (n *Node) replicaOrder(dests []string, now time.Time) []string {
	if len(dests) == 1 {
		return dests
	}
	es := make([]tracker.Estimate, len(dests))
	order := make([]int, len(dests))
	for i, d := range dests {
		order[i] = i
		e, err := n.fleet.Estimate(d, timeout.MedianQuantile, now)
		if err != nil {
			e = tracker.Estimate{Dest: d}
		}
		e.Failing = e.Failing || n.dec.Failing(d)
		es[i] = e
	}
	timeout.OrderReplicas(es, order)
	out := make([]string, len(dests))
	for i, k := range order {
		out[i] = dests[k]
	}
	return out
}

// hedgeDelay returns dest's hedge delay at now, false when it has none or
// hedging is off.
func (n *Node) hedgeDelay(dest string, now time.Time) (time.Duration, bool) {
	if n.cfg.HedgeBudget <= 0 {
		return 0, false
	}
	e, err := n.fleet.Estimate(dest, timeout.HedgeQuantile(n.cfg.HedgeBudget), now)
	if err != nil {
		return 0, false
	}
	e.Failing = e.Failing || n.dec.Failing(dest)
	return timeout.HedgeDelay(&e)
}

// hedgeRun is one DoHedged call: the coordinator, on the caller's
// goroutine, and its attempts.
type hedgeRun struct {
	n       *Node
	ctx     context.Context
	fn      func(ctx context.Context, dest string) error
	attempt int
	order   []string // replicas in the order tried
	tries   []*hedgeTry
	events  chan hedgeEvent // from attempts' goroutines and timers; never blocks them
	live    int             // tries that neither reached their timeout nor failed
	running int             // tries whose fn has not returned
	timer   *time.Timer     // the hedge timer of the latest try, nil until armed
	timerC  <-chan time.Time
}

// hedgeTry is one attempt of a DoHedged call. Only the coordinator touches
// it, but for p, which the timeout callback writes and the coordinator reads
// once the callback is settled.
type hedgeTry struct {
	dest    string
	a       timeout.Attempt // as observed; p once settled
	p       timeout.Attempt // the callback's copy (Probe set when reserved)
	start   time.Time
	ctx     context.Context
	cancel  context.CancelCauseFunc
	dcancel context.CancelFunc // the deadline's
	timer   *time.Timer
	fired   chan struct{} // closed when the timeout callback returned
	hedge   bool          // started as a hedge
	reached bool          // reached its timeout or failed: no longer live
	done    bool          // fn returned
	ended   bool          // observed, as outcome
	outcome timeout.Outcome
	settled bool
	err     error
}

// hedgeEvent is a try reaching its timeout (reached) or its fn returning
// err.
type hedgeEvent struct {
	i       int
	reached bool
	err     error
}

// settle waits for t's timeout callback, if it started, and takes its copy
// of the attempt.
func (t *hedgeTry) settle() {
	if t.settled {
		return
	}
	t.settled = true
	if !t.timer.Stop() {
		<-t.fired
		t.a = t.p
	}
}

// ours reports whether our timeout ended t.
func (t *hedgeTry) ours() bool {
	return t.ctx.Err() != nil && errors.Is(context.Cause(t.ctx), ErrTimeout)
}

func (h *hedgeRun) run() (string, error) {
	defer h.cleanup()
	h.launch(false)
	for {
		select {
		case <-h.ctx.Done():
			return h.canceled()
		case <-h.timerC:
			h.timerC = nil
			if len(h.tries) == len(h.order) {
				continue
			}
			if !h.n.hedge.Spend() {
				h.n.met.hedgesRefused.Inc()
				continue
			}
			h.n.met.hedgesSent.Inc()
			h.launch(true)
		case ev := <-h.events:
			t := h.tries[ev.i]
			if ev.reached {
				if !t.reached && !t.ended {
					t.reached = true
					h.live--
					h.failover()
				}
				continue
			}
			t.done, t.err = true, ev.err
			h.running--
			o := timeout.Completed
			switch {
			case ev.err == nil:
			case t.ours():
				o = timeout.TimedOut
			case h.ctx.Err() != nil:
				return h.canceled()
			case h.n.cfg.Classify != nil:
				o = h.n.cfg.Classify(ev.err)
			}
			if o == timeout.Completed {
				return h.win(t)
			}
			h.observe(t, o)
			if !t.reached {
				t.reached = true
				h.live--
			}
			h.failover()
			if h.running == 0 && len(h.tries) == len(h.order) {
				return "", h.failed()
			}
		}
	}
}

// launch starts the next replica's attempt (a hedge when hedge is set)
// and arms the hedge timer for it.
func (h *hedgeRun) launch(hedge bool) {
	n, i := h.n, len(h.tries)
	dest := h.order[i]
	start := n.clock()
	d := n.decide([]string{dest}, 1, h.attempt, start)
	n.met.observe(d)
	a := attemptOf(dest, d)
	t := &hedgeTry{dest: dest, a: a, p: a, start: start, hedge: hedge, fired: make(chan struct{})}
	// As in Do: the context ends at the timeout, or for a caller probe at
	// the probe timeout unless the probe cannot be reserved at the timeout.
	limit, probing := a.Timeout, a.ProbeTimeout > a.Timeout && probeRoom(h.ctx, a.ProbeTimeout)
	if probing {
		limit = a.ProbeTimeout
	}
	base, dcancel := context.WithTimeoutCause(h.ctx, limit, ErrTimeout)
	t.ctx, t.cancel = context.WithCancelCause(base)
	t.dcancel = dcancel
	h.tries = append(h.tries, t)
	h.live++
	h.running++
	events, ctx := h.events, h.ctx
	t.timer = time.AfterFunc(a.Timeout, func() {
		defer close(t.fired)
		// A caller probe goes on until its probe timeout; either way the
		// attempt reached its timeout and DoHedged fails over.
		if probing && (ctx.Err() != nil || !n.Probe(&t.p, n.clock())) {
			t.cancel(ErrTimeout)
		}
		events <- hedgeEvent{i: i, reached: true}
	})
	go func(fn func(context.Context, string) error, actx context.Context) {
		events <- hedgeEvent{i: i, err: fn(actx, dest)}
	}(h.fn, t.ctx)
	h.arm(dest, start)
}

// arm sets the hedge timer for the attempt to dest started at start, or
// clears it when no hedge can follow.
func (h *hedgeRun) arm(dest string, start time.Time) {
	h.timerC = nil
	if len(h.tries) == len(h.order) {
		return
	}
	delay, ok := h.n.hedgeDelay(dest, start)
	if !ok {
		return
	}
	if h.timer == nil {
		h.timer = time.NewTimer(delay)
	} else {
		h.timer.Reset(delay)
	}
	h.timerC = h.timer.C
}

// failover starts the next replica when no attempt is live any more.
func (h *hedgeRun) failover() {
	if h.live == 0 && len(h.tries) < len(h.order) {
		h.launch(false)
	}
}

// observe learns how t ended at now.
func (h *hedgeRun) observe(t *hedgeTry, o timeout.Outcome) {
	t.settle()
	now := h.n.clock()
	h.n.Observe(t.a, o, max(now.Sub(t.start), 0), now)
	t.ended, t.outcome = true, o
}

// win ends the call with t's completion: every other attempt still running
// is cancelled and superseded (or timed out, if our timeout had ended it).
func (h *hedgeRun) win(t *hedgeTry) (string, error) {
	h.observe(t, timeout.Completed)
	if t.hedge {
		h.n.met.hedgesWon.Inc()
	}
	for _, o := range h.tries {
		if o.ended {
			continue
		}
		o.cancel(context.Canceled)
		if o.ours() {
			h.observe(o, timeout.TimedOut)
		} else {
			h.observe(o, timeout.Superseded)
		}
	}
	return t.dest, t.err
}

// canceled ends the call when the caller's context ended: attempts still
// running are observed as canceled (nothing recorded), or timed out if our
// timeout had ended them first.
func (h *hedgeRun) canceled() (string, error) {
	for _, t := range h.tries {
		if t.ended {
			continue
		}
		t.settle()
		if t.ours() {
			h.observe(t, timeout.TimedOut)
		} else {
			h.observe(t, timeout.Canceled)
		}
	}
	return "", h.ctx.Err()
}

// failed joins every attempt's error, in the order tried; a timed-out one
// matches ErrTimeout.
func (h *hedgeRun) failed() error {
	errs := make([]error, 0, len(h.tries))
	for _, t := range h.tries {
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

// cleanup releases every attempt's timers and contexts; attempts still
// running see context.Canceled.
func (h *hedgeRun) cleanup() {
	if h.timer != nil {
		h.timer.Stop()
	}
	for _, t := range h.tries {
		t.timer.Stop()
		t.cancel(context.Canceled)
		t.dcancel()
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
