package timeout

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// fakeEstimates answers a fixed estimate per destination (none: no data).
type fakeEstimates struct {
	mu sync.Mutex
	m  map[string]tracker.Estimate
}

func newFakeEstimates(m map[string]tracker.Estimate) *fakeEstimates {
	return &fakeEstimates{m: m}
}

func (f *fakeEstimates) Estimate(dest string, q float64, _ time.Time) (tracker.Estimate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.m[dest]
	e.Dest, e.Quantile = dest, q
	return e, nil
}

func (f *fakeEstimates) set(dest string, e tracker.Estimate) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[dest] = e
}

// recorded is one call of a fake Learner.
type recorded struct {
	dest     string
	ms       uint64
	censored bool
}

type fakeLearner struct {
	mu  sync.Mutex
	got []recorded
}

func (l *fakeLearner) RecordMillis(dest string, ms uint64, _ time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, recorded{dest, ms, false})
}

func (l *fakeLearner) RecordTimeoutMillis(dest string, ms uint64, _ time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, recorded{dest, ms, true})
}

func (l *fakeLearner) take() []recorded {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.got
	l.got = nil
	return out
}

// est is a trusted estimate whose deciding view has quantile q and value v
// (v < q: capped by the highest completed latency).
func est(q, v uint64) tracker.Estimate {
	return tracker.Estimate{Source: tracker.SourceFleet, ValueMillis: q, Decision: tracker.Decision{ValueMillis: v}}
}

// failingEst is a trusted estimate whose deciding view is failing, with
// quantile q.
func failingEst(q uint64) tracker.Estimate {
	return tracker.Estimate{Source: tracker.SourceFleet, ValueMillis: q, Failing: true}
}

// guardedEst is a fleet estimate (quantile fleetQ) decided by the local
// view (quantile localQ, value v).
func guardedEst(fleetQ, localQ, v uint64) tracker.Estimate {
	return tracker.Estimate{Source: tracker.SourceFleet, ValueMillis: fleetQ, LocalValueMillis: localQ,
		HasLocalValue: true, Decision: tracker.Decision{ValueMillis: v, Guarded: true}}
}

// grid is a tracker configuration with a 6 s sub-window.
var grid = tracker.DefaultConfig()

func newTestDecider(t testing.TB, c Config, m map[string]tracker.Estimate) (*Decider, *fakeEstimates, *fakeLearner) {
	t.Helper()
	src, rec := newFakeEstimates(m), &fakeLearner{}
	d, err := NewDecider(c, grid, src, rec)
	require.NoError(t, err)
	return d, src, rec
}

