package timeout

import (
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

func TestHedgeDelay(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    tracker.Estimate
		want time.Duration
		ok   bool
	}{
		{"no trusted view", tracker.Estimate{ValueMillis: 30}, 0, false},
		{"fleet", tracker.Estimate{Source: tracker.SourceFleet, ValueMillis: 30}, 31 * time.Millisecond, true},
		{"guarded: the local view's", tracker.Estimate{Source: tracker.SourceFleet, ValueMillis: 30, LocalValueMillis: 50,
			LocalSamples: 100, HasMaxCompleted: true, Decision: tracker.Decision{Guarded: true}}, 51 * time.Millisecond, true},
		{"failing", tracker.Estimate{Source: tracker.SourceLocal, ValueMillis: 30, Failing: true}, 0, false},
		// The local guard from fewer than 1/(1 − q) = 20 samples: the
		// fleet's quantile, not the maximum of a rare caller's few calls.
		{"guarded by 19 local samples at q 0.95: the fleet's", tracker.Estimate{Quantile: 0.95, Source: tracker.SourceFleet,
			ValueMillis: 30, LocalValueMillis: 50, LocalSamples: 19, HasMaxCompleted: true,
			Decision: tracker.Decision{Guarded: true}}, 31 * time.Millisecond, true},
		{"guarded by 20 local samples at q 0.95: the local view's", tracker.Estimate{Quantile: 0.95, Source: tracker.SourceFleet,
			ValueMillis: 30, LocalValueMillis: 50, LocalSamples: 20, HasMaxCompleted: true,
			Decision: tracker.Decision{Guarded: true}}, 51 * time.Millisecond, true},
		{"a failing fleet view deferring to few local samples: the local view's", tracker.Estimate{Quantile: 0.95,
			Source: tracker.SourceFleet, ValueMillis: 30, LocalValueMillis: 50, LocalSamples: 3, FleetFailing: true,
			Decision: tracker.Decision{Guarded: true}}, 51 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A source without censored counts: the plain quantile of
			// HedgeView's view.
			d, ok := hedgeDelayOf(plainEstimates{tc.e}, &tc.e, time.Time{})
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, d)
			// The same quantile under censoring (nothing censored).
			d, ok = HedgeDelay(&tc.e, plainSurvival(&tc.e))
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, d)
		})
	}
	require.InDelta(t, 0.95, HedgeQuantile(0.05), 1e-12)

	// Under censoring the delay is the Survival's, whatever the plain
	// quantile says; none without one.
	e := tracker.Estimate{Dest: "r", Quantile: 0.95, Source: tracker.SourceFleet, ValueMillis: 8}
	d, ok := HedgeDelay(&e, tracker.Survival{Millis: 24, Samples: 500})
	require.True(t, ok)
	require.Equal(t, 25*time.Millisecond, d)
	for _, s := range []tracker.Survival{{}, {Samples: 500, Above: true}} {
		_, ok = HedgeDelay(&e, s)
		require.False(t, ok, "%+v", s)
	}
	failing := e
	failing.Failing = true
	_, ok = HedgeDelay(&failing, tracker.Survival{Millis: 24, Samples: 500})
	require.False(t, ok)

	// A source that is Survivals is asked for HedgeView's view at e's q.
	sv := &fakeSurvivals{s: tracker.Survival{Millis: 24, Samples: 500}}
	d, ok = hedgeDelayOf(sv, &e, time.Unix(5, 0))
	require.True(t, ok)
	require.Equal(t, 25*time.Millisecond, d)
	require.Equal(t, fakeSurvivalCall{"r", tracker.SourceFleet, 0.95, time.Unix(5, 0)}, sv.call)
	_, ok = hedgeDelayOf(sv, &failing, time.Unix(5, 0))
	require.False(t, ok)
}

// plainEstimates answers every Estimate with e and has no Survival.
type plainEstimates struct{ e tracker.Estimate }

func (p plainEstimates) Estimate(string, float64, time.Time) (tracker.Estimate, error) {
	return p.e, nil
}

