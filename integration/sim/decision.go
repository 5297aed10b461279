package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// PolicyKind is how a Policy picks a request's timeout.
type PolicyKind uint8

const (
	// PolicyFixed uses the same timeout for every request.
	PolicyFixed PolicyKind = iota
	// PolicyLocal uses timeout.Select on the node's own tracker.
	PolicyLocal
	// PolicyFleet uses timeout.Select on the node's fleet view (the
	// fleet's decision values: fleet estimate, local guard, local fallback).
	PolicyFleet
	// PolicyFleetNoGuard uses timeout.Select on the fleet estimate's value
	// alone (Estimate.ValueMillis: fleet view, else local view), without
	// the local guard: to show what the guard is for.
	PolicyFleetNoGuard
)

// Policy is one way of choosing timeouts, compared by RunDecision.
type Policy struct {
	Name  string
	Kind  PolicyKind
	Fixed time.Duration // PolicyFixed only
}

// DefaultPolicies returns fixed 100 ms, 250 ms and 1 s, local adaptive,
// fleet adaptive, and fleet adaptive without the local guard.
func DefaultPolicies() []Policy {
	return []Policy{
		{Name: "fixed 100ms", Kind: PolicyFixed, Fixed: 100 * time.Millisecond},
		{Name: "fixed 250ms", Kind: PolicyFixed, Fixed: 250 * time.Millisecond},
		{Name: "fixed 1s", Kind: PolicyFixed, Fixed: time.Second},
		{Name: "local adaptive", Kind: PolicyLocal},
		{Name: "fleet adaptive", Kind: PolicyFleet},
		{Name: "fleet, no local guard", Kind: PolicyFleetNoGuard},
	}
}

// The destinations of the decision scenario.
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
)

// DecisionConfig configures RunDecision.
type DecisionConfig struct {
	// Seed makes the run. Every policy sees the same requests with the same
	// latencies (common random numbers): only the timeouts differ.
	Seed uint64
	// Nodes is the number of calling nodes, >= 2. Default 20.
	Nodes int
	// Duration is the simulated time per policy; Warmup the time before
	// metrics count (one window fills). Defaults 240s and 60s.
	Duration, Warmup time.Duration
	// StepAt is when DestStep becomes 5× slower; DeadAt when DestDead stops
	// answering. Defaults 120s and 120s.
	StepAt, DeadAt time.Duration
	// Settle is how long after StepAt DestStep's spurious timeouts are
	// counted as "after the step". Default 30s.
	Settle time.Duration
	// Rate is the request rate per node to each frequently called
	// destination, per second; rare callers call DestRare at Rate/100 and
	// every node calls DestDead at Rate/10. Default 50.
	Rate float64
	// Timeout is the timeout configuration of the adaptive policies.
	// Default: timeout.DefaultConfig with Backoff 10ms..1m (the default
	// 250 ms floor would hide every difference at these latencies).
	Timeout timeout.Config
	// Tracker is every node's tracker. Default tracker.DefaultConfig().
	Tracker tracker.Config
	// Policies to compare. Default DefaultPolicies().
	Policies []Policy
	// Progress receives a line per simulated epoch when not nil.
	Progress func(format string, args ...any)
}

func (c *DecisionConfig) defaults() {
	if c.Nodes == 0 {
		c.Nodes = 20
	}
	if c.Duration == 0 {
		c.Duration = 240 * time.Second
	}
	if c.Warmup == 0 {
		c.Warmup = 60 * time.Second
	}
	if c.StepAt == 0 {
		c.StepAt = 120 * time.Second
	}
	if c.DeadAt == 0 {
		c.DeadAt = 120 * time.Second
	}
	if c.Settle == 0 {
		c.Settle = 30 * time.Second
	}
	if c.Rate == 0 {
		c.Rate = 50
	}
	if c.Timeout == (timeout.Config{}) {
		c.Timeout = timeout.DefaultConfig()
		c.Timeout.Backoff = timeout.BackoffInterval{Min: 10 * time.Millisecond, Max: time.Minute}
	}
	if c.Tracker == (tracker.Config{}) {
		c.Tracker = tracker.DefaultConfig()
	}
	if c.Policies == nil {
		c.Policies = DefaultPolicies()
	}
}

