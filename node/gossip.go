package node

import (
	"slices"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// This file is the only place that knows how the cluster disseminates
// batches. Until package cluster carries dissemination (GOSSIP_API.md),
// the node runs membership through the cluster and keeps its fleet view
// itself: it inserts its own sealed sub-window each epoch (sealOwn), and
// excludes and includes members on membership events (onEvent). Once the
// cluster disseminates, wireGossip hands it the fleet, the seal function,
// the tracker configuration and the clock, returns true, and the node
// leaves all of that to the cluster.

// clusterConfig is the cluster configuration derived from the node's.
func (n *Node) clusterConfig() cluster.Config {
	cc := cluster.DefaultConfig()
	cc.Name = n.cfg.Name
	cc.BootID = n.boot
	cc.Bind = n.cfg.Bind
	cc.Advertise = n.cfg.Advertise
	cc.Seeds = slices.Clone(n.cfg.Join)
	cc.KeyFile = n.cfg.SecretKeyFile
	cc.Label = n.cfg.Label
	cc.Logger = n.log
	cc.OnEvent = n.onEvent
	n.disseminates = n.wireGossip(&cc)
	if n.cfg.TuneCluster != nil {
		n.cfg.TuneCluster(&cc)
	}
	return cc
}

// wireGossip connects dissemination to cc and reports whether the cluster
// now seals, inserts and spreads this node's batches and keeps the fleet's
// membership. The cluster of this tree does membership only, so it
// connects nothing and returns false.
func (n *Node) wireGossip(cc *cluster.Config) bool {
	_ = cc
	return false
}

// gossipStats returns the dissemination counters for /v1/status and
// /metrics. The cluster of this tree does not disseminate: all zero.
func (n *Node) gossipStats() gossipStats {
	return newGossipStats()
}

// seal returns this node's sealed sub-window of epoch, destinations sorted
// by name, at most the fleet's MaxDestinations of them (the first by name):
// a larger batch would be refused whole.
func (n *Node) seal(epoch int64, now time.Time) []tracker.DestCounts {
	dests := tracker.SealedSubWindow(n.local, epoch, now)
	if m := n.fleet.Config().MaxDestinations; len(dests) > m {
		n.log.Warn("node: sealed sub-window truncated to the fleet's destination cap",
			"epoch", epoch, "destinations", len(dests), "cap", m)
		dests = dests[:m]
	}
	return dests
}

// sealOwn inserts this node's sealed sub-windows of the epochs finished
// since the last call (at most the window's) into the fleet view, when the
// cluster does not. It is called by the loop every second and before each
// query, so the view never lags an epoch boundary; between boundaries it
// costs one atomic load.
func (n *Node) sealOwn(now time.Time) {
	if n.disseminates {
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

// onEvent keeps the fleet's membership when the cluster does not: a dead
// or left member's batches leave the views and a member back alive
// returns. Either way it sets the live count that auto MinPeers reads
// (idempotent, so harmless if the cluster sets it too). It runs on the
// cluster's event goroutine.
func (n *Node) onEvent(ev cluster.Event) {
	if n.cl == nil {
		return
	}
	if !n.disseminates {
		now := n.clock()
		m := ev.Member
		switch ev.Type {
		case cluster.EventDead, cluster.EventLeft:
			if m.Member != n.self {
				n.fleet.Exclude(m.Name, m.BootID, now)
			}
		case cluster.EventJoin:
			n.fleet.Include(m.Name, m.BootID, now)
		}
	}
	n.fleet.SetLiveMembers(n.cl.NumAlive())
}

// gossipStats mirrors cluster.GossipStats (GOSSIP_API.md): the "gossip"
// object of GET /v1/status and the source of the atnode_gossip_* metrics.
// Maps are never nil, so the JSON always carries objects.
type gossipStats struct {
	BytesIn       uint64            `json:"bytes_in"`
	BytesOut      uint64            `json:"bytes_out"`
	MessagesIn    map[string]uint64 `json:"messages_in"`
	MessagesOut   map[string]uint64 `json:"messages_out"`
	BatchesIn     uint64            `json:"batches_in"`
	BatchesOut    uint64            `json:"batches_out"`
	Outcomes      map[string]uint64 `json:"outcomes"`
	Rejected      map[string]uint64 `json:"rejected"`
	QueueDrops    uint64            `json:"queue_drops"`
	SendDrops     uint64            `json:"send_drops"`
	Repairs       uint64            `json:"repairs"`
	SealToReceive gossipHistogram   `json:"seal_to_receive"`
}

// gossipHistogram mirrors cluster.Histogram: Counts has len(Bounds)+1
// entries, the last for +Inf; counts are per bucket, not cumulative.
type gossipHistogram struct {
	Bounds []float64 `json:"bounds"`
	Counts []uint64  `json:"counts"`
	Sum    float64   `json:"sum"`
	Count  uint64    `json:"count"`
}

func newGossipStats() gossipStats {
	return gossipStats{
		MessagesIn:    map[string]uint64{},
		MessagesOut:   map[string]uint64{},
		Outcomes:      map[string]uint64{},
		Rejected:      map[string]uint64{},
		SealToReceive: gossipHistogram{Bounds: []float64{}, Counts: []uint64{0}},
	}
}
