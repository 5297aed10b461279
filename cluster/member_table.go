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
	// refused: its settings differ from this node's (see refuse). It is
	// left out of Members and NumAlive, and the protocol sees it as dead.
	refused bool
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
	} else {
		m.Level = memberLevel(n.DMax)
	}
	m.Name, m.BootID = md.name, md.boot

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
	refused := prev != nil && prev.refused
	c.members[m.Member] = &entry{Member: m, leaving: leaving && !(typ == EventJoin), refused: refused}
	c.memberVersion.Add(1)
	c.mu.Unlock()
	c.kickMeta()
	if (typ == EventUpdate && leaving) || refused {
		return // the leaving flag itself is not news (the left event follows); a refused member is no member
	}
	c.emit(Event{Type: typ, Member: m})
}

// emit queues ev for delivery without blocking (memberlist's callbacks
// call it), counting it as dropped when the queue is full.
func (c *Cluster) emit(ev Event) {
	select {
	case c.events <- ev:
	default:
		c.stats.eventsDropped.Add(1)
	}
}

// Members returns every member this node knows, itself included: alive
// and suspect ones, and dead or left ones for Timing.DeadRetention after
// they went. A member refused for its settings (see WarnConfigMismatch)
// is not one. Sorted by peer name, then member name.
func (c *Cluster) Members() []Member { return c.memberList(false) }

// protocolMembers is Members for the protocol: a member refused for its
// settings is in it, as dead, so that the protocol excludes it from the
// views (had it counted before it was found out), sends it nothing and
// refuses its digests and pulls.
func (c *Cluster) protocolMembers() []Member { return c.memberList(true) }

func (c *Cluster) memberList(refusedAsDead bool) []Member {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pruneLocked(now)
	out := make([]Member, 0, len(c.members))
	for _, e := range c.members {
		switch {
		case !e.refused:
			out = append(out, e.Member)
		case refusedAsDead:
			m := e.Member
			if m.State.Up() {
				m.State = StateDead
			}
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b Member) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Member, b.Member))
	})
	return out
}

// markRefused marks member, if this node lists it, as refused for its
// settings, and returns its address ("" when it is not listed). A member
// up until now had its join delivered (it was merged before its settings
// were judged): it goes as dead, so that an OnEvent consumer does not
// keep it, since no event of a refused member follows. It takes only
// c.mu: memberlist's callbacks may call it.
func (c *Cluster) markRefused(member string) string {
	c.mu.Lock()
	e := c.members[member]
	if e == nil || member == c.self {
		c.mu.Unlock()
		return ""
	}
	var gone *Member
	if !e.refused {
		e.refused = true
		c.memberVersion.Add(1)
		if e.State.Up() {
			m := e.Member
			m.State, m.Since = StateDead, time.Now()
			gone = &m
		}
	}
	addr := e.Addr
	c.mu.Unlock()
	c.kickMeta()
	if gone != nil {
		c.emit(Event{Type: EventDead, Member: *gone})
	}
	return addr
}

// memberUp reports whether member is listed alive or suspect now, and not
// refused for its settings.
func (c *Cluster) memberUp(member string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.members[member]
	return e != nil && e.State.Up() && !e.refused
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
		if e.State.Up() && !e.refused {
			n++
		}
	}
	return n
}
