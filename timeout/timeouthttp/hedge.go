package timeouthttp

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// hedgeable reports whether req may be hedged: the Transport hedges, its
// Policy is a timeout.Hedger, req is idempotent (GET, HEAD, OPTIONS or
// TRACE, or it carries an Idempotency-Key or X-Idempotency-Key header, as
// net/http decides what it may replay), it does not ask to switch
// protocols, and its body, if any, can be read again (GetBody).
func (t *Transport) hedgeable(req *http.Request) (timeout.Hedger, bool) {
	if !t.hedge || upgrading(req) {
		return nil, false
	}
	h, ok := t.p.(timeout.Hedger)
	if !ok {
		return nil, false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
	default:
		if _, ok := req.Header["Idempotency-Key"]; !ok {
			if _, ok := req.Header["X-Idempotency-Key"]; !ok {
				return nil, false
			}
		}
	}
	return h, req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// hedgeResult is one hedged attempt's round trip.
type hedgeResult struct {
	i    int
	resp *http.Response
	err  error
	end  time.Time     // when the round trip returned, on the runtime's clock
	at   time.Duration // the attempt's elapsed time then (attempt.elapsedAt)
}

// hedgeCall is a hedged request's shared state: once won, attempts that
// return later are superseded by their own goroutine.
type hedgeCall struct {
	mu      sync.Mutex
	won     bool
	results chan hedgeResult
}

// roundTripHedged sends req, and when it has not answered after its
// destination's hedge delay and the budget allows, a copy of it to the
// same destination: the first answer (a response, or an error
// Options.Classify calls timeout.Completed) wins, the other attempt is
// cancelled and observed as superseded at its elapsed time. Each attempt
// has its own adaptive timeout and is observed as RoundTrip's are; an
// attempt that fails otherwise leaves the other running. When both fail,
// the first attempt's error is returned. The first attempt's return, if in
// hand when the coordinator handles the delay's passing, comes first (as
// in node.DoHedged): it ends the request and no copy is sent. Hedged
// attempts run no shadow probe.
func (t *Transport) roundTripHedged(req *http.Request, h timeout.Hedger, delay time.Duration) (*http.Response, error) {
	parent := req.Context()
	hc := &hedgeCall{results: make(chan hedgeResult, 2)}
	var tries []*hedgeTry
	launch := func(r *http.Request) {
		try := &hedgeTry{}
		a := &try.attempt
		a.t, a.parent, a.start = t, parent, t.now()
		a.a = t.p.Decide(t.dest(req), timeout.AttemptFrom(parent), a.start)
		cctx, cancel := context.WithCancelCause(parent)
		var ctx context.Context
		var stop context.CancelFunc
		if t.real {
			ctx, stop = context.WithDeadlineCause(cctx, a.start.Add(a.a.Timeout), ErrTimeout)
		} else {
			ctx, stop = context.WithTimeoutCause(cctx, a.a.Timeout, ErrTimeout)
		}
		a.req = r.WithContext(ctx)
		try.cancel, a.stop = cancel, func() { cancel(nil); stop() }
		i := len(tries)
		tries = append(tries, try)
		go func() {
			resp, err := t.base.RoundTrip(a.req)
			// When it returned, on the deadline's clock: read before the
			// lock, which the coordinator may hold while the deadline
			// passes.
			end := time.Now()
			// Its latency, read here too: the coordinator may handle the
			// return late, and its delay is not the destination's.
			at := a.elapsedAt(end)
			hc.mu.Lock()
			defer hc.mu.Unlock()
			if !hc.won {
				hc.results <- hedgeResult{i, resp, err, end, at}
				return
			}
			try.superseded(resp, end, at)
		}()
	}
	launch(req)
	timer := time.NewTimer(delay)
	defer timer.Stop()
	timerC := timer.C
	var first error
	for pending := 1; pending > 0; {
		select {
		case <-timerC:
			timerC = nil
			now := t.now()
			// The first attempt's return, if in hand by the time the
			// delay's passing is handled (the timer and the return may be
			// ready together, and Go's select takes either), comes first,
			// as in node.DoHedged: it ends the call, an answer winning
			// without a hedge, and no token is spent.
			if len(hc.results) > 0 || parent.Err() != nil {
				continue
			}
			// The copy's body first: a hedge that cannot be sent spends
			// no token.
			r := req.Clone(parent)
			if req.GetBody != nil && req.Body != nil && req.Body != http.NoBody {
				body, err := req.GetBody()
				if err != nil {
					continue
				}
				r.Body = body
			}
			if !h.SpendHedge(now) {
				if r.Body != req.Body && r.Body != nil {
					_ = r.Body.Close()
				}
				continue
			}
			launch(r)
			pending++
		case res := <-hc.results:
			pending--
			a := &tries[res.i].attempt
			// Latencies are the attempt's at its return (res.at), not at
			// its handling, as in node.DoHedged.
			if res.err == nil {
				hc.win(tries, a, t.now())
				return a.response(res.resp, res.at)
			}
			answered, err := a.failWith(res.err, res.at, res.at, false, returnedBefore(a.ctx(), res.end))
			if answered { // an error Options.Classify calls the destination's answer
				hc.win(tries, a, t.now())
				return nil, err
			}
			if res.i == 0 {
				first = err
			}
			if pending == 0 { // the first attempt failed, and the hedge if one was sent
				return nil, first
			}
		}
	}
	return nil, first
}

// win ends a hedged request that a answered: every other attempt lost at
// now (read before the lock, once for all of them) and is cancelled, and
// the ones whose round trips have returned but were not yet handled are
// observed as losers now, at their latencies when they returned.
func (hc *hedgeCall) win(tries []*hedgeTry, a *attempt, now time.Time) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	hc.won = true
	for _, o := range tries {
		if &o.attempt != a {
			o.supersede(now)
		}
	}
	for len(hc.results) > 0 { // returned, not yet handled: lost too
		late := <-hc.results
		tries[late.i].superseded(late.resp, late.end, late.at)
	}
}

