package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// stateDescs are the descriptions of the metrics read at scrape time, in
// the order declared below: stateDesc adds each, so Describe sends them all.
var stateDescs []*prometheus.Desc

// stateDesc returns the description of a metric read at scrape time and adds
// it to stateDescs.
func stateDesc(name, help string, labels ...string) *prometheus.Desc {
	d := desc(name, help, labels...)
	stateDescs = append(stateDescs, d)
	return d
}

// A stateMetric is a counter or gauge without labels of its own, read at
// scrape time from S (a destination's point, the fleet's, the cluster's or
// gossip's stats): its description and how to read it, declared once.
type stateMetric[S any] struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(*S) float64
}

// counterOf is the counter name of S's value v.
func counterOf[S any](name, help string, v func(*S) uint64) stateMetric[S] {
	return stateMetric[S]{stateDesc(name, help), prometheus.CounterValue, func(s *S) float64 { return float64(v(s)) }}
}

// gaugeOf is the gauge name of S's value v.
func gaugeOf[S any, N int | uint64 | float64](name, help string, v func(*S) N) stateMetric[S] {
	return stateMetric[S]{stateDesc(name, help), prometheus.GaugeValue, func(s *S) float64 { return float64(v(s)) }}
}

// destGauge is the gauge name, by destination (label dest), of the value v
// of a destination's point.
func destGauge[N int | uint64 | float64](name, help string, v func(*point) N) stateMetric[point] {
	return stateMetric[point]{stateDesc(name, help, "dest"), prometheus.GaugeValue, func(p *point) float64 { return float64(v(p)) }}
}

// collectState sends each of ms read from s, with labels.
func collectState[S any](ch chan<- prometheus.Metric, ms []stateMetric[S], s *S, labels ...string) {
	for _, m := range ms {
		ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.value(s), labels...)
	}
}

// Descriptions of the metrics read at scrape time that have labels or may
// be absent; the others are in the tables below them.
var (
	descDestLocal = stateDesc("atnode_destination_local_quantile_seconds",
		"The configured latency quantile of the local view, per tracked destination (absent without samples).", "dest")
	descDestFleet = stateDesc("atnode_destination_fleet_quantile_seconds",
		"The configured latency quantile of the fleet view after the share cap, per tracked destination (absent without samples).", "dest")

	descProbesFinished = stateDesc("atnode_probes_finished_total", "Probes that ended, by outcome: completed (the destination answered within the probe timeout), timed_out, failed, superseded (a DoHedged attempt going on as a probe that another replica's answer beat), canceled.", "outcome")

	descMembers = stateDesc("atnode_cluster_members", "Members this node knows, by state.", "state")

	descFleetInserts = stateDesc("atnode_fleet_inserts_total", "Batches offered to the fleet view, by outcome.", "outcome")

	descGossipBytes    = stateDesc("atnode_gossip_bytes_total", "Dissemination message bytes, by direction and type.", "direction", "type")
	descGossipMessages = stateDesc("atnode_gossip_messages_total", "Dissemination messages, by direction and type.", "direction", "type")
	descGossipBatches  = stateDesc("atnode_gossip_batches_total", "Batches received (decoded) and batch messages sent, by direction.", "direction")
	descGossipOutcomes = stateDesc("atnode_gossip_insert_outcomes_total", "Received batches by fleet insert outcome.", "outcome")
	descGossipRejected = stateDesc("atnode_gossip_rejected_total", "Received dissemination data refused, by reason.", "reason")
	descGossipDelay    = stateDesc("atnode_gossip_seal_to_receive_seconds", "Delay from the end of a batch's epoch to its receipt.")
	descGossipProtocol = stateDesc("atnode_gossip_protocol", "The dissemination protocol this node runs now: 1, or 2 (destination-owned aggregation, once every member up can).")

	descWarnings = stateDesc("atnode_warnings",
		"Warnings of /v1/status current now, by kind: config_mismatch (a member refused for another window, sub-window or layout, or a seed whose gossip encryption differs), name_conflict (two live processes with one -name), clock_skew (a clock more than a quarter sub-window off its peers' median).", "kind")
	descWarningsRaised = stateDesc("atnode_warnings_raised_total", "Warnings raised (a warning that appears), by kind.", "kind")
	descDestDropped    = stateDesc("atnode_destinations_dropped_total",
		"Destinations dropped, by where: tracker (evicted from the local tracker by -max-destinations, fewest samples first), seal (left out of a sealed batch by the fleet's per-member caps, fewest samples first), fleet (evicted from the fleet view by its destination cap, or refused by it while full).", "where")
)