// TestVerdictRule pins the rule for one request: the timeout, the deciding
// destination, the reason and the probe the rule offers, on hand-made
// estimates (no detector state).
func TestVerdictRule(t *testing.T) {
	def := DefaultConfig() // 250ms..1m, safety 2
	fine := cfg(10, 60_000, 2)
	tests := []struct {
		name    string
		c       Config
		es      []tracker.Estimate
		need    int // 0: all
		attempt int
		want    uint64
		by      int
		reason  Reason
		probe   int
		probeMs uint64
	}{
		{"no destinations", def, nil, 0, 1, 250, -1, ReasonFallback, -1, 0},
		{"no data", def, []tracker.Estimate{{}}, 0, 1, 250, -1, ReasonFallback, -1, 0},
		{"estimate", def, []tracker.Estimate{est(700, 700)}, 0, 1, 1400, 0, ReasonEstimate, -1, 0},
		{"estimate, attempt 3", def, []tracker.Estimate{est(700, 700)}, 0, 3, 5600, 0, ReasonEstimate, -1, 0},
		{"estimate below the floor", def, []tracker.Estimate{est(40, 40)}, 0, 1, 250, -1, ReasonFallback, -1, 0},
		{"capped: v = M < Q, probe on Q", def, []tracker.Estimate{est(2000, 700)}, 0, 1, 1400, 0, ReasonCapped, 0, 4000},
		{"capped, attempt 2: both double", def, []tracker.Estimate{est(2000, 700)}, 0, 2, 2800, 0, ReasonCapped, 0, 8000},
		{"capped, probe at the ceiling", def, []tracker.Estimate{est(50_000, 700)}, 0, 1, 1400, 0, ReasonCapped, 0, 60_000},
		{"capped below the floor: the fallback decides, the probe stands", def,
			[]tracker.Estimate{est(2000, 40)}, 0, 1, 250, -1, ReasonFallback, 0, 4000},
		{"capped, probe no longer than the timeout: none", def, []tracker.Estimate{est(100, 40)}, 0, 1, 250, -1, ReasonFallback, -1, 0},
		{"failing: fallback, probe on Q", def, []tracker.Estimate{failingEst(250)}, 0, 1, 250, -1, ReasonFailing, 0, 500},
		{"failing, attempt 3", def, []tracker.Estimate{failingEst(250)}, 0, 3, 1000, -1, ReasonFailing, 0, 2000},
		{"failing, Q below the fallback: no probe", def, []tracker.Estimate{failingEst(100)}, 0, 1, 250, -1, ReasonFailing, -1, 0},
		{"failing without a trusted view: no probe", def,
			[]tracker.Estimate{{Failing: true}}, 0, 1, 250, -1, ReasonFailing, -1, 0},
		{"guarded: Q is the local view's", def, []tracker.Estimate{guardedEst(500, 3000, 900)}, 0, 1, 1800, 0, ReasonCapped, 0, 6000},
		{"guarded, not capped", def, []tracker.Estimate{guardedEst(500, 900, 900)}, 0, 1, 1800, 0, ReasonEstimate, -1, 0},
		{"largest decides", def, []tracker.Estimate{est(300, 300), est(900, 900), est(400, 400)}, 0, 1, 1800, 1, ReasonEstimate, -1, 0},
		{"first of equals decides", def, []tracker.Estimate{est(300, 300), est(900, 900), est(900, 900)}, 0, 1, 1800, 1, ReasonEstimate, -1, 0},
		{"a failing one does not decide over an estimate", def,
			[]tracker.Estimate{failingEst(5000), est(900, 900)}, 0, 1, 1800, 1, ReasonEstimate, -1, 0},
		{"only the deciding destination's probe", def,
			[]tracker.Estimate{est(9000, 300), est(900, 900)}, 0, 1, 1800, 1, ReasonEstimate, -1, 0},
		{"the deciding destination is capped", def,
			[]tracker.Estimate{est(300, 300), est(9000, 900)}, 0, 1, 1800, 1, ReasonCapped, 1, 18_000},
		{"fallback decides with one failing: the first due probe", def,
			[]tracker.Estimate{est(40, 40), failingEst(100), failingEst(400), est(5000, 60)}, 0, 1, 250, -1, ReasonFailing, 2, 800},
		{"fallback decides, none failing: a capped one's probe", def,
			[]tracker.Estimate{est(40, 40), est(5000, 60)}, 0, 1, 250, -1, ReasonFallback, 1, 10_000},
		{"quorum: need-th smallest", def, []tracker.Estimate{est(300, 300), est(900, 900), est(400, 400)}, 2, 1, 800, 2, ReasonEstimate, -1, 0},
		{"quorum: a failing one counts as the fallback", def,
			[]tracker.Estimate{failingEst(300), est(900, 900), est(400, 400)}, 2, 1, 800, 2, ReasonEstimate, -1, 0},
		{"quorum of failing ones", def,
			[]tracker.Estimate{failingEst(300), failingEst(900), est(400, 400)}, 2, 1, 250, -1, ReasonFailing, 0, 600},
		{"quorum need 0 counts as 1", def, []tracker.Estimate{est(300, 300), est(900, 900)}, -1, 1, 600, 0, ReasonEstimate, -1, 0},
		{"a fine floor: the estimate decides", fine, []tracker.Estimate{est(54, 54)}, 0, 1, 108, 0, ReasonEstimate, -1, 0},
		{"a fine floor, capped", fine, []tracker.Estimate{est(108, 54)}, 0, 1, 108, 0, ReasonCapped, 0, 216},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			need := tc.need
			if need == 0 {
				need = len(tc.es)
			}
			r := rule{c: tc.c, attempt: tc.attempt}
			r.init()
			v := r.verdict(inputsOf(tc.es), need)
			require.Equal(t, ms(int64(tc.want)), v.Timeout, "timeout")
			require.Equal(t, tc.by, v.DecidedBy, "decided by")
			require.Equal(t, tc.by < 0, v.Fallback, "fallback")
			require.Equal(t, tc.reason, v.Reason, "reason")
			require.Equal(t, tc.probe, v.Probe, "probe")
			require.Equal(t, ms(int64(tc.probeMs)), v.ProbeTimeout, "probe timeout")

			// The Decider gives the same verdict with no detector state.
			m := map[string]tracker.Estimate{}
			dests := make([]string, len(tc.es))
			for i, e := range tc.es {
				dests[i] = strconv.Itoa(i)
				m[dests[i]] = e
			}
			d, _, _ := newTestDecider(t, tc.c, m)
			got := d.Explain(dests, need, tc.attempt, t0, nil)
			require.Equal(t, v, got)
			var vi Verdict
			d.ExplainTo(&vi, dests, need, tc.attempt, t0, nil)
			require.Equal(t, v, vi, "ExplainTo")
			if len(dests) == 1 {
				a := d.Decide(dests[0], tc.attempt, t0)
				require.Equal(t, Attempt{Dest: dests[0], Attempt: max(tc.attempt, 1), Timeout: v.Timeout, Reason: v.Reason,
					Failing: tc.es[0].Failing, ProbeTimeout: v.ProbeTimeout}, a)
			}
		})
	}
}

// estimatorOf is the Estimator timeout.Explain would see for a request:
// each destination's decision value, none when failing or untrusted.
type estimatorOf []tracker.Estimate

func (e estimatorOf) QuantileMillis(i int, _ float64, _ time.Time) (uint64, bool) {
	return e[i].DecisionValue()
}

