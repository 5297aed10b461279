package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// uncachedFleet reads the fleet view through EstimateUncached: the decision
// path without the estimate cache.
type uncachedFleet struct{ f *tracker.Fleet }

func (u uncachedFleet) Estimate(dest string, q float64, now time.Time) (tracker.Estimate, error) {
	return u.f.EstimateUncached(dest, q, now)
}

// useUncached makes n decide on uncached estimates: a fresh Decider (no
// detector or probe state) over EstimateUncached, recording into n's
// tracker as before.
func useUncached(tb testing.TB, n *Node) {
	tb.Helper()
	d, err := timeout.NewDecider(n.tocfg, n.tcfg, uncachedFleet{n.fleet}, n.local)
	require.NoError(tb, err)
	n.dec = d
}

// TestDecisionCacheNeverChangesADecision drives two nodes with the same
// seeded random sequence — completed, timed-out and failed attempts (the
// failure detector), caller probes, records, peer batches (censored ones
// and ones whose censoring is unknown), seals at each epoch boundary,
// bursts of attempts at the edges of the local quantile (the records a
// cached local view survives) and clock steps within a sub-window, across
// one and across the window — one
// node deciding on the cached estimates, the other on EstimateUncached,
// and after every step requires equal decisions from Timeout,
// TimeoutQuorum and Decide for several destination sets and attempts, and
// equal estimates, field by field, from the cache and without it, and at
// the end equal metrics of the decisions (the quick path counts its own).
// CI runs two seeds of 500 steps; ATNODE_LONG=1 runs five of 3000.
func TestDecisionCacheNeverChangesADecision(t *testing.T) {
	seeds, steps := uint64(2), 500
	if os.Getenv("ATNODE_LONG") == "1" {
		seeds, steps = 5, 3000
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			clk := &testClock{now: epochStart(e0)}
			mk := func() *Node {
				return newAlone(t, clk, func(c *Config) {
					c.Cluster.BootID = 0xb007
					c.Tracker.MinSamples = 5
				})
			}
			cached, naive := mk(), mk()
			useUncached(t, naive)
			nodes := []*Node{cached, naive}
			r := rand.New(rand.NewPCG(seed, 24))
			dests := []string{"a", "b", "c"}
			sets := [][]string{{"a"}, {"b"}, {"c"}, {"a", "b", "c"}, {"c", "a"}}
			var part uint16
			seen := map[string]int{}
			for step := range steps {
				now := clk.Now()
				var what string
				switch k := r.IntN(100); {
				case k < 25:
					d, lat := dests[r.IntN(3)], time.Duration(1+r.IntN(400))*time.Millisecond
					what = fmt.Sprintf("record %s %v", d, lat)
					for _, n := range nodes {
						n.Record(d, lat)
					}
				case k < 30: // a burst at the local quantile's edges, as Do's records come
					d, m := dests[r.IntN(3)], 2+r.IntN(40)
					what = fmt.Sprintf("burst %s %d", d, m)
					for range m {
						lat := time.Duration(1+r.IntN(400)) * time.Millisecond
						if e, err := cached.fleet.Estimate(d, cached.tocfg.Quantile, now); err == nil && e.HasLocalValue && r.IntN(4) > 0 {
							lat = time.Duration(max(int64(e.LocalValueMillis)+int64(r.IntN(3))-1, 0)) * time.Millisecond
						}
						o := timeout.Completed
						if r.IntN(5) == 0 {
							o = timeout.TimedOut
						}
						for _, n := range nodes {
							n.Observe(timeout.Attempt{Dest: d, Attempt: 1, Timeout: lat}, o, lat, now)
						}
					}
				case k < 55: // an attempt through the Policy methods
					d, attempt := dests[r.IntN(3)], 1+r.IntN(3)
					o := []timeout.Outcome{timeout.Completed, timeout.TimedOut, timeout.TimedOut, timeout.Failed, timeout.Superseded, timeout.Canceled}[r.IntN(6)]
					elapsed := time.Duration(r.IntN(500)) * time.Millisecond
					probe := r.IntN(2) == 0
					what = fmt.Sprintf("attempt %s %d %v probe %v", d, attempt, o, probe)
					var as []timeout.Attempt
					for _, n := range nodes {
						a := n.Decide(d, attempt, now)
						if probe {
							n.Probe(&a, now)
						}
						n.Observe(a, o, elapsed, now)
						as = append(as, a)
					}
					require.Equal(t, as[0], as[1], "step %d: %s", step, what)
				case k < 70:
					part++
					origin := fmt.Sprintf("peer-%d", r.IntN(4))
					ep := cached.tcfg.Epoch(now) - int64(1+r.IntN(3))
					b := tracker.Batch{Key: tracker.BatchKey{Origin: origin, Boot: 1, Epoch: ep, Part: part % 3}, Layout: cached.tcfg.Layout()}
					for _, d := range dests {
						if r.IntN(3) == 0 {
							continue
						}
						dc := tracker.DestCounts{Dest: d, Total: uint64(10 + r.IntN(50))}
						dc.Buckets = []tracker.Bucket{{Index: uint16(20 + r.IntN(200)), Count: uint32(dc.Total)}}
						switch r.IntN(4) {
						case 0:
							dc.TimedOut = slices.Clone(dc.Buckets)
						case 1:
							dc.CensoringUnknown = true
						}
						b.Dests = append(b.Dests, dc)
					}
					what = fmt.Sprintf("insert %v", b.Key)
					for _, n := range nodes {
						n.fleet.Insert(b, now)
					}
				case k < 75:
					n := 1 + r.IntN(4)
					what = fmt.Sprintf("live %d", n)
					for _, nd := range nodes {
						nd.fleet.SetLiveMembers(n)
					}
				case k < 92:
					what = "step"
					clk.Set(now.Add(time.Duration(r.IntN(3000)) * time.Millisecond))
				case k < 98:
					what = "next sub-window"
					clk.Set(now.Add(subMs * time.Millisecond))
				default:
					what = "past the window"
					clk.Set(now.Add(time.Minute + time.Duration(r.IntN(2))*subMs*time.Millisecond))
				}
				// The decisions first: the estimates below advance the clock.
				for _, ds := range sets {
					for attempt := 1; attempt <= 3; attempt++ {
						got, err := cached.Timeout(ds, attempt)
						require.NoError(t, err)
						want, err := naive.Timeout(ds, attempt)
						require.NoError(t, err)
						require.Equal(t, want, got, "step %d (%s): Timeout(%v, %d)", step, what, ds, attempt)
						seen["source "+got.Source.String()]++
						seen["reason "+got.Reason.String()]++
						if got.Guarded {
							seen["guarded"]++
						}
						if got.ProbeTimeout > 0 {
							seen["probe due"]++
						}
						if len(ds) > 1 {
							got, err := cached.TimeoutQuorum(ds, 1, attempt)
							require.NoError(t, err)
							want, err := naive.TimeoutQuorum(ds, 1, attempt)
							require.NoError(t, err)
							require.Equal(t, want, got, "step %d (%s): TimeoutQuorum(%v, 1, %d)", step, what, ds, attempt)
						}
					}
				}
				for _, d := range dests { // then the estimates, field by field
					for _, q := range []float64{cached.tocfg.Quantile, 0.5} {
						got, err := cached.fleet.Estimate(d, q, now)
						require.NoError(t, err)
						want, err := cached.fleet.EstimateUncached(d, q, now)
						require.NoError(t, err)
						require.Equal(t, want, got, "step %d (%s): Estimate(%s, %v)", step, what, d, q)
					}
				}
			}
			// Both counted the same decisions alike.
			require.Equal(t, decisionMetrics(t, naive), decisionMetrics(t, cached), "the decisions' metrics")
			// The sequence reaches every kind of decision.
			for _, k := range []string{"source fleet", "source local", "source none", "reason estimate",
				"reason capped", "reason failing", "reason fallback", "guarded", "probe due"} {
				require.Positive(t, seen[k], "%s never decided: %v", k, seen)
			}
		})
	}
}