// nodeState is what the node's own counts are read from at scrape time.
type nodeState struct {
	dests, failing int
	dec            timeout.DeciderStats
}

// The metrics read at scrape time from a table of their own, one per
// source.
var (
	destMetrics = []stateMetric[point]{
		destGauge("atnode_destination_timeout_seconds", "The first attempt's timeout for the destination alone.",
			func(p *point) float64 { return float64(p.TimeoutMs) / 1000 }),
		destGauge("atnode_destination_samples", "Samples in the destination's fleet view after the share cap.",
			func(p *point) uint64 { return p.Samples }),
		destGauge("atnode_destination_local_samples", "Samples in the destination's local view.",
			func(p *point) uint64 { return p.LocalSamples }),
		destGauge("atnode_destination_peers", "Distinct peers with samples in the destination's fleet view, self included.",
			func(p *point) int { return p.Peers }),
		destGauge("atnode_destination_effective_peers", "(Σn)²/Σn² over the peers' sample counts in the destination's fleet view.",
			func(p *point) float64 { return p.EffPeers }),
		destGauge("atnode_destination_failing", "1 when this node treats the destination as failing (its first attempt's timeout is the fallback: the deciding view is failing, or the failure detector is), else 0.",
			func(p *point) float64 { return b2f(p.Failing) }),
	}

	nodeMetrics = []stateMetric[nodeState]{
		gaugeOf("atnode_destinations", "Destinations in the local or fleet view; per-destination metrics cover at most 100 of them.",
			func(s *nodeState) int { return s.dests }),
		gaugeOf("atnode_destinations_failing", "Destinations this node treats as failing: the view deciding for them is failing (enough samples, some timed out, none completed), or the failure detector is (3 consecutive timed-out or failed attempts of this node, no completion since).",
			func(s *nodeState) int { return s.failing }),
		counterOf("atnode_probes_started_total", "Probes started: attempts that reached their timeout and went on until the probe timeout (at most one per destination in flight, one per sub-window).",
			func(s *nodeState) uint64 { return s.dec.ProbesStarted }),
		gaugeOf("atnode_probes_in_flight", "Probes in flight.",
			func(s *nodeState) int { return s.dec.ProbesInFlight }),
		counterOf("atnode_failure_state_evicted_total", "Destinations whose failure-detector or probe state was dropped because state for too many destinations (-max-destinations) was held.",
			func(s *nodeState) uint64 { return s.dec.Evicted }),
	}

	fleetMetrics = []stateMetric[tracker.FleetStats]{
		counterOf("atnode_fleet_expired_batches_total", "Batches dropped from the fleet view because they aged out.",
			func(s *tracker.FleetStats) uint64 { return s.Expired }),
		counterOf("atnode_fleet_evicted_origins_total", "Members evicted from the fleet view by its origin cap.",
			func(s *tracker.FleetStats) uint64 { return s.OriginsEvicted }),
		counterOf("atnode_fleet_evicted_destinations_total", "Destinations evicted from the fleet view by its destination cap.",
			func(s *tracker.FleetStats) uint64 { return s.DestinationsEvicted }),
		gaugeOf("atnode_fleet_batches", "Batches (protocol v1) held by the fleet view.",
			func(s *tracker.FleetStats) int { return s.Batches }),
		gaugeOf("atnode_fleet_members", "Members (peer name and boot) whose batches (protocol v1) the fleet view holds; an aggregate (protocol v2) names none.",
			func(s *tracker.FleetStats) int { return s.Members }),
		gaugeOf("atnode_fleet_peers", "Distinct peer names whose batches (protocol v1) the fleet view holds.",
			func(s *tracker.FleetStats) int { return s.Peers }),
		gaugeOf("atnode_fleet_destinations", "Destinations with a fleet view: batches (protocol v1) or aggregates (protocol v2) held.",
			func(s *tracker.FleetStats) int { return s.Destinations }),
		gaugeOf("atnode_fleet_aggregate_destinations", "Destinations with aggregates (protocol v2) held.",
			func(s *tracker.FleetStats) int { return s.AggregateDestinations }),
		gaugeOf("atnode_fleet_aggregates", "Aggregates (protocol v2) held, over destinations and epochs.",
			func(s *tracker.FleetStats) int { return s.Aggregates }),
		counterOf("atnode_fleet_refused_destinations_total", "Batch entries not counted: a new destination while the destination cap was full of destinations two or more peers report.",
			func(s *tracker.FleetStats) uint64 { return s.DestinationsRefused }),
		counterOf("atnode_fleet_evicted_exclusions_total", "Exclusions of dead members forgotten early because too many were remembered.",
			func(s *tracker.FleetStats) uint64 { return s.ExclusionsEvicted }),
		gaugeOf("atnode_fleet_exclusions", "Exclusions of dead members the fleet view remembers.",
			func(s *tracker.FleetStats) int { return s.Excluded }),
		gaugeOf("atnode_fleet_buckets", "Sparse histogram buckets held by the fleet view over all batches (8 bytes each).",
			func(s *tracker.FleetStats) int { return s.Buckets }),
	}

	clusterMetrics = []stateMetric[cluster.Stats]{
		counterOf("atnode_cluster_messages_received_total", "User messages the cluster queued for delivery.",
			func(s *cluster.Stats) uint64 { return s.MessagesReceived }),
		counterOf("atnode_cluster_messages_dropped_total", "User messages the cluster dropped: queue full or no handler.",
			func(s *cluster.Stats) uint64 { return s.MessagesDropped }),
		counterOf("atnode_cluster_messages_too_large_total", "User messages the cluster dropped for their size.",
			func(s *cluster.Stats) uint64 { return s.MessagesTooLarge }),
		counterOf("atnode_cluster_events_dropped_total", "Membership events dropped because the event queue was full.",
			func(s *cluster.Stats) uint64 { return s.EventsDropped }),
		counterOf("atnode_cluster_bad_metadata_total", "Members whose metadata was malformed.",
			func(s *cluster.Stats) uint64 { return s.BadMetadata }),
		counterOf("atnode_cluster_join_attempts_total", "Seed joins tried.",
			func(s *cluster.Stats) uint64 { return s.JoinAttempts }),
		counterOf("atnode_cluster_join_failures_total", "Seed joins that failed.",
			func(s *cluster.Stats) uint64 { return s.JoinFailures }),
	}

	// protocolMetrics are what protocol v2 (destination-owned
	// aggregation) did; all 0 on a node that has run v1 only.
	protocolMetrics = []stateMetric[cluster.V2Stats]{
		counterOf("atnode_gossip_protocol_switches_total", "Changes of the dissemination protocol this node runs (v1 to v2 and back, as the members' levels allow).",
			func(s *cluster.V2Stats) uint64 { return s.Switches }),
		counterOf("atnode_gossip_owner_changes_total", "Recomputations of the destinations' owners (protocol v2) that changed some.",
			func(s *cluster.V2Stats) uint64 { return s.OwnerChanges }),
		counterOf("atnode_gossip_records_sent_total", "Records messages sent to destinations' owners (protocol v2), heartbeats included.",
			func(s *cluster.V2Stats) uint64 { return s.RecordsSent }),
		counterOf("atnode_gossip_records_resent_total", "Records messages sent again (protocol v2): to new owners, or answering a record pull.",
			func(s *cluster.V2Stats) uint64 { return s.Resent }),
		counterOf("atnode_gossip_aggregates_published_total", "Aggregates this node published as a destination's first owner (protocol v2).",
			func(s *cluster.V2Stats) uint64 { return s.Published }),
		counterOf("atnode_gossip_aggregates_republished_total", "Aggregates published again with a larger coverage (protocol v2).",
			func(s *cluster.V2Stats) uint64 { return s.Republished }),
		counterOf("atnode_gossip_takeovers_total", "Aggregates this node published as a destination's second owner, the first's missing (protocol v2).",
			func(s *cluster.V2Stats) uint64 { return s.Takeovers }),
		counterOf("atnode_gossip_cross_check_mismatches_total", "Second-owner checks that found the first owner's aggregate with another coverage than its own (protocol v2).",
			func(s *cluster.V2Stats) uint64 { return s.CrossCheckMismatches }),
		counterOf("atnode_gossip_record_pulls_total", "Record pulls sent (protocol v2): an owner asking origins for records it lacks.",
			func(s *cluster.V2Stats) uint64 { return s.RecordPulls }),
		counterOf("atnode_gossip_aggregate_pulls_total", "Aggregate pulls sent (protocol v2).",
			func(s *cluster.V2Stats) uint64 { return s.AggPulls }),
		counterOf("atnode_gossip_relayed_total", "Aggregates this node forwarded as a relay (protocol v2).",
			func(s *cluster.V2Stats) uint64 { return s.Relayed }),
		counterOf("atnode_gossip_cross_checks_total", "Second-owner checks that found the first owner's aggregate with the coverage of its own (protocol v2).",
			func(s *cluster.V2Stats) uint64 { return s.CrossChecks }),
		counterOf("atnode_gossip_repair_pulls_total", "Record pulls (of atnode_gossip_record_pulls_total) sent within a round to origins whose records of the round's epoch had not arrived (protocol v2).",
			func(s *cluster.V2Stats) uint64 { return s.RepairPulls }),
		counterOf("atnode_gossip_aggregate_repair_pulls_total", "Aggregate pulls (of atnode_gossip_aggregate_pulls_total) sent within a round to an owner, for the round's aggregates missing here (protocol v2).",
			func(s *cluster.V2Stats) uint64 { return s.AggRepairPulls }),
		counterOf("atnode_gossip_repairs_skipped_total", "A round's repair pulls not sent because too much was missing: lateness, not loss (protocol v2).",
			func(s *cluster.V2Stats) uint64 { return s.RepairsSkipped }),
		counterOf("atnode_gossip_round_digests_total", "Aggregate digests sent within a round, after the publish and the republish (protocol v2).",
			func(s *cluster.V2Stats) uint64 { return s.RoundDigests }),
		counterOf("atnode_gossip_relayed_publishes_total", "Aggregates this node published through relays, of those published, republished and taken over (protocol v2).",
			func(s *cluster.V2Stats) uint64 { return s.RelayedPublishes }),
		counterOf("atnode_gossip_relay_sends_total", "Messages this node's forwards as a relay took (protocol v2).",
			func(s *cluster.V2Stats) uint64 { return s.RelaySends }),
		counterOf("atnode_gossip_caught_up_total", "Aggregates of the epoch before the round's this node published late, for a round its loop missed (protocol v2).",
			func(s *cluster.V2Stats) uint64 { return s.CaughtUp }),
	}

	gossipMetrics = []stateMetric[cluster.GossipStats]{
		counterOf("atnode_gossip_queue_drops_total", "Received messages dropped because the queue was full.",
			func(s *cluster.GossipStats) uint64 { return s.QueueDrops }),
		counterOf("atnode_gossip_send_drops_total", "Messages not sent: the send queue was full, the member went dead or left, the cluster closed, or a batch expired while queued.",
			func(s *cluster.GossipStats) uint64 { return s.SendDrops }),
		counterOf("atnode_gossip_queue_discards_total", "Received messages never handled: still queued when the cluster closed, or arrived after.",
			func(s *cluster.GossipStats) uint64 { return s.QueueDiscards }),
		counterOf("atnode_gossip_repairs_total", "Batches obtained through anti-entropy pulls.",
			func(s *cluster.GossipStats) uint64 { return s.Repairs }),
		gaugeOf("atnode_gossip_backed_off_members", "Members backed off now: their last send failed or ran past the probe timeout, and none has succeeded since.",
			func(s *cluster.GossipStats) int { return s.BackedOff }),
	}
)

