package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// PolicyKind is how a Policy picks a request's timeout.
type PolicyKind uint8

const (
	// PolicyFixed uses the same timeout for every request.
	PolicyFixed PolicyKind = iota
	// PolicyLocal uses timeout.Select on the node's own tracker, recording
	// a timed-out attempt at its timeout as a plain sample: the rule before
	// failure-aware timeouts, on one node's data.
	PolicyLocal
	// PolicyFleet uses timeout.Select on the node's fleet view (the
	// fleet's decision values: fleet estimate, local guard, local
	// fallback), recording a timed-out attempt as a plain sample: the
	// rule before failure-aware timeouts.
	PolicyFleet
	// PolicyFleetNoGuard is PolicyFleet on the fleet estimate's value
	// alone (Estimate.ValueMillis: fleet view, else local view), without
	// the local guard: to show what the guard is for.
	PolicyFleetNoGuard
	// PolicyShadow is the failure-aware rule as it ships: each node's
	// timeout.Decider over its fleet view and tracker (the rule on v =
	// min(Q, M), failing destinations, the consecutive-failure detector,
	// probe bookkeeping), every attempt recorded as a Policy records it
	// (a timed-out one censored), with shadow probes: the caller gets its
	// timeout error at the timeout while a probe goes on unseen until the
	// probe timeout (timeouthttp, timeoutgrpc).
	PolicyShadow
	// PolicyCaller is PolicyShadow with caller probes (node.Do): the
	// caller waits on until the probe timeout.
	PolicyCaller
)

// Policy is one way of choosing timeouts, compared by RunDecision.
type Policy struct {
	Name  string
	Kind  PolicyKind
	Fixed time.Duration // PolicyFixed only
}

// DefaultPolicies returns fixed 100 ms, 250 ms and 1 s, local adaptive,
// fleet adaptive, fleet adaptive without the local guard, and the
// failure-aware rule with shadow probes and with caller probes.
func DefaultPolicies() []Policy {
	return []Policy{
		{Name: "fixed 100ms", Kind: PolicyFixed, Fixed: 100 * time.Millisecond},
		{Name: "fixed 250ms", Kind: PolicyFixed, Fixed: 250 * time.Millisecond},
		{Name: "fixed 1s", Kind: PolicyFixed, Fixed: time.Second},
		{Name: "local adaptive", Kind: PolicyLocal},
		{Name: "fleet adaptive", Kind: PolicyFleet},
		{Name: "fleet, no local guard", Kind: PolicyFleetNoGuard},
		{Name: "failure-aware, shadow probes", Kind: PolicyShadow},
		{Name: "failure-aware, caller probes", Kind: PolicyCaller},
	}
}

// The destinations of the decision scenario, each a scenario of its own.
const (
	// DestStall is called often by every node and stalls rarely: 0.1 % of
	// its requests take 20× as long.
	DestStall = "stall"
	// DestStep is called often by every node and becomes 5× slower at
	// DecisionConfig.StepAt.
	DestStep = "step"
	// DestRare is called often by the first half of the nodes ("heavy
	// callers") and rarely by the others ("rare callers").
	DestRare = "rare"
	// DestDead stops answering at DecisionConfig.DeadAt: its requests never
	// complete after that.
	DestDead = "dead"
	// DestHang is called often; 1 % of its requests never answer.
	DestHang = "hang"
	// DestHangRare is called often; 0.05 % of its requests never answer
	// (still more than the 0.01 % above P99.99).
	DestHangRare = "hang-rare"
	// DestSlow is called often; 1 % of its requests are 100× slower, but
	// answer.
	DestSlow = "slow"
	// DestTight is first called at DecisionConfig.TightAt, and every one
	// of its requests is slower than the first timeouts (the fallback).
	DestTight = "tight"
)

// decisionDests are the scenario's destinations, in the order of their
// random streams (the first four are the original scenario's, so their
// requests are the same as before the others were added).
var decisionDests = [...]string{DestStall, DestStep, DestRare, DestDead, DestHang, DestHangRare, DestSlow, DestTight}

const (
	dStall = iota
	dStep
	dRare
	dDead
	dHang
	dHangRare
	dSlow
	dTight
	numDecisionDests
)

