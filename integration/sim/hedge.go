package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// HedgeKind is how a HedgePolicy hedges.
type HedgeKind uint8

const (
	// HedgeNone sends one attempt at a time: the next replica only when an
	// attempt ends by our timeout (failover).
	HedgeNone HedgeKind = iota
	// HedgeFixed hedges after a fixed delay, without a budget.
	HedgeFixed
	// HedgeClient hedges after a quantile (HedgePolicy.Quantile, default
	// 0.9) of the calling node's own latencies, within a token bucket of
	// its own (HedgePolicy.Budget, default 0.1, of HedgePolicy.RPS
	// requests a second), at most once a round trip (a request, or a
	// failover: the caller's retry there), a round trip ending at its
	// first result: at the defaults, bhope/hedge's rule as that library
	// runs it (see hedge_client.go).
	HedgeClient
	// HedgeFleet is DoHedged's rule run through the same pure parts:
	// replicas in the order of the fleet median, censoring-aware
	// (tracker.Fleet.Median, timeout.OrderReplicas),
	// the delay strictly above the fleet's bucket at 1 − budget
	// (timeout.HedgeDelay), and the node's token bucket
	// (timeout.HedgeBudget).
	HedgeFleet
)

// HedgeOrder is the order in which a HedgePolicy tries replicas.
type HedgeOrder uint8

const (
	// OrderFleet is DoHedged's: by the fleet median, censoring-aware
	// (tracker.Fleet.Median and timeout.OrderReplicas on the node's fleet
	// view).
	OrderFleet HedgeOrder = iota
	// OrderOwn is the same rule on the node's own calls only (its local
	// view, tracker.LocalMedian), as a client-side least-latency balancer
	// would order them.
	OrderOwn
	// OrderRandom is a random order per request.
	OrderRandom
)

// HedgePolicy is one way of hedging, compared by RunHedge.
type HedgePolicy struct {
	Name  string
	Kind  HedgeKind
	Delay time.Duration // HedgeFixed only
	Order HedgeOrder
	// Quantile and Budget of HedgeClient; defaults 0.9 and 0.1. Budget is
	// also HedgeFleet's HedgeBudget (the delay at quantile 1 − Budget and
	// the node's bucket), default HedgeConfig.HedgeBudget.
	Quantile, Budget float64
	// RPS is HedgeClient's estimated request rate (bhope/hedge's
	// WithEstimatedRPS), which sets its bucket's refill and burst: 0 is the
	// library's default, 100 a second.
	RPS float64
	// OwnRate sets HedgeClient's RPS to the calling node's true request
	// rate, so that its budget is Budget of its own calls.
	OwnRate bool
	// LaterReserve, for HedgeFleet, sends a round's second and later hedges
	// only while the node's bucket keeps LaterReserve tokens after the one
	// they spend, leaving those to other calls' first hedges. It is an
	// experiment (TestHedgeLaterReserve), not DoHedged's rule: 0, as
	// DoHedged, spends every token alike.
	LaterReserve float64
	// PlainDelay, for HedgeFleet, takes the hedge delay from the plain
	// quantile at 1 − budget (which counts censored samples, hedges'
	// losers among them, as latencies) instead of the quantile under
	// censoring: the rule before the censoring-aware one, kept to measure
	// the two side by side. DoHedged does not do it.
	PlainDelay bool
}

// DefaultHedgePolicies returns no hedging, fixed delays of 10 to 80 ms
// (the sweep for the best), per-client hedging (bhope/hedge's P90 at its
// defaults, with the client's own replica order and with the fleet's;
// P90 with the budget set to 10 % of the client's own rate; P95 with a 5 %
// budget, our quantile and budget in its terms) and ours (the fleet rule
// with the fleet's order, as DoHedged), at HedgeConfig.HedgeBudget and at
// bhope/hedge's budget, 0.10 (so its delay is the fleet's P90 bucket: the
// per-client P90 rule with the fleet's quantile in place of the
// client's). Every policy but the per-client one with its own order tries
// replicas in the fleet's order, so that the rows differ by the hedge rule
// alone.
func DefaultHedgePolicies() []HedgePolicy {
	return hedgePolicies(10, 15, 20, 25, 30, 40, 60, 80)
}

func hedgePolicies(fixedMs ...int) []HedgePolicy {
	ps := []HedgePolicy{{Name: "no hedging", Kind: HedgeNone}}
	for _, ms := range fixedMs {
		ps = append(ps, HedgePolicy{Name: fmt.Sprintf("fixed %d ms", ms), Kind: HedgeFixed, Delay: time.Duration(ms) * time.Millisecond})
	}
	return append(ps,
		HedgePolicy{Name: PolicyClientOwnOrder, Kind: HedgeClient, Order: OrderOwn},
		HedgePolicy{Name: PolicyClient, Kind: HedgeClient},
		HedgePolicy{Name: PolicyClientOwnRate, Kind: HedgeClient, OwnRate: true},
		HedgePolicy{Name: PolicyClientSameBudget, Kind: HedgeClient, Quantile: 0.95, Budget: 0.05},
		HedgePolicy{Name: PolicyOurs, Kind: HedgeFleet},
		HedgePolicy{Name: PolicyOursClientBudget, Kind: HedgeFleet, Budget: 0.10},
	)
}