// TestVerdictMatchesExplain is a property test: on random estimates the
// verdict's Decision is exactly Explain's (need = all) or ExplainQuorum's
// on the destinations' decision values, and the reason and probe follow
// from it as documented.
func TestVerdictMatchesExplain(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	random := func() tracker.Estimate { return randomEstimate(r, 0) }
	for i := range 5000 {
		c := cfg(int64(1+r.IntN(300)), int64(1000+r.IntN(60_000)), 0.5+3*r.Float64())
		es := make([]tracker.Estimate, 1+r.IntN(6))
		idx := make([]int, len(es))
		for j := range es {
			es[j], idx[j] = random(), j
		}
		need, attempt := 1+r.IntN(len(es)), r.IntN(6)
		rl := rule{c: c, attempt: attempt}
		rl.init()
		v := rl.verdict(inputsOf(es), need)
		want := ExplainQuorum(c, estimatorOf(es), idx, need, attempt, t0)
		if need == len(es) {
			require.Equal(t, Explain(c, estimatorOf(es), idx, attempt, t0), want, "case %d", i)
		}
		require.Equal(t, want, v.Decision, "case %d: %+v need %d attempt %d", i, es, need, attempt)
		anyFailing := false
		for _, e := range es {
			anyFailing = anyFailing || e.Failing
		}
		switch {
		case v.Fallback && anyFailing:
			require.Equal(t, ReasonFailing, v.Reason)
		case v.Fallback:
			require.Equal(t, ReasonFallback, v.Reason)
		case capped(new(es[v.DecidedBy].Input())):
			require.Equal(t, ReasonCapped, v.Reason)
		default:
			require.Equal(t, ReasonEstimate, v.Reason)
		}
		if v.Probe >= 0 {
			e := es[v.Probe]
			require.True(t, e.Trusted() && (e.Failing || capped(new(e.Input()))), "case %d", i)
			require.Greater(t, v.ProbeTimeout, v.Timeout, "case %d", i)
			require.LessOrEqual(t, v.ProbeTimeout, c.Backoff.Max, "case %d", i)
			if !v.Fallback {
				require.Equal(t, v.DecidedBy, v.Probe)
			}
		} else {
			require.Zero(t, v.ProbeTimeout)
		}
	}
}