// decisionMetrics is what n's metrics of its decisions say
// (atnode_timeout_chosen_seconds, atnode_timeout_fallbacks_total,
// atnode_timeout_guarded_total), as text.
func decisionMetrics(t *testing.T, n *Node) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(n.met.chosen))
	require.NoError(t, reg.Register(n.met.fallbacks))
	require.NoError(t, reg.Register(n.met.guarded))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs { // the counters' creation times differ
		for _, m := range mf.Metric {
			if m.Counter != nil {
				m.Counter.CreatedTimestamp = nil
			}
		}
	}
	return fmt.Sprint(mfs)
}

// naiveDecision is a Decision with the MarshalJSON it had through
// encoding/json: the reference of its hand-written encoding.
type naiveDecision Decision

func (n naiveDecision) MarshalJSON() ([]byte, error) {
	d := Decision(n)
	failing := d.Failing
	if failing == nil {
		failing = []string{}
	}
	var probe *int64
	if d.ProbeTimeout > 0 {
		ms := d.ProbeTimeout.Milliseconds()
		probe = &ms
	}
	return json.Marshal(struct {
		TimeoutMs int64          `json:"timeout_ms"`
		Attempt   int            `json:"attempt"`
		Need      int            `json:"need"`
		DecidedBy string         `json:"decided_by"`
		Source    tracker.Source `json:"source"`
		Guarded   bool           `json:"guarded"`
		Fallback  bool           `json:"fallback"`
		Reason    timeout.Reason `json:"reason"`
		Failing   []string       `json:"failing"`
		ProbeMs   *int64         `json:"probe_ms"`
	}{d.Timeout.Milliseconds(), d.Attempt, d.Need, d.DecidedBy, d.Source, d.Guarded, d.Fallback, d.Reason, failing, probe})
}

