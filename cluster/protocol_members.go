package cluster

import "time"

// SetMembers gives the protocol the member list (Cluster.Members: every
// member known, this process included, alive, suspect, dead or left within
// Timing.DeadRetention). From it the protocol knows its peers (the other
// members up, in the list's order: seals go to them, digests to one of
// them), which batch origins are current or recent members, and which
// senders are up. It brings the Store's exclusions and live-member count in
// line at once (see applyMembership). With no peer a bulk sync becomes due,
// armed BulkSyncDelay after peers appear; a member gone is forgotten.
// Each member's Since must move at its joins and deaths only (as
// Cluster.Members has it): a member up in two lists with another Since was
// dead or left in between, and on protocol v2 gets the window's records
// again as an owner that restarted does. members is not retained.
func (p *Protocol) SetMembers(members []Member, now time.Time) {
	p.given = true
	p.lastNow = later(p.lastNow, now)
	p.members = append(p.members[:0], members...)
	clear(p.byMember)
	clear(p.origins)
	p.peers = p.peers[:0]
	for i, m := range p.members {
		p.byMember[m.Member] = i
		if m.Member == MemberName(m.Name, m.BootID) {
			p.origins[origin{m.Name, m.BootID}] = struct{}{}
		}
		if m.State.Up() && m.Member != p.self {
			p.peers = append(p.peers, m.Member)
		}
	}
	for m := range p.digestTo {
		if !p.up(m) {
			delete(p.digestTo, m)
		}
	}
	for m := range p.clocks {
		if !p.up(m) {
			delete(p.clocks, m)
		}
	}
	p.applyMembership(now)
	p.setMembersV2(now)
	if len(p.peers) == 0 {
		p.alone()
	} else {
		p.armBulk(now)
	}
}

// knownOrigin reports whether (name, boot) is a member this node knows:
// alive, suspect, or dead or left within Timing.DeadRetention.
func (p *Protocol) knownOrigin(name string, boot uint64) bool {
	_, ok := p.origins[origin{name, boot}]
	return ok
}

// origin is a batch origin: a peer name and one boot of it.
type origin struct {
	name string
	boot uint64
}

// up reports whether the member named member is alive or suspect.
func (p *Protocol) up(member string) bool {
	i, ok := p.byMember[member]
	return ok && p.members[i].State.Up()
}

// applyMembership brings the Store's exclusions and live-member count in
// line with the member list: every member alive or suspect is included,
// unless another boot of the same peer name is its current one (this
// process for its own name, else the one currentBoots picks); every other
// member — dead, left, or a restarted peer's old boot — is excluded (its
// batches stay until they age out, so a refuted death costs nothing).
// SetLiveMembers gets the number alive or suspect.
func (p *Protocol) applyMembership(now time.Time) {
	current := currentBoots(p.members)
	live := 0
	for _, m := range p.members {
		if m.State.Up() {
			live++
		}
	}
	for _, m := range p.members {
		if m.BootID == 0 {
			continue // metadata unusable: no batch can name it
		}
		cur := m.State.Up() && current[m.Name].BootID == m.BootID
		if m.Name == p.cfg.Name {
			cur = m.BootID == p.cfg.BootID
		}
		if cur {
			p.cfg.Store.Include(m.Name, m.BootID, now)
			if p.cfg.Owned != nil {
				p.cfg.Owned.Include(m.Name, m.BootID, now)
			}
		} else {
			p.cfg.Store.Exclude(m.Name, m.BootID, now)
			if p.cfg.Owned != nil {
				p.cfg.Owned.Exclude(m.Name, m.BootID, now)
			}
		}
	}
	p.cfg.Store.SetLiveMembers(live)
}

// currentBoots returns, per peer name, the boot whose data counts: of the
// members up with that name, the one with the latest Since (the one this
// node saw join last: Since stays the join's across metadata updates),
// ties going to the first in members' order (by member name, as
// Cluster.Members sorts). A restarted peer's new boot so counts at once,
// before its old boot is declared dead. Two live processes with one name
// (a name conflict, reported as a name_conflict warning) cannot both
// count: a peer is a name, and its batches are keyed by it; the rule keeps
// one, deterministically given the member list.
func currentBoots(members []Member) map[string]Member {
	current := map[string]Member{}
	for _, m := range members {
		if !m.State.Up() {
			continue
		}
		if c, ok := current[m.Name]; !ok || m.Since.After(c.Since) {
			current[m.Name] = m
		}
	}
	return current
}
