package timeout

import (
	"cmp"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// The pure parts of hedged requests (Tail at Scale's hedged request with
// the delay taken from the fleet's quantile), shared by node.DoHedged, the
// transport adapters and the simulator: which replica to try first, when
// to hedge, and the budget that bounds hedges.

// HedgeBurst is how many hedges a HedgeBudget allows beyond its share of
// calls: the bucket's capacity, and what it holds when new.
const HedgeBurst = 10

// MaxHedgeBudget is the largest hedge budget: half of all calls.
const MaxHedgeBudget = 0.5

// MedianQuantile is the quantile of the estimate replicas are ordered
// with: the median. The estimate at it names the deciding view; the
// median itself is that view's censoring-aware one (tracker.Survival).
const MedianQuantile = 0.5

// HedgeQuantile returns the quantile whose estimate is the hedge delay for
// budget b (Finagle's rule): 1 − b, so that about b of the attempts are
// still running when it passes.
func HedgeQuantile(b float64) float64 { return 1 - b }

// HedgeDelay returns the hedge delay from e, a destination's estimate at
// HedgeQuantile(budget), and s, the censoring-aware quantile at that q of
// the view hedging reads (HedgeView(e); tracker.Fleet.Survival,
// tracker.LocalSurvival): strictly above the bucket that holds that
// quantile, its highest equivalent value plus 1 ms (an attempt still
// running then is slower than every latency in that bucket). It reports
// false when no view is trusted or the destination is failing (without a
// trusted estimate there is no hedge), and when s has no quantile: an
// empty view, or one where the survival function never falls to 1 − q
// (s.Above).
//
// Why under censoring. A hedge's loser is censored at its elapsed time
// (superseded: it was slower than that), as is an attempt our timeout
// ended. The plain quantile counts them there, as the timeout's rule does
// (it keeps seed parity), so a replica the fleet mostly hedges to,
// whose losers are cut a few milliseconds after they start, shows a plain
// P95 near its median or below it: a caller trying it first would hedge
// most of its calls and run its bucket dry. The Kaplan–Meier quantile
// reads a censored sample as "slower than this"; with nothing censored it
// is the plain quantile exactly, so the delay is the same as before
// wherever nothing is censored.
//
// Why no hedge when S never falls to 1 − q. Then more than the budget's
// share of the view's attempts were still running, by the estimator, after
// the highest completed latency M: the quantile is above M by an unknown
// amount. A delay at M + 1 ms would hedge more than the budget's share of
// calls by construction and spend the tokens other calls' stalls need;
// any later delay is a guess. The view's timeout is capped near M there
// (v = min(Q, M)), so an attempt that does stall fails over at that
// timeout without spending budget, and the order tries the destination
// after those with a quantile (timeout.OrderReplicas, Survival.Above).
//
// The view is the deciding view (tracker.Estimate.DecisionSource: the
// local view when the local guard or a failing fleet view put it in
// charge), with one exception: the local guard (a trusted fleet view, not
// failing, replaced by a local view that exceeds it by more than 20 %) is
// not followed when the local view holds fewer than 1/(1 − q) samples, q
// being e.Quantile: so few samples put the quantile at their maximum, and
// a node that calls a replica rarely would hedge after the slowest of its
// last few calls instead of at the fleet's quantile. The fleet's view
// gives the delay then (HedgeView).
func HedgeDelay(e *tracker.Estimate, s tracker.Survival) (time.Duration, bool) {
	if !e.Trusted() || e.Failing || s.Samples == 0 || s.Above {
		return 0, false
	}
	return fromMillis(s.Millis + 1), true
}

// Survivals gives a destination's quantile under right-censoring in one of
// its views, what HedgeDelay takes the delay from beside the estimate
// (*tracker.Fleet implements it: tracker.Fleet.Survival).
type Survivals interface {
	Survival(dest string, view tracker.Source, q float64, now time.Time) tracker.Survival
}

// hedgeDelayOf returns HedgeDelay of e (dest's estimate at e.Quantile)
// with the censoring-aware quantile from src when src is Survivals, else
// with the plain quantile of HedgeView's view (a source without censored
// counts; identical wherever nothing is censored).
func hedgeDelayOf(src Estimates, e *tracker.Estimate, now time.Time) (time.Duration, bool) {
	if !e.Trusted() || e.Failing {
		return 0, false
	}
	if sv, ok := src.(Survivals); ok {
		return HedgeDelay(e, sv.Survival(e.Dest, HedgeView(e), e.Quantile, now))
	}
	return HedgeDelay(e, plainSurvival(e))
}

// plainSurvival is HedgeView's view's plain quantile of e as a Survival:
// the value where that view is the fleet's, else the deciding view's.
func plainSurvival(e *tracker.Estimate) tracker.Survival {
	s := tracker.Survival{Millis: e.DecisionQuantileMillis(), Samples: max(e.Samples, e.LocalSamples, 1)}
	if HedgeView(e) == tracker.SourceFleet {
		s.Millis = e.ValueMillis
	}
	return s
}

// Replica is what OrderReplicas knows of one replica: its estimate at
// MedianQuantile, which says whether a view is trusted, whether the
// replica is failing and which view decides (HedgeView), and Median, the
// censoring-aware median of that view (tracker.Fleet.Median with
// HedgeView's source, or tracker.LocalMedian for a local estimate).
type Replica struct {
	Estimate tracker.Estimate
	Median   tracker.Survival
}

// HedgeView returns the view hedging reads of e: the deciding view
// (tracker.Estimate.DecisionSource), with HedgeDelay's exception to the
// local guard (the fleet's when the guard decided from fewer local
// samples than 1/(1 − e.Quantile): 20 at q = 0.95, 2 at the median);
// SourceNone when no view is trusted. HedgeDelay takes its quantile from
// it, and an estimate at MedianQuantile names the view whose median
// orders the replica (Replica.Median).
func HedgeView(e *tracker.Estimate) tracker.Source {
	if e.Decision.Guarded && e.Source == tracker.SourceFleet && !e.FleetFailing &&
		float64(e.LocalSamples)*(1-e.Quantile) < 1 {
		return tracker.SourceFleet
	}
	return e.DecisionSource()
}

// OrderReplicas sorts order, the indices of rs, into the order replicas
// are tried in, as node.DoHedged's contract writes it: by their fleet
// median (q = 0.5), failing ones last, ones without an estimate after
// those with one, ties in the caller's order. A replica with a trusted
// estimate (tracker.Estimate.Trusted: the tracker's MinSamples) and a
// median is ordered by its Median.Millis, whatever the median's sample
// count: the Kaplan–Meier median of HedgeView's view, which counts a
// censored sample (a timeout or a hedge's loser) as "slower than this"
// rather than as a latency; with nothing censored, the plain median.
// Medians equal at the tracker's bucket resolution are ties. Then come
// those whose median is above every completed latency (Median.Above: too
// much of the view is censored above what completed; after a known median
// because that median is unknown, before the untrusted because they did
// complete), then those without a trusted estimate (or no median given),
// then failing ones. order must hold each index of rs once (as
// 0..len(rs)−1 in the caller's order does).
func OrderReplicas(rs []Replica, order []int) {
	slices.SortStableFunc(order, func(a, b int) int {
		ra, rb := &rs[a], &rs[b]
		ca, cb := replicaClass(ra), replicaClass(rb)
		if c := cmp.Compare(ca, cb); c != 0 || ca != 0 {
			return c
		}
		return cmp.Compare(ra.Median.Millis, rb.Median.Millis)
	})
}

// replicaClass is r's rank before its median: 0 a trusted estimate with a
// median, 1 a median above every completed latency, 2 no trusted estimate
// (or no median given for it), 3 failing.
func replicaClass(r *Replica) int {
	switch {
	case r.Estimate.Failing:
		return 3
	case !r.Estimate.Trusted() || r.Median.Samples == 0:
		return 2
	case r.Median.Above:
		return 1
	}
	return 0
}

// HedgeBudget is the token bucket that keeps hedges within a share of
// calls: each hedgeable call deposits the share (Deposit), each hedge
// spends one token (Spend), and the bucket holds at most HedgeBurst tokens
// (it starts full). Over any stretch of time, then, hedges never exceed
// share × the calls deposited in it plus HedgeBurst, and in particular over
// any minute. A share of 0 allows no hedge at all, not even the burst.
//
// Tokens are kept in millionths, so shares are rounded to 1e-6. It is safe
// for concurrent use and takes no lock.
type HedgeBudget struct {
	deposit int64 // micro-tokens a call deposits
	tokens  atomic.Int64
}

// hedgeUnit is one token in micro-tokens.
const hedgeUnit = 1_000_000

// NewHedgeBudget returns a full bucket for share (clamped to [0,
// MaxHedgeBudget]; NaN counts as 0).
func NewHedgeBudget(share float64) *HedgeBudget {
	if !(share > 0) {
		share = 0
	}
	b := &HedgeBudget{deposit: int64(math.Round(min(share, MaxHedgeBudget) * hedgeUnit))}
	if b.deposit > 0 {
		b.tokens.Store(HedgeBurst * hedgeUnit)
	}
	return b
}

// Deposit counts one call that may hedge: it adds the share to the bucket,
// up to HedgeBurst tokens.
func (b *HedgeBudget) Deposit() {
	if b.deposit == 0 {
		return
	}
	for {
		t := b.tokens.Load()
		n := min(t+b.deposit, HedgeBurst*hedgeUnit)
		if n == t || b.tokens.CompareAndSwap(t, n) {
			return
		}
	}
}

// Spend takes one token for a hedge, and reports false (taking nothing)
// when the bucket holds less than one.
func (b *HedgeBudget) Spend() bool {
	for {
		t := b.tokens.Load()
		if t < hedgeUnit {
			return false
		}
		if b.tokens.CompareAndSwap(t, t-hedgeUnit) {
			return true
		}
	}
}

// Tokens returns the tokens the bucket holds.
func (b *HedgeBudget) Tokens() float64 { return float64(b.tokens.Load()) / hedgeUnit }

// DefaultHedgeBudget is the hedge budget of a Decider until
// SetHedgeBudget changes it, as node.Config.HedgeBudget's default.
const DefaultHedgeBudget = 0.05

// Hedger is what a Policy offers a transport that hedges a request to the
// same destination (timeouthttp, timeoutgrpc; opt-in there): the rule of
// node.DoHedged for one destination. *node.Node implements it over the
// fleet view with its Config.HedgeBudget, and the Decider NewPolicy
// returns over its own estimates (DefaultHedgeBudget; SetHedgeBudget).
// It is optional: a transport asks a Policy for it with a type assertion
// and hedges nothing when it is missing.
type Hedger interface {
	// HedgeDelay counts one request to dest that may hedge at now toward
	// the hedge budget, and returns the delay after which, without an
	// answer, a hedge may be sent: HedgeDelay of dest's estimate at
	// HedgeQuantile(budget), under censoring. It reports false when no
	// hedge may follow (no trusted estimate, dest failing, no quantile
	// under censoring, or a budget of 0).
	HedgeDelay(dest string, now time.Time) (time.Duration, bool)
	// SpendHedge reports whether the budget allows a hedge at now, and if
	// so spends it.
	SpendHedge(now time.Time) bool
}

var _ Hedger = (*Decider)(nil)
