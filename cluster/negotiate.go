package cluster

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// metaVersionFor returns the metadata version a member should advertise
// given the member table (Members: itself included, refused members left
// out): version 2 when it has settings to advertise, knows at least one
// other member of this project up, every member up speaks Level2, and no
// member of an older release is dead (not left) in the table; version 1
// otherwise. Version 1 while it knows nobody means that a node joining a
// cluster of an older release never shows it bytes it cannot read; the
// settings of a joiner still reach a seed of this release in the join's
// push/pull state (see judgeState). A dead member stays in the table for
// Timing.DeadRetention and may come back (a false death, a partition
// healing); one that left does not, so an older node stopped cleanly lets
// the others switch at once, and one that crashed after DeadRetention.
func metaVersionFor(members []Member, self string, hasSettings bool) uint32 {
	if !hasSettings {
		return metaVersion1
	}
	others := false
	for _, m := range members {
		if m.State == StateDead && m.Level > 0 && m.Level < Level2 {
			return metaVersion1
		}
		if m.State.Up() && m.Level > 0 && m.Member != self {
			others = true
		}
	}
	if others && ClusterLevel(members) >= Level2 {
		return metaVersion2
	}
	return metaVersion1
}

// nodeMeta is this member's metadata now: the negotiated version, with the
// leaving flag once Close set it.
func (c *Cluster) nodeMeta() []byte {
	v := c.metaVersion.Load()
	if v != metaVersion2 || c.settings == nil {
		v = metaVersion1
	}
	leaving := 0
	if c.leaving.Load() {
		leaving = 1
	}
	return c.meta[v-1][leaving]
}

// kickMeta wakes metaLoop; it never blocks, so memberlist's callbacks may
// call it.
func (c *Cluster) kickMeta() {
	select {
	case c.metaKick <- struct{}{}:
	default:
	}
}

// metaLoop re-advertises this member's metadata whenever the member table
// (read at each change, and every metaRecheck) calls for another version
// (metaVersionFor), from the end of Start's initial joins until Close.
// Before the joins end nothing changes: a joiner advertises version 1
// until it knows what it joined, and a joiner refused at join never
// advertises anything else.
func (c *Cluster) metaLoop() {
	defer c.wg.Done()
	select {
	case <-c.stop:
		return
	case <-c.joined:
	}
	// The ticker sees a dead member leave the table (pruned after
	// Timing.DeadRetention, with no event).
	tick := time.NewTicker(metaRecheck)
	defer tick.Stop()
	for {
		c.readvertise()
		select {
		case <-c.stop:
			return
		case <-c.metaKick:
		case <-tick.C:
		}
	}
}

// metaRecheck is how often metaLoop re-reads the member table without an
// event.
const metaRecheck = time.Second

// readvertise switches the advertised metadata version if the member table
// calls for it, with memberlist's UpdateNode (one alive message with a new
// incarnation, gossiped like any other). It waits at most a gossip
// interval for the broadcast: the update is in effect either way, and
// push/pull carries it too.
func (c *Cluster) readvertise() {
	want := metaVersionFor(c.Members(), c.self, c.settings != nil)
	c.metaMu.Lock()
	defer c.metaMu.Unlock()
	if c.leaving.Load() || want == c.metaVersion.Load() {
		return
	}
	c.life.RLock()
	ml, closed := c.ml, c.closed
	c.life.RUnlock()
	if ml == nil || closed {
		return
	}
	c.metaVersion.Store(want)
	if err := ml.UpdateNode(c.cfg.Timing.GossipInterval); err != nil {
		c.log.Debug("cluster: metadata update not confirmed yet", "version", want, "err", err)
	}
	c.log.Info("cluster: advertising member metadata", "version", want)
}

// localState is what this member sends in memberlist's push/pull state
// (joins, re-joins and the periodic syncs): its version 2 metadata, with
// its settings, whatever version it advertises; nothing without settings
// or once it is leaving.
func (c *Cluster) localState() []byte {
	if c.settings == nil || c.leaving.Load() {
		return nil
	}
	return c.meta[1][0]
}