// DecisionDists returns the scenario's latency distributions: before and
// after the step for DestStep, the only one that changes.
func DecisionDists() (stall, stepBefore, stepAfter, rare, dead Dist) {
	stall = Dist{MedianMillis: 10, Sigma: 0.4, StallProb: 0.001, StallFactor: 20}
	stepBefore = Dist{MedianMillis: 10, Sigma: 0.4}
	stepAfter = Dist{MedianMillis: 50, Sigma: 0.4}
	rare = Dist{MedianMillis: 20, Sigma: 1.0}
	dead = Dist{MedianMillis: 10, Sigma: 0.4}
	return
}

// DecisionResult is one policy's measured decision quality.
type DecisionResult struct {
	Policy string
	// Requests counts requests issued after the warm-up.
	Requests uint64
	// Spurious is the share of requests that would have completed but timed
	// out, after the warm-up, over every destination but DestDead after its
	// death; SpuriousStall, SpuriousRare and SpuriousStep the same for
	// DestStall, for rare callers' requests to DestRare, and for DestStep
	// within Settle after the step.
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
}

// RunDecision runs the decision scenario once per policy, on a simulated
// cluster with the dissemination protocol running (the fleet policy uses
// it; the others ignore it), and returns one result per policy.
func RunDecision(cfg DecisionConfig) ([]DecisionResult, error) {
	cfg.defaults()
	if cfg.Nodes < 2 {
		return nil, errors.New("sim: DecisionConfig.Nodes must be >= 2")
	}
	if err := cfg.Timeout.Validate(); err != nil {
		return nil, err
	}
	var out []DecisionResult
	for _, p := range cfg.Policies {
		r, err := runPolicy(cfg, p)
		if err != nil {
			return nil, fmt.Errorf("sim: policy %s: %w", p.Name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// stream is one node's Poisson request stream to one destination.
type stream struct {
	node  int
	dest  string
	dests []string // {dest}, for timeout.Select without allocating
	rate  float64
	rng   *rand.Rand
}

type counter struct{ timedOut, total uint64 }

func (c counter) rate() float64 {
	if c.total == 0 {
		return 0
	}
	return float64(c.timedOut) / float64(c.total)
}

func runPolicy(cfg DecisionConfig, p Policy) (DecisionResult, error) {
	sc := DefaultConfig(cfg.Nodes)
	sc.Seed, sc.Observers, sc.Tracker, sc.Progress = cfg.Seed, cfg.Nodes, cfg.Tracker, cfg.Progress
	sc.Gossip.Protocol = 1 // the pinned decision table was measured on protocol v1
	s, err := New(sc)
	if err != nil {
		return DecisionResult{}, err
	}
	stall, stepBefore, stepAfter, rare, dead := DecisionDists()
	newTruth := float64(stepAfter.TrueQuantileMillis(cfg.Timeout.Quantile))
	res := DecisionResult{Policy: p.Name}
	var all, cStall, cRare, cStep counter
	var sumTimeoutStall time.Duration
	var nStall uint64
	var deadWait time.Duration
	var deadN uint64
	// lastBelow[i] is the last time after the step that node i chose a
	// timeout for DestStep below the new P99.99 (0 if never).
	lastBelow := make([]time.Duration, cfg.Nodes)
	below := make([]bool, cfg.Nodes)

	choose := func(st *stream, now time.Time) time.Duration {
		switch p.Kind {
		case PolicyLocal:
			return timeout.Select(cfg.Timeout, s.Tracker(st.node), st.dests, 1, now)
		case PolicyFleet:
			return timeout.Select(cfg.Timeout, s.Fleet(st.node), st.dests, 1, now)
		case PolicyFleetNoGuard:
			return timeout.Select(cfg.Timeout, unguarded{s.Fleet(st.node)}, st.dests, 1, now)
		}
		return p.Fixed
	}
	arrive := func(st *stream) func(time.Time) {
		var fn func(time.Time)
		fn = func(now time.Time) {
			at := s.Elapsed()
			// Draw the latency first, always the same number of draws, so
			// every policy sees the same requests.
			var lat float64
			switch st.dest {
			case DestStall:
				lat = stall.SampleMillis(st.rng)
			case DestStep:
				if at >= cfg.StepAt {
					lat = stepAfter.SampleMillis(st.rng)
				} else {
					lat = stepBefore.SampleMillis(st.rng)
				}
			case DestRare:
				lat = rare.SampleMillis(st.rng)
			case DestDead:
				lat = dead.SampleMillis(st.rng)
				if at >= cfg.DeadAt {
					lat = math.Inf(1)
				}
			}
			next := time.Duration(st.rng.ExpFloat64() / st.rate * float64(time.Second))
			s.At(at+next, fn)

			to := choose(st, now)
			toMs := float64(to.Milliseconds())
			done := lat > toMs
			wait := time.Duration(lat * float64(time.Millisecond))
			rec := uint64(lat)
			if done {
				wait, rec = to, uint64(to.Milliseconds())
			}
			if p.Kind != PolicyFixed {
				tr := s.Tracker(st.node)
				s.At(at+wait, func(t time.Time) { tr.RecordMillis(st.dest, rec, t) })
			}
			if st.dest == DestStep && at >= cfg.StepAt {
				below[st.node] = toMs < newTruth
				if below[st.node] {
					lastBelow[st.node] = at - cfg.StepAt
				}
			}
			if at < cfg.Warmup {
				return
			}
			res.Requests++
			if math.IsInf(lat, 1) {
				deadWait += wait
				deadN++
				return
			}
			c := counter{total: 1}
			if done {
				c.timedOut = 1
			}
			add := func(dst *counter) { dst.total += c.total; dst.timedOut += c.timedOut }
			add(&all)
			switch st.dest {
			case DestStall:
				add(&cStall)
				sumTimeoutStall += to
				nStall++
			case DestRare:
				if st.node >= cfg.Nodes/2 {
					add(&cRare)
				}
			case DestStep:
				if at >= cfg.StepAt && at < cfg.StepAt+cfg.Settle {
					add(&cStep)
				}
			}
		}
		return fn
	}
	for i := range cfg.Nodes {
		rareRate := cfg.Rate
		if i >= cfg.Nodes/2 {
			rareRate = cfg.Rate / 100
		}
		for k, d := range []struct {
			name string
			rate float64
		}{{DestStall, cfg.Rate}, {DestStep, cfg.Rate}, {DestRare, rareRate}, {DestDead, cfg.Rate / 10}} {
			st := &stream{node: i, dest: d.name, dests: []string{d.name}, rate: d.rate,
				rng: newRand(cfg.Seed, uint64(i)<<8|uint64(k)|1<<62)}
			first := time.Duration(st.rng.ExpFloat64() / st.rate * float64(time.Second))
			s.At(first, arrive(st))
		}
	}
	if err := s.Run(cfg.Duration); err != nil {
		return res, err
	}
	res.Spurious, res.SpuriousStall, res.SpuriousRare, res.SpuriousStep = all.rate(), cStall.rate(), cRare.rate(), cStep.rate()
	if nStall > 0 {
		res.MeanTimeoutStall = sumTimeoutStall / time.Duration(nStall)
	}
	var fs []time.Duration
	for i, f := range lastBelow {
		if below[i] {
			res.FollowNever++
		} else {
			fs = append(fs, f)
		}
	}
	slices.Sort(fs)
	if len(fs) > 0 {
		res.FollowP50, res.FollowMax = pctDur(fs, 0.5), fs[len(fs)-1]
	}
	if deadN > 0 {
		res.DeadWaitMean = deadWait / time.Duration(deadN)
		res.DeadWaitPerNode = deadWait / time.Duration(cfg.Nodes)
	}
	return res, nil
}

// DecisionTable formats results as a markdown table.
func DecisionTable(rs []DecisionResult) string {
	var b strings.Builder
	b.WriteString("| policy | spurious timeouts, all | stall dest | rare callers | step dest, 30 s after step | mean timeout, stall dest | step followed after (p50 / max) | wait per request to dead peer | request-time wasted on dead peer, per node |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		follow := fmt.Sprintf("%v / %v", r.FollowP50.Round(10*time.Millisecond), r.FollowMax.Round(10*time.Millisecond))
		switch {
		case r.FollowNever > 0 && r.FollowP50 == 0 && r.FollowMax == 0:
			follow = "never"
		case r.FollowNever > 0:
			follow += fmt.Sprintf(" (%d nodes never)", r.FollowNever)
		}
		fmt.Fprintf(&b, "| %s | %.4f %% | %.4f %% | %.3f %% | %.3f %% | %v | %s | %v | %v |\n",
			r.Policy, 100*r.Spurious, 100*r.SpuriousStall, 100*r.SpuriousRare, 100*r.SpuriousStep,
			r.MeanTimeoutStall.Round(time.Millisecond), follow,
			r.DeadWaitMean.Round(time.Millisecond), r.DeadWaitPerNode.Round(100*time.Millisecond))
	}
	return b.String()
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