// The names of DefaultHedgePolicies' per-client rows and of ours.
const (
	PolicyClientOwnOrder   = "per-client P90 (bhope/hedge defaults), own order"
	PolicyClient           = "per-client P90 (bhope/hedge defaults)"
	PolicyClientOwnRate    = "per-client P90, 10 % of own rate"
	PolicyClientSameBudget = "per-client P95, 5 % budget"
	PolicyOurs             = "ours (DoHedged)"
	PolicyOursClientBudget = "ours, HedgeBudget 0.10 (bhope's budget)"
)

// RareHedgePolicies returns the rows of the rare callers' sweep
// (TestHedgeRareCallers): no hedging; fixed 15 ms (the fixed delay nearest
// ours at 0.10 in load); the per-client rule at bhope/hedge's defaults, at
// 10 % and 5 % of the client's own rate, and at a 5 % budget at P90 and at
// P95 (the library's estimated rate: the budget ours is set to, in its
// terms); and ours at HedgeBudget 0.05 (the default), 0.10, 0.15, 0.20,
// 0.30 and 0.40, so that every per-client row has a row of ours at no more
// extra load, near its own, to be compared with (RareAtNoMoreLoad).
func RareHedgePolicies() []HedgePolicy {
	ps := hedgePoliciesNamed(DefaultHedgePolicies(), "no hedging", "fixed 15 ms", PolicyClient, PolicyClientOwnRate)
	ps = append(ps,
		HedgePolicy{Name: PolicyClientOwnRate5, Kind: HedgeClient, Budget: 0.05, OwnRate: true},
		HedgePolicy{Name: PolicyClientBudget5, Kind: HedgeClient, Budget: 0.05},
		HedgePolicy{Name: PolicyClientSameBudget, Kind: HedgeClient, Quantile: 0.95, Budget: 0.05},
		HedgePolicy{Name: PolicyOurs, Kind: HedgeFleet},
		HedgePolicy{Name: PolicyOursClientBudget, Kind: HedgeFleet, Budget: 0.10},
	)
	for _, b := range []float64{0.125, 0.15, 0.20, 0.25, 0.30, 0.40} {
		ps = append(ps, HedgePolicy{Name: PolicyOursAt(b), Kind: HedgeFleet, Budget: b})
	}
	return ps
}

// PolicyOursAt is the name of ours at HedgeBudget b in RareHedgePolicies
// (b other than 0.05 and 0.10, which have their own names).
func PolicyOursAt(b float64) string { return "ours, HedgeBudget " + budgetText(b) }

// budgetText writes a budget with two decimals, or more when it has them
// (0.10, 0.125).
func budgetText(b float64) string {
	full, two := strconv.FormatFloat(b, 'f', -1, 64), strconv.FormatFloat(b, 'f', 2, 64)
	if strings.HasPrefix(two, full) {
		return two // at most two decimals: 0.1 as 0.10
	}
	return full
}

// The names of RareHedgePolicies' per-client rows not in
// DefaultHedgePolicies.
const (
	PolicyClientOwnRate5 = "per-client P90, 5 % of own rate"
	PolicyClientBudget5  = "per-client P90, 5 % budget"
)

// hedgePoliciesNamed returns the policies of ps with the given names, in
// that order.
func hedgePoliciesNamed(ps []HedgePolicy, names ...string) []HedgePolicy {
	var out []HedgePolicy
	for _, n := range names {
		for _, p := range ps {
			if p.Name == n {
				out = append(out, p)
			}
		}
	}
	return out
}

// HedgeConfig configures RunHedge.
type HedgeConfig struct {
	// Seed makes the run. Every policy sees the same requests with the same
	// latencies per replica (common random numbers).
	Seed uint64
	// Nodes is the number of calling nodes, >= 2: the first Nodes − Rare
	// call often (Rate per second), the others rarely (RareRate). Default
	// 20.
	Nodes int
	// Rare is the number of rarely calling nodes, 1..Nodes−1. Default
	// Nodes/2.
	Rare int
	// Seeds is the number of runs per policy, with seeds Seed, Seed+1, …,
	// whose requests are pooled into one result. Default 1.
	Seeds int
	// Replicas is the number of replicas each request may use. Default 3.
	Replicas int
	// Duration is the simulated time per policy; Warmup the time before
	// metrics count. Defaults 180s and 60s.
	Duration, Warmup time.Duration
	// DegradeAt is when replica 0 becomes Degrade times slower (its normal
	// and stalled latencies alike). Defaults 120s and 2.
	DegradeAt time.Duration
	Degrade   float64
	// Rate is a frequent caller's request rate per second, RareRate a rare
	// caller's. Defaults 50 and Rate/100.
	Rate, RareRate float64
	// MedianMillis and Sigma shape a replica's normal latency (lognormal);
	// StallProb is the share of attempts that stall, taking 50–100× the
	// median. Defaults 10 ms, 0.3, 0.02.
	MedianMillis, Sigma, StallProb float64
	// HedgeBudget is HedgeFleet's budget (node.Config.HedgeBudget).
	// Default 0.05.
	HedgeBudget float64
	// ClientWarm starts every HedgeClient sketch past bhope/hedge's
	// warm-up requests, as in a client that has run for long: its first
	// request already reads its sketch (an empty one still gives the
	// warm-up delay).
	ClientWarm bool
	// Policies to compare. Default DefaultHedgePolicies().
	Policies []HedgePolicy
	// RunSettings are every attempt's timeout rule (the Decider on each
	// node's fleet view, as node.DoHedged), every node's tracker and the
	// progress lines.
	RunSettings
}