// naiveDecisionJSON is what GET /v1/timeout wrote for d: writeJSON's
// encoder on the reference MarshalJSON.
func naiveDecisionJSON(d Decision) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(naiveDecision(d))
	return buf.Bytes()
}

// TestDecisionJSON: the hand-written encoding of GET /v1/timeout's answer
// (and of Decision.MarshalJSON) is what encoding/json wrote, byte for byte, names with quotes, controls, HTML
// characters and non-ASCII included.
func TestDecisionJSON(t *testing.T) {
	names := []string{"", "db-1", `a"b`, `back\slash`, "tab\there", "<&>", "ünï", "\u2028", "del\x7f", "nul\x00"}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		d := Decision{
			Timeout:      time.Duration(r.Int64N(1 << 40)),
			Attempt:      1 + r.IntN(5),
			Need:         1 + r.IntN(3),
			DecidedBy:    names[r.IntN(len(names))],
			Source:       tracker.Source(r.IntN(3)),
			Guarded:      r.IntN(2) == 0,
			Fallback:     r.IntN(2) == 0,
			Reason:       timeout.Reason(r.IntN(4)),
			ProbeTimeout: time.Duration(r.Int64N(1<<40)) * time.Duration(r.IntN(2)),
		}
		for range r.IntN(3) {
			d.Failing = append(d.Failing, names[r.IntN(len(names))])
		}
		want := naiveDecisionJSON(d)
		require.Equal(t, string(want), string(append(d.appendJSON(nil), '\n')), "decision %d", i)
		got, err := json.Marshal(d)
		require.NoError(t, err)
		wantM, err := json.Marshal(naiveDecision(d))
		require.NoError(t, err)
		require.Equal(t, string(wantM), string(got), "decision %d", i)
	}
}

