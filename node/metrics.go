package node

import (
	"math"
	"math/big"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// metrics are the node's Prometheus metrics: instruments updated on the
// request path, and a collector that reads everything else at scrape time.
type metrics struct {
	records   prometheus.CounterFunc // the local tracker's count: no shared counter on the record path
	rejected  prometheus.Counter
	chosen    *chosenHist
	fallbacks prometheus.Counter
	guarded   prometheus.Counter
	calls     *callCounts // atnode_do_calls_total and atnode_outcomes_total
	reloads   *prometheus.CounterVec
	httpOpen  prometheus.Gauge
	httpRefd  prometheus.Counter
	state     *stateCollector

	// DoHedged's calls and hedges (hedge.go).
	hedgedCalls, hedgesSent, hedgesWon, hedgesRefused prometheus.Counter
}

func newMetrics(n *Node) *metrics {
	m := &metrics{
		records: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "atnode_records_total",
			Help: "Latency samples recorded locally (Record, RecordSince, Do, POST /v1/record).",
		}, func() float64 { return float64(n.local.Recorded()) }),
		rejected: newCounter("atnode_records_rejected_total",
			"Latency samples dropped because the destination name was empty, over 256 bytes or not UTF-8."),
		chosen: newChosenHist(),
		fallbacks: newCounter("atnode_timeout_fallbacks_total",
			"Timeout decisions made by the exponential fallback because no destination had a trusted value above it."),
		guarded: newCounter("atnode_timeout_guarded_total",
			"Timeout decisions whose deciding destination's fleet value was replaced by the local one (the local guard; GET /v1/timeout's guarded)."),
		httpOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atnode_http_connections",
			Help: "HTTP connections open on the node's own listener.",
		}),
		httpRefd: newCounter("atnode_http_connections_refused_total",
			"HTTP connections closed as soon as they were accepted because -http-max-connections were open."),
		calls: &callCounts{},
		reloads: newCounterVec("atnode_key_reloads_total", "result",
			"Reloads of the gossip key file (ReloadKeys, SIGHUP in atnode) by result: ok, or error (the file was unreadable or refused; the keyring is unchanged)."),
		hedgedCalls: newCounter("atnode_hedged_calls_total",
			"Calls of DoHedged, and requests a transport adapter may hedge through the node (timeout.Hedger): each deposits -hedge-budget of a hedge into the token bucket."),
		hedgesSent: newCounter("atnode_hedges_sent_total",
			"Hedges sent by DoHedged or by a transport adapter through the node: an attempt had not answered after its destination's hedge delay (failovers are not counted)."),
		hedgesWon: newCounter("atnode_hedges_won_total",
			"DoHedged calls answered by a hedged attempt."),
		hedgesRefused: newCounter("atnode_hedges_refused_total",
			"Hedges DoHedged did not start because the token bucket was empty (-hedge-budget of calls plus a burst of 10)."),
		state: &stateCollector{n: n},
	}
	for _, r := range []string{"ok", "error"} {
		m.reloads.WithLabelValues(r)
	}
	return m
}

// newCounter returns a counter of the name and help text.
func newCounter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// newCounterVec returns a counter of the name, one label and the help text.
func newCounterVec(name, label, help string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
}

// doResults are the values of atnode_do_calls_total's result label, indexed
// by doResult.
var doResults = [...]string{doOK: "ok", doError: "error", doTimeout: "timeout", doCanceled: "canceled"}

// doResult is how a call of Do ended, as atnode_do_calls_total counts it.
type doResult uint8

const (
	doOK doResult = iota
	doError
	doTimeout
	doCanceled
)

// outcome counts one attempt's outcome, learned elsewhere than in Do.
func (m *metrics) outcome(o timeout.Outcome) {
	if o >= timeout.Completed && int(o) < len(m.calls.other) {
		m.calls.other[o].Add(1)
	}
}

// doEnd counts one call of Do that ended with result, having learned
// outcome o (0: none, the destination's name was refused).
func (m *metrics) doEnd(result doResult, o timeout.Outcome) {
	if int(o) >= len(m.calls.pairs[result]) {
		o = 0
	}
	m.calls.pairs[result][o].Add(1)
}

// descDoCalls and descOutcomes describe atnode_do_calls_total and
// atnode_outcomes_total.
var (
	descDoCalls = desc("atnode_do_calls_total",
		"Calls of Do by result: ok, error (fn failed on its own), timeout (the adaptive timeout expired), canceled (the caller's context ended).", "result")
	descOutcomes = desc("atnode_outcomes_total",
		"Attempts this node learned from, by outcome: completed, timed_out, failed, superseded, canceled (Do, the timeout.Policy methods, POST /v1/record samples; Record and RecordSince are counted in atnode_records_total only).", "outcome")
)