func (c *HedgeConfig) defaults() {
	orDefault(&c.Nodes, 20)
	orDefault(&c.Rare, c.Nodes/2)
	orDefault(&c.Seeds, 1)
	orDefault(&c.Replicas, 3)
	orDefault(&c.Duration, 180*time.Second)
	orDefault(&c.Warmup, 60*time.Second)
	orDefault(&c.DegradeAt, 120*time.Second)
	orDefault(&c.Degrade, 2)
	orDefault(&c.Rate, 50)
	orDefault(&c.RareRate, c.Rate/100)
	orDefault(&c.MedianMillis, 10)
	orDefault(&c.Sigma, 0.3)
	orDefault(&c.StallProb, 0.02)
	orDefault(&c.HedgeBudget, timeout.DefaultHedgeBudget)
	c.RunSettings.defaults()
	if c.Policies == nil {
		c.Policies = DefaultHedgePolicies()
	}
}

// HedgeCallers is one class of callers' measurements: time to a
// successful answer (from the request to the first completed attempt, an
// attempt ended by our timeout retried as the next attempt number), extra
// attempts per request, and attempts ended by our timeout per request.
type HedgeCallers struct {
	Requests       uint64
	P50, P99, P999 time.Duration
	// P50CI, P99CI and P999CI are distribution-free 95 % confidence
	// intervals of P50, P99 and P999 (the order statistics at
	// n·q ± 1.96·√(n·q·(1−q))).
	P50CI, P99CI, P999CI [2]time.Duration
	Extra                float64
	TimedOut             float64
	// ExtraCI and TimedOutCI are 95 % confidence intervals of Extra and
	// TimedOut, the means per request ± 1.96 standard errors. Like the
	// quantiles' they take requests as independent.
	ExtraCI, TimedOutCI [2]float64
	// Sketch is, for a per-client policy (HedgeClient), how many values the
	// client's sketch held at its round trips: the 10th, 50th and 90th
	// percentiles; SketchEmpty the share of round trips that found it
	// empty (and so hedged after the warm-up delay).
	Sketch      [3]int
	SketchEmpty float64
	// Hedges and Refused count this class's hedges sent and refused by a
	// budget; LaterHedges and LaterRefused those of them that were a
	// request round's second hedge or later.
	Hedges, Refused, LaterHedges, LaterRefused uint64
}

// HedgeResult is one policy's measurements after the warm-up.
type HedgeResult struct {
	Policy string
	Kind   HedgeKind
	// Budget is HedgeFleet's hedge budget (0 for the other kinds).
	Budget           float64
	Frequent, Rare   HedgeCallers
	Hedges, Refused  uint64 // hedges sent, and refused by a budget
	FailedRequests   uint64 // requests that gave up after maxHedgeRounds rounds
	MedianMillis     float64
	DegradedReplica  string
	DegradeAtSeconds float64
}

// maxHedgeRounds bounds a request's retries (each round tries every
// replica once at most).
const maxHedgeRounds = 8

// hedgeStall is a stalled attempt's latency factor range.
const hedgeStallMin, hedgeStallMax = 50, 100