// TestDetector pins the consecutive detector: FailingAfter timed-out or
// failed attempts in a row make a destination failing, a completion resets
// it, superseded and canceled attempts count as neither; what each outcome
// records.
func TestDetector(t *testing.T) {
	c := DefaultConfig()
	type step struct {
		o       Outcome
		failing bool // after the step
	}
	C, T, F, S, X := Completed, TimedOut, Failed, Superseded, Canceled
	tests := []struct {
		name  string
		steps []step
	}{
		{"three timeouts", []step{{T, false}, {T, false}, {T, true}, {T, true}}},
		{"three fast failures", []step{{F, false}, {F, false}, {F, true}}},
		{"mixed", []step{{T, false}, {F, false}, {T, true}}},
		{"a completion resets", []step{{T, false}, {T, false}, {C, false}, {T, false}, {T, false}, {T, true}, {C, false}}},
		{"superseded and canceled count as neither", []step{{T, false}, {S, false}, {X, false}, {T, false}, {S, false}, {T, true}, {X, true}, {S, true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, _, _ := newTestDecider(t, c, map[string]tracker.Estimate{"db": est(100, 100)})
			for i, s := range tc.steps {
				a := d.Decide("db", 1, t0)
				d.Observe(a, s.o, 30*time.Millisecond, t0)
				require.Equal(t, s.failing, d.Failing("db"), "after step %d (%v)", i, s.o)
				require.Equal(t, s.failing, d.Decide("db", 1, t0).Failing, "after step %d", i)
			}
			if !tc.steps[len(tc.steps)-1].failing {
				require.Zero(t, d.Stats().Tracked, "a healthy destination keeps no state")
			}
		})
	}

	t.Run("what is recorded", func(t *testing.T) {
		d, _, rec := newTestDecider(t, c, map[string]tracker.Estimate{})
		a := Attempt{Dest: "db", Attempt: 1, Timeout: 300 * time.Millisecond, ProbeTimeout: 900 * time.Millisecond}
		d.Observe(a, Completed, 42*time.Millisecond+900*time.Microsecond, t0)
		d.Observe(a, TimedOut, 301*time.Millisecond, t0)
		d.Observe(a, Failed, 3*time.Millisecond, t0)
		d.Observe(a, Superseded, 120*time.Millisecond, t0)
		d.Observe(a, Canceled, 50*time.Millisecond, t0)
		p := a
		p.Probe = true
		d.Observe(p, TimedOut, 905*time.Millisecond, t0)
		d.Observe(p, Completed, 700*time.Millisecond, t0)
		d.Record("db", TimedOut, 77, t0)
		d.Record("db", Failed, 77, t0)
		d.Record("db", Completed, 78, t0)
		require.Equal(t, []recorded{
			{"db", 42, false}, {"db", 300, true}, {"db", 120, true}, {"db", 900, true}, {"db", 700, false},
			{"db", 77, true}, {"db", 78, false},
		}, rec.take())
	})

	t.Run("the count saturates", func(t *testing.T) {
		d, _, _ := newTestDecider(t, c, map[string]tracker.Estimate{})
		d.Record("db", Failed, 0, t0)
		d.mu.Lock()
		h := d.dests["db"]
		h.fails = 1<<31 - 1 // as after that many failures in a row
		d.dests["db"] = h
		d.mu.Unlock()
		for range 2 {
			d.Record("db", Failed, 0, t0)
		}
		require.Equal(t, uint32(1<<31), d.dests["db"].fails)
		require.True(t, d.Failing("db"))
	})

	t.Run("failing sets the attempt and the reason", func(t *testing.T) {
		d, _, _ := newTestDecider(t, c, map[string]tracker.Estimate{"db": est(700, 700)})
		for range FailingAfter {
			d.Record("db", TimedOut, 1400, t0)
		}
		a := d.Decide("db", 2, t0)
		require.Equal(t, Attempt{Dest: "db", Attempt: 2, Timeout: 500 * time.Millisecond, Reason: ReasonFailing, Failing: true,
			ProbeTimeout: 2800 * time.Millisecond}, a)
		require.Equal(t, []string{"db"}, d.Detected())
		var es [2]tracker.Estimate
		v := d.Explain([]string{"ok", "db"}, 2, 1, t0, es[:])
		require.False(t, es[0].Failing)
		require.True(t, es[1].Failing)
		require.Equal(t, ReasonFailing, v.Reason)
		require.Equal(t, 1, v.Probe)
	})
}

// TestProbeLimits pins the probe bookkeeping: one probe per destination in
// flight, one started per sub-window, none without an offer; a probe's
// reservation ends when it is observed, whatever its outcome.
func TestProbeLimits(t *testing.T) {
	c := DefaultConfig()
	sw := grid.SubWindow()
	start := grid.EpochStart(grid.Epoch(t0) + 1) // the start of a sub-window
	d, _, _ := newTestDecider(t, c, map[string]tracker.Estimate{"db": est(2000, 700), "other": est(2000, 700), "fine": est(700, 700)})

	a := d.Decide("db", 1, start)
	require.Equal(t, 4*time.Second, a.ProbeTimeout)
	b := d.Decide("db", 1, start)
	require.True(t, d.Probe(&a, start.Add(a.Timeout)))
	require.True(t, a.Probe)
	require.False(t, d.Probe(&a, start.Add(a.Timeout)), "already a probe")
	require.False(t, d.Probe(&b, start.Add(b.Timeout)), "one in flight")
	require.Zero(t, d.Decide("db", 1, start.Add(time.Second)).ProbeTimeout, "none offered while one is in flight")

	o := d.Decide("other", 1, start)
	require.True(t, d.Probe(&o, start.Add(o.Timeout)), "per destination")
	fine := d.Decide("fine", 1, start)
	require.Zero(t, fine.ProbeTimeout)
	require.False(t, d.Probe(&fine, start.Add(fine.Timeout)), "not offered")

	d.Observe(a, Completed, 2*time.Second, start.Add(2*time.Second))
	require.Zero(t, d.Decide("db", 1, start.Add(3*time.Second)).ProbeTimeout, "one started in this sub-window already")
	c2 := d.Decide("db", 1, start.Add(3*time.Second))
	c2.ProbeTimeout = 4 * time.Second // as offered earlier: Probe checks the bookkeeping itself
	require.False(t, d.Probe(&c2, start.Add(3*time.Second+c2.Timeout)))

	next := start.Add(sw)
	e := d.Decide("db", 1, next)
	require.Equal(t, 4*time.Second, e.ProbeTimeout, "offered again in the next sub-window")
	require.True(t, d.Probe(&e, next.Add(e.Timeout)))
	d.Observe(e, Canceled, time.Second, next.Add(time.Second))
	require.False(t, d.Probe(&c2, next.Add(2*time.Second)), "still one per sub-window")

	s := d.Stats()
	require.Equal(t, uint64(3), s.ProbesStarted)
	require.Equal(t, OutcomeCounts{Completed: 1, Canceled: 1}, s.ProbesEnded)
	require.Equal(t, 1, s.ProbesInFlight) // "other"

	// Once the sub-window is over, the destinations' state goes.
	d.Observe(o, TimedOut, 4*time.Second, start.Add(4*time.Second))
	d.Record("other", Completed, 10, next.Add(2*sw))
	d.Record("db", Completed, 10, next.Add(2*sw))
	require.Zero(t, d.Stats().Tracked)
	require.Equal(t, OutcomeCounts{Completed: 1, TimedOut: 1, Canceled: 1}, d.Stats().ProbesEnded)

	// A probe that timed out after P pauses the destination's probes for
	// ProbePause·P after it ended, across sub-windows; a completed probe
	// does not.
	later := next.Add(10 * sw)
	f := d.Decide("db", 1, later)
	require.True(t, d.Probe(&f, later.Add(f.Timeout)))
	ended := later.Add(f.ProbeTimeout)
	d.Observe(f, TimedOut, f.ProbeTimeout, ended)
	resume := ended.Add(8 * time.Second) // ProbePause·P = 2·4 s: beyond the next sub-window
	for _, at := range []time.Time{ended.Add(sw), resume.Add(-time.Millisecond)} {
		g := d.Decide("db", 1, at)
		require.Zero(t, g.ProbeTimeout, "paused at %v", at.Sub(ended))
		g.ProbeTimeout = f.ProbeTimeout
		require.False(t, d.Probe(&g, at))
	}
	require.Equal(t, 1, d.Stats().Tracked, "the pause is state")
	g := d.Decide("db", 1, resume)
	require.Equal(t, 4*time.Second, g.ProbeTimeout)
	require.True(t, d.Probe(&g, resume))
}

// TestProbeOfDecidingDestinationOnly pins the probe a verdict offers when
// the deciding destination's probe is refused by the bookkeeping (one in
// flight): none, even though another destination's probe is due; only when
// the fallback decides is the first destination with a probe due offered.
// And Probe refuses an attempt whose probe timeout is not beyond its
// timeout, as the rule never offers one.
func TestProbeOfDecidingDestinationOnly(t *testing.T) {
	start := grid.EpochStart(grid.Epoch(t0) + 1)
	d, _, _ := newTestDecider(t, DefaultConfig(), map[string]tracker.Estimate{
		"a": est(2000, 700), // own timeout 1.4 s, probe 4 s
		"b": est(5000, 300), // own timeout 0.6 s, probe 10 s
	})
	v := d.Explain([]string{"a", "b"}, 2, 1, start, nil)
	require.Equal(t, 0, v.DecidedBy)
	require.Equal(t, 0, v.Probe)
	require.Equal(t, 4*time.Second, v.ProbeTimeout)

	a := d.Decide("a", 1, start)
	require.True(t, d.Probe(&a, start.Add(a.Timeout)))
	v = d.Explain([]string{"a", "b"}, 2, 1, start.Add(time.Second), nil)
	require.Equal(t, 0, v.DecidedBy, "a still decides")
	require.Equal(t, -1, v.Probe, "a's probe is in flight, and only the deciding destination's counts")
	require.Zero(t, v.ProbeTimeout)

	b := d.Decide("b", 1, start)
	require.Equal(t, 10*time.Second, b.ProbeTimeout)
	b.ProbeTimeout = b.Timeout
	require.False(t, d.Probe(&b, start.Add(b.Timeout)), "a probe timeout equal to the timeout is no probe")
	require.False(t, b.Probe)
	require.Equal(t, uint64(1), d.Stats().ProbesStarted)
}

// TestProbeEndedOtherwiseNoPause: only a probe that timed out pauses the
// next; one that completed, failed, was superseded or canceled, however
// late, leaves the next sub-window's probe due.
func TestProbeEndedOtherwiseNoPause(t *testing.T) {
	start := grid.EpochStart(grid.Epoch(t0) + 1)
	for _, o := range []Outcome{Completed, Failed, Superseded, Canceled} {
		d, _, _ := newTestDecider(t, DefaultConfig(), map[string]tracker.Estimate{"db": est(2000, 700)})
		a := d.Decide("db", 1, start)
		require.True(t, d.Probe(&a, start.Add(a.Timeout)))
		d.Observe(a, o, 3900*time.Millisecond, start.Add(3900*time.Millisecond))
		next := start.Add(grid.SubWindow())
		require.Equal(t, 4*time.Second, d.Decide("db", 1, next).ProbeTimeout, "%v: due in the next sub-window", o)
	}
}

// TestProbePauseKeptByShorterOne: a probe that ends inside the pause of an
// earlier one (it was started on a clock stepped back before that pause)
// and whose own pause would end sooner leaves the longer pause in place.
func TestProbePauseKeptByShorterOne(t *testing.T) {
	start := grid.EpochStart(grid.Epoch(t0) + 1)
	d, src, _ := newTestDecider(t, DefaultConfig(), map[string]tracker.Estimate{"db": est(2000, 700)})
	a := d.Decide("db", 1, start)
	require.Equal(t, 4*time.Second, a.ProbeTimeout)
	require.True(t, d.Probe(&a, start.Add(a.Timeout)))
	d.Observe(a, TimedOut, a.ProbeTimeout, start.Add(a.ProbeTimeout)) // paused in [start+4 s, start+12 s)

	src.set("db", est(1000, 300))       // probes of 2 s from now on
	back := start.Add(-3 * time.Second) // the previous sub-window, before the pause
	b := d.Decide("db", 1, back)
	require.Equal(t, 2*time.Second, b.ProbeTimeout)
	require.True(t, d.Probe(&b, back))
	d.Observe(b, TimedOut, b.ProbeTimeout, start.Add(5*time.Second)) // its own pause would end at start+9 s

	at := start.Add(10 * time.Second) // the next sub-window
	require.Equal(t, grid.Epoch(start)+1, grid.Epoch(at))
	require.Zero(t, d.Decide("db", 1, at).ProbeTimeout, "still in the first pause")
	require.Equal(t, 2*time.Second, d.Decide("db", 1, start.Add(12*time.Second)).ProbeTimeout, "due once it is over")

	// An hour back, before both pauses: a probe is due at once, and its own
	// timeout pauses the probes that follow on the new time line.
	src.set("db", est(2000, 700))
	back = start.Add(-time.Hour)
	c := d.Decide("db", 1, back)
	require.Equal(t, 4*time.Second, c.ProbeTimeout)
	require.True(t, d.Probe(&c, back.Add(time.Second)))
	d.Observe(c, TimedOut, c.ProbeTimeout, back.Add(5*time.Second)) // paused until back+13 s
	require.Zero(t, d.Decide("db", 1, back.Add(7*time.Second)).ProbeTimeout, "paused, in the next sub-window")
	require.Equal(t, 4*time.Second, d.Decide("db", 1, back.Add(13*time.Second)).ProbeTimeout)
}

// TestProbesDoubleOnATracker runs NewPolicy on a real tracker against a
// destination that stops answering, with one sequential caller: the
// detector makes it failing after three timeouts, every attempt but the
// probes gets the fallback, and each timed-out probe is recorded at its
// probe timeout, so successive probes (one per sub-window) double; a
// timed-out probe of P then pauses probing for 2P, so probes take at most a
// third of the caller's time. Once a pause outlasts what the window
// remembers of the last probe (after the 32 s one, at a 60 s window), the
// doubling starts over.
func TestProbesDoubleOnATracker(t *testing.T) {
	tc, tr, p := syncPolicy(t)
	now := tc.EpochStart(tc.Epoch(t0) + 1)
	for i := range 1000 { // a healthy history: 10–29 ms
		tr.RecordMillis("db", uint64(10+i%20), now.Add(-time.Duration(i)*time.Millisecond))
	}
	begin, end := now, now.Add(10*time.Minute)
	var probes []time.Duration
	var probing time.Duration
	for now.Before(end) {
		a := p.Decide("db", 1, now)
		reached := now.Add(a.Timeout)
		if p.Probe(&a, reached) {
			probes = append(probes, a.ProbeTimeout)
			probing += a.ProbeTimeout
			now = now.Add(a.ProbeTimeout)
		} else {
			require.Equal(t, 250*time.Millisecond, a.Timeout, "every other attempt gets the floor")
			now = reached
		}
		p.Observe(a, TimedOut, a.Timeout, now)
	}
	require.True(t, p.Failing("db"))
	// 2 × Q, where Q is the highest equivalent value of the last probe's
	// bucket (500 → 501, 1002 → 1003, ...).
	ramp := []time.Duration{500 * time.Millisecond, 1002 * time.Millisecond, 2006 * time.Millisecond, 4014 * time.Millisecond,
		8030 * time.Millisecond, 16_062 * time.Millisecond, 32_126 * time.Millisecond}
	require.Equal(t, ramp, probes[:len(ramp)])
	require.Equal(t, ramp[:3], probes[len(ramp):len(ramp)+3], "the doubling starts over")
	share := float64(probing) / float64(now.Sub(begin))
	require.Less(t, share, 0.34, "probes take at most a third of the time")
	require.Greater(t, share, 0.25)
}

// TestDeciderMemory checks the bound: healthy destinations keep no state, a
// flood of failing ones stays within the cap (the least recently used go
// first, a probe in flight never), and evictions are counted.
func TestDeciderMemory(t *testing.T) {
	tc := tracker.DefaultConfig()
	tc.MaxDestinations = 64
	src, rec := newFakeEstimates(map[string]tracker.Estimate{}), &fakeLearner{}
	d, err := NewDecider(DefaultConfig(), tc, src, rec)
	require.NoError(t, err)
	src.set("probed", est(2000, 700))
	a := d.Decide("probed", 1, t0)
	require.True(t, d.Probe(&a, t0))
	for i := range 10_000 {
		dest := fmt.Sprintf("junk-%d", i)
		d.Record(dest, Failed, 0, t0)
		if i%2 == 0 {
			d.Record(dest, Completed, 5, t0)
		}
		require.LessOrEqual(t, d.Stats().Tracked, 64)
	}
	for range FailingAfter {
		d.Record("recent", TimedOut, 250, t0)
	}
	s := d.Stats()
	require.LessOrEqual(t, s.Tracked, 64)
	require.Equal(t, 1, s.ProbesInFlight, "the probe in flight was kept")
	require.True(t, d.Failing("recent"))
	require.Greater(t, s.Evicted, uint64(4000))
	d.Observe(a, Completed, time.Second, t0)
	require.Equal(t, OutcomeCounts{Completed: 1}, d.Stats().ProbesEnded)
}

// TestDeciderEvictsLeastRecentlyUsed pins how the cap makes room: with
// every entry holding a failure count, a new one evicts the least
// recently used down to seven eighths of the cap (two of 16 here), and
// Stats counts the failing ones.
func TestDeciderEvictsLeastRecentlyUsed(t *testing.T) {
	tc := tracker.DefaultConfig()
	tc.MaxDestinations = 16
	d, err := NewDecider(DefaultConfig(), tc, newFakeEstimates(map[string]tracker.Estimate{}), &fakeLearner{})
	require.NoError(t, err)
	name := func(i int) string { return fmt.Sprintf("d%02d", i) }
	for i := range 16 {
		d.Record(name(i), Failed, 0, t0)
	}
	for range FailingAfter - 1 {
		d.Record(name(0), Failed, 0, t0) // d00 failing, and now the most recently used
	}
	s := d.Stats()
	require.Equal(t, 16, s.Tracked)
	require.Equal(t, 1, s.Failing)
	d.Record("new", Failed, 0, t0)
	s = d.Stats()
	require.Equal(t, 15, s.Tracked)
	require.Equal(t, uint64(2), s.Evicted)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, dest := range []string{name(1), name(2)} {
		require.NotContains(t, d.dests, dest, "least recently used")
	}
	for _, dest := range []string{name(0), name(3), name(15), "new"} {
		require.Contains(t, d.dests, dest)
	}
}

// TestDeciderConcurrent runs decisions, probes and observations from
// several goroutines (for the race detector) and checks the bookkeeping
// still holds: never two probes of one destination in flight.
func TestDeciderConcurrent(t *testing.T) {
	d, _, _ := newTestDecider(t, DefaultConfig(), map[string]tracker.Estimate{"a": est(2000, 700), "b": failingEst(400)})
	var mu sync.Mutex
	inFlight := map[string]int{}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			now := t0
			for i := range 2000 {
				now = now.Add(7 * time.Millisecond)
				dest := []string{"a", "b"}[(g+i)%2]
				a := d.Decide(dest, 1, now)
				if d.Probe(&a, now) {
					mu.Lock()
					inFlight[dest]++
					require.Equal(t, 1, inFlight[dest])
					mu.Unlock()
				}
				if a.Probe {
					mu.Lock()
					inFlight[dest]--
					mu.Unlock()
				}
				d.Observe(a, []Outcome{Completed, TimedOut, Failed}[i%3], time.Millisecond, now)
			}
		})
	}
	wg.Wait()
	require.Zero(t, d.Stats().ProbesInFlight)
}

