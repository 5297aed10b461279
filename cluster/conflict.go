package cluster

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// maxConflictPings bounds the pings of one round of conflictLoop.
const maxConflictPings = 8

// conflictLoop looks for name conflicts every Timing.ProbeInterval until
// Close (see checkConflicts).
func (c *Cluster) conflictLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.Timing.ProbeInterval)
	defer t.Stop()
	live := map[string]bool{} // member name → answered a ping while up
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.checkConflicts(live)
		}
	}
}

// checkConflicts reports, as name_conflict warnings, every peer name that
// two or more live processes use. The member table shows such a name with
// several boots up; so does a restart, whose old boot stays up here until
// the failure detector declares it dead. The difference is whether the
// other boot answers: each boot of a shared name other than this process
// is pinged (memberlist's ping names the member, and a process answers
// only to its own member name, so a restart at the same address stays
// silent) until it answers once, which it is then remembered for while it
// is up. A name is in conflict while at least two of its boots up are this
// process or have answered. live is the loop's memory of those answers.
func (c *Cluster) checkConflicts(live map[string]bool) {
	members := c.Members()
	byName := map[string][]Member{}
	up := map[string]bool{}
	for _, m := range members {
		if m.State.Up() && m.BootID != 0 {
			byName[m.Name] = append(byName[m.Name], m)
			up[m.Member] = true
		}
	}
	maps.DeleteFunc(live, func(member string, _ bool) bool { return !up[member] })
	pings := 0
	ws := map[string]Warning{}
	current := currentBoots(members)
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		ms := byName[name]
		if len(ms) < 2 {
			continue
		}
		var alive []Member
		for _, m := range ms {
			if m.Member != c.self && !live[m.Member] && pings < maxConflictPings {
				pings++
				live[m.Member] = c.ping(m)
			}
			if m.Member == c.self || live[m.Member] {
				alive = append(alive, m)
			}
		}
		if len(alive) >= 2 {
			ws[name] = Warning{Message: c.conflictText(name, alive, current[name])}
		}
	}
	c.warn.replace(WarnNameConflict, ws, time.Now())
}

// ping reports whether member m answers a memberlist ping within
// Timing.ProbeTimeout. It must not be called from memberlist's callbacks.
func (c *Cluster) ping(m Member) bool {
	c.life.RLock()
	ml, closed := c.ml, c.closed
	c.life.RUnlock()
	if ml == nil || closed {
		return false
	}
	_, err := ml.Ping(m.Member, addrString(m.Addr))
	return err == nil
}

// addrString is a net.Addr for memberlist's Ping, which uses only String.
type addrString string

func (a addrString) Network() string { return "udp" }
func (a addrString) String() string  { return string(a) }

// conflictText says which live processes share name and whose data counts.
func (c *Cluster) conflictText(name string, alive []Member, counted Member) string {
	list := func(ms []Member) string {
		parts := make([]string, len(ms))
		for i, m := range ms {
			parts[i] = fmt.Sprintf("%s (%s)", m.Member, m.Addr)
		}
		if len(parts) == 1 {
			return parts[0]
		}
		return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
	}
	if name == c.cfg.Name {
		others := slices.DeleteFunc(slices.Clone(alive), func(m Member) bool { return m.Member == c.self })
		return fmt.Sprintf("another live process uses this node's name %q: %s; the other nodes count the data of only one of them "+
			"(the one they saw join last), so give each process its own -name", name, list(others))
	}
	return fmt.Sprintf("%d live processes use the name %q: %s; this node counts only %s's data (the one it saw join last)",
		len(alive), name, list(alive), counted.Member)
}