type fakeSurvivalCall struct {
	dest string
	view tracker.Source
	q    float64
	now  time.Time
}

// fakeSurvivals is plainEstimates with a Survival that returns s and
// remembers its call.
type fakeSurvivals struct {
	plainEstimates
	s    tracker.Survival
	call fakeSurvivalCall
}

func (f *fakeSurvivals) Survival(dest string, view tracker.Source, q float64, now time.Time) tracker.Survival {
	f.call = fakeSurvivalCall{dest, view, q, now}
	return f.s
}

func TestOrderReplicas(t *testing.T) {
	trusted := func(ms uint64) Replica {
		return Replica{Estimate: tracker.Estimate{Source: tracker.SourceLocal, ValueMillis: ms},
			Median: tracker.Survival{Millis: ms, Samples: 100}}
	}
	failing := trusted(5)
	failing.Estimate.Failing = true
	above := trusted(3)
	above.Median = tracker.Survival{Samples: 100, Above: true}
	// A plain median of 4 ms, pulled down by hedges' losers: its
	// censoring-aware median, 30 ms, orders it.
	censored := trusted(4)
	censored.Median.Millis = 30
	rs := []Replica{
		0: failing,
		1: {},          // no estimate
		2: trusted(40), //
		3: trusted(20),
		4: {},          // no estimate, after 1
		5: trusted(20), // ties 3: after it
		// Guarded by its local view, whose median (on 5 samples) orders it.
		6: {Estimate: tracker.Estimate{Source: tracker.SourceFleet, ValueMillis: 10, LocalValueMillis: 60, Decision: tracker.Decision{Guarded: true}},
			Median: tracker.Survival{Millis: 60, Samples: 5}},
		7: above,                           // after every known median, before the untrusted
		8: censored,                        // by 30 ms
		9: {Estimate: trusted(1).Estimate}, // trusted but no median given: as untrusted
	}
	order := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	OrderReplicas(rs, order)
	require.Equal(t, []int{3, 5, 8, 2, 6, 7, 1, 4, 9, 0}, order)

	// The contract: ties in the caller's order. Two trusted replicas
	// whose medians share a bucket (equal Median.Millis) keep the order
	// given, in both orders, whatever their sample counts.
	thin, thick := trusted(10), trusted(10)
	thin.Median.Samples, thick.Median.Samples = 5, 500
	rs = []Replica{thin, thick}
	for _, given := range [][]int{{0, 1}, {1, 0}} {
		order = slices.Clone(given)
		OrderReplicas(rs, order)
		require.Equal(t, given, order, "equal medians keep the caller's order")
	}

	// A trusted estimate with a median is ordered by its median, whatever
	// its sample count: few samples and a lower median go before many
	// samples and a higher one.
	few := trusted(7)
	few.Median.Samples = 4
	many := trusted(10)
	many.Median.Samples = 27_000
	rs = []Replica{many, few}
	order = []int{0, 1}
	OrderReplicas(rs, order)
	require.Equal(t, []int{1, 0}, order)

	// Failing last, the untrusted before it, whatever their medians.
	untrusted := Replica{Median: tracker.Survival{Millis: 1, Samples: 2}}
	failingLow := trusted(1)
	failingLow.Estimate.Failing = true
	rs = []Replica{failingLow, untrusted, trusted(50)}
	order = []int{0, 1, 2}
	OrderReplicas(rs, order)
	require.Equal(t, []int{2, 1, 0}, order)

	// Within the failing, and within the untrusted, medians do not order:
	// the caller's order stands.
	failingHigh := trusted(50)
	failingHigh.Estimate.Failing = true
	untrustedHigh := Replica{Median: tracker.Survival{Millis: 50, Samples: 2}}
	rs = []Replica{failingHigh, failingLow, untrustedHigh, untrusted}
	order = []int{0, 1, 2, 3}
	OrderReplicas(rs, order)
	require.Equal(t, []int{2, 3, 0, 1}, order)
}

