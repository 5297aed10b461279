package cluster

import (
	"fmt"
	"slices"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// receiveV2 handles a message of a v2 type. A node that does not run v2
// with its stores refuses them as decode_type, as a v1 node does.
func (p *Protocol) receiveV2(msg []byte, t codec.MessageType, now time.Time, r *Receipt) {
	if !p.speaksV2() {
		r.Reject = RejectDecodeType
		return
	}
	switch t {
	case codec.TypeRecords:
		p.receiveRecords(msg, now, r)
	case codec.TypeRecordPull:
		if pl, err := p.dec.DecodeRecordPull(msg); p.accept(err, pl.Sender, pl.SentAtMillis, now, r) {
			p.answerRecordPull(pl, now)
		}
	case codec.TypeAggregates, codec.TypePackedAggregates:
		decode := p.dec.DecodeAggregates
		if t == codec.TypePackedAggregates {
			decode = p.dec.DecodePackedAggregates
		}
		if m, err := decode(msg); p.accept(err, m.Sender, m.SentAtMillis, now, r) {
			fresh := p.insertAggregates(m.Aggregates, now, r)
			p.relay(m.Sender, m.Aggregates, fresh, now)
		}
	case codec.TypeAggDigest:
		if d, err := p.dec.DecodeAggDigest(msg); p.accept(err, d.Sender, d.SentAtMillis, now, r) {
			p.answerAggDigest(d, now)
		}
	case codec.TypeAggList, codec.TypeAggPull:
		e, err := p.dec.DecodeAggEntries(msg, t)
		switch {
		case !p.accept(err, e.Sender, e.SentAtMillis, now, r):
		case t == codec.TypeAggList:
			p.answerAggList(e, now)
		default:
			p.answerAggPull(e, now)
		}
	}
}

// receiveRecords stores an origin's records (the origin must be a current
// or recent member, not this process) and checks its manifests: an epoch
// whose records this node holds otherwise than the origin says it sent is
// pulled again.
func (p *Protocol) receiveRecords(msg []byte, now time.Time, r *Receipt) {
	rec, err := p.dec.DecodeRecords(msg)
	if err != nil {
		r.Reject = decodeReason(err)
		return
	}
	b := rec.Batch
	r.Key = b.Key
	p.observeClock(MemberName(b.Key.Origin, b.Key.Boot), rec.SentAtMillis, now)
	if r.Reject = p.checkOrigin(b.Key); r.Reject != "" {
		return
	}
	if len(b.Dests) > 0 {
		r.Inserted, r.Outcome = true, p.ownedInsert(b, now)
		r.Reject = outcomeReason(r.Outcome)
		p.observeBatchEpoch(b.Key, r.Outcome, r.Reject, now)
		if r.Reject != "" {
			return
		}
	}
	sender := MemberName(b.Key.Origin, b.Key.Boot)
	e := p.cfg.Tracker.Epoch(now)
	var want []int64
	if (len(b.Dests) > 0 || len(rec.Manifests) > 0) && p.up(sender) {
		// Not while the origin is listed dead here: its manifests are
		// not checked then (a pull to it would not be sent), and the
		// first message after its return pulls the gap since the last
		// heard before (gapEpochs), what came meanwhile included.
		last, ok := p.v2.heard[sender]
		if b.Key.Epoch > last {
			p.v2.heard[sender] = b.Key.Epoch
		}
		if ok && b.Key.Epoch > last+1 {
			want = p.gapEpochs(b.Key, last, rec.Manifests, now)
		}
	}
	if !p.up(sender) || len(rec.Manifests) == 0 && len(want) == 0 {
		return
	}
	p.expireAsked(now)
	for _, m := range rec.Manifests {
		if m.Epoch < e-int64(p.cfg.Tracker.SubWindows)+1 || m.Epoch > e {
			continue
		}
		if p.holdsAll(b.Key.Origin, b.Key.Boot, m.Epoch, m.Manifest, now) {
			delete(p.v2.wanted[sender], m.Epoch)
			continue
		}
		if p.v2.wanted[sender] == nil {
			p.v2.wanted[sender] = map[int64]tracker.Manifest{}
		}
		p.v2.wanted[sender][m.Epoch] = m.Manifest
		k := askedKey(sender, m.Epoch)
		if _, asked := p.v2.askedRecs[k]; asked {
			continue
		}
		p.v2.askedRecs[k] = now
		want = append(want, m.Epoch)
	}
	if len(want) == 0 {
		return
	}
	payload, err := codec.AppendRecordPull(nil, codec.RecordPull{Sender: p.self, Epochs: want, SentAtMillis: clockMillis(now)})
	if err == nil {
		p.stats.V2.RecordPulls++
		p.v2.outbox = append(p.v2.outbox, Message{To: sender, Type: codec.TypeRecordPull, Payload: payload})
	}
}

// gapEpochs returns the epochs of the window between last, the newest
// epoch origin key's records messages had brought this node, and key's,
// that the origin must have sent it something for and that this message's
// manifests do not name: an origin sends each owner a records message
// every epoch while it has records of the window for it (sealV2), so a gap
// is what was lost on its way, as while this node was cut off from the
// origin without a member list noticing (the owners never changed, and
// nobody sends the window again). The manifests of the message name
// only its epoch and the one before; without this, the records of the
// older epochs of the gap stayed missing until they slid out of the
// window. The origin must have sent something at epoch x while it had
// records of x−S+2..x for this node (S sub-windows): the newest epoch
// held of it tells. Heard last before the window, nothing tells (what
// this node held of it has slid out): the whole window is pulled, and the
// origin answers only the epochs it has records of for this node.
func (p *Protocol) gapEpochs(key tracker.BatchKey, last int64, ms []codec.EpochManifest, now time.Time) []int64 {
	e := p.cfg.Tracker.Epoch(now)
	n := int64(p.cfg.Tracker.SubWindows)
	held := int64(-1 << 62)
	if last <= e-n {
		held = e // heard before the window: every epoch of it
	}
	for x := last; x > last-n+1 && x > e-n; x-- {
		if p.cfg.Owned.Manifest(key.Origin, key.Boot, x, now).Records > 0 {
			held = x
			break
		}
	}
	var out []int64
	for x := max(last+1, e-n+1); x < key.Epoch && x <= held+n-2; x++ {
		if !slices.ContainsFunc(ms, func(m codec.EpochManifest) bool { return m.Epoch == x }) {
			p.v2.askedRecs[askedKey(MemberName(key.Origin, key.Boot), x)] = now
			out = append(out, x)
		}
	}
	return out
}

// outcomeReason is the rejection reason of a Store's outcome, "" for new
// and duplicate.
func outcomeReason(o tracker.InsertOutcome) string {
	switch o {
	case tracker.InsertNew, tracker.InsertDuplicate, tracker.InsertSuperseded:
		return ""
	case tracker.InsertTooOld:
		return RejectStaleEpoch
	case tracker.InsertTooNew:
		return RejectFutureEpoch
	case tracker.InsertConflict:
		return RejectConflict
	case tracker.InsertLayoutMismatch:
		return RejectDecodeLayout
	}
	return "store_" + o.String()
}

// answerRecordPull sends the pulling owner this node's records of the
// epochs asked for that the owner owns, with their manifests.
func (p *Protocol) answerRecordPull(pl codec.RecordPull, now time.Time) {
	if !p.v2.on {
		return
	}
	peer := p.members[p.byMember[pl.Sender]].Name
	if p.memberOf(peer) != pl.Sender {
		return // not that peer's current member
	}
	o := p.ownersNow(now)
	e := p.cfg.Tracker.Epoch(now)
	for _, ep := range slices.Compact(slices.Sorted(slices.Values(pl.Epochs))) {
		if ep < e-int64(p.cfg.Tracker.SubWindows)+1 || ep > e-1 {
			continue
		}
		var dests []tracker.DestCounts
		for _, dc := range p.sealedFor(ep, now) {
			if o.Rank(dc.Dest, peer) >= 0 {
				dests = append(dests, dc)
			}
		}
		ms := p.manifests(peer, []int64{ep})
		if len(dests) == 0 && len(ms) == 0 {
			continue // nothing of ep for that owner
		}
		p.stats.V2.Resent++
		p.sendRecords(peer, ep, dests, ms, now)
	}
}

// insertAggregates keeps received aggregates (the largest coverage per
// destination and epoch). The receipt counts the first refusal, and lists
// the aggregates kept as new; so does the result, by index in aggs.
func (p *Protocol) insertAggregates(aggs []tracker.Aggregate, now time.Time, r *Receipt) []int {
	var fresh []int
	r.Inserted, r.Outcome = true, tracker.InsertDuplicate
	for i := range aggs {
		a := &aggs[i]
		out := p.cfg.Aggregates.InsertAggregate(*a, now)
		if out == tracker.InsertNew || out == tracker.InsertDuplicate || out == tracker.InsertSuperseded {
			// Only an aggregate the store took (its epoch in range) names
			// a destination the owners are computed over: refused ones,
			// a far-future epoch or a name beyond the caps, would grow
			// known without end.
			p.see(a.Dest, a.Epoch)
		}
		p.observeEpoch(out, now)
		switch out {
		case tracker.InsertNew:
			r.Outcome = tracker.InsertNew
			r.Key.Epoch = max(r.Key.Epoch, a.Epoch)
			r.NewAggregates = append(r.NewAggregates, tracker.AggregateEntry{Dest: a.Dest, Epoch: a.Epoch, Coverage: a.Coverage})
			fresh = append(fresh, i)
			delete(p.v2.askedAggs, aggKey(a.Dest, a.Epoch))
		case tracker.InsertDuplicate, tracker.InsertSuperseded:
			if r.Outcome != tracker.InsertNew {
				r.Outcome = out
			}
		default:
			if r.Reject == "" {
				r.Reject = outcomeReason(out)
			}
		}
	}
	return fresh
}

func aggKey(dest string, ep int64) string { return fmt.Sprintf("%s/%d", dest, ep) }

// answerAggDigest compares a peer's aggregate digest with this node's:
// for the slices that differ it sends this node's list of aggregates, and
// its own digest (unless it sent that peer one within half an interval),
// so that each side pulls what the other holds with a larger coverage.
func (p *Protocol) answerAggDigest(d codec.AggDigest, now time.Time) {
	mine := map[int64]tracker.AggregateDigest{}
	for _, g := range p.cfg.Aggregates.AggregateDigests(now) {
		mine[g.Epoch] = g
	}
	theirs := map[int64]tracker.AggregateDigest{}
	for _, g := range d.Epochs {
		theirs[g.Epoch] = g
	}
	e := p.cfg.Tracker.Epoch(now)
	var list []tracker.AggregateEntry
	differ := false
	for ep := e - 2; ep <= e; ep++ {
		a, b := mine[ep], theirs[ep]
		var mask uint32
		for k := range a.Slices {
			if a.Slices[k] != b.Slices[k] {
				mask |= 1 << k
			}
		}
		if mask == 0 {
			continue
		}
		differ = true
		list = append(list, p.cfg.Aggregates.AggregateEntries(ep, mask, now)...)
	}
	if !differ {
		return
	}
	for len(list) > 0 {
		n := min(len(list), 2048)
		if payload, err := codec.AppendAggEntries(nil, codec.TypeAggList, codec.AggEntries{Sender: p.self, Entries: list[:n], SentAtMillis: clockMillis(now)}); err == nil {
			p.v2.outbox = append(p.v2.outbox, Message{To: d.Sender, Type: codec.TypeAggList, Payload: payload})
		}
		list = list[n:]
	}
	if last, ok := p.digestTo[d.Sender]; !ok || now.Sub(last) >= p.cfg.Gossip.AntiEntropyInterval/2 {
		p.v2.outbox = append(p.v2.outbox, p.aggDigests(d.Sender, now)...)
	}
}

// answerAggList pulls the aggregates of a peer's list that it holds with a
// larger coverage than this node (each from one member at a time).
func (p *Protocol) answerAggList(l codec.AggEntries, now time.Time) {
	p.expireAsked(now)
	var want []tracker.AggregateEntry
	for _, x := range l.Entries {
		mine, _ := p.cfg.Aggregates.AggregateCoverage(x.Dest, x.Epoch)
		if x.Coverage.Compare(mine) <= 0 {
			continue
		}
		k := aggKey(x.Dest, x.Epoch)
		if _, asked := p.v2.askedAggs[k]; asked {
			continue
		}
		p.v2.askedAggs[k] = now
		want = append(want, tracker.AggregateEntry{Dest: x.Dest, Epoch: x.Epoch, Coverage: mine})
	}
	for len(want) > 0 {
		n := min(len(want), 2048)
		if payload, err := codec.AppendAggEntries(nil, codec.TypeAggPull, codec.AggEntries{Sender: p.self, Entries: want[:n], SentAtMillis: clockMillis(now)}); err == nil {
			p.stats.V2.AggPulls++
			p.v2.outbox = append(p.v2.outbox, Message{To: l.Sender, Type: codec.TypeAggPull, Payload: payload})
		}
		want = want[n:]
	}
}

// answerAggPull sends the aggregates asked for that this node holds with a
// larger coverage than the puller, within Gossip.BulkSyncBytes.
func (p *Protocol) answerAggPull(pl codec.AggEntries, now time.Time) {
	var aggs []tracker.Aggregate
	for _, x := range pl.Entries {
		if a, ok := p.cfg.Aggregates.LookupAggregate(x.Dest, x.Epoch); ok && a.Coverage.Compare(x.Coverage) > 0 {
			aggs = append(aggs, a)
		}
	}
	budget := p.cfg.Gossip.BulkSyncBytes
	for i, payload := range p.aggregateMessages(aggs, now) {
		if i > 0 && len(payload) > budget {
			break
		}
		budget -= len(payload)
		p.v2.outbox = append(p.v2.outbox, Message{To: pl.Sender, Type: p.aggType(), Payload: payload})
	}
}

// expireAsked forgets the record and aggregate pulls older than an
// anti-entropy interval, so that they are asked again.
func (p *Protocol) expireAsked(now time.Time) {
	for _, m := range []map[string]time.Time{p.v2.askedRecs, p.v2.askedAggs} {
		for k, at := range m {
			if now.Sub(at) >= p.cfg.Gossip.AntiEntropyInterval || now.Before(at) {
				delete(m, k)
			}
		}
	}
}

// askedKey is the key of p.v2.askedRecs for the records of epoch ep asked
// of member.
func askedKey(member string, ep int64) string { return fmt.Sprintf("%s/%d", member, ep) }