// stateCollector reads the node's state at scrape time. It is safe for
// concurrent use: every source is.
type stateCollector struct{ n *Node }

// Describe sends every description; the per-destination and by-label
// series vary, the descriptions do not.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range stateDescs {
		ch <- d
	}
}

// Collect reads the node's state now.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	now := n.clock()
	n.poll(now) // seal what is due first, so that the whole scrape reads one state
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}

	for _, d := range n.hist.tracked() {
		p := n.samplePoint(d, now)
		if p.Local.ok {
			gauge(descDestLocal, float64(p.Local.ms)/1000, d)
		}
		if p.Fleet.ok {
			gauge(descDestFleet, float64(p.Fleet.ms)/1000, d)
		}
		collectState(ch, destMetrics, &p, d)
	}
	dests := n.destinations(now)
	ns := nodeState{dests: len(dests), failing: n.failingCount(dests, now), dec: n.dec.Stats()}
	collectState(ch, nodeMetrics, &ns)
	ds := ns.dec
	for _, f := range []struct {
		o timeout.Outcome
		v uint64
	}{{timeout.Completed, ds.ProbesEnded.Completed}, {timeout.TimedOut, ds.ProbesEnded.TimedOut},
		{timeout.Failed, ds.ProbesEnded.Failed}, {timeout.Superseded, ds.ProbesEnded.Superseded},
		{timeout.Canceled, ds.ProbesEnded.Canceled}} {
		counter(descProbesFinished, f.v, f.o.String())
	}

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
	collectState(ch, fleetMetrics, &fs)
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
		collectState(ch, clusterMetrics, &cs)
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
	collectState(ch, gossipMetrics, &gs)
	version := 1.0
	if n.proto.V2() {
		version = 2
	}
	gauge(descGossipProtocol, version)
	ps := n.proto.Stats()
	collectState(ch, protocolMetrics, &ps.V2)
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