func TestHedgeView(t *testing.T) {
	fleet := tracker.Estimate{Source: tracker.SourceFleet, Quantile: 0.5, HasMaxCompleted: true}
	require.Equal(t, tracker.SourceFleet, HedgeView(&fleet))
	require.Equal(t, tracker.SourceNone, HedgeView(&tracker.Estimate{}))
	require.Equal(t, tracker.SourceLocal, HedgeView(&tracker.Estimate{Source: tracker.SourceLocal}))
	guarded := fleet
	guarded.Decision.Guarded = true
	guarded.LocalSamples = 1 // fewer than 1/(1 − 0.5) = 2: the fleet's
	require.Equal(t, tracker.SourceFleet, HedgeView(&guarded))
	guarded.LocalSamples = 2
	require.Equal(t, tracker.SourceLocal, HedgeView(&guarded))
	guarded.Quantile, guarded.LocalSamples = 0.95, 19
	require.Equal(t, tracker.SourceFleet, HedgeView(&guarded))
	guarded.FleetFailing = true // a failing fleet view defers to the local one
	require.Equal(t, tracker.SourceLocal, HedgeView(&guarded))
	guarded.FleetFailing, guarded.HasMaxCompleted = false, false // censoring unknown: no M, not failing
	require.Equal(t, tracker.SourceFleet, HedgeView(&guarded), "the guard's exception holds")
}

// TestHedgeDelayCensoringUnknown: with a fleet view whose censoring is
// unknown (peers that send no censored counts) the local guard's
// exception still applies: a guard decided from a handful of local
// samples leaves the hedge delay to the fleet's view, as with censoring
// known.
func TestHedgeDelayCensoringUnknown(t *testing.T) {
	for _, unknown := range []bool{false, true} {
		tc := tracker.DefaultConfig()
		fc := tracker.DefaultFleetConfig()
		fc.Self, fc.Tracker = "self", tc
		local, err := tracker.NewSync[string](tc)
		require.NoError(t, err)
		f, err := tracker.NewFleet(fc, local)
		require.NoError(t, err)
		e := tc.Epoch(t0)
		prev, now := tc.EpochStart(e-1), tc.EpochStart(e).Add(time.Second)
		peer, err := tracker.NewSync[string](tc)
		require.NoError(t, err)
		for i := range 100 {
			peer.RecordMillis("db", uint64(10+i%10), prev)
		}
		dcs := tracker.SealedSubWindow(peer, e-1, now)
		require.Len(t, dcs, 1)
		dcs[0].CensoringUnknown = unknown
		f.SetLiveMembers(4)
		for _, o := range []string{"p1", "p2", "p3"} {
			require.Equal(t, tracker.InsertNew, f.Insert(tracker.Batch{Key: tracker.BatchKey{Origin: o, Boot: 1, Epoch: e - 1}, Layout: tc.Layout(), Dests: dcs}, now))
		}
		for range 5 { // too few for a local P95, and 10× the fleet's
			local.RecordMillis("db", 100, now)
		}
		est, err := f.Estimate("db", 0.95, now)
		require.NoError(t, err)
		require.True(t, est.Decision.Guarded, "unknown=%v: the local guard decides", unknown)
		require.False(t, est.FleetFailing)
		require.Equal(t, tracker.SourceFleet, HedgeView(&est), "unknown=%v", unknown)
		d, err := NewDecider(DefaultConfig(), tc, f, local)
		require.NoError(t, err)
		delay, ok := d.HedgeDelay("db", now)
		require.True(t, ok)
		require.Less(t, delay, 25*time.Millisecond, "unknown=%v: the fleet's P95 (19 ms), not 5 local samples' 100 ms", unknown)
	}
}

