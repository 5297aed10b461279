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

// Descriptions of the metrics read at scrape time.
var (
	descDestLocal = stateDesc("atnode_destination_local_quantile_seconds",
		"The configured latency quantile of the local view, per tracked destination (absent without samples).", "dest")
	descDestFleet = stateDesc("atnode_destination_fleet_quantile_seconds",
		"The configured latency quantile of the fleet view after the share cap, per tracked destination (absent without samples).", "dest")
	descDestTimeout = stateDesc("atnode_destination_timeout_seconds",
		"The first attempt's timeout for the destination alone.", "dest")
	descDestSamples = stateDesc("atnode_destination_samples",
		"Samples in the destination's fleet view after the share cap.", "dest")
	descDestLocalSamples = stateDesc("atnode_destination_local_samples",
		"Samples in the destination's local view.", "dest")
	descDestPeers = stateDesc("atnode_destination_peers",
		"Distinct peers with samples in the destination's fleet view, self included.", "dest")
	descDestEffPeers = stateDesc("atnode_destination_effective_peers",
		"(Σn)²/Σn² over the peers' sample counts in the destination's fleet view.", "dest")
	descDestFailing = stateDesc("atnode_destination_failing",
		"1 when this node treats the destination as failing (its first attempt's timeout is the fallback: the deciding view is failing, or the failure detector is), else 0.", "dest")
	descDests = stateDesc("atnode_destinations",
		"Destinations in the local or fleet view; per-destination metrics cover at most 100 of them.")
	descFailing = stateDesc("atnode_destinations_failing",
		"Destinations this node treats as failing: the view deciding for them is failing (enough samples, some timed out, none completed), or the failure detector is (3 consecutive timed-out or failed attempts of this node, no completion since).")

	descProbesStarted  = stateDesc("atnode_probes_started_total", "Probes started: attempts that reached their timeout and went on until the probe timeout (at most one per destination in flight, one per sub-window).")
	descProbesFinished = stateDesc("atnode_probes_finished_total", "Probes that ended, by outcome: completed (the destination answered within the probe timeout), timed_out, failed, canceled.", "outcome")
	descProbesInFlight = stateDesc("atnode_probes_in_flight", "Probes in flight.")
	descDetectorEvict  = stateDesc("atnode_failure_state_evicted_total",
		"Destinations whose failure-detector or probe state was dropped because state for too many destinations (-max-destinations) was held.")

	descMembers = stateDesc("atnode_cluster_members", "Members this node knows, by state.", "state")

	descFleetInserts = stateDesc("atnode_fleet_inserts_total", "Batches offered to the fleet view, by outcome.", "outcome")
	descFleetExpired = stateDesc("atnode_fleet_expired_batches_total", "Batches dropped from the fleet view because they aged out.")
	descFleetOrigEv  = stateDesc("atnode_fleet_evicted_origins_total", "Members evicted from the fleet view by its origin cap.")
	descFleetDestEv  = stateDesc("atnode_fleet_evicted_destinations_total", "Destinations evicted from the fleet view by its destination cap.")
	descFleetBatches = stateDesc("atnode_fleet_batches", "Batches held by the fleet view.")
	descFleetMembers = stateDesc("atnode_fleet_members", "Members (peer name and boot) held by the fleet view.")
	descFleetPeers   = stateDesc("atnode_fleet_peers", "Distinct peer names held by the fleet view.")
	descFleetDests   = stateDesc("atnode_fleet_destinations", "Destinations with a fleet view.")
	descFleetDestRef = stateDesc("atnode_fleet_refused_destinations_total",
		"Batch entries not counted: a new destination while the destination cap was full of destinations two or more peers report.")
	descFleetExclEv  = stateDesc("atnode_fleet_evicted_exclusions_total", "Exclusions of dead members forgotten early because too many were remembered.")
	descFleetExcl    = stateDesc("atnode_fleet_exclusions", "Exclusions of dead members the fleet view remembers.")
	descFleetBuckets = stateDesc("atnode_fleet_buckets", "Sparse histogram buckets held by the fleet view over all batches (8 bytes each).")

	descClusterMsgIn    = stateDesc("atnode_cluster_messages_received_total", "User messages the cluster queued for delivery.")
	descClusterMsgDrop  = stateDesc("atnode_cluster_messages_dropped_total", "User messages the cluster dropped: queue full or no handler.")
	descClusterMsgLarge = stateDesc("atnode_cluster_messages_too_large_total", "User messages the cluster dropped for their size.")
	descClusterEvDrop   = stateDesc("atnode_cluster_events_dropped_total", "Membership events dropped because the event queue was full.")
	descClusterBadMeta  = stateDesc("atnode_cluster_bad_metadata_total", "Members whose metadata was malformed.")
	descClusterJoins    = stateDesc("atnode_cluster_join_attempts_total", "Seed joins tried.")
	descClusterJoinFail = stateDesc("atnode_cluster_join_failures_total", "Seed joins that failed.")

	descGossipBytes    = stateDesc("atnode_gossip_bytes_total", "Dissemination message bytes, by direction and type.", "direction", "type")
	descGossipMessages = stateDesc("atnode_gossip_messages_total", "Dissemination messages, by direction and type.", "direction", "type")
	descGossipBatches  = stateDesc("atnode_gossip_batches_total", "Batches received (decoded) and batch messages sent, by direction.", "direction")
	descGossipOutcomes = stateDesc("atnode_gossip_insert_outcomes_total", "Received batches by fleet insert outcome.", "outcome")
	descGossipRejected = stateDesc("atnode_gossip_rejected_total", "Received dissemination data refused, by reason.", "reason")
	descGossipQDrops   = stateDesc("atnode_gossip_queue_drops_total", "Received messages dropped because the queue was full.")
	descGossipSDrops   = stateDesc("atnode_gossip_send_drops_total",
		"Messages not sent: the send queue was full, the member went dead or left, the cluster closed, or a batch expired while queued.")
	descGossipQDisc   = stateDesc("atnode_gossip_queue_discards_total", "Received messages never handled: still queued when the cluster closed, or arrived after.")
	descGossipRepairs = stateDesc("atnode_gossip_repairs_total", "Batches obtained through anti-entropy pulls.")
	descGossipDelay   = stateDesc("atnode_gossip_seal_to_receive_seconds", "Delay from the end of a batch's epoch to its receipt.")

	descWarnings = stateDesc("atnode_warnings",
		"Warnings of /v1/status current now, by kind: config_mismatch (a member refused for another window, sub-window or layout), name_conflict (two live processes with one -name), clock_skew (a clock more than a quarter sub-window off its peers' median).", "kind")
	descWarningsRaised = stateDesc("atnode_warnings_raised_total", "Warnings raised (a warning that appears), by kind.", "kind")
	descDestDropped    = stateDesc("atnode_destinations_dropped_total",
		"Destinations dropped, by where: tracker (evicted from the local tracker by -max-destinations, fewest samples first), seal (left out of a sealed batch by the fleet's per-member caps, fewest samples first), fleet (evicted from the fleet view by its destination cap, or refused by it while full).", "where")
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