// DecisionConfig configures RunDecision.
type DecisionConfig struct {
	// Seed makes the run. Every policy sees the same requests with the same
	// latencies (common random numbers): only the timeouts differ.
	Seed uint64
	// Nodes is the number of calling nodes, >= 2. Default 20.
	Nodes int
	// Duration is the simulated time; Warmup the time before metrics count
	// (one window fills). Defaults 240s and 60s.
	Duration, Warmup time.Duration
	// StepAt is when DestStep becomes 5× slower, DeadAt when DestDead stops
	// answering, TightAt when DestTight is first called. Defaults 120s.
	StepAt, DeadAt, TightAt time.Duration
	// Settle is how long after StepAt DestStep's spurious timeouts are
	// counted as "after the step". Default 30s.
	Settle time.Duration
	// Rate is the request rate per node to each frequently called
	// destination, per second; rare callers call DestRare at Rate/100 and
	// every node calls DestDead at Rate/10. Default 50.
	Rate float64
	// Policies to compare. Default DefaultPolicies().
	Policies []Policy
	// RunSettings are the adaptive policies' timeout rule, every node's
	// tracker and the progress lines.
	RunSettings
}

func (c *DecisionConfig) defaults() {
	orDefault(&c.Nodes, 20)
	orDefault(&c.Duration, 240*time.Second)
	orDefault(&c.Warmup, 60*time.Second)
	orDefault(&c.StepAt, 120*time.Second)
	orDefault(&c.DeadAt, 120*time.Second)
	orDefault(&c.TightAt, 120*time.Second)
	orDefault(&c.Settle, 30*time.Second)
	orDefault(&c.Rate, 50)
	c.RunSettings.defaults()
	if c.Policies == nil {
		c.Policies = DefaultPolicies()
	}
}

// DecisionDistributions are the scenario's latency distributions.
type DecisionDistributions struct {
	Stall, StepBefore, StepAfter, Rare, Dead Dist
	// Hang and HangRare are the distributions of the requests that answer;
	// HangProb and HangRareProb the shares that never do.
	Hang, HangRare         Dist
	HangProb, HangRareProb float64
	Slow, Tight            Dist
}

// DecisionDists returns the scenario's latency distributions.
func DecisionDists() DecisionDistributions {
	base := Dist{MedianMillis: 10, Sigma: 0.4}
	return DecisionDistributions{
		Stall:        Dist{MedianMillis: 10, Sigma: 0.4, StallProb: 0.001, StallFactor: 20},
		StepBefore:   base,
		StepAfter:    Dist{MedianMillis: 50, Sigma: 0.4},
		Rare:         Dist{MedianMillis: 20, Sigma: 1.0},
		Dead:         base,
		Hang:         base,
		HangRare:     base,
		HangProb:     0.01,
		HangRareProb: 0.0005,
		Slow:         Dist{MedianMillis: 10, Sigma: 0.4, StallProb: 0.01, StallFactor: 100},
		Tight:        Dist{MedianMillis: 200, Sigma: 0.4},
	}
}

// Scenario is one policy's figures on one destination: the requests issued
// after the warm-up (DestDead's after its death), how long callers waited
// for them, and how many our timeout failed.
type Scenario struct {
	// Requests counts the requests; Hung those that never answer.
	Requests, Hung uint64
	// Wait and HungWait are the total time callers waited on all of them
	// and on the hung ones: until the answer, or until our timeout (a
	// caller probe's timeout) ended the attempt.
	Wait, HungWait time.Duration
	// Spurious counts requests that would have answered but that our
	// timeout failed (the caller got a timeout error): failures caused by
	// our timeout.
	Spurious uint64
	// Probes counts the probes started.
	Probes uint64
}

// WaitMean is the mean wait per request.
func (s Scenario) WaitMean() time.Duration { return meanOf(s.Wait, s.Requests) }

// HungWaitMean is the mean wait per hung request.
func (s Scenario) HungWaitMean() time.Duration { return meanOf(s.HungWait, s.Hung) }

// SpuriousRate is Spurious over the requests that would have answered.
func (s Scenario) SpuriousRate() float64 {
	if s.Requests == s.Hung {
		return 0
	}
	return float64(s.Spurious) / float64(s.Requests-s.Hung)
}

func meanOf(d time.Duration, n uint64) time.Duration {
	if n == 0 {
		return 0
	}
	return d / time.Duration(n)
}