func TestHedgeBudget(t *testing.T) {
	t.Run("burst, then the share of calls", func(t *testing.T) {
		b := NewHedgeBudget(0.05)
		require.Equal(t, 10.0, b.Tokens(), "HedgeBurst: a new bucket is full")
		for range HedgeBurst {
			require.True(t, b.Spend())
		}
		require.False(t, b.Spend())
		spent := 0
		for range 1000 {
			b.Deposit()
			if b.Spend() {
				spent++
			}
		}
		require.Equal(t, 50, spent)
	})
	t.Run("capped at the burst", func(t *testing.T) {
		b := NewHedgeBudget(0.5)
		for range 1000 {
			b.Deposit()
		}
		require.Equal(t, float64(HedgeBurst), b.Tokens())
	})
	t.Run("the share is at most MaxHedgeBudget", func(t *testing.T) {
		b := NewHedgeBudget(0.9)
		for range HedgeBurst {
			require.True(t, b.Spend())
		}
		b.Deposit()
		b.Deposit()
		require.Equal(t, 1.0, b.Tokens(), "two calls deposit a token at a share of 0.5")
	})
	t.Run("zero or NaN: never", func(t *testing.T) {
		for _, s := range []float64{0, -1, math.NaN()} {
			b := NewHedgeBudget(s)
			b.Deposit()
			require.False(t, b.Spend())
		}
	})
	t.Run("concurrent: never more than the share plus the burst", func(t *testing.T) {
		b := NewHedgeBudget(0.1)
		var wg sync.WaitGroup
		var mu sync.Mutex
		spent := 0
		for range 4 {
			wg.Go(func() {
				for range 10_000 {
					b.Deposit()
					if b.Spend() {
						mu.Lock()
						spent++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		require.LessOrEqual(t, spent, 4_000+HedgeBurst)
		require.GreaterOrEqual(t, spent, 3_900)
	})
}

// TestDeciderHedgeDelayRefused: a Decider offers no hedge delay for a
// destination its detector treats as failing, nor any with a hedge budget
// of 0, though the estimate would give one.
func TestDeciderHedgeDelayRefused(t *testing.T) {
	d, _, _ := newTestDecider(t, DefaultConfig(), map[string]tracker.Estimate{"db": est(2000, 700)})
	delay, ok := d.HedgeDelay("db", t0)
	require.True(t, ok)
	require.Equal(t, 2001*time.Millisecond, delay)
	for range FailingAfter {
		d.Record("db", TimedOut, 4000, t0)
	}
	_, ok = d.HedgeDelay("db", t0)
	require.False(t, ok, "failing by the detector: no hedge")
	d.Record("db", Completed, 700, t0)
	_, ok = d.HedgeDelay("db", t0)
	require.True(t, ok)
	d.SetHedgeBudget(0)
	_, ok = d.HedgeDelay("db", t0)
	require.False(t, ok, "budget 0: no hedge")
	require.False(t, d.SpendHedge(t0))
}

// TestPolicyHedgeDelayCensored: the Decider NewPolicy returns hedges after
// its tracker's quantile under censoring. Its window is a hedged-to
// replica's: 100 losers superseded at 3 ms and completions at 10 (80), 20
// (15) and 40 ms (5). At a budget of 0.10 the plain P90 (10 ms) counts the
// losers as latencies; under censoring it is 20 ms.
func TestPolicyHedgeDelayCensored(t *testing.T) {
	tr, err := tracker.NewSync[string](tracker.DefaultConfig())
	require.NoError(t, err)
	p, err := NewPolicy(DefaultConfig(), tr)
	require.NoError(t, err)
	p.SetHedgeBudget(0.10)
	now := time.Unix(1_700_000_000, 0)
	for range 100 {
		tr.RecordTimeout("r", 3*time.Millisecond, now)
	}
	for _, c := range []struct{ ms, n int }{{10, 80}, {20, 15}, {40, 5}} {
		for range c.n {
			tr.Record("r", time.Duration(c.ms)*time.Millisecond, now)
		}
	}
	q, ok := tr.QuantileMillis("r", HedgeQuantile(0.10), now)
	require.True(t, ok)
	require.Equal(t, uint64(10), q)
	d, ok := p.HedgeDelay("r", now)
	require.True(t, ok)
	require.Equal(t, 21*time.Millisecond, d)

	// Nothing censored: the plain quantile's bucket, as before.
	for range 100 {
		tr.Record("s", 10*time.Millisecond, now)
	}
	d, ok = p.HedgeDelay("s", now)
	require.True(t, ok)
	require.Equal(t, 11*time.Millisecond, d)
}