// TestChosenHistMatchesPrometheus: atnode_timeout_chosen_seconds, observed
// through chosenHist, gathers exactly as the prometheus.HistogramVec it
// replaced for the same observations — buckets and counts, per source —
// for random timeouts and for the values at and beside every bound, and
// its sums are exact: the float64 nearest to the true sum of the observed
// durations (where Prometheus' sequential float adds round at each one),
// through sums that carry past 2^64 ns and borrow back.
func TestChosenHistMatchesPrometheus(t *testing.T) {
	ref := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "atnode_timeout_chosen_seconds",
		Help:    chosenHelp,
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
	}, []string{"source"})
	h := newChosenHist()
	for _, s := range []tracker.Source{tracker.SourceNone, tracker.SourceLocal, tracker.SourceFleet} {
		ref.WithLabelValues(s.String())
	}
	var ds []time.Duration
	for _, b := range chosenBounds {
		at := time.Duration(math.Round(b * 1e9))
		ds = append(ds, at-1, at, at+1)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		ds = append(ds, time.Duration(r.Int64N(int64(200*time.Second))), time.Duration(r.IntN(5000))*time.Millisecond)
	}
	ds = append(ds, 0, -time.Second, 1, time.Duration(math.MaxInt64))
	for range 4 { // past 2^64 ns in every source, and back below it
		ds = append(ds, time.Duration(math.MaxInt64), time.Duration(math.MaxInt64), time.Duration(math.MaxInt64))
	}
	for range 6 {
		ds = append(ds, time.Duration(math.MinInt64))
	}
	exact := make([]*big.Int, 3)
	for i := range exact {
		exact[i] = new(big.Int)
	}
	for i, d := range ds {
		s := tracker.Source(i % 3)
		ref.WithLabelValues(s.String()).Observe(d.Seconds())
		h.observe(s, d)
		exact[s].Add(exact[s], big.NewInt(int64(d)))
	}
	gather := func(c prometheus.Collector) []*dto.MetricFamily {
		reg := prometheus.NewPedanticRegistry()
		require.NoError(t, reg.Register(c))
		mfs, err := reg.Gather()
		require.NoError(t, err)
		return mfs
	}
	want, got := gather(ref), gather(h)
	require.Len(t, got, 1)
	rounded := 0
	for _, m := range want[0].Metric { // const histograms carry no created timestamp
		m.Histogram.CreatedTimestamp = nil
		var s tracker.Source
		switch m.GetLabel()[0].GetValue() {
		case "local":
			s = tracker.SourceLocal
		case "fleet":
			s = tracker.SourceFleet
		}
		sum, _ := new(big.Rat).SetFrac(exact[s], big.NewInt(int64(time.Second))).Float64()
		if sum != m.Histogram.GetSampleSum() {
			rounded++
		}
		m.Histogram.SampleSum = &sum
	}
	require.Positive(t, rounded, "the float adds were exact: the sums test nothing")
	require.Equal(t, want[0].String(), got[0].String())
	require.Equal(t, uint64(len(ds)), got[0].Metric[0].Histogram.GetSampleCount()+got[0].Metric[1].Histogram.GetSampleCount()+got[0].Metric[2].Histogram.GetSampleCount())
}

// TestValidDestMatchesNaive: validDest's ASCII scan answers as the check it
// replaced, for ASCII names, valid and invalid UTF-8 after an ASCII prefix,
// and at the length limit.
func TestValidDestMatchesNaive(t *testing.T) {
	naive := func(d string) bool { return d != "" && len(d) <= maxDestLen && utf8.ValidString(d) }
	r := rand.New(rand.NewPCG(5, 6))
	parts := []string{"a", "db-1", "ü", "\xff", "\xe2\x82", "€", "\x00", strings.Repeat("x", 100)}
	names := []string{"", strings.Repeat("y", maxDestLen), strings.Repeat("y", maxDestLen+1), strings.Repeat("y", maxDestLen-1) + "ü"}
	for range 3000 {
		var b strings.Builder
		for range r.IntN(5) {
			b.WriteString(parts[r.IntN(len(parts))])
		}
		names = append(names, b.String())
	}
	for _, d := range names {
		require.Equal(t, naive(d), validDest(d), "%q", d)
	}
}