func TestNewDeciderErrors(t *testing.T) {
	_, err := NewPolicy(DefaultConfig(), nil)
	require.ErrorIs(t, err, ErrNoTracker)
	tr, err := tracker.NewSync[string](tracker.DefaultConfig())
	require.NoError(t, err)
	bad := DefaultConfig()
	bad.Quantile = 2
	_, err = NewPolicy(bad, tr)
	require.ErrorIs(t, err, ErrQuantile)
	_, err = NewDecider(DefaultConfig(), tracker.DefaultConfig(), nil, tr)
	require.ErrorIs(t, err, ErrNoEstimates)
	_, err = NewDecider(DefaultConfig(), tracker.Config{}, newFakeEstimates(nil), tr)
	require.Error(t, err)
	var _ Policy = (*Decider)(nil)
}

// TestDecisionAccessors: the rule's reads of a decision input are the
// estimate's own methods.
func TestDecisionAccessors(t *testing.T) {
	for _, e := range []tracker.Estimate{
		{},
		{Source: tracker.SourceFleet, ValueMillis: 80, LocalValueMillis: 120, Decision: tracker.Decision{ValueMillis: 70}},
		{Source: tracker.SourceFleet, ValueMillis: 80, LocalValueMillis: 120, Decision: tracker.Decision{ValueMillis: 110, Guarded: true}},
		{Source: tracker.SourceLocal, ValueMillis: 80, Failing: true},
		{Source: tracker.SourceNone, ValueMillis: 80, Decision: tracker.Decision{ValueMillis: 70}},
	} {
		in := e.Input()
		v, ok := in.Value()
		wv, wok := e.DecisionValue()
		require.Equal(t, wv, v)
		require.Equal(t, wok, ok)
		require.Equal(t, e.DecisionQuantileMillis(), in.QuantileMillis)
		require.Equal(t, e.Source, in.Source)
		require.Equal(t, e.Decision.Guarded, in.Guarded)
		require.Equal(t, e.Failing, in.Failing)
	}
}

