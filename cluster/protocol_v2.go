package cluster

import (
	"iter"
	"maps"
	"slices"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// This file is protocol v2, destination-owned aggregation: origins send
// each destination's sealed records to its owners only (Owners), the
// first owner merges them and publishes one aggregate per destination and
// epoch to every member, the second cross-checks and takes over, readers
// keep the largest coverage. A node runs it once every member up
// is at Level3 (Member.Level, ClusterLevel) and it has the stores for it
// (ProtocolConfig.Owned and Aggregates); until then, v1. Once every member
// up is at Level4 it sends aggregates packed, and in large clusters
// through relays (protocol_relay.go).

// ProtocolV2 is the protocol version of destination-owned aggregation, the
// highest this package speaks.
const ProtocolV2 = 2

// OwnedStore is what an owner keeps (protocol v2): the records of the
// destinations it owns. *tracker.Owned satisfies it.
type OwnedStore interface {
	InsertRecords(b tracker.Batch, now time.Time) tracker.InsertOutcome
	Manifest(origin string, boot uint64, epoch int64, now time.Time) tracker.Manifest
	ManifestWithout(origin string, boot uint64, epoch int64, leave iter.Seq[string], now time.Time) tracker.Manifest
	Destinations(now time.Time) []string
	Coverage(dest string, now time.Time) tracker.Coverage
	Aggregate(dest string, now time.Time) (tracker.Aggregate, bool)
	CoverageOf(dest string, epoch int64, now time.Time) tracker.Coverage
	AggregateOf(dest string, epoch int64, now time.Time) (tracker.Aggregate, bool)
	Exclude(name string, boot uint64, now time.Time)
	Include(name string, boot uint64, now time.Time)
}

// AggregateStore is what a reader keeps (protocol v2): per destination and
// epoch the aggregate with the largest coverage. *tracker.Fleet satisfies
// it. A returned aggregate must never be modified.
type AggregateStore interface {
	InsertAggregate(a tracker.Aggregate, now time.Time) tracker.InsertOutcome
	LookupAggregate(dest string, epoch int64) (tracker.Aggregate, bool)
	AggregateCoverage(dest string, epoch int64) (tracker.Coverage, bool)
	AggregateDigests(now time.Time) []tracker.AggregateDigest
	AggregateEntries(epoch int64, mask uint32, now time.Time) []tracker.AggregateEntry
	AggregateDestinations(now time.Time) []string
}

var (
	_ OwnedStore     = (*tracker.Owned)(nil)
	_ AggregateStore = (*tracker.Fleet)(nil)
)

// V2Stats counts what protocol v2 did; all counts are cumulative.
type V2Stats struct {
	// Switches counts changes of protocol (v1 to v2 and back).
	Switches uint64
	// OwnerChanges counts recomputations of the owners that changed some.
	OwnerChanges uint64
	// RecordsSent counts records messages sent (heartbeats with manifests
	// only included); Resent those sent again (owner change, record pull).
	RecordsSent, Resent uint64
	// Published counts aggregates this node published as first owner,
	// Republished those published again with a larger coverage,
	// Takeovers those it published as second owner.
	Published, Republished, Takeovers uint64
	// CrossChecks counts second-owner checks that found the first owner's
	// aggregate with its own coverage; CrossCheckMismatches those that
	// found another.
	CrossChecks, CrossCheckMismatches uint64
	// RecordPulls counts record pulls sent (RepairPulls of them before
	// and after publishing, to origins whose records of the round's epoch
	// had not arrived); AggPulls aggregate pulls.
	RecordPulls, RepairPulls, AggPulls uint64
	// AggRepairPulls counts the aggregate pulls (of AggPulls) sent
	// within a round to an owner, for the round's aggregates missing here.
	AggRepairPulls uint64
	// RepairsSkipped counts the round's repair pulls not sent because too
	// much was missing: lateness, not loss.
	RepairsSkipped uint64
	// RoundDigests counts the aggregate digests sent within a round, after
	// the publish and after the republish (the periodic anti-entropy's
	// are not counted).
	RoundDigests uint64
	// RelayedPublishes counts the aggregates this node published through
	// relays (of Published, Republished and Takeovers); Relayed the
	// aggregates it forwarded as a relay, RelaySends the messages those
	// forwards took.
	RelayedPublishes, Relayed, RelaySends uint64
	// CaughtUp counts the aggregates this node published late, of the
	// epoch before the round's, for a round its loop missed (a stall over
	// the round's publish or failover).
	CaughtUp uint64
}

// v2 is the protocol's v2 state.
type v2 struct {
	on      bool              // running v2
	current map[string]Member // peer name → its current member up (self included)
	level   uint8             // the lowest level of this node and the other members up
	hashes  map[string]uint64 // peer name → tracker.NameHash, for the relays' rendezvous order
	owners  *Owners
	dirty   bool             // members or destinations changed: owners are stale
	known   map[string]int64 // destination → newest epoch it was seen in
	// own is this node's sealed destinations per epoch (after the cut),
	// sorted: what it sends owners and can send again.
	own    map[int64][]string
	resend bool // send every held epoch's records to every owner
	// restarted are the peers whose current member changed since the
	// owners were last computed: a new boot (a restart), or the same boot
	// back from dead or left within one member list (its Since moved, the
	// death never seen here). An owner that restarted holds none of the
	// window's records, one that came back lacks those sent while it
	// could not be reached, though both own what they owned (owners go by
	// peer name and the death changed none here), so ownersNow sends them
	// the window's records again.
	restarted map[string]bool

	pubEpoch              int64     // aggregate epoch of the current round
	pullAt, pubAt, failAt time.Time // this round's repair pull, publish and failover times
	pullDone              bool      // pulled the missing records this round
	pubDone               bool      // published this round
	failDone              bool      // failed over (and pulled again) this round
	// digestAt are this round's two aggregate digests to a random peer:
	// after the publish and after the republish, so that an aggregate
	// lost on its way is pulled within the round (zero: none);
	// digestDone says which were sent.
	digestAt    [2]time.Time
	digestDone  [2]bool
	published   map[string]tracker.Coverage // destinations published this round, with their coverage
	late        map[string]bool             // published destinations with new records since
	lateAt      time.Time                   // when the late ones are republished; zero: none due
	republished map[string]bool             // republished this round (at most once)

	// heard is, per origin member, the newest epoch of the records
	// messages with records or manifests it sent this node: an origin
	// heard of in one of the two epochs before the round's but not since
	// is pulled (pullMissing), and the epochs of a gap in what it sent
	// when it is heard again (gapEpochs).
	heard map[string]int64
	// wanted is, per origin member, the epochs whose manifest it told
	// this node while this node held otherwise, with that manifest:
	// pulled again at each of the round's pulls until it holds them.
	wanted map[string]map[int64]tracker.Manifest

	mans   map[int64]map[string]tracker.Manifest // manifestsOf's cache
	outbox []Message                             // messages queued by ownersNow and the sends, for the caller to return

	askedRecs map[string]time.Time // "member/epoch" → when its records were pulled
	askedAggs map[string]time.Time // "dest/epoch" → when its aggregate was pulled
}

func newV2() v2 {
	return v2{
		current: map[string]Member{}, known: map[string]int64{}, own: map[int64][]string{},
		published: map[string]tracker.Coverage{}, late: map[string]bool{}, republished: map[string]bool{},
		askedRecs: map[string]time.Time{}, askedAggs: map[string]time.Time{}, mans: map[int64]map[string]tracker.Manifest{},
		heard: map[string]int64{}, wanted: map[string]map[int64]tracker.Manifest{},
		hashes: map[string]uint64{},
	}
}

// speaksV2 reports whether this node can run v2: configured for it, with
// both stores.
func (p *Protocol) speaksV2() bool {
	return p.cfg.Gossip.Protocol >= ProtocolV2 && p.cfg.Owned != nil && p.cfg.Aggregates != nil
}

// V2 reports whether the protocol runs v2 now.
func (p *Protocol) V2() bool { return p.v2.on }

// Owners returns dest's owners (peer names, first owner first) as this
// node computes them at now under protocol v2; nil while it runs v1 or does
// not know dest.
func (p *Protocol) Owners(dest string, now time.Time) []string {
	if !p.v2.on {
		return nil
	}
	return p.ownersNow(now).Of(dest)
}

// setMembersV2 follows a new member list: the current member of each peer
// name, whether every member up speaks v2, and the owners to recompute.
func (p *Protocol) setMembersV2(now time.Time) {
	if !p.speaksV2() {
		return
	}
	cur := map[string]Member{}
	all := true
	own := CurrentLevel
	if p.cfg.Level > 0 {
		own = p.cfg.Level
	}
	lvl := own
	for _, m := range p.members {
		if !m.State.Up() || m.BootID == 0 {
			continue
		}
		if m.Member != p.self && m.Level > 0 && m.Level < Level3 {
			all = false // the one rule: every member up at Level3 (ClusterLevel)
		}
		if m.Member != p.self && m.Level > 0 {
			lvl = min(lvl, m.Level)
		}
		if m.Name == p.cfg.Name && m.BootID != p.cfg.BootID {
			continue // an old boot of this peer name
		}
		if c, ok := cur[m.Name]; !ok || m.Since.After(c.Since) {
			cur[m.Name] = m
		}
	}
	cur[p.cfg.Name] = Member{Name: p.cfg.Name, Member: p.self, BootID: p.cfg.BootID, State: StateAlive, Level: own}
	if !sameCurrent(cur, p.v2.current) {
		p.v2.dirty = true
		for name, m := range cur {
			if was, ok := p.v2.current[name]; ok && !sameMember(was, m) && name != p.cfg.Name {
				if p.v2.restarted == nil {
					p.v2.restarted = map[string]bool{}
				}
				p.v2.restarted[name] = true
			}
		}
		for name := range p.v2.hashes {
			if _, ok := cur[name]; !ok {
				delete(p.v2.hashes, name)
			}
		}
	}
	p.v2.current = cur
	p.v2.level = lvl
	switch {
	case all && !p.v2.on:
		p.v2.on, p.v2.resend, p.v2.dirty = true, true, true
		p.stats.V2.Switches++
		p.v2.pubEpoch = 0 // a new round
	case !all && p.v2.on:
		p.v2.on = false
		p.stats.V2.Switches++
		// Back to v1: seal the window's epochs again as batches, so
		// every member gets them (v2 sent them to owners only).
		p.lastSealed = p.cfg.Tracker.Epoch(now) - int64(p.cfg.Tracker.SubWindows)
	}
}

func sameCurrent(a, b map[string]Member) bool {
	if len(a) != len(b) {
		return false
	}
	for k, m := range a {
		if o, ok := b[k]; !ok || !sameMember(o, m) {
			return false
		}
	}
	return true
}

// sameMember reports whether a and b are one member up without a change
// between: the same boot, and the same Since (the member list moves Since
// at a join and a death, not at a metadata update, so a member up in two
// lists with another Since was dead or left in between).
func sameMember(a, b Member) bool { return a.Member == b.Member && a.Since.Equal(b.Since) }

// see notes a destination seen in epoch ep; a new one makes the owners
// stale.
func (p *Protocol) see(dest string, ep int64) {
	if old, ok := p.v2.known[dest]; !ok {
		p.v2.known[dest] = ep
		p.v2.dirty = true
	} else if ep > old {
		p.v2.known[dest] = ep
	}
}

// member returns the member name of peer name's current member.
func (p *Protocol) memberOf(peer string) string { return p.v2.current[peer].Member }

// ownersNow returns the owners, recomputed when members or destinations
// changed. A change queues (in outbox) the records of every held epoch
// for the owners that did not have them; the records of the destinations
// this node no longer owns stay until they age out (unowned).
func (p *Protocol) ownersNow(now time.Time) *Owners {
	if !p.v2.dirty && p.v2.owners != nil {
		return p.v2.owners
	}
	p.v2.dirty = false
	e := p.cfg.Tracker.Epoch(now)
	lo := e - int64(p.cfg.Tracker.SubWindows) - 1
	for d, ep := range p.v2.known {
		if ep < lo {
			delete(p.v2.known, d)
		}
	}
	for ep := range p.v2.own {
		if ep < lo {
			delete(p.v2.own, ep)
			delete(p.v2.mans, ep)
		}
	}
	peers := make([]string, 0, len(p.v2.current))
	for name := range p.v2.current {
		peers = append(peers, name)
	}
	dests := make([]string, 0, len(p.v2.known))
	for d := range p.v2.known {
		dests = append(dests, d)
	}
	old := p.v2.owners
	o := AssignOwners(peers, dests, p.cfg.Gossip.Owners)
	p.v2.owners = o
	clear(p.v2.mans)
	p.noteGiven(old, o, now)
	restarted := p.v2.restarted
	p.v2.restarted = nil
	if !p.v2.on {
		return o
	}
	if p.v2.resend {
		p.v2.resend = false
		p.resendRecords(func(string, string) bool { return true }, now)
		return o
	}
	if old != nil {
		// An owner new to a destination, or one that restarted (empty),
		// gets the window's records of it again.
		fresh := func(d, peer string) bool { return restarted[peer] || !slices.Contains(old.Of(d), peer) }
		for _, d := range dests {
			if was := old.Of(d); was != nil && !slices.Equal(was, o.Of(d)) {
				p.stats.V2.OwnerChanges++
				p.resendRecords(fresh, now)
				return o
			}
		}
		if len(restarted) > 0 {
			p.resendRecords(fresh, now)
		}
	}
	return o
}

// holdsAll reports whether the records held from member (origin, boot)
// for epoch are those of told, the manifest the origin sent this node: as
// held, or without the destinations held that the owners give to others
// (unowned). The origin's owners may give this node those destinations
// (members or destinations that its list and this node's do not agree on
// yet) or not (this node's own view, which the origin shares once they
// agree): either way nothing it sent is missing, and a pull would only
// bring records held already.
func (p *Protocol) holdsAll(origin string, boot uint64, epoch int64, told tracker.Manifest, now time.Time) bool {
	if p.cfg.Owned.Manifest(origin, boot, epoch, now) == told {
		return true
	}
	unowned := p.unowned(now)
	return len(unowned) > 0 && p.cfg.Owned.ManifestWithout(origin, boot, epoch, slices.Values(unowned), now) == told
}

// unowned returns the destinations whose records Owned holds though the
// owners last computed give them to others. They are kept until they age
// out of the window: the members' lists and the destinations each node
// knows differ for a while (a member declared dead and alive again, at
// different nodes at different times, on a loaded machine many times; a
// new destination spreading with its first aggregates), and an origin
// whose owners did not change when this node's did sends nothing again
// when this node's come back to what they were. Dropped at once, the
// records of such origins were missing until they slid out of the window
// (TestOwnerKeepsRecordsWhileNewDestinationsSpread); dropped a sub-window
// later, so were those of a member listed dead at the owner alone for
// longer than that (TestFlappingMemberLosesNoRecords).
func (p *Protocol) unowned(now time.Time) []string {
	o := p.v2.owners
	if o == nil {
		return nil
	}
	return slices.DeleteFunc(p.cfg.Owned.Destinations(now), func(d string) bool { return o.Rank(d, p.cfg.Name) >= 0 })
}

// sealedFor is this node's sealed sub-window of epoch cut to SealLimits
// (as sealDue cut it), or nil when the tracker no longer holds it.
func (p *Protocol) sealedFor(ep int64, now time.Time) []tracker.DestCounts {
	if p.cfg.Seal == nil {
		return nil
	}
	kept, _ := tracker.CutMostSamples(p.cfg.Seal(ep, now), p.cfg.SealLimits.MaxDestinations, p.cfg.SealLimits.MaxBuckets)
	return kept
}

// resendRecords sends, for every epoch of the window this node sealed, the
// records of each destination to those of its owners fresh says lack them:
// owners new to it after an owner died or joined, an owner that restarted,
// or every owner after the switch to v2.
func (p *Protocol) resendRecords(fresh func(dest, peer string) bool, now time.Time) {
	o := p.v2.owners
	e := p.cfg.Tracker.Epoch(now)
	for ep := e - int64(p.cfg.Tracker.SubWindows) + 1; ep <= e-1; ep++ {
		names := p.v2.own[ep]
		if len(names) == 0 {
			continue
		}
		need := false
		for _, d := range names {
			if slices.ContainsFunc(o.Of(d), func(peer string) bool { return fresh(d, peer) }) {
				need = true
				break
			}
		}
		if !need {
			continue
		}
		dests := p.sealedFor(ep, now)
		by := map[string][]tracker.DestCounts{}
		for _, dc := range dests {
			for _, peer := range o.Of(dc.Dest) {
				if fresh(dc.Dest, peer) {
					by[peer] = append(by[peer], dc)
				}
			}
		}
		for _, peer := range slices.Sorted(maps.Keys(by)) {
			p.stats.V2.Resent++
			p.sendRecords(peer, ep, by[peer], p.manifests(peer, []int64{ep}), now)
		}
	}
}

// manifests returns the manifests, for owner peer, of what this node has
// sent it for epochs eps: its sealed destinations of each epoch that peer
// owns. Epochs with none are left out.
func (p *Protocol) manifests(peer string, eps []int64) []codec.EpochManifest {
	var out []codec.EpochManifest
	slices.Sort(eps)
	for _, ep := range slices.Compact(eps) {
		if m := p.manifestsOf(ep)[peer]; m.Records > 0 {
			out = append(out, codec.EpochManifest{Epoch: ep, Manifest: m})
		}
	}
	return out
}

// manifestsOf returns, per owner, the manifest of this node's sealed
// destinations of epoch ep that it owns; cached until the owners change.
func (p *Protocol) manifestsOf(ep int64) map[string]tracker.Manifest {
	if m, ok := p.v2.mans[ep]; ok {
		return m
	}
	o := p.v2.owners
	m := map[string]tracker.Manifest{}
	for _, d := range p.v2.own[ep] {
		for _, peer := range o.Of(d) {
			x := m[peer]
			x.Add(d)
			m[peer] = x
		}
	}
	p.v2.mans[ep] = m
	return m
}

// sendRecords sends dests (records of epoch ep) to owner peer, with the
// manifests on the last part; to itself it inserts them into Owned.
func (p *Protocol) sendRecords(peer string, ep int64, dests []tracker.DestCounts, ms []codec.EpochManifest, now time.Time) {
	b := tracker.Batch{Key: tracker.BatchKey{Origin: p.cfg.Name, Boot: p.cfg.BootID, Epoch: ep}, Layout: p.layout, Dests: dests}
	if peer == p.cfg.Name {
		if len(dests) > 0 {
			p.ownedInsert(b, now)
		}
		return
	}
	to := p.memberOf(peer)
	if to == "" {
		return
	}
	parts, err := p.enc.RecordsParts(codec.Records{Batch: b, Manifests: ms, SentAtMillis: clockMillis(now)}, p.cfg.Gossip.MaxPartBytes)
	if err != nil {
		p.log.Warn("cluster: records", "epoch", ep, "to", to, "err", err)
		return
	}
	if len(parts) > 1 && len(ms) > 0 { // the manifests go last: the parts arrive in order
		last, err := codec.AppendRecords(nil, codec.Records{Batch: tracker.Batch{Key: b.Key, Layout: b.Layout}, Manifests: ms, SentAtMillis: clockMillis(now)})
		if err == nil {
			first, _ := p.enc.RecordsParts(codec.Records{Batch: b, SentAtMillis: clockMillis(now)}, p.cfg.Gossip.MaxPartBytes)
			parts = append(first, last)
		}
	}
	for _, part := range parts {
		p.stats.V2.RecordsSent++
		p.v2.outbox = append(p.v2.outbox, Message{To: to, Type: codec.TypeRecords, Payload: part, Expires: p.batchExpiry(ep)})
	}
}

// ownedInsert inserts records into Owned and notes a late arrival for a
// destination this node has published this round.
func (p *Protocol) ownedInsert(b tracker.Batch, now time.Time) tracker.InsertOutcome {
	out := p.cfg.Owned.InsertRecords(b, now)
	if out != tracker.InsertNew {
		return out
	}
	for _, dc := range b.Dests {
		p.see(dc.Dest, b.Key.Epoch)
	}
	if !p.v2.on || p.v2.pubEpoch != p.cfg.Tracker.Epoch(now)-1 || !p.v2.pubDone {
		return out
	}
	// Records after this round's publish, of a destination this node
	// publishes (first owner, or second once it failed over): publish again.
	// A destination new to this node makes the owners stale: computed
	// again, they may give it to this node.
	o := p.v2.owners
	if p.v2.dirty {
		o = p.ownersNow(now)
	}
	for _, dc := range b.Dests {
		p.noteLate(o, dc.Dest, now)
	}
	return out
}

// noteLate marks dest for this round's republish when the owners o have
// this node publish it (first owner, or second once it failed over) and it
// has not been republished this round.
func (p *Protocol) noteLate(o *Owners, dest string, now time.Time) {
	r := o.Rank(dest, p.cfg.Name)
	if (r == 0 || r == 1 && p.v2.failDone) && !p.v2.republished[dest] {
		p.v2.late[dest] = true
		if p.v2.lateAt.IsZero() {
			// The second owner a delay later: the first's republish,
			// arrived by then, makes its own needless.
			p.v2.lateAt = now.Add(time.Duration(1+r) * p.cfg.Gossip.RepublishDelay)
		}
	}
}

// noteGiven marks for this round's republish (noteLate) the destinations
// the owners o give this node and old did not, once the round's publish
// is past: their records came while other owners were computed here (a
// node that knew fewer destinations, as just after its start, gives some
// of them to others), and the origins, whose owners did not change, send
// none again. Without it their views kept the older aggregate until the
// next round (an owner restarted after its publish time, with one owner a
// destination). The republish itself publishes only what adds to the
// aggregate held.
func (p *Protocol) noteGiven(old, o *Owners, now time.Time) {
	if !p.v2.on || !p.v2.pubDone || p.v2.pubEpoch != p.cfg.Tracker.Epoch(now)-1 {
		return
	}
	for _, d := range o.Dests() {
		if old != nil && old.Rank(d, p.cfg.Name) == o.Rank(d, p.cfg.Name) {
			continue
		}
		p.noteLate(o, d, now)
	}
}

// sealV2 sends the sealed records of epoch ep to their owners: to each
// owner one records message (in parts if large) with the manifests of ep
// and ep−1, and to an owner that had records of the window but none now, a
// message of manifests only (every epoch of the window), so that a lost
// message is found and pulled.
func (p *Protocol) sealV2(ep int64, dests []tracker.DestCounts, now time.Time) {
	names := make([]string, len(dests))
	for i := range dests {
		names[i] = dests[i].Dest
		p.see(dests[i].Dest, ep)
	}
	o := p.ownersNow(now) // before ep is held: what changed is sent again for the epochs before
	p.v2.own[ep] = names
	delete(p.v2.mans, ep)
	by := map[string][]tracker.DestCounts{}
	for _, dc := range dests {
		for _, peer := range o.Of(dc.Dest) {
			by[peer] = append(by[peer], dc)
		}
	}
	window := make([]int64, 0, p.cfg.Tracker.SubWindows)
	for e := ep - int64(p.cfg.Tracker.SubWindows) + 2; e < ep; e++ {
		if len(p.v2.own[e]) > 0 {
			window = append(window, e)
		}
	}
	// Owners with records of the window but none of ep: a message of
	// manifests only.
	quiet := map[string]bool{}
	for _, e := range window {
		for peer := range p.manifestsOf(e) {
			if len(by[peer]) == 0 && peer != p.cfg.Name {
				quiet[peer] = true
			}
		}
	}
	for _, peer := range slices.Sorted(maps.Keys(by)) {
		p.sendRecords(peer, ep, by[peer], p.manifests(peer, []int64{ep - 1, ep}), now)
	}
	for _, peer := range slices.Sorted(maps.Keys(quiet)) {
		if ms := p.manifests(peer, window); len(ms) > 0 {
			p.sendRecords(peer, ep, nil, ms, now)
		}
	}
}

// round starts the publishing round of now's epoch E (aggregates of E−1)
// if it has not started: pull the missing records halfway between the
// last origin's seal and the publish, publish at the start of E plus
// publishDelay, fail over (and pull again) Gossip.FailoverDelay later (at
// most a quarter sub-window).
func (p *Protocol) round(now time.Time) {
	e := p.cfg.Tracker.Epoch(now)
	if p.v2.pubEpoch == e-1 {
		return
	}
	missed := p.v2.pubEpoch != 0 && (p.v2.pubEpoch < e-2 || !p.v2.pubDone || !p.v2.failDone)
	p.v2.pubEpoch = e - 1
	start := p.cfg.Tracker.EpochStart(e)
	p.v2.pullAt = start.Add(p.maxJitter + (p.publishDelay()-p.maxJitter)/2)
	p.v2.pubAt = start.Add(p.publishDelay())
	p.v2.failAt = p.v2.pubAt.Add(min(p.cfg.Gossip.FailoverDelay, p.cfg.Tracker.SubWindow()/4))
	p.v2.pullDone, p.v2.pubDone, p.v2.failDone = false, false, false
	p.v2.digestAt[0] = p.v2.pubAt.Add(p.v2.failAt.Sub(p.v2.pubAt) / 2)
	p.v2.digestAt[1] = p.v2.failAt.Add(3 * p.cfg.Gossip.RepublishDelay)
	if !p.v2.digestAt[1].Before(p.cfg.Tracker.EpochStart(e + 1)) {
		p.v2.digestAt[1] = time.Time{} // past the round: the periodic anti-entropy's
	}
	p.v2.digestDone = [2]bool{}
	for m := range p.v2.heard {
		if _, listed := p.byMember[m]; !listed {
			// Kept while the origin is listed, up or not, however long
			// it is quiet: pullMissing expects only those up and heard
			// in the round's two epochs before, and receiveRecords
			// pulls the gap of one heard again (gapEpochs), also when
			// it comes back with its boot after being listed dead
			// (forgotten then, what it sent while it could not be
			// reached stayed missing until it slid out of the window:
			// TestFlappingMemberLosesNoRecords).
			delete(p.v2.heard, m)
		}
	}
	clear(p.v2.published)
	clear(p.v2.late)
	clear(p.v2.republished)
	p.v2.lateAt = time.Time{}
	if missed {
		p.catchUp(e-2, now)
	}
}

// catchUp publishes, for the round of epoch ep+1 that this node's loop
// missed (stalled over its publish or its failover, or over the whole
// round), the aggregates of ep it owns (first or second owner) that add
// to what it holds: the readers' views read E−1 and, until it arrives,
// E−2 (older ones only while aggregates come late), so without them a
// view stays empty from the missed round until this round's publish
// (with a destination's only owner stalled over an epoch boundary, or
// both). It comes at once, the records of ep having come long before;
// what the other owner published covers as much and is not published
// again.
func (p *Protocol) catchUp(ep int64, now time.Time) {
	o := p.ownersNow(now)
	var aggs []tracker.Aggregate
	for _, d := range o.Dests() {
		if r := o.Rank(d, p.cfg.Name); r != 0 && r != 1 {
			continue
		}
		mine := p.cfg.Owned.CoverageOf(d, ep, now)
		if mine.Records == 0 {
			continue
		}
		if held, _ := p.cfg.Aggregates.AggregateCoverage(d, ep); mine.Compare(held) <= 0 {
			continue
		}
		if a, ok := p.cfg.Owned.AggregateOf(d, ep, now); ok {
			aggs = append(aggs, a)
		}
	}
	p.stats.V2.CaughtUp += uint64(p.sendAggregates(aggs, ep, now))
}

// nextV2 is when v2 next needs a tick, or zero for never.
func (p *Protocol) nextV2() time.Time {
	if !p.v2.on {
		return time.Time{}
	}
	if p.v2.dirty {
		return p.lastNow
	}
	var next time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if !p.v2.pullDone {
		consider(p.v2.pullAt)
	}
	if !p.v2.pubDone {
		consider(p.v2.pubAt)
	}
	if !p.v2.failDone {
		consider(p.v2.failAt)
	}
	for i, at := range p.v2.digestAt {
		if !p.v2.digestDone[i] {
			consider(at)
		}
	}
	consider(p.v2.lateAt)
	// The next round's publish.
	e := p.cfg.Tracker.Epoch(p.lastNow)
	if p.v2.pubEpoch == e-1 {
		e++
	}
	consider(p.cfg.Tracker.EpochStart(e).Add(p.publishDelay()))
	return next
}

// publishDelay is when, after an epoch boundary, the first owners publish:
// the largest seal jitter plus Gossip.PublishDelay, at most 60 % of a
// sub-window (the failover, at most a quarter sub-window later, must come
// before the next boundary).
func (p *Protocol) publishDelay() time.Duration {
	return min(p.maxJitter+p.cfg.Gossip.PublishDelay, p.cfg.Tracker.SubWindow()*3/5)
}

// repairShare: a round's repair pulls (pullMissing, pullAggregates) are
// sent only while at most 1 + 1/repairShare of what is expected is
// missing; more is lateness (an overloaded sender or network), not loss,
// and pulling would add to the load.
const repairShare = 4

// pullMissing pulls again, from each origin, the records this node most
// likely lost: those of the epochs its manifests named that this node
// still holds otherwise (wanted), and those of the round's epoch P from an
// origin that sent this node records or manifests in P−1 or P−2 but
// nothing since (each origin sends its owners a records message every
// epoch while it has records of the window for them), every epoch after
// the last heard up to P. One record_pull per origin, in member-name
// order; the origin answers with its records of those epochs for this
// node. An origin gone quiet is asked at most twice per round, in two
// rounds. When too much is missing (repairShare) it pulls none of the
// round's epoch.
func (p *Protocol) pullMissing(now time.Time) {
	ep := p.v2.pubEpoch
	lo := p.cfg.Tracker.Epoch(now) - int64(p.cfg.Tracker.SubWindows) + 1
	current := func(m string) (Member, bool) {
		if !p.up(m) {
			return Member{}, false
		}
		mem := p.members[p.byMember[m]]
		return mem, p.memberOf(mem.Name) == m
	}
	missing := map[string][]int64{}
	expected := 0
	for m, last := range p.v2.heard {
		if _, ok := current(m); !ok || last < ep-2 {
			continue
		}
		expected++
		if last < ep {
			for e := last + 1; e <= ep; e++ {
				missing[m] = append(missing[m], e)
			}
		}
	}
	if len(missing) > 1+expected/repairShare {
		// More than a few missing: the messages are late (an overloaded
		// sender or network), not lost; pulling would add to the load.
		// The next manifests will tell.
		p.stats.V2.RepairsSkipped++
		clear(missing)
	}
	for m, eps := range p.v2.wanted {
		mem, ok := current(m)
		for e, told := range eps {
			if !ok || e < lo || p.holdsAll(mem.Name, mem.BootID, e, told, now) {
				delete(eps, e)
			} else {
				missing[m] = append(missing[m], e)
			}
		}
		if len(eps) == 0 {
			delete(p.v2.wanted, m)
		}
	}
	for _, m := range slices.Sorted(maps.Keys(missing)) {
		eps := missing[m]
		slices.Sort(eps)
		eps = slices.Compact(eps)
		for _, e := range eps {
			p.v2.askedRecs[askedKey(m, e)] = now
		}
		payload, err := codec.AppendRecordPull(nil, codec.RecordPull{Sender: p.self, Epochs: eps, SentAtMillis: clockMillis(now)})
		if err != nil {
			continue
		}
		p.stats.V2.RecordPulls++
		p.stats.V2.RepairPulls++
		p.v2.outbox = append(p.v2.outbox, Message{To: m, Type: codec.TypeRecordPull, Payload: payload})
	}
}

// pullAggregates pulls, from each destination's owner of the given rank
// (0: the first, 1: the second), the round's aggregate of every
// destination whose aggregate of the epoch before this node holds but of
// the round's epoch not yet: most likely lost on its way. One agg_pull
// per owner, in member-name order.
func (p *Protocol) pullAggregates(rank int, now time.Time) {
	ep := p.v2.pubEpoch
	o := p.v2.owners
	if o == nil {
		return
	}
	by := map[string][]tracker.AggregateEntry{}
	expected, missing := 0, 0
	for _, d := range o.Dests() {
		owners := o.Of(d)
		if rank >= len(owners) || owners[rank] == p.cfg.Name {
			continue
		}
		if _, ok := p.cfg.Aggregates.AggregateCoverage(d, ep-1); !ok {
			continue
		}
		expected++
		if _, ok := p.cfg.Aggregates.AggregateCoverage(d, ep); ok {
			continue
		}
		missing++
		if to := p.memberOf(owners[rank]); to != "" {
			by[to] = append(by[to], tracker.AggregateEntry{Dest: d, Epoch: ep})
		}
	}
	if missing > 1+expected/repairShare {
		p.stats.V2.RepairsSkipped++ // late, not lost: anti-entropy's
		return
	}
	for _, to := range slices.Sorted(maps.Keys(by)) {
		for want := by[to]; len(want) > 0; {
			n := min(len(want), 2048)
			if payload, err := codec.AppendAggEntries(nil, codec.TypeAggPull, codec.AggEntries{Sender: p.self, Entries: want[:n], SentAtMillis: clockMillis(now)}); err == nil {
				p.stats.V2.AggPulls++
				p.stats.V2.AggRepairPulls++
				p.v2.outbox = append(p.v2.outbox, Message{To: to, Type: codec.TypeAggPull, Payload: payload})
			}
			want = want[n:]
		}
	}
}

// publishDue publishes what is due at now: the first owner's aggregates,
// the second owner's failover, the republishing of late records.
func (p *Protocol) publishDue(now time.Time) {
	if !p.v2.on {
		return
	}
	p.round(now)
	o := p.ownersNow(now)
	if !p.v2.pullDone && !now.Before(p.v2.pullAt) {
		p.v2.pullDone = true
		p.pullMissing(now)
	}
	if !p.v2.pubDone && !now.Before(p.v2.pubAt) {
		p.v2.pubDone = true
		var mine []string
		for _, d := range o.Dests() {
			if o.Rank(d, p.cfg.Name) == 0 {
				mine = append(mine, d)
			}
		}
		p.stats.V2.Published += uint64(p.publish(mine, now))
	}
	if !p.v2.failDone && !now.Before(p.v2.failAt) {
		p.v2.failDone = true
		var take []string
		for _, d := range o.Dests() {
			if o.Rank(d, p.cfg.Name) != 1 {
				continue
			}
			mine := p.cfg.Owned.Coverage(d, now)
			if mine.Records == 0 {
				continue
			}
			held, ok := p.cfg.Aggregates.AggregateCoverage(d, p.v2.pubEpoch)
			switch {
			case ok && held == mine:
				p.stats.V2.CrossChecks++
			case ok:
				p.stats.V2.CrossCheckMismatches++
				if mine.Compare(held) > 0 {
					take = append(take, d)
				}
			default:
				take = append(take, d)
			}
		}
		p.stats.V2.Takeovers += uint64(p.publish(take, now))
		// Pull again what is still missing (the pull or its answer was
		// lost); what it brings is published once more.
		p.pullMissing(now)
		clear(p.v2.republished)
	}
	if !p.v2.lateAt.IsZero() && !now.Before(p.v2.lateAt) {
		p.v2.lateAt = time.Time{}
		var again []string
		for _, d := range slices.Sorted(maps.Keys(p.v2.late)) {
			mine := p.cfg.Owned.Coverage(d, now)
			held, _ := p.cfg.Aggregates.AggregateCoverage(d, p.v2.pubEpoch)
			// Not when the other owner published as much already.
			if c, ok := p.v2.published[d]; (!ok || mine != c) && mine.Compare(held) > 0 {
				again = append(again, d)
			}
			p.v2.republished[d] = true
		}
		clear(p.v2.late)
		p.stats.V2.Republished += uint64(p.publish(again, now))
	}
	for i, at := range p.v2.digestAt {
		if !p.v2.digestDone[i] && !at.IsZero() && !now.Before(at) {
			p.v2.digestDone[i] = true
			p.pullAggregates(i, now)
			for range min(1, len(p.peers)) {
				p.stats.V2.RoundDigests++
				p.v2.outbox = append(p.v2.outbox, p.aggDigests(p.peers[p.rng.IntN(len(p.peers))], now)...)
			}
		}
	}
}

// publish merges dests' aggregates, keeps them and sends them to every
// member up, straight or through relays (relaying); it returns how many it
// published.
func (p *Protocol) publish(dests []string, now time.Time) int {
	var aggs []tracker.Aggregate
	for _, d := range dests {
		a, ok := p.cfg.Owned.Aggregate(d, now)
		if !ok {
			continue
		}
		p.v2.published[d] = a.Coverage
		aggs = append(aggs, a)
	}
	return p.sendAggregates(aggs, p.v2.pubEpoch, now)
}

// sendAggregates keeps aggs (aggregates of epoch ep) and sends them to
// every member up, straight or through relays (relaying); it returns how
// many it sent.
func (p *Protocol) sendAggregates(aggs []tracker.Aggregate, ep int64, now time.Time) int {
	for _, a := range aggs {
		p.cfg.Aggregates.InsertAggregate(a, now)
	}
	if len(aggs) == 0 {
		return 0
	}
	expires := p.aggExpiry(ep)
	if p.relaying() {
		p.stats.V2.RelayedPublishes += uint64(len(aggs))
		p.publishRelayed(aggs, expires, now)
		return len(aggs)
	}
	var to []string
	for _, peer := range slices.Sorted(maps.Keys(p.v2.current)) {
		if peer != p.cfg.Name {
			to = append(to, p.v2.current[peer].Member)
		}
	}
	t := p.aggType()
	for _, payload := range p.aggregateMessages(aggs, now) {
		for _, m := range to {
			p.v2.outbox = append(p.v2.outbox, Message{To: m, Type: t, Payload: payload, Expires: expires})
		}
	}
	return len(aggs)
}

// aggExpiry is when an aggregate of epoch ep stops being of use anywhere:
// at the start of ep+H+1, when every reader's kept and read range
// (tracker.Config.AggregateHorizon) begins above it.
func (p *Protocol) aggExpiry(ep int64) time.Time {
	return p.cfg.Tracker.EpochStart(ep + p.cfg.Tracker.AggregateHorizon() + 1)
}

// aggType is the type of the aggregates messages this node sends: packed
// once every member up is at Level4.
func (p *Protocol) aggType() codec.MessageType {
	if p.v2.level >= Level4 {
		return codec.TypePackedAggregates
	}
	return codec.TypeAggregates
}

// aggregateMessages encodes aggs (as aggType) in messages of at most
// Gossip.MaxPartBytes (one aggregate alone may exceed it, up to
// codec.MaxMessageBytes).
func (p *Protocol) aggregateMessages(aggs []tracker.Aggregate, now time.Time) [][]byte {
	appendAggs := codec.AppendAggregates
	if p.aggType() == codec.TypePackedAggregates {
		appendAggs = codec.AppendPackedAggregates
	}
	var out [][]byte
	for len(aggs) > 0 {
		n := len(aggs)
		var msg []byte
		for {
			var err error
			msg, err = appendAggs(nil, codec.Aggregates{Sender: p.self, Layout: p.layout, Aggregates: aggs[:n], SentAtMillis: clockMillis(now)})
			if err == nil && (len(msg) <= p.cfg.Gossip.MaxPartBytes || n == 1) {
				break
			}
			if n == 1 {
				msg = nil // cannot happen: an aggregate of one layout fits a message
				break
			}
			n = (n + 1) / 2
		}
		if msg != nil {
			out = append(out, msg)
		}
		aggs = aggs[n:]
	}
	return out
}

// flush returns msgs with the outbox appended, and empties the outbox.
func (p *Protocol) flush(msgs []Message) []Message {
	if len(p.v2.outbox) == 0 {
		return msgs
	}
	msgs = append(msgs, p.v2.outbox...)
	p.v2.outbox = p.v2.outbox[:0]
	return msgs
}

// aggDigests returns this node's aggregate digest for member to.
func (p *Protocol) aggDigests(to string, now time.Time) []Message {
	p.digestTo[to] = now
	payload, err := codec.AppendAggDigest(nil, codec.AggDigest{Sender: p.self, Epochs: p.cfg.Aggregates.AggregateDigests(now), SentAtMillis: clockMillis(now)})
	if err != nil {
		return nil
	}
	return []Message{{To: to, Type: codec.TypeAggDigest, Payload: payload}}
}