// hedgeTry is one attempt of a hedged request.
type hedgeTry struct {
	attempt
	cancel context.CancelCauseFunc // ends the attempt's context with a cause
	lost   time.Duration           // its elapsed time when another attempt won (hedgeCall.mu)
	left   bool                    // the caller's context had ended when another attempt won (hedgeCall.mu)
}

// supersede marks a hedged attempt not yet observed as the loser, at its
// elapsed time at now (Options.Now), and cancels it; it is observed when
// its round trip's return is handled. hc.mu is held.
func (h *hedgeTry) supersede(now time.Time) {
	if h.settled() {
		return
	}
	h.lost, h.left = now.Sub(h.start), h.callerLeft()
	h.cancel(context.Canceled)
}

// superseded ends a loser's round trip, which returned at end (on the
// runtime's clock) at elapsed time at: it discards a late response and
// observes the attempt by what ended it first, whatever it returned, at
// its latency when it returned: timed out if our timeout had ended it
// before it returned and before it lost, canceled if the caller's context
// had ended before it lost, else superseded at the time it lost, or when
// it returned if that was earlier (a coordinator that handles the win
// late does not make the loser slower than it was), as node.DoHedged
// does. A round trip that returned before its deadline was not ended by
// it, though the deadline may have passed by the time the win is handled,
// as timeoutgrpc and node.DoHedged decide. hc.mu is held.
func (h *hedgeTry) superseded(resp *http.Response, end time.Time, at time.Duration) {
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if h.settle() {
		switch {
		case h.ours() && !returnedBefore(h.ctx(), end):
			h.observe(timeout.TimedOut, at)
		case h.left:
			h.observe(timeout.Canceled, at)
		default:
			h.observe(timeout.Superseded, min(h.lost, at))
		}
	}
	h.end()
}