// inputsOf is the decision inputs of es.
func inputsOf(es []tracker.Estimate) []tracker.DecisionInput {
	in := make([]tracker.DecisionInput, len(es))
	for i := range es {
		in[i] = es[i].Input()
	}
	return in
}

// syncPolicy returns the default Decider (NewPolicy) over a new SyncTracker
// of the default tracker configuration, and that configuration.
func syncPolicy(t *testing.T) (tracker.Config, *tracker.SyncTracker[string], *Decider) {
	t.Helper()
	tc := tracker.DefaultConfig()
	tr, err := tracker.NewSync[string](tc)
	require.NoError(t, err)
	d, err := NewPolicy(DefaultConfig(), tr)
	require.NoError(t, err)
	return tc, tr, d
}

// randomEstimate draws an estimate of the kinds the rule's property tests
// combine: none, failing, capped (its decision value below its quantile),
// guarded or plain; with floor > 0 also one capped at most at floor with
// its quantile well above it (its own timeout the fallback, its probe
// above it).
func randomEstimate(r *rand.Rand, floor uint64) tracker.Estimate {
	q := uint64(r.IntN(5000))
	kinds := 5
	if floor > 0 {
		kinds = 6
	}
	switch r.IntN(kinds) {
	case 0:
		return tracker.Estimate{}
	case 1:
		return failingEst(q)
	case 2:
		return est(q, uint64(r.IntN(int(q)+1)))
	case 3:
		return guardedEst(q, q+uint64(r.IntN(3000)), q)
	case 5:
		return est(q+4*floor, uint64(r.IntN(int(floor)+1)))
	}
	return est(q, q)
}