// RunHedge runs the hedging scenario once per policy, on a simulated
// cluster with the dissemination protocol running, and returns one result
// per policy. Policies run side by side, up to GOMAXPROCS at once; the
// results do not depend on how many.
//
// Each request picks its replicas' order, then runs attempts as
// node.DoHedged does: each attempt's timeout from the node's timeout.Decider
// on its fleet view; a hedge to the next replica when the policy's delay
// passes without an answer (and the budget allows); the next replica at
// once when an attempt ends by our timeout and no other attempt is
// running; the first answer wins, the others are superseded. A round in
// which every replica's attempt timed out is retried with the next attempt
// number. What the attempts teach is observed by the Decider at the time
// each ends, so the fleet learns from superseded and timed-out attempts
// as a node would. Two simplifications: a request's decisions are taken
// at its arrival (an attempt started later is decided with the estimates
// of then, at most a few timeouts older), and a caller probe is reserved
// when the attempt starts rather than when it reaches its timeout.
func RunHedge(cfg HedgeConfig) ([]HedgeResult, error) {
	cfg.defaults()
	if cfg.Nodes < 2 {
		return nil, errors.New("sim: HedgeConfig.Nodes must be >= 2")
	}
	if cfg.Rare < 1 || cfg.Rare >= cfg.Nodes {
		return nil, errors.New("sim: HedgeConfig.Rare must be in 1..Nodes-1")
	}
	if cfg.Replicas < 1 {
		return nil, errors.New("sim: HedgeConfig.Replicas must be >= 1")
	}
	if err := cfg.Timeout.Validate(); err != nil {
		return nil, err
	}
	out := make([]HedgeResult, len(cfg.Policies))
	errs := make([]error, len(cfg.Policies))
	// Policies are independent runs (each its own simulated cluster from
	// the same seeds), so they run side by side, up to GOMAXPROCS at once;
	// each result is the same as if they ran one after another.
	next := make(chan int, len(cfg.Policies))
	for k := range cfg.Policies {
		next <- k
	}
	close(next)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(cfg.Policies)) {
		wg.Go(func() {
			for k := range next {
				out[k], errs[k] = runHedgePolicySeeds(cfg, cfg.Policies[k])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// runHedgePolicySeeds runs policy p once per seed of cfg and pools the
// seeds' requests into one result.
func runHedgePolicySeeds(cfg HedgeConfig, p HedgePolicy) (HedgeResult, error) {
	res := HedgeResult{Policy: p.Name, Kind: p.Kind, MedianMillis: cfg.MedianMillis,
		DegradedReplica: "replica-0", DegradeAtSeconds: cfg.DegradeAt.Seconds()}
	if p.Kind == HedgeFleet {
		res.Budget = cmp.Or(p.Budget, cfg.HedgeBudget)
	}
	var frequent, rare hedgeClass
	for k := range cfg.Seeds {
		c := cfg
		c.Seed = cfg.Seed + uint64(k)
		if err := runHedgePolicy(c, p, &res, &frequent, &rare); err != nil {
			return HedgeResult{}, fmt.Errorf("sim: policy %s: %w", p.Name, err)
		}
	}
	res.Frequent, res.Rare = frequent.result(), rare.result()
	return res, nil
}

// hedgeNode is one calling node's state for a policy.
type hedgeNode struct {
	dec    *timeout.Decider
	budget *timeout.HedgeBudget
	own    *clientSketch // HedgeClient: the node's own latencies
	bucket *clientBucket // HedgeClient: the node's own token bucket
}

// hedgeRequest is what one request did: its time to a successful answer,
// its attempts, those ended by our timeout, its hedges sent and refused by
// a budget, and whether it got an answer.
type hedgeRequest struct {
	wait                                time.Duration
	attempts, timedOut, hedges, refused int
	laterHedges, laterRefused           int // of hedges and refused: a round's second or later
	ok                                  bool
	// HedgeClient: the values in the client's sketch at each of the
	// request's first round trips.
	sketch [4]int
	trips  int
}

// hedgeAttempt is one attempt of a request round.
type hedgeAttempt struct {
	replica    int
	a          timeout.Attempt
	start, lat time.Duration // lat: its latency if it were let run
	limit      time.Duration // when our timeout ends it, after start
	stop       time.Duration // when it was cancelled (canceled only)
	hedge      bool
	running    bool
	canceled   bool // HedgeClient: cancelled when its round trip failed
}

func (h *hedgeAttempt) end() time.Duration {
	if h.canceled {
		return h.stop
	}
	return h.start + min(h.lat, h.limit)
}
func (h *hedgeAttempt) answers() bool { return h.lat <= h.limit }

type hedgeClass struct {
	waits                                   []time.Duration
	extra, timedOut, count, hedges, refused uint64
	laterHedges, laterRefused               uint64
	extra2, timedOut2                       uint64 // sums of squares per request
	sketch                                  []int  // HedgeClient: values in the sketch per round trip
}

func (c *hedgeClass) result() HedgeCallers {
	r := HedgeCallers{Requests: c.count, Hedges: c.hedges, Refused: c.refused,
		LaterHedges: c.laterHedges, LaterRefused: c.laterRefused}
	if c.count == 0 {
		return r
	}
	slices.Sort(c.waits)
	r.P50, r.P99, r.P999 = pctDur(c.waits, 0.5), pctDur(c.waits, 0.99), pctDur(c.waits, 0.999)
	r.P50CI, r.P99CI, r.P999CI = quantileCI(c.waits, 0.5), quantileCI(c.waits, 0.99), quantileCI(c.waits, 0.999)
	r.Extra, r.ExtraCI = meanCI(c.extra, c.extra2, c.count)
	r.TimedOut, r.TimedOutCI = meanCI(c.timedOut, c.timedOut2, c.count)
	if len(c.sketch) > 0 {
		slices.Sort(c.sketch)
		at := func(q float64) int { return c.sketch[min(int(q*float64(len(c.sketch))), len(c.sketch)-1)] }
		r.Sketch = [3]int{at(0.1), at(0.5), at(0.9)}
		empty, _ := slices.BinarySearch(c.sketch, 1)
		r.SketchEmpty = float64(empty) / float64(len(c.sketch))
	}
	return r
}

// meanCI returns the mean of n values whose sum is sum and sum of squares
// sum2, and its 95 % confidence interval (± 1.96 standard errors).
func meanCI(sum, sum2, n uint64) (float64, [2]float64) {
	m := float64(sum) / float64(n)
	v := max(float64(sum2)/float64(n)-m*m, 0)
	h := 1.96 * math.Sqrt(v/float64(n))
	return m, [2]float64{max(m-h, 0), m + h}
}

// quantileCI returns a distribution-free 95 % confidence interval of the
// q-quantile of sorted xs: the order statistics at ranks n·q ∓ 1.96·√(n·q·(1−q)),
// clamped to the sample.
func quantileCI(xs []time.Duration, q float64) [2]time.Duration {
	n := float64(len(xs))
	if n == 0 {
		return [2]time.Duration{}
	}
	h := 1.96 * math.Sqrt(n*q*(1-q))
	at := func(rank float64) time.Duration {
		return xs[int(min(max(math.Ceil(rank), 1), n))-1]
	}
	return [2]time.Duration{at(n*q - h), at(n*q + h)}
}

func runHedgePolicy(cfg HedgeConfig, p HedgePolicy, res *HedgeResult, frequent, rare *hedgeClass) error {
	sc := DefaultConfig(cfg.Nodes)
	sc.Seed, sc.Observers, sc.Tracker, sc.Progress = cfg.Seed, cfg.Nodes, cfg.Tracker, cfg.Progress
	s, err := New(sc)
	if err != nil {
		return err
	}
	isRare := func(i int) bool { return i >= cfg.Nodes-cfg.Rare }
	rateOf := func(i int) float64 {
		if isRare(i) {
			return cfg.RareRate
		}
		return cfg.Rate
	}
	replicas := make([]string, cfg.Replicas)
	for i := range replicas {
		replicas[i] = fmt.Sprintf("replica-%d", i)
	}
	fleetBudget := cfg.HedgeBudget
	if p.Kind == HedgeFleet && p.Budget != 0 {
		fleetBudget = p.Budget
	}
	nodes := make([]hedgeNode, cfg.Nodes)
	for i := range nodes {
		if nodes[i].dec, err = timeout.NewDecider(cfg.Timeout, cfg.Tracker, s.Fleet(i), s.Tracker(i)); err != nil {
			return err
		}
		switch p.Kind {
		case HedgeFleet:
			nodes[i].budget = timeout.NewHedgeBudget(fleetBudget)
		case HedgeClient:
			rps := cmp.Or(p.RPS, clientDefaultRPS)
			if p.OwnRate {
				rps = rateOf(i)
			}
			nodes[i].own, nodes[i].bucket = newClientSketch(), newClientBucket(cmp.Or(p.Budget, clientDefaultBudget), rps)
			if cfg.ClientWarm {
				nodes[i].own.n = clientWarmupRequests
			}
		}
	}
	hedgeQ := timeout.HedgeQuantile(fleetBudget)
	rs := make([]timeout.Replica, cfg.Replicas)
	order := make([]int, cfg.Replicas)
	var tries []hedgeAttempt

	// latency draws replica r's latency for an attempt at elapsed time at.
	latency := func(rng *rand.Rand, r int, at time.Duration) time.Duration {
		ms := cfg.MedianMillis * math.Exp(cfg.Sigma*rng.NormFloat64())
		if u := rng.Float64(); u < cfg.StallProb {
			ms = cfg.MedianMillis * (hedgeStallMin + (hedgeStallMax-hedgeStallMin)*u/cfg.StallProb)
		}
		if r == 0 && at >= cfg.DegradeAt {
			ms *= cfg.Degrade
		}
		return time.Duration(ms * float64(time.Millisecond))
	}
	// clientDelay is HedgeClient's delay for the round trip being run, taken
	// at its start.
	var clientDelay time.Duration
	// delay returns the hedge delay of an attempt to replica r by node i.
	delay := func(i, r int, now time.Time) (time.Duration, bool) {
		nd := &nodes[i]
		switch p.Kind {
		case HedgeFixed:
			return p.Delay, true
		case HedgeClient:
			return clientDelay, true
		case HedgeFleet:
			e, err := s.Fleet(i).Estimate(replicas[r], hedgeQ, now)
			if err != nil {
				return 0, false
			}
			if e.Failing = e.Failing || nd.dec.Failing(replicas[r]); !e.Trusted() || e.Failing {
				return 0, false
			}
			sv := s.Fleet(i).Survival(replicas[r], timeout.HedgeView(&e), hedgeQ, now)
			if p.PlainDelay {
				sv = tracker.Survival{Millis: plainHedgeMillis(&e), Samples: 1}
			}
			return timeout.HedgeDelay(&e, sv)
		}
		return 0, false
	}

	// request runs one request of node i arriving at elapsed time at, with
	// its own random stream, and returns what it did: its time to a
	// successful answer, attempts, attempts ended by our timeout, hedges.
	request := func(i int, at time.Duration, now time.Time, rng *rand.Rand) (rq hedgeRequest) {
		nd := &nodes[i]
		// The order: a random permutation, always drawn (the same draws for
		// every policy), or the fleet's or the node's own.
		for k := range order {
			order[k] = k
		}
		rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		if p.Order != OrderRandom {
			for k := range order {
				order[k] = k
			}
			for r := range rs {
				var e tracker.Estimate
				var err error
				var m tracker.Survival
				if p.Order == OrderFleet {
					e, err = s.Fleet(i).Estimate(replicas[r], timeout.MedianQuantile, now)
					m = s.Fleet(i).Median(replicas[r], timeout.HedgeView(&e), now)
				} else {
					e, err = tracker.LocalEstimate(s.Tracker(i), replicas[r], timeout.MedianQuantile, now)
					m = tracker.LocalMedian(s.Tracker(i), replicas[r], now)
				}
				if err != nil {
					e, m = tracker.Estimate{}, tracker.Survival{}
				}
				e.Failing = e.Failing || nd.dec.Failing(replicas[r])
				rs[r] = timeout.Replica{Estimate: e, Median: m}
			}
			timeout.OrderReplicas(rs, order)
		}
		if nd.budget != nil {
			nd.budget.Deposit()
		}
		t0 := time.Duration(0) // the round's start, after at
		for round := 1; round <= maxHedgeRounds; round++ {
			tries = tries[:0]
			// Every replica's latency for this round, drawn up front.
			var lats [16]time.Duration
			for r := range min(cfg.Replicas, len(lats)) {
				lats[r] = latency(rng, r, at+t0)
			}
			// HedgeClient's round trip (one RoundTrip of bhope/hedge's
			// transport): its first attempt and start. A round trip is the
			// first attempt of a round or a failover, which is the caller's
			// retry there.
			var rtStart time.Duration
			hedged := false
			roundHedges := 0 // hedges this round (one DoHedged call) sent
			launch := func(start time.Duration, hedge bool) {
				r := order[len(tries)]
				if !hedge && nd.own != nil {
					// A new round trip counts toward the warm-up and reads
					// the sketch; it may send one hedge.
					if rq.trips < len(rq.sketch) {
						rq.sketch[rq.trips] = nd.own.count(at)
						rq.trips++
					}
					clientDelay = nd.own.delay(cmp.Or(p.Quantile, 0.9), at)
					rtStart, hedged = start, false
				}
				a := nd.dec.Decide(replicas[r], round, now)
				h := hedgeAttempt{replica: r, a: a, start: start, lat: lats[r], limit: a.Timeout, hedge: hedge, running: true}
				if h.lat > a.Timeout && a.ProbeTimeout > a.Timeout && nd.dec.Probe(&h.a, now) {
					h.limit = a.ProbeTimeout // a caller probe: it may still answer
				}
				tries = append(tries, h)
			}
			hedgeAt := time.Duration(-1)
			arm := func() { // the hedge timer of the latest attempt
				hedgeAt = -1
				if p.Kind == HedgeClient && hedged {
					return // at most one hedge a round trip
				}
				if last := len(tries) - 1; len(tries) < len(order) {
					if d, ok := delay(i, tries[last].replica, now); ok {
						hedgeAt = tries[last].start + d
					}
				}
			}
			launch(t0, false)
			arm()
			winner := -1
			var tWin time.Duration
			for winner < 0 {
				next, which := time.Duration(math.MaxInt64), -1
				for k := range tries {
					if h := &tries[k]; h.running && h.end() < next {
						next, which = h.end(), k
					}
				}
				if hedgeAt >= 0 && hedgeAt < next && len(tries) < len(order) {
					hat := hedgeAt
					hedgeAt = -1
					allowed := true
					switch {
					case nd.budget != nil:
						// The policy runs one request at a time: nothing
						// spends between the look and the spend.
						allowed = (roundHedges == 0 || p.LaterReserve <= 0 || nd.budget.Tokens() >= 1+p.LaterReserve) && nd.budget.Spend()
					case nd.bucket != nil:
						allowed = nd.bucket.spend(at + hat)
					}
					if allowed {
						res.Hedges++
						rq.hedges++
						if roundHedges > 0 {
							rq.laterHedges++
						}
						roundHedges++
						hedged = true
						launch(hat, true)
						arm()
					} else {
						res.Refused++
						rq.refused++
						if roundHedges > 0 {
							rq.laterRefused++
						}
					}
					continue
				}
				if which < 0 {
					break // every attempt ended by our timeout, no replica left
				}
				h := &tries[which]
				h.running = false
				if h.answers() {
					winner, tWin = which, next
					break
				}
				if nd.own != nil {
					// bhope/hedge returns its round trip's first result,
					// an error too: it cancels the other attempt, learns
					// the error's elapsed time, and the caller retries
					// with the next replica.
					for k := range tries {
						if o := &tries[k]; o.running {
							o.running, o.canceled, o.stop = false, true, next
						}
					}
					own, d, when := nd.own, next-rtStart, at+next
					s.At(when, func(time.Time) { own.add(d, when) })
					hedgeAt = -1
					if len(tries) < len(order) {
						launch(next, false)
						arm()
					}
					continue
				}
				// Ended by our timeout: fail over when no other attempt runs.
				running := false
				for k := range tries {
					running = running || tries[k].running
				}
				if !running && len(tries) < len(order) {
					launch(next, false)
					arm()
				}
			}
			// Learn: every attempt is observed at its end.
			for k := range tries {
				h := &tries[k]
				var o timeout.Outcome
				var end time.Duration
				switch {
				case k == winner:
					o, end = timeout.Completed, tWin
				case h.canceled:
					o, end = timeout.Superseded, h.stop
				case !h.running:
					o, end = timeout.TimedOut, h.end()
					rq.timedOut++
				default:
					o, end = timeout.Superseded, tWin
				}
				dec, a, el := nd.dec, h.a, end-h.start
				s.At(at+end, func(t time.Time) { dec.Observe(a, o, el, t) })
				if o == timeout.Completed && nd.own != nil {
					// bhope/hedge learns the winner's latency from its
					// round trip's start.
					own, d, when := nd.own, end-rtStart, at+end
					s.At(when, func(time.Time) { own.add(d, when) })
				}
			}
			rq.attempts += len(tries)
			if winner >= 0 {
				rq.wait, rq.ok = tWin, true
				return rq
			}
			for k := range tries {
				t0 = max(t0, tries[k].end())
			}
		}
		rq.wait = t0
		return rq
	}

	seqs := make([]uint64, cfg.Nodes)
	arrive := func(i int, rate float64, rng *rand.Rand) func(time.Time) {
		var fn func(time.Time)
		fn = func(now time.Time) {
			at := s.Elapsed()
			s.At(at+time.Duration(rng.ExpFloat64()/rate*float64(time.Second)), fn)
			seqs[i]++
			rr := newRand(cfg.Seed, uint64(i)<<40|seqs[i])
			rq := request(i, at, now, rr)
			if at < cfg.Warmup {
				return
			}
			c := frequent
			if isRare(i) {
				c = rare
			}
			c.count++
			c.waits = append(c.waits, rq.wait)
			c.extra += uint64(rq.attempts - 1)
			c.timedOut += uint64(rq.timedOut)
			c.extra2 += uint64((rq.attempts - 1) * (rq.attempts - 1))
			c.timedOut2 += uint64(rq.timedOut * rq.timedOut)
			c.sketch = append(c.sketch, rq.sketch[:rq.trips]...)
			c.hedges += uint64(rq.hedges)
			c.refused += uint64(rq.refused)
			c.laterHedges += uint64(rq.laterHedges)
			c.laterRefused += uint64(rq.laterRefused)
			if !rq.ok {
				res.FailedRequests++
			}
		}
		return fn
	}
	for i := range cfg.Nodes {
		rate := rateOf(i)
		rng := newRand(cfg.Seed, uint64(i)|1<<61)
		s.At(time.Duration(rng.ExpFloat64()/rate*float64(time.Second)), arrive(i, rate, rng))
	}
	return s.Run(cfg.Duration)
}

// plainHedgeMillis is HedgePolicy.PlainDelay's quantile: the plain
// quantile of timeout.HedgeView's view of e.
func plainHedgeMillis(e *tracker.Estimate) uint64 {
	if timeout.HedgeView(e) == tracker.SourceFleet {
		return e.ValueMillis
	}
	return e.DecisionQuantileMillis()
}

// HedgeTable formats results as a markdown table: for frequent and rare
// callers, the time to a successful answer (p50, p99, p99.9), extra
// attempts per request, and attempts ended by our timeout per request.
func HedgeTable(rs []HedgeResult) string {
	var b strings.Builder
	b.WriteString("| policy | frequent: p50 | p99 | p99.9 | extra requests | ended by our timeout | rare: p50 | p99 | p99.9 | extra requests | ended by our timeout |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s", r.Policy)
		for _, c := range []HedgeCallers{r.Frequent, r.Rare} {
			fmt.Fprintf(&b, " | %s | %s | %s | %.2f %% | %.3f %%", ms(c.P50), ms(c.P99), ms(c.P999), 100*c.Extra, 100*c.TimedOut)
		}
		b.WriteString(" |\n")
	}
	return b.String()
}

// BestFixed returns the fixed-delay result with the lowest frequent-caller
// p99 among those whose frequent callers' extra requests are at most
// maxExtra, and false when there is none.
func BestFixed(rs []HedgeResult, maxExtra float64) (HedgeResult, bool) {
	var best HedgeResult
	found := false
	for _, r := range rs {
		if r.Kind == HedgeFixed && r.Frequent.Extra <= maxExtra && (!found || r.Frequent.P99 < best.Frequent.P99) {
			best, found = r, true
		}
	}
	return best, found
}

// StrictlyBetter reports whether callers a fare strictly better than b,
// the meaning docs/design.md's hedging target gives it: at no more extra
// load (a.Extra <= b.Extra), with p99 and p99.9 each at most b's, and one
// of them lower beyond doubt (a's 95 % confidence interval wholly below
// b's).
func StrictlyBetter(a, b HedgeCallers) bool {
	if a.Extra > b.Extra || a.P99 > b.P99 || a.P999 > b.P999 {
		return false
	}
	return a.P99CI[1] < b.P99CI[0] || a.P999CI[1] < b.P999CI[0]
}

// RareAtNoMoreLoad returns ours at no more extra load than rare callers
// spending maxExtra: of the HedgeFleet results, the one whose rare callers
// spend the most extra requests without exceeding maxExtra (the budget
// nearest that load from below), and false when there is none. It picks by
// load alone, never by the latencies it is then compared on.
func RareAtNoMoreLoad(rs []HedgeResult, maxExtra float64) (HedgeResult, bool) {
	var best HedgeResult
	found := false
	for _, r := range rs {
		if r.Kind == HedgeFleet && r.Rare.Extra <= maxExtra && (!found || r.Rare.Extra > best.Rare.Extra) {
			best, found = r, true
		}
	}
	return best, found
}

// LowerTail reports whether callers a have a lower p99 and a lower p99.9
// than b at no more extra load: the point estimates, with no regard to
// their intervals (StrictlyBetter asks the intervals too).
func LowerTail(a, b HedgeCallers) bool {
	return a.Extra <= b.Extra && a.P99 < b.P99 && a.P999 < b.P999
}

// Verdict compares callers a with b as StrictlyBetter does: "better" when
// a is strictly better than b, "worse" when b is strictly better than a,
// else "neither".
func Verdict(a, b HedgeCallers) string {
	switch {
	case StrictlyBetter(a, b):
		return "better"
	case StrictlyBetter(b, a):
		return "worse"
	}
	return "neither"
}

// HedgeRareTable formats the rare callers' results as a markdown table,
// with 95 % confidence intervals, for per-client rows the values their
// sketches held at a round trip, for each of ours at a budget up to
// bhope/hedge's (0.10; by its budget) its Verdict against each other row,
// and for each other row ours at no more extra load (RareAtNoMoreLoad):
// its budget and extra requests, how its p99 and p99.9 compare (both
// lower: LowerTail), and its Verdict.
func HedgeRareTable(rs []HedgeResult) string {
	var ours []HedgeResult
	for _, r := range rs {
		if r.Kind == HedgeFleet && r.Budget <= clientDefaultBudget {
			ours = append(ours, r)
		}
	}
	var b strings.Builder
	b.WriteString("| policy | requests | p50 (95 % CI) | p99 (95 % CI) | p99.9 (95 % CI) | extra requests (95 % CI) | ended by our timeout (95 % CI) | own sketch: values (p10 / p50 / p90), empty |")
	for _, o := range ours {
		fmt.Fprintf(&b, " ours at %s is |", budgetText(o.Budget))
	}
	b.WriteString(" ours at no more extra load |")
	b.WriteString("\n|---|---:|---:|---:|---:|---:|---:|---:|" + strings.Repeat("---|", len(ours)+1) + "\n")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }
	q := func(v time.Duration, ci [2]time.Duration) string {
		return fmt.Sprintf("%s ms (%s–%s)", ms(v), ms(ci[0]), ms(ci[1]))
	}
	pct := func(v float64, ci [2]float64, prec int) string {
		return fmt.Sprintf("%.*f %% (%.*f–%.*f)", prec, 100*v, prec, 100*ci[0], prec, 100*ci[1])
	}
	for _, r := range rs {
		c := r.Rare
		sketch := ""
		if r.Kind == HedgeClient {
			sketch = fmt.Sprintf("%d / %d / %d, %.1f %%", c.Sketch[0], c.Sketch[1], c.Sketch[2], 100*c.SketchEmpty)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s |", r.Policy, c.Requests, q(c.P50, c.P50CI), q(c.P99, c.P99CI),
			q(c.P999, c.P999CI), pct(c.Extra, c.ExtraCI, 2), pct(c.TimedOut, c.TimedOutCI, 3), sketch)
		for _, o := range ours {
			verdict := ""
			if r.Kind != HedgeFleet {
				verdict = Verdict(o.Rare, c)
			}
			fmt.Fprintf(&b, " %s |", verdict)
		}
		fmt.Fprintf(&b, " %s |\n", atNoMoreLoad(rs, r))
	}
	return b.String()
}

// atNoMoreLoad describes, for HedgeRareTable, ours at no more extra load
// than row r's rare callers: its budget and extra requests, how its p99
// and p99.9 compare, and its Verdict ("" for a row of ours).
func atNoMoreLoad(rs []HedgeResult, r HedgeResult) string {
	if r.Kind == HedgeFleet {
		return ""
	}
	o, ok := RareAtNoMoreLoad(rs, r.Rare.Extra)
	if !ok {
		return "none (every budget spends more)"
	}
	than := func(a, b time.Duration) string {
		switch {
		case a < b:
			return "lower"
		case a > b:
			return "higher"
		}
		return "equal"
	}
	return fmt.Sprintf("%s (%.2f %%): p99 %s, p99.9 %s; %s", budgetText(o.Budget), 100*o.Rare.Extra,
		than(o.Rare.P99, r.Rare.P99), than(o.Rare.P999, r.Rare.P999), Verdict(o.Rare, r.Rare))
}
