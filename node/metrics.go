package node

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// metrics are the node's Prometheus metrics: instruments updated on the
// request path, and a collector that reads everything else at scrape time.
type metrics struct {
	records   prometheus.CounterFunc // the local tracker's count: no shared counter on the record path
	rejected  prometheus.Counter
	chosen    *chosenHist
	doBy      [len(doResults)]prometheus.Counter // do's children by result
	fallbacks prometheus.Counter
	guarded   prometheus.Counter
	do        *prometheus.CounterVec
	outcomes  *prometheus.CounterVec
	byOutcome [timeout.Canceled + 1]prometheus.Counter // outcomes' children
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
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "atnode_records_rejected_total",
			Help: "Latency samples dropped because the destination name was empty, over 256 bytes or not UTF-8.",
		}),
		chosen: newChosenHist(),
		fallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "atnode_timeout_fallbacks_total",
			Help: "Timeout decisions made by the exponential fallback because no destination had a trusted value above it.",
		}),
		guarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "atnode_timeout_guarded_total",
			Help: "Timeout decisions whose deciding destination's fleet value was replaced by the local one (the local guard; GET /v1/timeout's guarded).",
		}),
		httpOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atnode_http_connections",
			Help: "HTTP connections open on the node's own listener.",
		}),
		httpRefd: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "atnode_http_connections_refused_total",
			Help: "HTTP connections closed as soon as they were accepted because -http-max-connections were open.",
		}),
		do: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atnode_do_calls_total",
			Help: "Calls of Do by result: ok, error (fn failed on its own), timeout (the adaptive timeout expired), canceled (the caller's context ended).",
		}, []string{"result"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atnode_outcomes_total",
			Help: "Attempts this node learned from, by outcome: completed, timed_out, failed, superseded, canceled (Do, the timeout.Policy methods, POST /v1/record samples; Record and RecordSince are counted in atnode_records_total only).",
		}, []string{"outcome"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atnode_key_reloads_total",
			Help: "Reloads of the gossip key file (ReloadKeys, SIGHUP in atnode) by result: ok, or error (the file was unreadable or refused; the keyring is unchanged).",
		}, []string{"result"}),
		hedgedCalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "atnode_hedged_calls_total",
			Help: "Calls of DoHedged, and requests a transport adapter may hedge through the node (timeout.Hedger): each deposits -hedge-budget of a hedge into the token bucket.",
		}),
		hedgesSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "atnode_hedges_sent_total",
			Help: "Hedges sent by DoHedged or by a transport adapter through the node: an attempt had not answered after its destination's hedge delay (failovers are not counted).",
		}),
		hedgesWon: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "atnode_hedges_won_total",
			Help: "DoHedged calls answered by a hedged attempt.",
		}),
		hedgesRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "atnode_hedges_refused_total",
			Help: "Hedges DoHedged did not start because the token bucket was empty (-hedge-budget of calls plus a burst of 10).",
		}),
		state: &stateCollector{n: n},
	}
	for _, r := range []string{"ok", "error"} {
		m.reloads.WithLabelValues(r)
	}
	for r, name := range doResults {
		m.doBy[r] = m.do.WithLabelValues(name)
	}
	for o := timeout.Completed; o <= timeout.Canceled; o++ {
		m.byOutcome[o] = m.outcomes.WithLabelValues(o.String())
	}
	return m
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

