package node

import (
	"slices"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// This file is the only place that knows how the cluster disseminates
// batches. With gossip on, the cluster seals this node's sub-window at each
// epoch boundary, inserts it into the fleet view, spreads it, and keeps the
// fleet's membership. With gossip off (Config.DisableGossip) the node inserts
// its own sealed sub-windows itself (sealOwn), so a node alone still has a
// fleet view of one peer.

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
	cc.Store, cc.Seal, cc.Tracker, cc.Clock = n.fleet, n.seal, n.tcfg, n.clock
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

// seal returns this node's sealed sub-window of epoch, destinations sorted
// by name, cut to what the fleet accepts from one member per epoch (its
// MaxDestinations and MaxEpochBuckets; the first destinations by name): a
// larger batch would be refused whole, by this node and by its peers.
func (n *Node) seal(epoch int64, now time.Time) []tracker.DestCounts {
	dests := tracker.SealedSubWindow(n.local, epoch, now)
	fc := n.fleet.Config()
	keep, buckets := min(len(dests), fc.MaxDestinations), 0
	for i := range keep {
		if buckets += len(dests[i].Buckets); buckets > fc.MaxEpochBuckets {
			keep = i
			break
		}
	}
	if keep < len(dests) {
		n.log.Warn("node: sealed sub-window truncated to the fleet's per-member caps",
			"epoch", epoch, "destinations", len(dests), "kept", keep,
			"max_destinations", fc.MaxDestinations, "max_epoch_buckets", fc.MaxEpochBuckets)
		dests = dests[:keep]
	}
	return dests
}

// sealOwn inserts this node's sealed sub-windows of the epochs finished
// since the last call (at most the window's) into the fleet view when gossip
// is off; with gossip on the cluster does it. It is called by the loop every second and before each
// query, so the view never lags an epoch boundary; between boundaries it
// costs one atomic load.
func (n *Node) sealOwn(now time.Time) {
	if !n.cfg.DisableGossip {
		return
	}
	last := n.tcfg.Epoch(now) - 1
	if n.sealed.Load() >= last {
		return
	}
	n.sealMu.Lock()
	defer n.sealMu.Unlock()
	from := max(n.sealed.Load()+1, last-int64(n.tcfg.SubWindows)+1)
	layout := n.tcfg.Layout()
	for ep := from; ep <= last; ep++ {
		dests := n.seal(ep, now)
		if len(dests) == 0 {
			continue
		}
		b := tracker.Batch{
			Key:    tracker.BatchKey{Origin: n.cfg.Name, Boot: n.boot, Epoch: ep},
			Layout: layout,
			Dests:  dests,
		}
		if o := n.fleet.Insert(b, now); o != tracker.InsertNew && o != tracker.InsertDuplicate {
			n.log.Warn("node: own sealed batch refused", "epoch", ep, "outcome", o.String())
		}
	}
	n.sealed.Store(max(last, n.sealed.Load()))
}

// onEvent sets the live member count that auto MinPeers reads. The cluster
// keeps the fleet's membership itself (and sets the count too; both are
// idempotent). It runs on the cluster's event goroutine.
func (n *Node) onEvent(cluster.Event) {
	if n.cl != nil {
		n.fleet.SetLiveMembers(n.cl.NumAlive())
	}
}
