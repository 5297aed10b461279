package node

import (
	"slices"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// This file is the only place that knows how the cluster disseminates
// batches. The protocol core (cluster.SyncProtocol) seals this node's
// sub-windows into the fleet view at each epoch boundary, cut to the
// fleet's per-member caps. With gossip on, the cluster owns it, spreads what
// it seals and keeps the fleet's membership; with gossip off
// (Config.DisableGossip) the node owns one with no members, so a node
// alone still has a fleet view of one peer. Either way the node polls it
// (Node.poll) from its loop and before each query, so a node that is not
// gossiping seals lazily and its view never lags an epoch boundary.

// clusterConfig is the cluster configuration: Config.Cluster with the
// node's name, boot ID and logger, and the fleet view it disseminates.
func (n *Node) clusterConfig() cluster.Config {
	cc := n.cfg.Cluster
	cc.Name = n.cfg.Name
	cc.BootID = n.boot
	cc.Seeds = slices.Clone(cc.Seeds)
	cc.Logger = n.log
	cc.OnEvent = n.onEvent
	// The cluster seals this node's sub-windows, inserts them into the
	// fleet view, spreads them, and keeps the fleet's membership. Its
	// Tracker is the fleet view's (cluster.Config.Validate checks it).
	cc.Store, cc.Seal, cc.SealLimits, cc.Tracker, cc.Clock = n.fleet, n.sealed, n.sealLimits(), n.tcfg, n.clock
	if n.owned != nil { // protocol v2: this node owns some destinations' records
		cc.Owned = n.owned
	}
	return cc
}

// gossipStats returns the dissemination counters for /v1/status and
// /metrics; all zero when gossip is off. Maps are never nil, so the JSON
// always carries objects.
func (n *Node) gossipStats() cluster.GossipStats {
	if n.cl != nil {
		return n.cl.GossipStats()
	}
	return cluster.NewGossipStats()
}

// Warnings returns the operator mistakes this node sees now, as the
// cluster reports them (cluster.Cluster.Warnings: a member refused for
// other settings, two live processes with one name, a clock off its peers'
// median): the "warnings" of GET /v1/status, counted in atnode_warnings
// and atnode_warnings_raised_total. Empty, never nil, without gossip.
func (n *Node) Warnings() []cluster.Warning {
	if n.cl == nil {
		return []cluster.Warning{}
	}
	return n.cl.Warnings()
}

// protocolConfig is the configuration of the protocol core of a node
// without gossip: no members, so it seals at each boundary and sends
// nothing.
func (n *Node) protocolConfig() cluster.ProtocolConfig {
	return cluster.ProtocolConfig{
		Name:       n.cfg.Name,
		BootID:     n.boot,
		Tracker:    n.tcfg,
		Gossip:     cluster.DefaultGossip(),
		Store:      n.fleet,
		Seal:       n.sealed,
		SealLimits: n.sealLimits(),
		Logger:     n.log,
	}
}

// sealed returns this node's sealed sub-window of epoch, destinations
// sorted by name: what the protocol seals.
func (n *Node) sealed(epoch int64, now time.Time) []tracker.DestCounts {
	return tracker.SealedSubWindow(n.local, epoch, now)
}

// sealLimits are the fleet's per-member caps: a larger batch would be
// refused whole, by this node's fleet and by its peers'.
func (n *Node) sealLimits() cluster.SealLimits {
	if n.fleet == nil {
		return cluster.SealLimits{} // a config built before the fleet, in tests
	}
	fc := n.fleet.Config()
	return cluster.SealLimits{MaxDestinations: fc.MaxDestinations, MaxBuckets: fc.MaxEpochBuckets}
}

// poll lets the protocol seal what is due at now when nothing else drives
// it (cluster.SyncProtocol.Poll): between epoch boundaries, two atomic
// loads.
func (n *Node) poll(now time.Time) { n.proto.Poll(now) }

// onEvent sets the live member count that auto MinPeers reads. The cluster
// keeps the fleet's membership itself (and sets the count too; both are
// idempotent). It runs on the cluster's event goroutine.
func (n *Node) onEvent(cluster.Event) {
	if n.cl != nil {
		n.fleet.SetLiveMembers(n.cl.NumAlive())
	}
}
