package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
)

// Cut is a network partition (Sim.Partition): the nodes of each group
// reach one another, and no message crosses from one group to another.
type Cut struct {
	// Groups are the sides, by node index; the nodes in no group form one
	// more. A node may be in one group only.
	Groups [][]int
	// OneWay drops only what the first group sends to the others: the
	// other way messages pass (an asymmetric cut). memberlist's probes
	// need both ways, so the member lists notice it as they do a cut both
	// ways.
	OneWay bool
	// Detect is how long the cut must last for each side's member lists
	// to list the other sides' members dead (memberlist's probes and
	// suspicion); a cut healed sooner is noticed by nobody. Zero means
	// never: the member lists never notice it (membership probes pass,
	// while the protocol's streams are cut: a firewall rule on the gossip
	// streams, an overloaded link that loses the large messages).
	Detect time.Duration
	// Stall is how long a send across the cut holds the sender's worker
	// before it fails: a connect that gets no answer waits for
	// memberlist's TCPTimeout (Timing.StreamTimeout, 10 s on a LAN), and
	// each member has at most one send in flight, so a node with more
	// members cut off than Gossip.SendWorkers can have every worker
	// waiting. Zero: a send across the cut fails at once (as a refused
	// connect), costing the sender nothing.
	Stall time.Duration
}

// partition is a Sim's partition state: the last cut's groups, whether
// messages are cut now, and what each side's member list says of the
// others.
type partition struct {
	group  []int // per node: its side
	oneWay bool
	stall  time.Duration
	on     bool // messages between the sides are dropped
	gen    int  // counts cuts and heals: a pending detection or merge is the current one's
	dead   bool // each side lists the other sides' members dead
	deadAt time.Time
	// back is, per node, the Since of the members its side listed dead
	// and then alive again (memberlist's member table moves Since at a
	// death and at a return).
	back []map[string]time.Time
	// lists caches each node's member list until the next change.
	lists [][]cluster.Member
}

// Partition cuts the network between groups now (see Cut): messages
// between the sides, sent or on their way, are lost (their bytes count at
// the sender, as a lost message's). A cut replaces the one before.
func (s *Sim) Partition(c Cut) {
	group := make([]int, len(s.nodes))
	for i := range group {
		group[i] = len(c.Groups)
	}
	for g, nodes := range c.Groups {
		for _, i := range nodes {
			if i < 0 || i >= len(s.nodes) || group[i] != len(c.Groups) {
				s.fail(fmt.Errorf("sim: partition: node %d is not a node, or is in two groups", i))
				return
			}
			group[i] = g
		}
	}
	if s.part == nil {
		s.part = &partition{back: make([]map[string]time.Time, len(s.nodes))}
	}
	p := s.part
	p.group, p.oneWay, p.stall, p.on = group, c.OneWay, c.Stall, true
	p.gen++
	p.lists = nil
	if c.Detect > 0 {
		gen := p.gen
		s.At(s.now+c.Detect, func(now time.Time) {
			if p.gen != gen || !p.on {
				return // healed (or cut again) before the detection
			}
			p.dead, p.deadAt = true, now
			s.listsChanged()
		})
	}
}

// Heal ends the cut now: messages pass again. Sides that listed each
// other dead list each other alive again merge later, with the same boots
// and a new Since (memberlist: the refutation of the death once gossip
// reaches the other side, or the next re-join of the seeds,
// Timing.RejoinInterval).
func (s *Sim) Heal(merge time.Duration) {
	p := s.part
	if p == nil || !p.on {
		return
	}
	p.on = false
	p.gen++
	if !p.dead {
		return
	}
	gen := p.gen
	s.At(s.now+merge, func(now time.Time) {
		if p.gen != gen {
			return
		}
		for i := range s.nodes {
			for j, n := range s.nodes {
				if !n.dead && p.group[i] != p.group[j] {
					if p.back[i] == nil {
						p.back[i] = map[string]time.Time{}
					}
					p.back[i][n.member] = now
				}
			}
		}
		p.dead = false
		s.listsChanged()
	})
}

// listsChanged gives every member up its side's member list again.
func (s *Sim) listsChanged() {
	if s.part != nil {
		s.part.lists = nil
	}
	s.membersChanged(-1)
}

// cutOff reports whether a message from node from to node to is dropped
// by the cut now.
func (s *Sim) cutOff(from, to int32) bool {
	p := s.part
	if p == nil || !p.on || p.group[from] == p.group[to] {
		return false
	}
	return !p.oneWay || p.group[from] == 0
}

// membersOf is the member list node i has: everyone's (memberList), as
// its side sees it while a cut is noticed or after one.
func (s *Sim) membersOf(i int32) []cluster.Member {
	p := s.part
	if p == nil {
		return s.memberList
	}
	g := p.group[i]
	if p.lists == nil {
		p.lists = make([][]cluster.Member, len(s.nodes))
	}
	if l := p.lists[i]; l != nil {
		return l
	}
	l := slices.Clone(s.memberList)
	for k := range l {
		m := &l[k]
		ref := s.byMember[m.Member]
		if p.group[ref.node] == g || !m.State.Up() || ref.gen != s.nodes[ref.node].gen {
			continue
		}
		if p.dead {
			m.State, m.Since = cluster.StateDead, p.deadAt
		}
	}
	for k := range l {
		if t, ok := p.back[i][l[k].Member]; ok && l[k].State.Up() {
			l[k].Since = t
		}
	}
	p.lists[i] = l
	return l
}

// aliveFor is the number of members up in node i's member list.
func (s *Sim) aliveFor(i int32) int {
	if s.part == nil {
		return s.alive()
	}
	c := 0
	for _, m := range s.membersOf(i) {
		if m.State.Up() {
			c++
		}
	}
	return c
}

// partitioned reports whether the run has had a cut: refusals of members
// the receiver lists dead are then expected.
func (s *Sim) partitioned() bool { return s.part != nil }