// DecisionResult is one policy's measured decision quality.
type DecisionResult struct {
	Policy string
	// Requests counts requests issued after the warm-up, every
	// destination.
	Requests uint64
	// Spurious is the share of requests that would have completed but timed
	// out, after the warm-up, over DestStall, DestStep, DestRare and
	// DestDead before its death (the original scenario); SpuriousStall,
	// SpuriousRare and SpuriousStep the same for DestStall, for rare
	// callers' requests to DestRare, and for DestStep within Settle after
	// the step.
	Spurious, SpuriousStall, SpuriousRare, SpuriousStep float64
	// MeanTimeoutStall is the mean timeout chosen for DestStall after the
	// warm-up: what a caller waits before giving up on a stalled request.
	MeanTimeoutStall time.Duration
	// FollowP50 and FollowMax are, over nodes, the time from the step until
	// a node's chosen timeout for DestStep reaches the new true P99.99 for
	// good (its last request with a lower timeout; 0 if none was lower);
	// FollowNever counts nodes whose timeout was still lower at the end.
	FollowP50, FollowMax time.Duration
	FollowNever          int
	// DeadWaitMean is the mean time a request to DestDead waited before
	// timing out after its death; DeadWaitPerNode the total per node.
	DeadWaitMean, DeadWaitPerNode time.Duration
	// TightRecovered is, over nodes, the median time from DestTight's
	// first call until a node's requests to it stop failing for good (its
	// last failed request); TightNever counts nodes still failing some at
	// the end.
	TightRecovered time.Duration
	TightNever     int
	// Scenarios has the figures of every destination, by name.
	Scenarios map[string]Scenario
}

// RunDecision runs the decision scenario: one simulated cluster with the
// dissemination protocol running, where every node calls every destination
// and every policy decides each request side by side. Every policy has its
// own copy of each destination in every node's tracker and fleet view
// (their histories differ, since their timeouts do), gossiped like any
// other; the failure-aware policies run timeout.Decider, the decision code
// that ships, over each node's fleet view. It returns one result per
// policy.
func RunDecision(cfg DecisionConfig) ([]DecisionResult, error) {
	cfg.defaults()
	if cfg.Nodes < 2 {
		return nil, errors.New("sim: DecisionConfig.Nodes must be >= 2")
	}
	if err := cfg.Timeout.Validate(); err != nil {
		return nil, err
	}
	if len(cfg.Policies) > 250 {
		return nil, errors.New("sim: at most 250 policies")
	}
	sc := DefaultConfig(cfg.Nodes)
	sc.Seed, sc.Observers, sc.Tracker, sc.Progress = cfg.Seed, cfg.Nodes, cfg.Tracker, cfg.Progress
	sc.Gossip.Protocol = 1 // the pinned decision tables were measured on protocol v1
	s, err := New(sc)
	if err != nil {
		return nil, err
	}
	r, err := newDecisionRun(cfg, s)
	if err != nil {
		return nil, err
	}
	r.start()
	if err := s.Run(cfg.Duration); err != nil {
		return nil, fmt.Errorf("sim: decision run: %w", err)
	}
	for i := range cfg.Nodes {
		r.flush(i, cfg.Duration)
	}
	return r.results(), nil
}

// stream is one node's Poisson request stream to one destination.
type stream struct {
	node int
	dest int // index in decisionDests
	rate float64
	rng  *rand.Rand
	fn   func(time.Time)
}

type counter struct{ timedOut, total uint64 }

func (c counter) rate() float64 {
	if c.total == 0 {
		return 0
	}
	return float64(c.timedOut) / float64(c.total)
}

func (c *counter) add(timedOut bool) {
	c.total++
	if timedOut {
		c.timedOut++
	}
}

// policyRun is one policy's state in a run: its destination names, its
// deciders (failure-aware policies), and what is measured.
type policyRun struct {
	p     Policy
	names [numDecisionDests][]string // {name}: this policy's copy of each destination
	decs  []*timeout.Decider         // per node, failure-aware policies only

	res                 DecisionResult
	all, stall, rare    counter
	stepSettle          counter
	sumTimeoutStall     time.Duration
	nStall              uint64
	deadWait            time.Duration
	deadN               uint64
	lastBelow           []time.Duration // per node, since the step
	below               []bool
	tightLastFail       []time.Duration // per node, since TightAt; -1 none
	tightLastAt         []time.Duration // per node: the latest request accounted
	tightFailing        []bool          // per node: that request failed
	scen                [numDecisionDests]Scenario
	failureAware, fixed bool
}

// pendingKind is what a pending completion does.
type pendingKind uint8