// TestQuickCombinesAsTheRule: the memos of random decision inputs (none,
// failing, capped well below and just below the fallback, guarded,
// plain), combined as Quick combines them, give the rule's verdict on the
// inputs for a request that needs all of them, for every memoized
// attempt, or refuse exactly when an input is failing.
func TestQuickCombinesAsTheRule(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	seen := map[string]int{}
	for i := range 1500 {
		c := cfg(int64(1+r.IntN(300)), int64(1000+r.IntN(60_000)), 0.5+3*r.Float64())
		d, _, _ := newTestDecider(t, c, nil)
		in := make([]tracker.DecisionInput, 1+r.IntN(4))
		failing := false
		for j := range in {
			e := randomEstimate(r, uint64(c.Backoff.Min.Milliseconds()))
			in[j] = e.Input()
			failing = failing || in[j].Failing
		}
		for attempt := 1; attempt <= tracker.MemoSlots; attempt++ {
			m := make([]tracker.Memo, len(in))
			for j := range in {
				m[j] = d.Memo(&in[j], attempt-1)
			}
			got, ok := combine(m)
			require.Equal(t, !failing, ok, "case %d: %+v attempt %d", i, in, attempt)
			if !ok {
				continue
			}
			want := d.rules[attempt-1].verdict(in, len(in))
			var src tracker.Source
			var guarded bool
			if want.DecidedBy >= 0 {
				src, guarded = in[want.DecidedBy].Source, in[want.DecidedBy].Guarded
			}
			require.Equal(t, []any{want.Timeout, want.DecidedBy, want.Reason, want.ProbeTimeout, src, guarded},
				[]any{got.Timeout(), got.DecidedBy(), got.Reason(), got.ProbeTimeout(), got.Source(), got.Guarded()},
				"case %d: %+v attempt %d", i, in, attempt)
			if want.Fallback && want.Probe > 0 {
				seen["fallback, a later destination's probe"]++
			}
			if !want.Fallback && want.Probe >= 0 {
				seen["decided, its probe"]++
			}
			if guarded {
				seen["guarded"]++
			}
		}
	}
	for _, k := range []string{"fallback, a later destination's probe", "decided, its probe", "guarded"} {
		require.Positive(t, seen[k], "%s never combined: %v", k, seen)
	}
}