// callCounts are atnode_do_calls_total and atnode_outcomes_total, counted
// so that a call of Do takes one atomic add for both: a count per pair of
// Do's result and the outcome it learned, from which Collect derives Do's
// calls by result and its share of the outcomes, and the outcomes learned
// elsewhere (the timeout.Policy methods, POST /v1/record). Each metric a
// scrape reads is a sum of counts that only grow, so it only grows too.
type callCounts struct {
	pairs [len(doResults)][timeout.Canceled + 1]atomic.Uint64 // [result][outcome], outcome 0: none learned
	other [timeout.Canceled + 1]atomic.Uint64
}

// doCalls returns atnode_do_calls_total's value for result.
func (c *callCounts) doCalls(result doResult) uint64 {
	var n uint64
	for o := range c.pairs[result] {
		n += c.pairs[result][o].Load()
	}
	return n
}

// outcomes returns atnode_outcomes_total's value for o.
func (c *callCounts) outcomes(o timeout.Outcome) uint64 {
	n := c.other[o].Load()
	for r := range c.pairs {
		n += c.pairs[r][o].Load()
	}
	return n
}

// Describe sends the two metrics' descriptions.
func (c *callCounts) Describe(ch chan<- *prometheus.Desc) {
	ch <- descDoCalls
	ch <- descOutcomes
}

// Collect sends Do's calls for every result and the outcomes for every
// outcome, zeros included.
func (c *callCounts) Collect(ch chan<- prometheus.Metric) {
	for r, name := range doResults {
		ch <- prometheus.MustNewConstMetric(descDoCalls, prometheus.CounterValue, float64(c.doCalls(doResult(r))), name)
	}
	for o := timeout.Completed; o <= timeout.Canceled; o++ {
		ch <- prometheus.MustNewConstMetric(descOutcomes, prometheus.CounterValue, float64(c.outcomes(o)), o.String())
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.records, m.rejected, m.chosen, m.fallbacks, m.guarded, m.calls, m.reloads,
		m.hedgedCalls, m.hedgesSent, m.hedgesWon, m.hedgesRefused, m.httpOpen, m.httpRefd, m.state}
}

// observe counts one decision in atnode_timeout_chosen_seconds and the
// fallback and guard counters.
func (m *metrics) observe(d Decision) { m.observeOf(&d) }

// observeOf is observe through a pointer, for the hot paths.
func (m *metrics) observeOf(d *Decision) {
	m.chosen.observe(d.Source, d.Timeout)
	if d.Fallback {
		m.fallbacks.Inc()
	}
	if d.Guarded {
		m.guarded.Inc()
	}
}

// observeQuick is observeOf for the decision of the quick verdict v
// (Decision.fromQuick).
func (m *metrics) observeQuick(v timeout.QuickVerdict) {
	if s, ms := v.Source(), v.TimeoutMillis(); !m.chosen.counted(s, ms) {
		m.chosen.observeProbing(s, ms)
	}
	if v.DecidedBy() < 0 {
		m.fallbacks.Inc()
	} else if v.Guarded() {
		m.guarded.Inc()
	}
}

// chosenBounds are the upper bounds of atnode_timeout_chosen_seconds'
// buckets: 1 ms .. 131 s, doubling.
var chosenBounds = prometheus.ExponentialBuckets(0.001, 2, 18)

// descChosen describes atnode_timeout_chosen_seconds.
var descChosen = desc("atnode_timeout_chosen_seconds", chosenHelp, "source")

const chosenHelp = "Timeouts chosen by Timeout, TimeoutQuorum, Do and GET /v1/timeout, by source: the deciding destination's estimate source, as GET /v1/timeout's source (none: the exponential fallback decided)."

// chosenHist is atnode_timeout_chosen_seconds by source: a Prometheus
// histogram of chosenBounds, observed with one atomic add in the common
// case rather than prometheus.Histogram's binary search and four atomic
// operations (it is on every decision's path). A timeout of whole
// milliseconds (every decision's is) is counted in vals, a count per
// distinct (source, milliseconds) pair: the bucket and the sum of those
// observations follow from the value at Collect. Others, and values that
// find no room in vals, are counted in by: a bucket count found with a
// table lookup and an integer comparison or two (chosenBucket), and an
// exact sum, two atomic adds. Its buckets and counts are exactly what a
// prometheus.HistogramVec of the same bounds reports for the same
// observations: a value falls in the first bucket whose bound it does not
// exceed, compared as float64 seconds. Its sum is exact: the observed
// durations are added as integers (by's 128-bit sums of nanoseconds, vals'
// counts times their values) and converted to float64 seconds once, at
// Collect, which gives the float64 nearest to the true sum where
// Prometheus' float adds round at every observation
// (TestChosenHistMatchesPrometheus). The count is the sum of the bucket
// counts, so a scrape always sees buckets and count agree; by's sum is
// read after them and may include an observation its buckets do not.
type chosenHist struct {
	by   [tracker.SourceFleet + 1]chosenCounts
	vals [chosenVals]chosenVal
}

