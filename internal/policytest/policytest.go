// Package policytest holds timeout.Policy fakes for the transport adapters'
// tests and benchmarks, and Hedging, the real timeout.NewPolicy over a
// fixed history, for their hedging tests.
package policytest

import (
	"sync"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// Fixed is a timeout.Policy whose every attempt gets the same timeout, that
// never probes and learns nothing: the cheapest policy, for benchmarks.
type Fixed time.Duration

// Decide returns the fixed timeout.
func (f Fixed) Decide(dest string, attempt int, _ time.Time) timeout.Attempt {
	return timeout.Attempt{Dest: dest, Attempt: max(attempt, 1), Timeout: time.Duration(f)}
}

// Probe never reserves a probe.
func (Fixed) Probe(*timeout.Attempt, time.Time) bool { return false }

// Observe does nothing.
func (Fixed) Observe(timeout.Attempt, timeout.Outcome, time.Duration, time.Time) {}

// Observation is one Observe call as Policy recorded it.
type Observation struct {
	Dest    string
	Attempt int
	Outcome timeout.Outcome
	Elapsed time.Duration
	Probe   bool // the attempt went on as a probe
}

// Policy is a timeout.Policy for tests: attempt n to a destination gets its
// timeout (SetTimeout; Default for the others) doubled n−1 times; a probe is
// offered (ProbeTimeout set by Decide) while OfferProbe's offer stands and
// no probe of the destination is in flight, and Probe reserves it, using the
// offer up. Every Observe is recorded. Safe for concurrent use.
type Policy struct {
	mu       sync.Mutex
	def      time.Duration
	timeouts map[string]time.Duration
	probe    time.Duration // the offered probe timeout; 0 when none is offered
	inFlight map[string]bool
	decided  int
	probes   int
	observed []Observation
	at       []time.Time // each Observe's now
}

// New returns a Policy whose attempts get def unless SetTimeout says
// otherwise.
func New(def time.Duration) *Policy {
	return &Policy{def: def, timeouts: map[string]time.Duration{}, inFlight: map[string]bool{}}
}

// SetTimeout sets the first attempt's timeout to dest.
func (p *Policy) SetTimeout(dest string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.timeouts[dest] = d
}

// OfferProbe makes a probe due for every destination, with probe timeout d
// after the attempt's start, until one Probe call reserves it. d = 0
// withdraws the offer.
func (p *Policy) OfferProbe(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probe = d
}

// Decide returns dest's timeout for attempt, with the offered probe timeout
// when a probe is due.
func (p *Policy) Decide(dest string, attempt int, _ time.Time) timeout.Attempt {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.decided++
	attempt = max(attempt, 1)
	d, ok := p.timeouts[dest]
	reason := timeout.ReasonEstimate
	if !ok {
		d, reason = p.def, timeout.ReasonFallback
	}
	a := timeout.Attempt{Dest: dest, Attempt: attempt, Timeout: d << min(attempt-1, 20), Reason: reason}
	if p.probe > 0 && !p.inFlight[dest] {
		a.ProbeTimeout = max(p.probe, a.Timeout)
	}
	return a
}

// Probe reserves the offered probe for a.Dest if it is still due.
func (p *Policy) Probe(a *timeout.Attempt, _ time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.probe == 0 || p.inFlight[a.Dest] {
		return false
	}
	p.inFlight[a.Dest] = true
	p.probe = 0
	p.probes++
	a.Probe = true
	return true
}

// Observe records the outcome and releases a probe's reservation.
func (p *Policy) Observe(a timeout.Attempt, o timeout.Outcome, elapsed time.Duration, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a.Probe {
		delete(p.inFlight, a.Dest)
	}
	p.observed = append(p.observed, Observation{Dest: a.Dest, Attempt: a.Attempt, Outcome: o, Elapsed: elapsed, Probe: a.Probe})
	p.at = append(p.at, now)
}

// ObservedAt returns the now of every Observe call so far, in order.
func (p *Policy) ObservedAt() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.at...)
}

// Observed returns the observations so far, in order.
func (p *Policy) Observed() []Observation {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Observation(nil), p.observed...)
}

// Outcomes returns the outcomes observed so far, in order.
func (p *Policy) Outcomes() []timeout.Outcome {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]timeout.Outcome, len(p.observed))
	for i, o := range p.observed {
		out[i] = o.Outcome
	}
	return out
}

// Probes returns how many probes Probe reserved.
func (p *Policy) Probes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.probes
}

// Decided returns how many times Decide was called.
func (p *Policy) Decided() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.decided
}

// InFlight reports whether a probe of dest is reserved and not yet observed.
func (p *Policy) InFlight(dest string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inFlight[dest]
}
