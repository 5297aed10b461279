package cluster

import (
	"github.com/hashicorp/memberlist"
)

// eventDelegate is memberlist's EventDelegate. memberlist calls it with its
// node lock held: calling memberlist from here would deadlock.
type eventDelegate struct{ c *Cluster }

func (e eventDelegate) NotifyJoin(n *memberlist.Node)   { e.c.observe(n, EventJoin, false) }
func (e eventDelegate) NotifyUpdate(n *memberlist.Node) { e.c.observe(n, EventUpdate, false) }

// NotifyLeave reports a member that is dead or left. Node.State cannot tell
// which (memberlist v0.7.0 never sets it), so observe uses the leaving flag.
func (e eventDelegate) NotifyLeave(n *memberlist.Node) { e.c.observe(n, EventDead, true) }

// delegate is memberlist's Delegate: small metadata (its version
// negotiated, see nodeMeta), user messages into a bounded queue, this
// member's settings in push/pull state (see localState), and nothing in
// broadcasts (histogram payloads travel by SendReliable only).
type delegate struct{ c *Cluster }

func (d delegate) NodeMeta(limit int) []byte {
	meta := d.c.nodeMeta()
	if len(meta) > limit {
		return nil // cannot happen: 11 + MaxNameLen + 5 varints (at most 308 bytes) < memberlist.MetaMaxSize
	}
	return meta
}

// NotifyMsg queues a user message (Cluster.enqueueMessage); it never
// blocks.
func (d delegate) NotifyMsg(buf []byte) { d.c.enqueueMessage(buf) }

func (delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState is this member's settings for the other side of a push/pull
// (Cluster.localState); releases before the levels ignore it.
func (d delegate) LocalState(join bool) []byte { return d.c.localState() }

// MergeRemoteState judges the other side's settings (Cluster.judgeState).
// memberlist calls it after merging the other side's member list, outside
// its node lock.
func (d delegate) MergeRemoteState(buf []byte, join bool) { d.c.judgeState(buf, join) }