// chosenVal counts the observations of one value: key is its source and
// milliseconds (chosenKey), 0 while the slot is free; a slot once taken
// keeps its key.
type chosenVal struct {
	key, n atomic.Uint64
}

// The size of chosenHist.vals (a power of two), how many slots an
// observation looks at from its value's, and the values it holds: below
// chosenValMax milliseconds, so that a count times its value in
// nanoseconds fits in 128 bits and the value in a Duration. Chosen
// timeouts take few distinct values (each is a tracker bucket's value
// times the safety factor and the attempt's doubling, or a fallback,
// clamped), so the table rarely fills; a full one costs only the two adds.
const (
	chosenValBits = 10
	chosenVals    = 1 << chosenValBits
	chosenProbes  = 4
	chosenValMax  = 1 << 40
)

// chosenKey is vals' key of ms milliseconds from source s (ms <
// chosenValMax, s < 4): never 0.
func chosenKey(s tracker.Source, ms uint64) uint64 { return (ms<<2 | uint64(s)) + 1 }

// chosenCounts are one source's bucket counts (the last one above every
// bound) and the sum of its observations in nanoseconds, a two's
// complement 128-bit integer: lo, and hi, which takes lo's carries and
// borrows (a scrape between the two adds of the one observation in 2^64
// ns that carries may read a sum 2^64 ns short), each on its own cache
// lines.
type chosenCounts struct {
	counts [19]atomic.Uint64
	lo, hi atomic.Uint64
	_      [88]byte
}

func newChosenHist() *chosenHist {
	if len(chosenBounds)+1 != len(chosenCounts{}.counts) {
		panic("node: chosen histogram bounds")
	}
	return &chosenHist{}
}

// observe counts one timeout d chosen from source s (one of the three; an
// unknown one is counted as none).
func (h *chosenHist) observe(s tracker.Source, d time.Duration) {
	if ms := d / time.Millisecond; ms*time.Millisecond == d && ms >= 0 && ms < chosenValMax {
		h.observeMillis(s, uint64(ms))
		return
	}
	h.add(s, d)
}

// observeMillis is observe of ms milliseconds: one atomic add to the
// count of its value, found in its first slot (counted), or
// observeProbing's.
func (h *chosenHist) observeMillis(s tracker.Source, ms uint64) {
	if !h.counted(s, ms) {
		h.observeProbing(s, ms)
	}
}

// counted counts ms milliseconds from source s in its value's first slot
// and reports whether it could: observeMillis but for its call of
// observeProbing, so that it inlines into the decisions' paths.
func (h *chosenHist) counted(s tracker.Source, ms uint64) bool {
	if uint(s) < uint(len(h.by)) && ms < chosenValMax {
		key := chosenKey(s, ms)
		if v := &h.vals[chosenSlot(key)]; v.key.Load() == key {
			v.n.Add(1)
			return true
		}
	}
	return false
}

// observeProbing is observeMillis beyond the value's first slot: it
// looks at chosenProbes slots from there, takes a free one for the value,
// and counts it with add when none is or can be the value's (or ms is not
// below chosenValMax).
func (h *chosenHist) observeProbing(s tracker.Source, ms uint64) {
	if int(s) >= len(h.by) {
		s = tracker.SourceNone
	}
	if ms >= chosenValMax {
		h.add(s, time.Duration(ms)*time.Millisecond)
		return
	}
	key := chosenKey(s, ms)
	i := chosenSlot(key)
	for p := range uint64(chosenProbes) {
		v := &h.vals[(i+p)&(chosenVals-1)]
		k := v.key.Load()
		if k == 0 {
			if v.key.CompareAndSwap(0, key) {
				k = key
			} else {
				k = v.key.Load() // another value took the slot first, or this one
			}
		}
		if k == key {
			v.n.Add(1)
			return
		}
	}
	h.add(s, time.Duration(ms)*time.Millisecond)
}

// chosenSlot is the first slot of vals a key looks at: a Fibonacci hash
// of it, chosenValBits bits.
func chosenSlot(key uint64) uint64 { return key * 0x9e3779b97f4a7c15 >> (64 - chosenValBits) }