const (
	// pendRecord records a plain sample (the policies before failure-aware
	// timeouts, a timed-out attempt at its timeout).
	pendRecord pendingKind = iota
	// pendObserve tells the decider how the attempt ended.
	pendObserve
	// pendReach is a failure-aware attempt reaching its timeout with a
	// probe offered: it asks Decider.Probe, then ends or goes on.
	pendReach
)

// pending is a completion of one node's attempt: a sample to record, an
// outcome to observe, or a probe to ask for at the attempt's timeout.
type pending struct {
	at, arrived time.Duration
	seq         uint64
	lat         float64 // the request's latency in ms (+Inf: never)
	ms          uint64  // pendRecord: the sample
	to, probeTo time.Duration
	kind        pendingKind
	pol, dest   uint8
	out         timeout.Outcome
	probe       bool // the attempt went on as a probe
	counted     bool // the request counts in the metrics
}

// nodeQueue is one node's pending completions, a min-heap by (at, seq).
// They are applied lazily, in time order, just before anything reads the
// node's tracker or deciders (its decisions, its probes, its seal): only
// those reads see them, so this is exact, and it spares a simulator event
// per completion.
type nodeQueue []pending

func (q *nodeQueue) push(p pending) {
	h := append(*q, p)
	for i := len(h) - 1; i > 0; {
		up := (i - 1) / 2
		if !pendingLess(&h[i], &h[up]) {
			break
		}
		h[i], h[up] = h[up], h[i]
		i = up
	}
	*q = h
}