// TestQuickRefusesFailing: over a Fleet, Quick gives no verdict for a
// destination whose published decision input is failing (its local view
// holds only timed-out samples), alone or with others, while it does for a
// healthy one.
func TestQuickRefusesFailing(t *testing.T) {
	tc := tracker.DefaultConfig()
	fc := tracker.DefaultFleetConfig()
	fc.Self, fc.Tracker = "self", tc
	local, err := tracker.NewSync[string](tc)
	require.NoError(t, err)
	f, err := tracker.NewFleet(fc, local)
	require.NoError(t, err)
	d, err := NewDecider(DefaultConfig(), tc, f, local)
	require.NoError(t, err)
	now := tc.EpochStart(tc.Epoch(t0)).Add(time.Second)
	for range 5 {
		local.RecordMillis("ok", 20, now)
		local.RecordTimeoutMillis("dead", 500, now)
	}
	dests := []string{"ok", "dead"}
	in := make([]tracker.DecisionInput, 2)
	var v Verdict
	for range 2 { // the first fills the estimate cache, the second publishes
		d.ExplainTo(&v, dests, 2, 1, now, in)
	}
	require.False(t, in[0].Failing)
	require.True(t, in[1].Failing)
	q, ok := d.Quick1("ok", 1, now)
	require.True(t, ok)
	require.Equal(t, DefaultConfig().Backoff.Min, q.Timeout())
	_, ok = d.Quick1("dead", 1, now)
	require.False(t, ok, "failing: no quick verdict")
	_, ok = d.Quick(dests, 1, now)
	require.False(t, ok)
}

// TestDeciderSweep: state that holds nothing any more (a probe that
// completed, its sub-window over) is dropped by Sweep even if its
// destination is never seen again, so Quiet, and the quick paths, come
// back; a failure count, a probe in flight and a probe's sub-window are
// kept.
func TestDeciderSweep(t *testing.T) {
	tc, tr, d := syncPolicy(t)
	now := tc.EpochStart(tc.Epoch(t0) + 1)
	for i := range 100 {
		tr.RecordMillis("db", 10, now.Add(-time.Duration(i)*time.Millisecond))
	}
	require.True(t, d.Quiet())

	// x: a probe that completed; y: one timed-out attempt; z: a probe in flight.
	a := d.Decide("x", 1, now)
	a.ProbeTimeout = 2 * a.Timeout
	require.True(t, d.Probe(&a, now.Add(a.Timeout)))
	d.Observe(a, Completed, a.Timeout+time.Millisecond, now.Add(a.Timeout+time.Millisecond))
	y := d.Decide("y", 1, now)
	d.Observe(y, TimedOut, y.Timeout, now.Add(y.Timeout))
	z := d.Decide("z", 1, now)
	z.ProbeTimeout = 2 * z.Timeout
	require.True(t, d.Probe(&z, now.Add(z.Timeout)))
	require.Equal(t, 3, d.Stats().Tracked)

	d.Sweep(now.Add(time.Second)) // x's probe was started in this sub-window: kept
	require.Equal(t, 3, d.Stats().Tracked)
	later := now.Add(tc.SubWindow() + time.Second)
	d.Sweep(later)
	require.Equal(t, 2, d.Stats().Tracked, "x holds nothing any more; y's count and z's probe stay")
	require.False(t, d.Quiet())

	d.Observe(z, Completed, z.Timeout+time.Millisecond, later)
	d.Observe(d.Decide("y", 1, later), Completed, time.Millisecond, later)
	d.Sweep(later.Add(tc.SubWindow()))
	require.True(t, d.Quiet(), "nothing held: the quick paths are back")
}

// TestProbeAfterClockStepBack: a clock stepped back (an hour) does not
// hold a failing destination's probes for the length of the step: the
// probe's sub-window and the pause after its timeout lie ahead of the new
// time line, and a probe is due on it at once, one per sub-window as
// always.
func TestProbeAfterClockStepBack(t *testing.T) {
	tc, tr, p := syncPolicy(t)
	now := tc.EpochStart(tc.Epoch(t0) + 1)
	for i := range 1000 {
		tr.RecordMillis("db", uint64(10+i%20), now.Add(-time.Duration(i)*time.Millisecond))
	}
	for range FailingAfter {
		a := p.Decide("db", 1, now)
		p.Observe(a, TimedOut, a.Timeout, now.Add(a.Timeout))
	}
	now = now.Add(time.Second)
	a := p.Decide("db", 1, now)
	require.NotZero(t, a.ProbeTimeout, "a probe is due")
	require.True(t, p.Probe(&a, now.Add(a.Timeout)))
	end := now.Add(a.ProbeTimeout)
	p.Observe(a, TimedOut, a.ProbeTimeout, end) // a pause follows
	require.Zero(t, p.Decide("db", 1, end.Add(time.Millisecond)).ProbeTimeout, "paused")
	require.NotZero(t, p.Decide("db", 1, end.Add(tc.SubWindow()+ProbePause*a.ProbeTimeout)).ProbeTimeout,
		"without a step: due once the pause and the sub-window are over")

	back := end.Add(-time.Hour)
	b := p.Decide("db", 1, back)
	require.True(t, b.Failing)
	require.NotZero(t, b.ProbeTimeout, "an hour back: due at once")
	require.True(t, p.Probe(&b, back.Add(b.Timeout)))
	c := p.Decide("db", 1, back.Add(b.Timeout+time.Millisecond))
	require.False(t, p.Probe(&c, back.Add(b.Timeout+c.Timeout)), "one probe in flight at a time")
}