// add counts d in by: its bucket's count and the exact sum.
func (h *chosenHist) add(s tracker.Source, d time.Duration) {
	if int(s) >= len(h.by) {
		s = tracker.SourceNone
	}
	c := &h.by[s]
	c.counts[chosenBucket(d)].Add(1)
	u := uint64(d)
	carry := c.lo.Add(u) < u
	switch {
	case d >= 0 && carry:
		c.hi.Add(1)
	case d < 0 && !carry: // adding d sign-extended: hi + (2^64 − 1) + carry
		c.hi.Add(math.MaxUint64)
	}
}

// sum returns c's sum in nanoseconds.
func (c *chosenCounts) sum() *big.Int {
	hi, lo := c.hi.Load(), c.lo.Load()
	for range 3 { // a carry between the loads: read again
		if h := c.hi.Load(); h != hi {
			hi, lo = h, c.lo.Load()
		}
	}
	ns := new(big.Int).Lsh(big.NewInt(int64(hi)), 64) // hi signed: the sum's sign
	return ns.Add(ns, new(big.Int).SetUint64(lo))
}

// chosenBucket returns the bucket of d: the first whose bound d.Seconds()
// does not exceed, len(chosenBounds) when it exceeds every one. It
// compares d with chosenMax, the largest duration at or below each bound
// as Prometheus compares them (float64 seconds), starting from the first
// bound that d's bit length can reach: the doubling bounds leave at most
// two steps.
func chosenBucket(d time.Duration) int {
	if d <= chosenMax[0] {
		return 0
	}
	k := int(chosenStart[bits.Len64(uint64(d))])
	for k < len(chosenMax) && d > chosenMax[k] {
		k++
	}
	return k
}

// chosenMax[k] is the largest duration d with d.Seconds() <=
// chosenBounds[k]; chosenStart[L] the first k whose chosenMax[k] a
// duration of bit length L (at least 1<<(L-1)) can be at or below.
var chosenMax, chosenStart = chosenTables()

func chosenTables() ([]time.Duration, [65]uint8) {
	hi := make([]time.Duration, len(chosenBounds))
	for k, b := range chosenBounds {
		d := time.Duration(math.Round(b * 1e9))
		for (d + 1).Seconds() <= b {
			d++
		}
		for d.Seconds() > b {
			d--
		}
		hi[k] = d
	}
	var start [65]uint8 // [0] and [64] unused: 0 and negative durations are in bucket 0
	for l := 1; l < 64; l++ {
		k := 0
		for k < len(hi) && hi[k] < time.Duration(1)<<(l-1) {
			k++
		}
		start[l] = uint8(k)
	}
	return hi, start
}

// Describe sends atnode_timeout_chosen_seconds' description.
func (h *chosenHist) Describe(ch chan<- *prometheus.Desc) { ch <- descChosen }

// Collect sends the histogram of each source: by's counts and sum, and
// vals' counts in their values' buckets, with their values in the sum.
func (h *chosenHist) Collect(ch chan<- prometheus.Metric) {
	var counts [len(h.by)][len(chosenCounts{}.counts)]uint64
	var sums [len(h.by)]*big.Int
	for s := range h.by {
		c := &h.by[s]
		for k := range counts[s] {
			counts[s][k] = c.counts[k].Load()
		}
		sums[s] = c.sum()
	}
	for i := range h.vals {
		v := &h.vals[i]
		key := v.key.Load()
		if key == 0 {
			continue
		}
		n, s, ms := v.n.Load(), (key-1)&3, (key-1)>>2
		if n == 0 || s >= uint64(len(h.by)) {
			continue
		}
		d := time.Duration(ms) * time.Millisecond
		counts[s][chosenBucket(d)] += n
		hi, lo := bits.Mul64(n, uint64(d))
		ns := new(big.Int).Lsh(new(big.Int).SetUint64(hi), 64)
		sums[s].Add(sums[s], ns.Add(ns, new(big.Int).SetUint64(lo)))
	}
	for s := range h.by {
		buckets := make(map[float64]uint64, len(chosenBounds))
		var cum uint64
		for k, b := range chosenBounds {
			cum += counts[s][k]
			buckets[b] = cum
		}
		cum += counts[s][len(chosenBounds)]
		sum, _ := new(big.Rat).SetFrac(sums[s], big.NewInt(int64(time.Second))).Float64()
		ch <- prometheus.MustNewConstHistogram(descChosen, cum, sum, buckets, tracker.Source(s).String())
	}
}

// opened and refused count the HTTP listener's connections (connCounters).
func (m *metrics) opened(delta int) { m.httpOpen.Add(float64(delta)) }
func (m *metrics) refused()         { m.httpRefd.Inc() }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}
