package cluster

import (
	"cmp"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
)

// entry is a member plus what this node knows about it beyond Member.
type entry struct {
	Member
	leaving bool // its last metadata announced a leave
}

// observe records a change reported by memberlist and queues its event;
// left is true for NotifyLeave. It runs inside memberlist's callbacks,
// under memberlist's node lock: it copies what it needs, takes only c.mu,
// and never blocks.
func (c *Cluster) observe(n *memberlist.Node, typ EventType, left bool) {
	m := Member{
		Member: n.Name,
		Addr:   net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))),
		State:  StateAlive,
		Since:  time.Now(),
	}
	md, err := decodeMeta(n.Name, n.Meta)
	if err != nil {
		c.stats.badMeta.Add(1)
		md = meta{name: nameFromMember(n.Name)}
	}
	m.Name, m.BootID, m.Protocol = md.name, md.boot, md.protocol

	c.mu.Lock()
	c.pruneLocked(m.Since)
	prev := c.members[m.Member]
	leaving := md.leaving || (prev != nil && prev.leaving) || (n.Name == c.self && c.leaving.Load())
	if left {
		typ, m.State = EventDead, StateDead
		if leaving {
			typ, m.State = EventLeft, StateLeft
		}
	}
	if prev != nil && typ == EventUpdate && prev.State == m.State {
		m.Since = prev.Since // an update is no state change: Since stays the join's
	}
	c.members[m.Member] = &entry{Member: m, leaving: leaving && !(typ == EventJoin)}
	c.memberVersion.Add(1)
	c.mu.Unlock()
	if typ == EventUpdate && leaving {
		return // the leaving flag itself is not news; the left event follows
	}
	select {
	case c.events <- Event{Type: typ, Member: m}:
	default:
		c.stats.eventsDropped.Add(1)
	}
}

// Members returns every member this node knows, itself included: alive
// and suspect ones, and dead or left ones for Timing.DeadRetention after
// they went. Sorted by peer name, then member name.
func (c *Cluster) Members() []Member {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pruneLocked(now)
	out := make([]Member, 0, len(c.members))
	for _, e := range c.members {
		out = append(out, e.Member)
	}
	slices.SortFunc(out, func(a, b Member) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Member, b.Member))
	})
	return out
}

// pruneLocked forgets members dead or left for longer than DeadRetention
// (memberlist forgets them then too); self is kept.
func (c *Cluster) pruneLocked(now time.Time) {
	for k, e := range c.members {
		if !e.State.Up() && k != c.self && now.Sub(e.Since) > c.cfg.Timing.DeadRetention {
			delete(c.members, k)
			c.memberVersion.Add(1)
		}
	}
}

// NumAlive returns the number of members alive or suspect, itself included
// (0 before Start): the input of the fleet's MinPeers auto.
func (c *Cluster) NumAlive() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.members {
		if e.State.Up() {
			n++
		}
	}
	return n
}