// judgeState judges the settings another member sent in its push/pull
// state (localState): one whose settings differ is refused like a member
// whose metadata shows them (see refuse), even while it advertises
// version 1. join is memberlist's: true for a join's or re-join's
// push/pull, on either side. During Start's initial join of a seed, a
// refusal of that seed (the member at the address dialled) makes the join
// refused (see pushPull). memberlist calls it after merging the sender's
// member list, so the sender is already a member here: it is then marked
// refused and leaves Members.
func (c *Cluster) judgeState(buf []byte, join bool) {
	if c.settings == nil || len(buf) == 0 {
		return
	}
	m, err := decodeMetaBytes(buf)
	if err != nil || m.settings == nil {
		c.stats.badMeta.Add(1)
		return
	}
	member := MemberName(m.name, m.boot)
	if member == c.self {
		return
	}
	var addr string
	var refusal error
	if ds := c.settings.diff(*m.settings); len(ds) > 0 {
		addr, refusal = c.refuse(member, "", ds, join)
	} else if join {
		addr = c.memberAddr(member)
	}
	if !join {
		return
	}
	c.joinMu.Lock()
	defer c.joinMu.Unlock()
	if a, err := netip.ParseAddrPort(addr); err == nil && c.dialing.IsValid() && netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) == c.dialing {
		c.dialJudged = true
		if refusal != nil {
			c.dialRefusals = append(c.dialRefusals, strings.TrimPrefix(refusal.Error(), ErrJoinRefused.Error()+": "))
		}
	}
}

// settingsChecks bounds the members checkSettings tries.
const settingsChecks = 3

// checkSettings is Start's check of this member's settings when no seed
// showed its own at the initial joins: the seeds are of an older release
// (which sends no push/pull state, and makes everyone advertise version 1
// metadata, which carries no settings), or were named by a host name that
// judgeState cannot match. It pushes and pulls with members of this
// release (Level2 and up) that the joins taught it, one after another
// until one shows its settings, at most settingsChecks. It returns the
// refusal's text when that member's settings differ, else "". Nothing is
// checked without settings, or when the cluster has no member of this
// release: then nobody can judge this member, as before the levels.
func (c *Cluster) checkSettings(ml *memberlist.Memberlist) string {
	if c.settings == nil {
		return ""
	}
	tried := 0
	for _, m := range c.Members() {
		if tried == settingsChecks {
			break
		}
		if m.Member == c.self || !m.State.Up() || m.Level < Level2 || m.Addr == "" {
			continue
		}
		tried++
		refused, judged, _ := c.pushPull(ml, "member", m.Addr, true)
		if refused != "" || judged {
			return refused
		}
	}
	return ""
}

// memberAddr returns member's address if this node lists it, else "".
func (c *Cluster) memberAddr(member string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.members[member]; e != nil {
		return e.Addr
	}
	return ""
}

// refuse reports member (at addr; "" to look it up) as refused for its
// settings ds: a config_mismatch warning, and, if this node lists it, the
// member marked refused (out of Members, dead to the protocol). joining
// says whether a join found it. It returns the member's address ("" if
// unknown) and the refusal, an ErrJoinRefused naming each setting from the
// joiner's side. It takes only c.mu and the warnings' lock.
func (c *Cluster) refuse(member, addr string, ds []difference, joining bool) (string, error) {
	if listed := c.markRefused(member); addr == "" {
		addr = listed
	}
	how := "refused as a member"
	if joining {
		how = "refused at join"
	}
	ref, at := member, ""
	if addr != "" {
		ref, at = member+" ("+addr+")", " at "+addr
	}
	now := time.Now()
	c.warn.set("member/"+member, Warning{
		Kind:    WarnConfigMismatch,
		Message: fmt.Sprintf("member %s %s: %s", ref, memberText(ds), how),
	}, now, now.Add(mismatchRetention))
	return addr, fmt.Errorf("%w: %s (member %s%s)", ErrJoinRefused, joinText(ds), member, at)
}

// dial notes the address Start's initial join is dialling (the zero
// AddrPort when done) and returns what judgeState recorded for the one
// dialled before: its refusals, and whether its state showed settings.
func (c *Cluster) dial(addr netip.AddrPort) (refusals []string, judged bool) {
	c.joinMu.Lock()
	defer c.joinMu.Unlock()
	refusals, judged = c.dialRefusals, c.dialJudged
	c.dialing, c.dialRefusals, c.dialJudged = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port()), nil, false
	return refusals, judged
}