// outcome counts one attempt's outcome.
func (m *metrics) outcome(o timeout.Outcome) {
	if int(o) < len(m.byOutcome) && m.byOutcome[o] != nil {
		m.byOutcome[o].Inc()
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.records, m.rejected, m.chosen, m.fallbacks, m.guarded, m.do, m.outcomes, m.reloads,
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

// chosenBounds are the upper bounds of atnode_timeout_chosen_seconds'
// buckets: 1 ms .. 131 s, doubling.
var chosenBounds = prometheus.ExponentialBuckets(0.001, 2, 18)

// descChosen describes atnode_timeout_chosen_seconds.
var descChosen = desc("atnode_timeout_chosen_seconds", chosenHelp, "source")

const chosenHelp = "Timeouts chosen by Timeout, TimeoutQuorum, Do and GET /v1/timeout, by source: the deciding destination's estimate source, as GET /v1/timeout's source (none: the exponential fallback decided)."

// chosenHist is atnode_timeout_chosen_seconds by source: a Prometheus
// histogram of chosenBounds, observed with one atomic add to its bucket and
// one compare-and-swap of its sum rather than prometheus.Histogram's
// binary search and four atomic operations (it is on every decision's
// path). Its buckets and sums are exactly what a prometheus.HistogramVec
// of the same bounds reports for the same observations: a value falls in
// the first bucket whose bound it does not exceed, compared as float64
// seconds, and sums add the same float64 values in order
// (TestChosenHistMatchesPrometheus). The count is the sum of the bucket
// counts, so a scrape always sees buckets and count agree; the sum is read
// after them and may include an observation the buckets do not.
type chosenHist struct {
	by [tracker.SourceFleet + 1]chosenCounts
}

// chosenCounts are one source's bucket counts (the last one above every
// bound) and the float64 bits of its sum, each on its own cache lines.
type chosenCounts struct {
	counts [19]atomic.Uint64
	sum    atomic.Uint64
	_      [96]byte
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
	if int(s) >= len(h.by) {
		s = tracker.SourceNone
	}
	c := &h.by[s]
	v := d.Seconds()
	c.counts[chosenBucket(d, v)].Add(1)
	for {
		old := c.sum.Load()
		if c.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// chosenBucket returns the bucket of d, v = d.Seconds(): the first whose
// bound v does not exceed, len(chosenBounds) when it exceeds every one.
// The doubling bounds give it from the bit length of d in milliseconds,
// then the float64 comparison settles the values at a bound exactly as
// Prometheus compares them.
func chosenBucket(d time.Duration, v float64) int {
	k := 0
	if d > time.Millisecond {
		k = min(bits.Len64(uint64((d-1)/time.Millisecond)), len(chosenBounds))
	}
	for k < len(chosenBounds) && !(v <= chosenBounds[k]) {
		k++
	}
	for k > 0 && v <= chosenBounds[k-1] {
		k--
	}
	return k
}

// Describe sends atnode_timeout_chosen_seconds' description.
func (h *chosenHist) Describe(ch chan<- *prometheus.Desc) { ch <- descChosen }

// Collect sends the histogram of each source.
func (h *chosenHist) Collect(ch chan<- prometheus.Metric) {
	for s := range h.by {
		c := &h.by[s]
		buckets := make(map[float64]uint64, len(chosenBounds))
		var cum uint64
		for k, b := range chosenBounds {
			cum += c.counts[k].Load()
			buckets[b] = cum
		}
		cum += c.counts[len(chosenBounds)].Load()
		sum := math.Float64frombits(c.sum.Load())
		ch <- prometheus.MustNewConstHistogram(descChosen, cum, sum, buckets, tracker.Source(s).String())
	}
}

// opened and refused count the HTTP listener's connections (connCounters).
func (m *metrics) opened(delta int) { m.httpOpen.Add(float64(delta)) }
func (m *metrics) refused()         { m.httpRefd.Inc() }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// Descriptions of the metrics read at scrape time.
var (
	descDestLocal = desc("atnode_destination_local_quantile_seconds",
		"The configured latency quantile of the local view, per tracked destination (absent without samples).", "dest")
	descDestFleet = desc("atnode_destination_fleet_quantile_seconds",
		"The configured latency quantile of the fleet view after the share cap, per tracked destination (absent without samples).", "dest")
	descDestTimeout = desc("atnode_destination_timeout_seconds",
		"The first attempt's timeout for the destination alone.", "dest")
	descDestSamples = desc("atnode_destination_samples",
		"Samples in the destination's fleet view after the share cap.", "dest")
	descDestLocalSamples = desc("atnode_destination_local_samples",
		"Samples in the destination's local view.", "dest")
	descDestPeers = desc("atnode_destination_peers",
		"Distinct peers with samples in the destination's fleet view, self included.", "dest")
	descDestEffPeers = desc("atnode_destination_effective_peers",
		"(Σn)²/Σn² over the peers' sample counts in the destination's fleet view.", "dest")
	descDestFailing = desc("atnode_destination_failing",
		"1 when this node treats the destination as failing (its first attempt's timeout is the fallback: the deciding view is failing, or the failure detector is), else 0.", "dest")
	descDests = desc("atnode_destinations",
		"Destinations in the local or fleet view; per-destination metrics cover at most 100 of them.")
	descFailing = desc("atnode_destinations_failing",
		"Destinations this node treats as failing: the view deciding for them is failing (enough samples, some timed out, none completed), or the failure detector is (3 consecutive timed-out or failed attempts of this node, no completion since).")

	descProbesStarted  = desc("atnode_probes_started_total", "Probes started: attempts that reached their timeout and went on until the probe timeout (at most one per destination in flight, one per sub-window).")
	descProbesFinished = desc("atnode_probes_finished_total", "Probes that ended, by outcome: completed (the destination answered within the probe timeout), timed_out, failed, canceled.", "outcome")
	descProbesInFlight = desc("atnode_probes_in_flight", "Probes in flight.")
	descDetectorEvict  = desc("atnode_failure_state_evicted_total",
		"Destinations whose failure-detector or probe state was dropped because state for too many destinations (-max-destinations) was held.")

	descMembers = desc("atnode_cluster_members", "Members this node knows, by state.", "state")

	descFleetInserts = desc("atnode_fleet_inserts_total", "Batches offered to the fleet view, by outcome.", "outcome")
	descFleetExpired = desc("atnode_fleet_expired_batches_total", "Batches dropped from the fleet view because they aged out.")
	descFleetOrigEv  = desc("atnode_fleet_evicted_origins_total", "Members evicted from the fleet view by its origin cap.")
	descFleetDestEv  = desc("atnode_fleet_evicted_destinations_total", "Destinations evicted from the fleet view by its destination cap.")
	descFleetBatches = desc("atnode_fleet_batches", "Batches held by the fleet view.")
	descFleetMembers = desc("atnode_fleet_members", "Members (peer name and boot) held by the fleet view.")
	descFleetPeers   = desc("atnode_fleet_peers", "Distinct peer names held by the fleet view.")
	descFleetDests   = desc("atnode_fleet_destinations", "Destinations with a fleet view.")
	descFleetDestRef = desc("atnode_fleet_refused_destinations_total",
		"Batch entries not counted: a new destination while the destination cap was full of destinations two or more peers report.")
	descFleetExclEv  = desc("atnode_fleet_evicted_exclusions_total", "Exclusions of dead members forgotten early because too many were remembered.")
	descFleetExcl    = desc("atnode_fleet_exclusions", "Exclusions of dead members the fleet view remembers.")
	descFleetBuckets = desc("atnode_fleet_buckets", "Sparse histogram buckets held by the fleet view over all batches (8 bytes each).")

	descClusterMsgIn    = desc("atnode_cluster_messages_received_total", "User messages the cluster queued for delivery.")
	descClusterMsgDrop  = desc("atnode_cluster_messages_dropped_total", "User messages the cluster dropped: queue full or no handler.")
	descClusterMsgLarge = desc("atnode_cluster_messages_too_large_total", "User messages the cluster dropped for their size.")
	descClusterEvDrop   = desc("atnode_cluster_events_dropped_total", "Membership events dropped because the event queue was full.")
	descClusterBadMeta  = desc("atnode_cluster_bad_metadata_total", "Members whose metadata was malformed.")
	descClusterJoins    = desc("atnode_cluster_join_attempts_total", "Seed joins tried.")
	descClusterJoinFail = desc("atnode_cluster_join_failures_total", "Seed joins that failed.")

	descGossipBytes    = desc("atnode_gossip_bytes_total", "Dissemination message bytes, by direction and type.", "direction", "type")
	descGossipMessages = desc("atnode_gossip_messages_total", "Dissemination messages, by direction and type.", "direction", "type")
	descGossipBatches  = desc("atnode_gossip_batches_total", "Batches received (decoded) and batch messages sent, by direction.", "direction")
	descGossipOutcomes = desc("atnode_gossip_insert_outcomes_total", "Received batches by fleet insert outcome.", "outcome")
	descGossipRejected = desc("atnode_gossip_rejected_total", "Received dissemination data refused, by reason.", "reason")
	descGossipQDrops   = desc("atnode_gossip_queue_drops_total", "Received messages dropped because the queue was full.")
	descGossipSDrops   = desc("atnode_gossip_send_drops_total",
		"Messages not sent: the send queue was full, the member went dead or left, the cluster closed, or a batch expired while queued.")
	descGossipQDisc   = desc("atnode_gossip_queue_discards_total", "Received messages never handled: still queued when the cluster closed, or arrived after.")
	descGossipRepairs = desc("atnode_gossip_repairs_total", "Batches obtained through anti-entropy pulls.")
	descGossipDelay   = desc("atnode_gossip_seal_to_receive_seconds", "Delay from the end of a batch's epoch to its receipt.")

	descWarnings = desc("atnode_warnings",
		"Warnings of /v1/status current now, by kind: config_mismatch (a member refused for another window, sub-window or layout), name_conflict (two live processes with one -name), clock_skew (a clock more than a quarter sub-window off its peers' median).", "kind")
	descWarningsRaised = desc("atnode_warnings_raised_total", "Warnings raised (a warning that appears), by kind.", "kind")
	descDestDropped    = desc("atnode_destinations_dropped_total",
		"Destinations dropped, by where: tracker (evicted from the local tracker by -max-destinations, fewest samples first), seal (left out of a sealed batch by the fleet's per-member caps, fewest samples first), fleet (evicted from the fleet view by its destination cap, or refused by it while full).", "where")
)

// stateCollector reads the node's state at scrape time. It is safe for
// concurrent use: every source is.
type stateCollector struct{ n *Node }

// Describe sends every description; the per-destination and by-label
// series vary, the descriptions do not.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descDestLocal, descDestFleet, descDestTimeout, descDestSamples, descDestLocalSamples, descDestPeers,
		descDestEffPeers, descDestFailing, descDests, descFailing, descProbesStarted, descProbesFinished,
		descProbesInFlight, descDetectorEvict, descMembers, descFleetInserts, descFleetExpired, descFleetOrigEv,
		descFleetDestEv, descFleetBatches, descFleetMembers, descFleetPeers, descFleetDests,
		descFleetDestRef, descFleetExclEv, descFleetExcl, descFleetBuckets,
		descClusterMsgIn, descClusterMsgDrop, descClusterMsgLarge, descClusterEvDrop, descClusterBadMeta,
		descClusterJoins, descClusterJoinFail, descGossipBytes, descGossipMessages, descGossipBatches,
		descGossipOutcomes, descGossipRejected, descGossipQDrops, descGossipSDrops, descGossipQDisc, descGossipRepairs,
		descGossipDelay, descWarnings, descWarningsRaised, descDestDropped,
	} {
		ch <- d
	}
}

// Collect reads the node's state now.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	now := n.clock()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}

	for _, d := range n.hist.tracked() {
		p := n.samplePoint(d, now)
		if p.HasLocal {
			gauge(descDestLocal, float64(p.LocalMs)/1000, d)
		}
		if p.HasFleet {
			gauge(descDestFleet, float64(p.FleetMs)/1000, d)
		}
		gauge(descDestTimeout, float64(p.TimeoutMs)/1000, d)
		gauge(descDestSamples, float64(p.Samples), d)
		gauge(descDestLocalSamples, float64(p.LocalSamples), d)
		gauge(descDestPeers, float64(p.Peers), d)
		gauge(descDestEffPeers, p.EffPeers, d)
		gauge(descDestFailing, b2f(p.Failing), d)
	}
	dests := n.destinations(now)
	gauge(descDests, float64(len(dests)))
	gauge(descFailing, float64(n.failingCount(dests, now)))
	ds := n.dec.Stats()
	counter(descProbesStarted, ds.ProbesStarted)
	for _, f := range []struct {
		o timeout.Outcome
		v uint64
	}{{timeout.Completed, ds.ProbesEnded.Completed}, {timeout.TimedOut, ds.ProbesEnded.TimedOut},
		{timeout.Failed, ds.ProbesEnded.Failed}, {timeout.Canceled, ds.ProbesEnded.Canceled}} {
		counter(descProbesFinished, f.v, f.o.String())
	}
	gauge(descProbesInFlight, float64(ds.ProbesInFlight))
	counter(descDetectorEvict, ds.Evicted)

	states := map[string]int{"alive": 0, "suspect": 0, "dead": 0, "left": 0}
	for _, m := range n.members() {
		states[m.State]++
	}
	for s, k := range states {
		gauge(descMembers, float64(k), s)
	}

	fs := n.fleet.Stats()
	for o := tracker.InsertOutcome(0); o.String() != "unknown"; o++ {
		counter(descFleetInserts, fs.Outcome(o), o.String())
	}
	counter(descFleetExpired, fs.Expired)
	counter(descFleetOrigEv, fs.OriginsEvicted)
	counter(descFleetDestEv, fs.DestinationsEvicted)
	gauge(descFleetBatches, float64(fs.Batches))
	gauge(descFleetMembers, float64(fs.Members))
	gauge(descFleetPeers, float64(fs.Peers))
	gauge(descFleetDests, float64(fs.Destinations))
	counter(descFleetDestRef, fs.DestinationsRefused)
	counter(descFleetExclEv, fs.ExclusionsEvicted)
	gauge(descFleetExcl, float64(fs.Excluded))
	gauge(descFleetBuckets, float64(fs.Buckets))
	counter(descDestDropped, tracker.Stats(n.local).DestinationsEvicted, "tracker")
	counter(descDestDropped, n.proto.Stats().DestinationsDropped, "seal")
	counter(descDestDropped, fs.DestinationsEvicted+fs.DestinationsRefused, "fleet")

	current := map[string]int{}
	for _, w := range n.Warnings() {
		current[w.Kind]++
	}
	raised := map[string]uint64{}
	if n.cl != nil {
		raised = n.cl.WarningsRaised()
	}
	for _, k := range cluster.WarningKinds() {
		gauge(descWarnings, float64(current[k]), k)
		counter(descWarningsRaised, raised[k], k)
	}

	if n.cl != nil {
		cs := n.cl.Stats()
		counter(descClusterMsgIn, cs.MessagesReceived)
		counter(descClusterMsgDrop, cs.MessagesDropped)
		counter(descClusterMsgLarge, cs.MessagesTooLarge)
		counter(descClusterEvDrop, cs.EventsDropped)
		counter(descClusterBadMeta, cs.BadMetadata)
		counter(descClusterJoins, cs.JoinAttempts)
		counter(descClusterJoinFail, cs.JoinFailures)
	}

	gs := n.gossipStats()
	for _, dir := range []struct {
		name        string
		msgs, bytes map[string]uint64
	}{{"in", gs.MessagesIn, gs.BytesInByType}, {"out", gs.MessagesOut, gs.BytesOutByType}} {
		for typ, v := range dir.msgs {
			counter(descGossipMessages, v, dir.name, typ)
		}
		for typ, v := range dir.bytes {
			counter(descGossipBytes, v, dir.name, typ)
		}
	}
	counter(descGossipBatches, gs.BatchesIn, "in")
	counter(descGossipBatches, gs.BatchesOut, "out")
	for o, v := range gs.Outcomes { // the registry sorts series when it gathers
		counter(descGossipOutcomes, v, o)
	}
	for r, v := range gs.Rejected {
		counter(descGossipRejected, v, r)
	}
	counter(descGossipQDrops, gs.QueueDrops)
	counter(descGossipSDrops, gs.SendDrops)
	counter(descGossipQDisc, gs.QueueDiscards)
	counter(descGossipRepairs, gs.Repairs)
	if h := gs.SealToReceive; len(h.Counts) == len(h.Bounds)+1 {
		buckets := make(map[float64]uint64, len(h.Bounds))
		var cum uint64
		for i, b := range h.Bounds {
			cum += h.Counts[i]
			buckets[b] = cum
		}
		ch <- prometheus.MustNewConstHistogram(descGossipDelay, h.Count, h.Sum, buckets)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