// TestTimeoutConcurrentMatchesUncached runs writers (records, censored
// records, peer batches) and readers (Timeout of one and of three
// destinations, Do) of one node at once, in rounds with the clock moved
// between them, and after each round, with the writers stopped, requires
// every decision to equal the one made on EstimateUncached (a Decider over
// the uncached view, which no write of the round can have left stale).
// Run with -race it also checks that the lock-free reads of the published
// inputs race with nothing. Bounded: 30 rounds of 150 operations per
// goroutine.
func TestTimeoutConcurrentMatchesUncached(t *testing.T) {
	clk := &testClock{now: epochStart(e0).Add(time.Second)}
	n := newAlone(t, clk, func(c *Config) { c.Tracker.MinSamples = 5 })
	ref, err := timeout.NewDecider(n.tocfg, n.tcfg, uncachedFleet{n.fleet}, n.local)
	require.NoError(t, err)
	dests := []string{"a", "b", "c", "d"}
	sets := [][]string{{"a"}, {"b"}, {"c", "d", "a"}, {"d"}}
	ctx := context.Background()
	for round := range 30 {
		now := clk.Now()
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Go(func() { // a writer
				r := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				for range 150 {
					d, ms := dests[r.IntN(len(dests))], uint64(1+r.IntN(300))
					if r.IntN(5) == 0 {
						n.local.RecordTimeoutMillis(d, ms, now)
					} else {
						n.Record(d, time.Duration(ms)*time.Millisecond)
					}
				}
			})
			wg.Go(func() { // a reader
				r := rand.New(rand.NewPCG(uint64(round), uint64(w)+10))
				for range 150 {
					ds := sets[r.IntN(len(sets))]
					if r.IntN(4) == 0 {
						if err := n.Do(ctx, ds[0], 1+r.IntN(2), noop); err != nil {
							t.Error(err)
							return
						}
						continue
					}
					if _, err := n.Timeout(ds, 1+r.IntN(3)); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		if round%3 == 0 {
			wg.Go(func() { // a peer's batch
				b := tracker.Batch{Key: tracker.BatchKey{Origin: fmt.Sprint("p", round%4), Boot: 1, Epoch: n.tcfg.Epoch(now) - 1},
					Layout: n.tcfg.Layout()}
				for i, d := range dests[:2+round%3] {
					b.Dests = append(b.Dests, tracker.DestCounts{Dest: d, Total: 20,
						Buckets: []tracker.Bucket{{Index: uint16(40 + 30*i + round), Count: 20}}})
				}
				n.fleet.Insert(b, now)
			})
		}
		wg.Wait()
		cached := n.dec
		for _, ds := range sets {
			for attempt := 1; attempt <= 3; attempt++ {
				got, err := n.Timeout(ds, attempt)
				require.NoError(t, err)
				n.dec = ref
				want, err := n.Timeout(ds, attempt)
				n.dec = cached
				require.NoError(t, err)
				require.Equal(t, want, got, "round %d: Timeout(%v, %d)", round, ds, attempt)
			}
		}
		clk.Set(now.Add(2 * time.Second))
	}
}

// TestQuickReadsOnlyItsDecidersMemos: a second Decider with another
// configuration over the same fleet takes over the memos the fleet keeps
// (its registration replaces the node's), and then each decides as a
// Decider of its configuration over EstimateUncached: the node's decider
// never reads the other's memos (it takes the path without them), and the
// other's memoized verdicts are its own.
func TestQuickReadsOnlyItsDecidersMemos(t *testing.T) {
	n, clk := recordedAB(t, 200, func(i int) int { return 10 + i%50 }, func(i int) int { return 100 + i%80 })
	sets := [][]string{{"a"}, {"b"}, {"a", "b"}}
	for _, ds := range sets { // published with the node's memos
		_, err := n.Timeout(ds, 1)
		require.NoError(t, err)
	}
	other := n.tocfg
	other.SafetyFactor *= 3
	d2, err := timeout.NewDecider(other, n.tcfg, n.fleet, n.local)
	require.NoError(t, err)
	ref1, err := timeout.NewDecider(n.tocfg, n.tcfg, uncachedFleet{n.fleet}, n.local)
	require.NoError(t, err)
	ref2, err := timeout.NewDecider(other, n.tcfg, uncachedFleet{n.fleet}, n.local)
	require.NoError(t, err)
	now := clk.Now()
	for _, ds := range sets {
		for attempt := 1; attempt <= 3; attempt++ {
			var w timeout.Verdict
			in := make([]tracker.DecisionInput, len(ds))
			if v, ok := d2.Quick(ds, attempt, now); ok { // the node's memos are no longer the fleet's
				ref2.ExplainTo(&w, ds, len(ds), attempt, now, in)
				requireQuick(t, w, in, v, "other: Quick(%v, %d) before a read", ds, attempt)
			}
			for range 2 { // the second time from the memos, when they hold
				got, err := n.Timeout(ds, attempt)
				require.NoError(t, err)
				cached := n.dec
				n.dec = ref1
				want, err := n.Timeout(ds, attempt)
				n.dec = cached
				require.NoError(t, err)
				require.Equal(t, want, got, "node: Timeout(%v, %d)", ds, attempt)

				d2.ExplainTo(&w, ds, len(ds), attempt, now, in)
				v, ok := d2.Quick(ds, attempt, now)
				require.True(t, ok, "Quick(%v, %d) after ExplainTo", ds, attempt)
				requireQuick(t, w, in, v, "other: Quick(%v, %d)", ds, attempt)
				ref2.ExplainTo(&w, ds, len(ds), attempt, now, in)
				requireQuick(t, w, in, v, "other: Quick(%v, %d) against the uncached", ds, attempt)
				_, ok = n.dec.Quick(ds, attempt, now)
				require.False(t, ok, "the node's decider read the other's memos")
			}
		}
	}
}

// requireQuick requires the quick verdict v to say what the verdict w
// over the inputs in does.
func requireQuick(t *testing.T, w timeout.Verdict, in []tracker.DecisionInput, v timeout.QuickVerdict, msg string, args ...any) {
	t.Helper()
	var src tracker.Source
	var guarded bool
	if w.DecidedBy >= 0 {
		src, guarded = in[w.DecidedBy].Source, in[w.DecidedBy].Guarded
	}
	want := []any{w.Timeout, w.DecidedBy, w.Reason, w.ProbeTimeout, src, guarded}
	got := []any{v.Timeout(), v.DecidedBy(), v.Reason(), v.ProbeTimeout(), v.Source(), v.Guarded()}
	require.Equal(t, want, got, append([]any{msg}, args...)...)
}

// TestQuickIgnoresOtherQuantiles: a destination's published input is of
// one quantile at a time, and hedging reads it at others; the memos a
// cell carries are only of the decider's quantile, so after a read at
// another quantile republished the cell, Timeout decides as the uncached
// rule does (from the memos again once the decision's read republishes
// them), never from memos of the other quantile's input.
func TestQuickIgnoresOtherQuantiles(t *testing.T) {
	n, clk := recordedAB(t, 400, func(i int) int { return 10 + i%200 }, func(i int) int { return 5 + i%100 })
	ref, err := timeout.NewDecider(n.tocfg, n.tcfg, uncachedFleet{n.fleet}, n.local)
	require.NoError(t, err)
	now := clk.Now()
	for _, ds := range [][]string{{"a"}, {"a", "b"}} {
		for _, q := range []float64{0.5, 0.1} {
			for range 3 {
				got, err := n.Timeout(ds, 1)
				require.NoError(t, err)
				in := make([]tracker.DecisionInput, len(ds))
				for range 2 { // the second read publishes at q
					require.NoError(t, n.fleet.DecisionInputs(in, ds, q, now))
				}
				_, quick := n.dec.Quick(ds, 1, now)
				require.False(t, quick, "Quick(%v) answered from a cell published at %v", ds, q)
				cached := n.dec
				n.dec = ref
				want, err := n.Timeout(ds, 1)
				n.dec = cached
				require.NoError(t, err)
				require.Equal(t, want, got, "Timeout(%v) after a read at %v", ds, q)
				got, err = n.Timeout(ds, 1)
				require.NoError(t, err)
				require.Equal(t, want, got, "Timeout(%v) after a read at %v, again", ds, q)
			}
		}
	}
}

// TestDoLearnsAsObserve: Do from a quick verdict (its destination's
// memos published) learns what Decide and Observe of the same attempt
// and outcome learn — completions, errors classified as completed or
// failed, timeouts censored at the timeout, cancellations — sample for
// sample, censored count for censored count, with the same detector
// state and outcome counts, also once the detector holds state.
func TestDoLearnsAsObserve(t *testing.T) {
	errFailed := errors.New("transport failed")
	classify := func(err error) timeout.Outcome {
		if errors.Is(err, errFailed) {
			return timeout.Failed
		}
		return timeout.Completed
	}
	waitDone := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	sleep := func(d time.Duration, ret error) func(context.Context) error {
		return func(context.Context) error { time.Sleep(d); return ret }
	}
	type step struct {
		name    string
		fn      func(context.Context) error
		cancel  bool // the caller cancels after 30 ms
		outcome timeout.Outcome
	}
	steps := []step{
		{"ok", sleep(12*time.Millisecond, nil), false, timeout.Completed},
		{"error", sleep(5*time.Millisecond, errRefused), false, timeout.Completed},
		{"failed", sleep(3*time.Millisecond, errFailed), false, timeout.Failed},
		{"timeout", waitDone, false, timeout.TimedOut},
		{"timeout, returns late", func(ctx context.Context) error { <-ctx.Done(); time.Sleep(7 * time.Millisecond); return ctx.Err() },
			false, timeout.TimedOut},
		{"canceled", waitDone, true, timeout.Canceled},
	}
	synctest.Test(t, func(t *testing.T) {
		mk := func() *Node {
			return newAlone(t, nil, func(c *Config) {
				c.Classify = classify
				c.Tracker.MinSamples = 5
			})
		}
		do, ref := mk(), mk()
		for i := range 300 {
			for _, n := range []*Node{do, ref} {
				n.Record("db", time.Duration(20+i%60)*time.Millisecond)
			}
		}
		r := rand.New(rand.NewPCG(9, 24))
		quick := 0
		for i := range 100 {
			s := steps[r.IntN(len(steps))]
			// The next sub-window (no probe started in it yet), or past the
			// whole window (no timed-out sample left, so no probe due).
			time.Sleep([]time.Duration{6 * time.Second, 61 * time.Second}[r.IntN(2)])
			for k := range 20 {
				for _, n := range []*Node{do, ref} {
					n.Record("db", time.Duration(20+k)*time.Millisecond)
				}
			}
			for range 2 { // publishes the memos when they can be
				if _, err := do.Timeout([]string{"db"}, 1); err != nil {
					t.Fatal(err)
				}
			}
			if _, ok := do.dec.Quick1("db", 1, time.Now()); ok {
				quick++
			}
			ctx, cancel := context.WithCancel(t.Context())
			if s.cancel {
				time.AfterFunc(30*time.Millisecond, cancel)
			}
			start := time.Now()
			a := ref.Decide("db", 1, start)
			_ = do.Do(ctx, "db", 1, s.fn)
			cancel()
			elapsed := time.Since(start)
			if s.outcome == timeout.TimedOut && a.ProbeTimeout > a.Timeout { // Do's caller probe
				ref.Probe(&a, start.Add(a.Timeout))
			}
			ref.Observe(a, s.outcome, elapsed, time.Now())

			for _, q := range []float64{0.5, 0.99, 1} {
				want, err := ref.Estimate("db", q)
				require.NoError(t, err)
				got, err := do.Estimate("db", q)
				require.NoError(t, err)
				require.Equal(t, want, got, "step %d (%s): estimate at %v", i, s.name, q)
			}
			require.Equal(t, ref.dec.Failing("db"), do.dec.Failing("db"), "step %d (%s): detector", i, s.name)
			for o := timeout.Completed; o <= timeout.Canceled; o++ {
				require.Equal(t, outcomesValue(t, ref, o.String()), outcomesValue(t, do, o.String()), "step %d (%s): %v", i, s.name, o)
			}
		}
		require.Greater(t, quick, 30, "Do seldom decided from the memos")
	})
}

// TestDoRejectsInvalidNames: Do of a destination that cannot be recorded
// (empty, not UTF-8, too long) records nothing and counts it rejected,
// every time: only a quick verdict, which such a name never has, lets Do
// skip the name's check.
func TestDoRejectsInvalidNames(t *testing.T) {
	n := newAlone(t, &testClock{now: epochStart(e0)}, nil)
	bad := []string{"", "bad\xff", strings.Repeat("x", maxDestLen+1)}
	for round := range 3 {
		for _, dest := range bad {
			require.NoError(t, n.Do(t.Context(), dest, 1, noop))
		}
		require.Equal(t, float64(len(bad)*(round+1)), counterValue(t, n.met.rejected))
		require.Zero(t, n.local.Recorded())
	}
}

// recordedAB is a node alone (MinSamples 5) at a second into epoch e0 that
// recorded rounds samples of a and of b, the i-th at a(i) and b(i) ms.
func recordedAB(t *testing.T, rounds int, a, b func(i int) int) (*Node, *testClock) {
	t.Helper()
	clk := &testClock{now: epochStart(e0).Add(time.Second)}
	n := newAlone(t, clk, func(c *Config) { c.Tracker.MinSamples = 5 })
	for i := range rounds {
		n.Record("a", time.Duration(a(i))*time.Millisecond)
		n.Record("b", time.Duration(b(i))*time.Millisecond)
	}
	return n, clk
}

// doCallsValue is atnode_do_calls_total{result} as a scrape of n reads it.
func doCallsValue(t *testing.T, n *Node, result string) float64 {
	t.Helper()
	return callsValue(t, n, descDoCalls, "result", result)
}

// outcomesValue is atnode_outcomes_total{outcome} as a scrape of n reads
// it.
func outcomesValue(t *testing.T, n *Node, outcome string) float64 {
	t.Helper()
	return callsValue(t, n, descOutcomes, "outcome", outcome)
}

// callsValue is the value of the one counter of d with label = value that
// n's callCounts collect.
func callsValue(t *testing.T, n *Node, d *prometheus.Desc, label, value string) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	n.met.calls.Collect(ch)
	close(ch)
	var got []float64
	for m := range ch {
		var pb dto.Metric
		require.NoError(t, m.Write(&pb))
		if m.Desc() == d && len(pb.Label) == 1 && pb.Label[0].GetName() == label && pb.Label[0].GetValue() == value {
			got = append(got, pb.GetCounter().GetValue())
		}
	}
	require.Len(t, got, 1, "%v{%s=%q}", d, label, value)
	return got[0]
}
