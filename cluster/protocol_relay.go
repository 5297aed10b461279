package cluster

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// This file is protocol v2's relay fan-out. In a cluster of N members a
// first owner that mails each aggregate to all N−1 others sends N−1 copies
// of each: at N = 1000 that made the first owners the busiest nodes (about
// 400 KiB/s against the mean's 100). With relays, the publisher sends each
// aggregate to the destination's other owners and to R = ⌈√M⌉ relays, the
// first R of the M members that own no part of it in rendezvous order for
// (destination, epoch); relay j, on receiving it new from an owner,
// forwards it to the members at positions R+j, 2R+j, … of that order,
// computed from its own member list. Every member then receives each
// aggregate once, from its relay, and each forwards about as many
// aggregates as it receives: the load spreads evenly whoever owns what.
// Owners are left out of the order, so a forward (from a non-owner) is
// never taken for a publish. Members whose lists disagree may miss one;
// the round's aggregate pulls and digests (publishDue) repair it, as
// they repair a lost message. Relays are used only while every member up
// is at Level4 (so every member forwards) and the cluster has at least
// ProtocolConfig.RelayFrom members: below that, the extra hop costs more
// than the publisher's copies.

// DefaultRelayFrom is the default of ProtocolConfig.RelayFrom: the fewest
// members (this node included) at which first owners send through relays.
const DefaultRelayFrom = 100

// relaying reports whether aggregates go through relays now.
func (p *Protocol) relaying() bool {
	from := p.cfg.RelayFrom
	if from == 0 {
		from = DefaultRelayFrom
	}
	return from > 0 && p.v2.on && p.v2.level >= Level4 && len(p.v2.current) >= from
}

// fanout returns the current members that do not own dest (peer names)
// in rendezvous order for (dest, epoch), and how many of the first are its
// relays: ⌈√M⌉ of M.
func (p *Protocol) fanout(dest string, epoch int64, owners []string) ([]string, int) {
	hd := rendezvous(tracker.NameHash(dest), uint64(epoch))
	type scored struct {
		name  string
		score uint64
	}
	order := make([]scored, 0, len(p.v2.current))
	for name := range p.v2.current {
		if slices.Contains(owners, name) {
			continue
		}
		h, ok := p.v2.hashes[name]
		if !ok {
			h = tracker.NameHash(name)
			p.v2.hashes[name] = h
		}
		order = append(order, scored{name, rendezvous(h, hd)})
	}
	slices.SortFunc(order, func(a, b scored) int { return cmp.Or(cmp.Compare(b.score, a.score), cmp.Compare(a.name, b.name)) })
	names := make([]string, len(order))
	for i, x := range order {
		names[i] = x.name
	}
	return names, relayCount(len(names))
}

// relayCount is how many relays forward to m members: ⌈√m⌉.
func relayCount(m int) int {
	return min(m, int(math.Ceil(math.Sqrt(float64(m)))))
}

// publishRelayed sends each of aggs (published by this node) to its
// destination's other owners and to its relays.
func (p *Protocol) publishRelayed(aggs []tracker.Aggregate, expires, now time.Time) {
	o := p.v2.owners
	by := map[string][]int{}
	for i := range aggs {
		owners := o.Of(aggs[i].Dest)
		if !slices.Contains(owners, p.cfg.Name) {
			owners = append(owners, p.cfg.Name)
		}
		order, r := p.fanout(aggs[i].Dest, aggs[i].Epoch, owners)
		for _, peer := range owners {
			if peer != p.cfg.Name {
				by[peer] = append(by[peer], i)
			}
		}
		for _, peer := range order[:r] {
			by[peer] = append(by[peer], i)
		}
	}
	p.sendAggregatesTo(by, aggs, expires, now)
}

// relay forwards, as a relay, the aggregates of a message from sender
// (indexes fresh of aggs: new here) that came from one of their owners and
// for which this node is one of the relays, each to this node's slice of
// the members.
func (p *Protocol) relay(sender string, aggs []tracker.Aggregate, fresh []int, now time.Time) {
	if len(fresh) == 0 || !p.relaying() {
		return
	}
	i, ok := p.byMember[sender]
	if !ok {
		return
	}
	peer := p.members[i].Name
	if peer == p.cfg.Name || p.memberOf(peer) != sender {
		return
	}
	o := p.ownersNow(now)
	by := map[string][]int{}
	var last int64
	for _, k := range fresh {
		a := &aggs[k]
		owners := o.Of(a.Dest)
		if !slices.Contains(owners, peer) || slices.Contains(owners, p.cfg.Name) {
			continue // a relay's forward or a reader's answer, not a publish; or an owner's copy
		}
		order, r := p.fanout(a.Dest, a.Epoch, owners)
		j := slices.Index(order[:r], p.cfg.Name)
		if j < 0 {
			continue
		}
		p.stats.V2.Relayed++
		last = max(last, a.Epoch)
		for x := r + j; x < len(order); x += r {
			by[order[x]] = append(by[order[x]], k)
		}
	}
	if len(by) > 0 {
		p.stats.V2.RelaySends += uint64(p.sendAggregatesTo(by, aggs, p.aggExpiry(last), now))
	}
}

// sendAggregatesTo sends each peer (name) in by the aggregates of aggs at
// its indexes, encoding each distinct set once; it returns the messages
// queued.
func (p *Protocol) sendAggregatesTo(by map[string][]int, aggs []tracker.Aggregate, expires, now time.Time) int {
	type group struct {
		idx []int
		to  []string
	}
	var groups []*group
	byKey := map[string]*group{}
	for _, peer := range slices.Sorted(maps.Keys(by)) {
		to := p.memberOf(peer)
		if to == "" {
			continue
		}
		k := indexKey(by[peer])
		g := byKey[k]
		if g == nil {
			g = &group{idx: by[peer]}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.to = append(g.to, to)
	}
	t := p.aggType()
	sent := 0
	for _, g := range groups {
		set := make([]tracker.Aggregate, len(g.idx))
		for i, k := range g.idx {
			set[i] = aggs[k]
		}
		for _, payload := range p.aggregateMessages(set, now) {
			for _, m := range g.to {
				sent++
				p.v2.outbox = append(p.v2.outbox, Message{To: m, Type: t, Payload: payload, Expires: expires})
			}
		}
	}
	return sent
}

// indexKey is a map key of a list of indexes.
func indexKey(idx []int) string {
	var b strings.Builder
	for _, i := range idx {
		fmt.Fprintf(&b, "%d,", i)
	}
	return b.String()
}