func (q *nodeQueue) pop() pending {
	h := *q
	p := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < last && pendingLess(&h[l], &h[m]) {
			m = l
		}
		if l+1 < last && pendingLess(&h[l+1], &h[m]) {
			m = l + 1
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return p
}

func pendingLess(a, b *pending) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

// decisionRun is one run of the decision scenario.
type decisionRun struct {
	cfg      DecisionConfig
	s        *Sim
	dists    DecisionDistributions
	newTruth float64
	pols     []*policyRun
	streams  []*stream
	queues   []nodeQueue // per node
	seq      uint64
}

func newDecisionRun(cfg DecisionConfig, s *Sim) (*decisionRun, error) {
	r := &decisionRun{cfg: cfg, s: s, dists: DecisionDists(), queues: make([]nodeQueue, cfg.Nodes)}
	r.newTruth = float64(r.dists.StepAfter.TrueQuantileMillis(cfg.Timeout.Quantile))
	s.beforeSeal = func(i int) { r.flush(i, s.Elapsed()) }
	for k, p := range cfg.Policies {
		pr := &policyRun{p: p, res: DecisionResult{Policy: p.Name}}
		pr.fixed = p.Kind == PolicyFixed
		pr.failureAware = p.Kind == PolicyShadow || p.Kind == PolicyCaller
		for d, name := range decisionDests {
			pr.names[d] = []string{strconv.Itoa(k) + "." + name}
		}
		pr.lastBelow = make([]time.Duration, cfg.Nodes)
		pr.below = make([]bool, cfg.Nodes)
		pr.tightLastFail = make([]time.Duration, cfg.Nodes)
		pr.tightFailing = make([]bool, cfg.Nodes)
		pr.tightLastAt = make([]time.Duration, cfg.Nodes)
		for i := range pr.tightLastFail {
			pr.tightLastFail[i] = -1
		}
		if pr.failureAware {
			for i := range cfg.Nodes {
				d, err := timeout.NewDecider(cfg.Timeout, cfg.Tracker, s.Fleet(i), s.Tracker(i))
				if err != nil {
					return nil, err
				}
				pr.decs = append(pr.decs, d)
			}
		}
		r.pols = append(r.pols, pr)
	}
	return r, nil
}

// rate is node i's request rate to destination d.
func (r *decisionRun) rate(i, d int) float64 {
	switch {
	case d == dRare && i >= r.cfg.Nodes/2:
		return r.cfg.Rate / 100
	case d == dDead:
		return r.cfg.Rate / 10
	}
	return r.cfg.Rate
}

// start schedules every stream's first request.
func (r *decisionRun) start() {
	for i := range r.cfg.Nodes {
		for d := range numDecisionDests {
			st := &stream{node: i, dest: d, rate: r.rate(i, d), rng: newRand(r.cfg.Seed, uint64(i)<<8|uint64(d)|1<<62)}
			st.fn = func(now time.Time) { r.arrive(st, now) }
			first := time.Duration(st.rng.ExpFloat64() / st.rate * float64(time.Second))
			if d == dTight {
				first += r.cfg.TightAt
			}
			r.s.At(first, st.fn)
			r.streams = append(r.streams, st)
		}
	}
}

// draw returns a request's latency in ms (+Inf: it never answers). Every
// request draws the same numbers whatever the policies decide.
func (r *decisionRun) draw(st *stream, at time.Duration) float64 {
	ds := &r.dists
	switch st.dest {
	case dStall:
		return ds.Stall.SampleMillis(st.rng)
	case dStep:
		if at >= r.cfg.StepAt {
			return ds.StepAfter.SampleMillis(st.rng)
		}
		return ds.StepBefore.SampleMillis(st.rng)
	case dRare:
		return ds.Rare.SampleMillis(st.rng)
	case dDead:
		lat := ds.Dead.SampleMillis(st.rng)
		if at >= r.cfg.DeadAt {
			return math.Inf(1)
		}
		return lat
	case dHang:
		return hang(ds.Hang.SampleMillis(st.rng), st.rng.Float64() < ds.HangProb)
	case dHangRare:
		return hang(ds.HangRare.SampleMillis(st.rng), st.rng.Float64() < ds.HangRareProb)
	case dSlow:
		return ds.Slow.SampleMillis(st.rng)
	}
	return ds.Tight.SampleMillis(st.rng)
}

func hang(lat float64, hung bool) float64 {
	if hung {
		return math.Inf(1)
	}
	return lat
}

// counts reports whether a request issued at at counts in the metrics.
func (r *decisionRun) counts(at time.Duration) bool { return at >= r.cfg.Warmup }

// arrive is one request of st: one latency for every policy, each policy's
// decision, and what follows from it.
func (r *decisionRun) arrive(st *stream, now time.Time) {
	at := r.s.Elapsed()
	r.flush(st.node, at)
	lat := r.draw(st, at)
	next := time.Duration(st.rng.ExpFloat64() / st.rate * float64(time.Second))
	r.s.At(at+next, st.fn)
	counted := r.counts(at)
	for k, pr := range r.pols {
		var to time.Duration
		switch {
		case pr.fixed:
			to = pr.p.Fixed
		case pr.failureAware:
			a := pr.decs[st.node].Decide(pr.names[st.dest][0], 1, now)
			to = a.Timeout
			r.decided(pr, st, at, to)
			r.failureAware(k, pr, st, at, lat, a, counted)
			continue
		default:
			to = r.chooseBefore(pr, st, now)
		}
		r.decided(pr, st, at, to)
		wait, rec, timedOut := to, uint64(to.Milliseconds()), lat > float64(to.Milliseconds())
		if !timedOut {
			wait, rec = millisDur(lat), uint64(lat)
		}
		if !pr.fixed {
			r.push(st.node, pending{at: at + wait, kind: pendRecord, pol: uint8(k), dest: uint8(st.dest), ms: rec})
		}
		if counted {
			r.account(pr, st, at, lat, wait, timedOut, false)
		}
	}
}

// chooseBefore is the timeout of the policies before failure-aware
// timeouts.
func (r *decisionRun) chooseBefore(pr *policyRun, st *stream, now time.Time) time.Duration {
	names := pr.names[st.dest]
	switch pr.p.Kind {
	case PolicyLocal:
		return timeout.Select(r.cfg.Timeout, r.s.Tracker(st.node), names, 1, now)
	case PolicyFleet:
		return timeout.Select(r.cfg.Timeout, r.s.Fleet(st.node), names, 1, now)
	}
	return timeout.Select(r.cfg.Timeout, unguarded{r.s.Fleet(st.node)}, names, 1, now)
}

// failureAware plays a failure-aware attempt: it completes within its
// timeout, or reaches it, where a probe may let it go on.
func (r *decisionRun) failureAware(k int, pr *policyRun, st *stream, at time.Duration, lat float64, a timeout.Attempt, counted bool) {
	toMs := float64(a.Timeout) / float64(time.Millisecond)
	p := pending{pol: uint8(k), dest: uint8(st.dest), lat: lat, arrived: at, to: a.Timeout, probeTo: a.ProbeTimeout, counted: counted}
	switch {
	case lat <= toMs:
		p.at, p.kind, p.out = at+millisDur(lat), pendObserve, timeout.Completed
		if counted {
			r.account(pr, st, at, lat, millisDur(lat), false, false)
		}
	case a.ProbeTimeout > a.Timeout:
		p.at, p.kind = at+a.Timeout, pendReach // account there: a caller probe may wait on
	default:
		p.at, p.kind, p.out = at+a.Timeout, pendObserve, timeout.TimedOut
		if counted {
			r.account(pr, st, at, lat, a.Timeout, true, false)
		}
	}
	r.push(st.node, p)
}

// attempt rebuilds the timeout.Attempt of a failure-aware pending
// completion.
func (r *decisionRun) attempt(p *pending) timeout.Attempt {
	return timeout.Attempt{Dest: r.pols[p.pol].names[p.dest][0], Attempt: 1, Timeout: p.to, ProbeTimeout: p.probeTo, Probe: p.probe}
}

// reach is a failure-aware attempt of node at its timeout with a probe
// offered.
func (r *decisionRun) reach(node int, p pending, now time.Time) {
	pr := r.pols[p.pol]
	st := r.streams[node*numDecisionDests+int(p.dest)]
	a := r.attempt(&p)
	if !pr.decs[node].Probe(&a, now) {
		if p.counted {
			r.account(pr, st, p.arrived, p.lat, p.to, true, false)
		}
		p.out = timeout.TimedOut
		r.observe(node, p, now)
		return
	}
	p.kind, p.probe = pendObserve, true
	if p.lat <= float64(p.probeTo)/float64(time.Millisecond) {
		p.at, p.out = p.arrived+millisDur(p.lat), timeout.Completed
	} else {
		p.at, p.out = p.arrived+p.probeTo, timeout.TimedOut
	}
	if p.counted {
		switch {
		case pr.p.Kind == PolicyShadow: // the caller got its error at the timeout
			r.account(pr, st, p.arrived, p.lat, p.to, true, true)
		case p.out == timeout.Completed: // a caller probe: waited for the answer
			r.account(pr, st, p.arrived, p.lat, millisDur(p.lat), false, true)
		default:
			r.account(pr, st, p.arrived, p.lat, p.probeTo, true, true)
		}
	}
	r.push(node, p)
}

// observe ends a failure-aware attempt of node.
func (r *decisionRun) observe(node int, p pending, now time.Time) {
	r.pols[p.pol].decs[node].Observe(r.attempt(&p), p.out, p.at-p.arrived, now)
}

func millisDur(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// decided measures a decision: the stall destination's mean timeout and
// how the step destination's timeouts follow the step.
func (r *decisionRun) decided(pr *policyRun, st *stream, at, to time.Duration) {
	switch {
	case st.dest == dStep && at >= r.cfg.StepAt:
		b := float64(to.Milliseconds()) < r.newTruth
		pr.below[st.node] = b
		if b {
			pr.lastBelow[st.node] = at - r.cfg.StepAt
		}
	case st.dest == dStall && at >= r.cfg.Warmup:
		pr.sumTimeoutStall += to
		pr.nStall++
	}
}

// account adds one counted request to the metrics: the caller waited wait
// and got our timeout error when timedOut.
func (r *decisionRun) account(pr *policyRun, st *stream, at time.Duration, lat float64, wait time.Duration, timedOut, probe bool) {
	hung := math.IsInf(lat, 1)
	if st.dest != dDead || at >= r.cfg.DeadAt { // the dead peer's scenario starts at its death
		sc := &pr.scen[st.dest]
		sc.Requests++
		sc.Wait += wait
		if hung {
			sc.Hung++
			sc.HungWait += wait
		} else if timedOut {
			sc.Spurious++
		}
		if probe {
			sc.Probes++
		}
	}
	if st.dest == dTight {
		// Requests are accounted when their outcome is known, not quite in
		// the order they were issued.
		if timedOut {
			pr.tightLastFail[st.node] = max(pr.tightLastFail[st.node], at-r.cfg.TightAt)
		}
		if at >= pr.tightLastAt[st.node] {
			pr.tightLastAt[st.node], pr.tightFailing[st.node] = at, timedOut
		}
	}
	switch st.dest {
	case dStall, dStep, dRare, dDead:
	default:
		return
	}
	// The original scenario's figures.
	pr.res.Requests++
	if hung {
		pr.deadWait += wait
		pr.deadN++
		return
	}
	pr.all.add(timedOut)
	switch st.dest {
	case dStall:
		pr.stall.add(timedOut)
	case dRare:
		if st.node >= r.cfg.Nodes/2 {
			pr.rare.add(timedOut)
		}
	case dStep:
		if at >= r.cfg.StepAt && at < r.cfg.StepAt+r.cfg.Settle {
			pr.stepSettle.add(timedOut)
		}
	}
}

// push queues one of node's completions.
func (r *decisionRun) push(node int, p pending) {
	r.seq++
	p.seq = r.seq
	r.queues[node].push(p)
}

// flush applies node's completions due at or before until, in time order.
func (r *decisionRun) flush(node int, until time.Duration) {
	q := &r.queues[node]
	start := r.s.Start()
	for len(*q) > 0 && (*q)[0].at <= until {
		p := q.pop()
		now := start.Add(p.at)
		switch p.kind {
		case pendRecord:
			r.s.Tracker(node).RecordMillis(r.pols[p.pol].names[p.dest][0], p.ms, now)
		case pendObserve:
			r.observe(node, p, now)
		case pendReach:
			r.reach(node, p, now)
		}
	}
}

// results turns the measurements into one result per policy.
func (r *decisionRun) results() []DecisionResult {
	var out []DecisionResult
	for _, pr := range r.pols {
		res := pr.res
		res.Spurious, res.SpuriousStall, res.SpuriousRare, res.SpuriousStep = pr.all.rate(), pr.stall.rate(), pr.rare.rate(), pr.stepSettle.rate()
		res.MeanTimeoutStall = meanOf(pr.sumTimeoutStall, pr.nStall)
		var fs []time.Duration
		for i, f := range pr.lastBelow {
			if pr.below[i] {
				res.FollowNever++
			} else {
				fs = append(fs, f)
			}
		}
		slices.Sort(fs)
		if len(fs) > 0 {
			res.FollowP50, res.FollowMax = pctDur(fs, 0.5), fs[len(fs)-1]
		}
		res.DeadWaitMean = meanOf(pr.deadWait, pr.deadN)
		res.DeadWaitPerNode = pr.deadWait / time.Duration(r.cfg.Nodes)
		var ts []time.Duration
		for i, f := range pr.tightLastFail {
			switch {
			case pr.tightFailing[i]:
				res.TightNever++
			default:
				ts = append(ts, max(f, 0))
			}
		}
		slices.Sort(ts)
		if len(ts) > 0 {
			res.TightRecovered = pctDur(ts, 0.5)
		}
		res.Scenarios = make(map[string]Scenario, numDecisionDests)
		for d, name := range decisionDests {
			res.Scenarios[name] = pr.scen[d]
		}
		out = append(out, res)
	}
	return out
}

// unguarded is a fleet's estimate value without the local guard, as a
// timeout.Estimator: the PolicyFleetNoGuard column only.
type unguarded struct{ f *tracker.Fleet }

func (u unguarded) QuantileMillis(dest string, q float64, now time.Time) (uint64, bool) {
	e, err := u.f.Estimate(dest, q, now)
	if err != nil || !e.Trusted() {
		return 0, false
	}
	return e.ValueMillis, true
}

// RunSettings are what a decision run (DecisionConfig) and a hedging run
// (HedgeConfig) share: the timeout rule, every node's tracker, and the
// progress lines.
type RunSettings struct {
	// Timeout is every adaptive attempt's timeout rule (a
	// timeout.Decider on each node's fleet view). Default:
	// timeout.DefaultConfig with Backoff 10ms..1m (the default 250 ms floor
	// would hide every difference at these latencies; the fallback of a
	// failing destination starts at 10 ms).
	Timeout timeout.Config
	// Tracker is every node's tracker. Default tracker.DefaultConfig().
	Tracker tracker.Config
	// Progress receives a line per simulated epoch when not nil (from
	// several goroutines at once in RunHedge, which runs policies side by
	// side).
	Progress func(format string, args ...any)
}

// defaults fills in the zero configs.
func (r *RunSettings) defaults() {
	if r.Timeout == (timeout.Config{}) {
		r.Timeout = timeout.DefaultConfig()
		r.Timeout.Backoff = timeout.BackoffInterval{Min: 10 * time.Millisecond, Max: time.Minute}
	}
	if r.Tracker == (tracker.Config{}) {
		r.Tracker = tracker.DefaultConfig()
	}
}
