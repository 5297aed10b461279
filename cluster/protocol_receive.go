package cluster

import (
	"cmp"
	"errors"
	"slices"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// Receive handles one message from a peer: a batch is checked and inserted
// into the Store; a digest is answered with a pull of what this node lacks
// (and with this node's own digest when the sender lacks something and was
// not just sent one); a pull is answered with the batches asked for,
// newest epochs first, within Gossip.BulkSyncBytes. A batch's origin must
// be a current or recent member, a digest's or pull's sender a member up
// (as last given to SetMembers). msg is not retained. Receive never moves
// Next.
func (p *Protocol) Receive(msg []byte, now time.Time) (Receipt, []Message) {
	var r Receipt
	p.lastNow = later(p.lastNow, now)
	t, err := p.dec.Type(msg)
	r.Type = t
	if err != nil {
		r.Reject = decodeReason(err)
		return r, nil
	}
	if t > codec.TypePull {
		p.receiveV2(msg, t, now, &r)
		return r, p.flush(nil)
	}
	switch t {
	case codec.TypeBatch:
		p.receiveBatch(msg, now, &r)
		return r, nil
	case codec.TypeDigest:
		d, err := p.dec.DecodeDigest(msg)
		if !p.accept(err, d.Sender, d.SentAtMillis, now, &r) {
			return r, nil
		}
		return r, p.answerDigest(d, now)
	default: // codec.TypePull; Type refuses every other type
		pl, err := p.dec.DecodePull(msg)
		if !p.accept(err, pl.Sender, pl.SentAtMillis, now, &r) {
			return r, nil
		}
		return r, p.answerPull(pl, now)
	}
}

// accept judges a decoded message that names its sender (a digest, a
// pull, an aggregates message…): refused (r.Reject set, false returned)
// when it did not decode or its sender is not another member up;
// otherwise its clock is noted.
func (p *Protocol) accept(err error, sender string, sentAtMillis int64, now time.Time, r *Receipt) bool {
	if err != nil {
		r.Reject = decodeReason(err)
		return false
	}
	if r.Reject = p.checkSender(sender); r.Reject != "" {
		return false
	}
	p.observeClock(sender, sentAtMillis, now)
	return true
}

func (p *Protocol) checkSender(sender string) string {
	if sender == p.self || !p.up(sender) {
		return RejectUnknownSender
	}
	return ""
}

// checkOrigin refuses a batch or records message that claims to be this
// process's (only it makes those) or whose origin is not a current or
// recent member; "" accepts it.
func (p *Protocol) checkOrigin(k tracker.BatchKey) string {
	switch {
	case k.Origin == p.cfg.Name && k.Boot == p.cfg.BootID:
		return RejectOwnOrigin
	case !p.knownOrigin(k.Origin, k.Boot):
		return RejectUnknownOrigin
	}
	return ""
}

func (p *Protocol) receiveBatch(msg []byte, now time.Time, r *Receipt) {
	b, err := p.dec.DecodeBatch(msg)
	if err != nil {
		r.Reject = decodeReason(err)
		return
	}
	r.Key = b.Key
	if r.Reject = p.checkOrigin(b.Key); r.Reject != "" {
		return
	}
	// A batch carries sent_at only when its sender is its origin.
	p.observeClock(MemberName(b.Key.Origin, b.Key.Boot), p.dec.SentAtMillis(), now)
	p.observeBatchSize(len(msg))
	r.Inserted, r.Outcome = true, p.cfg.Store.Insert(b, now)
	if _, ok := p.requested[b.Key]; ok {
		delete(p.requested, b.Key)
		r.Repair = r.Outcome == tracker.InsertNew
	}
	r.Reject = outcomeReason(r.Outcome)
	p.observeBatchEpoch(b.Key, r.Outcome, r.Reject, now)
}

// digests returns the digest messages advertising every key the Store
// holds, for member to: one message per keysPerMessage keys, newest epochs
// in the first. It remembers sending them, so that to's digest in reply is
// not answered with another digest.
func (p *Protocol) digests(to string, now time.Time) []Message {
	p.digestTo[to] = now
	return p.keyMessages(to, codec.TypeDigest, p.cfg.Store.Keys(now), now)
}

// keyMessages encodes keys (any order; newest first if they are to be
// split that way) as digest or pull messages to member to, sent at now.
func (p *Protocol) keyMessages(to string, t codec.MessageType, keys []tracker.BatchKey, now time.Time) []Message {
	at := clockMillis(now)
	var msgs []Message
	for first := true; len(keys) > 0 || (first && t == codec.TypeDigest); first = false {
		n := min(len(keys), keysPerMessage)
		chunk := codec.SortKeys(slices.Clone(keys[:n]))
		keys = keys[n:]
		var payload []byte
		var err error
		if t == codec.TypeDigest {
			payload, err = codec.AppendDigest(nil, codec.Digest{Sender: p.self, Keys: chunk, SentAtMillis: at})
		} else {
			payload, err = codec.AppendPull(nil, codec.Pull{Sender: p.self, Keys: chunk, SentAtMillis: at})
		}
		if err != nil {
			continue // cannot happen: names were validated by the Store, sizes bounded by keysPerMessage
		}
		msgs = append(msgs, Message{To: to, Type: t, Payload: payload})
	}
	return msgs
}

// answerDigest returns the pull of what d's sender holds and this node
// lacks, and this node's digest when the sender lacks something.
func (p *Protocol) answerDigest(d codec.Digest, now time.Time) []Message {
	p.expireRequested(now)
	theirs := make([]tracker.BatchKey, 0, len(d.Keys))
	for _, k := range d.Keys {
		if (k.Origin != p.cfg.Name || k.Boot != p.cfg.BootID) && p.knownOrigin(k.Origin, k.Boot) {
			theirs = append(theirs, k)
		}
	}
	// Ask for about BulkSyncBytes' worth, newest first; keys asked of
	// another member within the last interval are left to that member.
	budget := max(1, int(float64(p.cfg.Gossip.BulkSyncBytes)/p.avgBatch))
	var want []tracker.BatchKey
	for _, k := range p.cfg.Store.Missing(theirs, now) {
		if len(want) == budget {
			break
		}
		if _, asked := p.requested[k]; asked {
			continue
		}
		want = append(want, k)
		if len(p.requested) < maxRequested {
			p.requested[k] = now
		}
	}
	msgs := p.keyMessages(d.Sender, codec.TypePull, want, now)
	mine := p.cfg.Store.Keys(now)
	if last, ok := p.digestTo[d.Sender]; (!ok || now.Sub(last) >= p.cfg.Gossip.AntiEntropyInterval/2) && lacks(d.Keys, mine) {
		msgs = append(msgs, p.digests(d.Sender, now)...)
	}
	return msgs
}

// lacks reports whether mine holds a key that theirs (canonical order)
// does not.
func lacks(theirs, mine []tracker.BatchKey) bool {
	if len(mine) > len(theirs) {
		return true
	}
	for _, k := range mine {
		if _, found := slices.BinarySearchFunc(theirs, k, codec.CompareKeys); !found {
			return true
		}
	}
	return false
}

// answerPull returns the batches pl asks for that the Store holds, newest
// epochs first, within Gossip.BulkSyncBytes (at least one). This node's
// own batches carry its clock; other origins' do not (see codec's
// sent_at).
func (p *Protocol) answerPull(pl codec.Pull, now time.Time) []Message {
	keys := slices.Clone(pl.Keys)
	slices.SortFunc(keys, CompareKeysNewestFirst)
	var msgs []Message
	budget := p.cfg.Gossip.BulkSyncBytes
	for _, k := range keys {
		b, ok := p.cfg.Store.Lookup(k)
		if !ok {
			continue
		}
		var at int64
		if k.Origin == p.cfg.Name && k.Boot == p.cfg.BootID {
			at = clockMillis(now)
		}
		payload, err := codec.AppendBatchAt(nil, b, at)
		if err != nil {
			continue // a held batch was validated on insert; cannot happen
		}
		if len(msgs) > 0 && len(payload) > budget {
			break
		}
		budget -= len(payload)
		msgs = append(msgs, Message{To: pl.Sender, Type: codec.TypeBatch, Payload: payload, Expires: p.batchExpiry(k.Epoch)})
	}
	return msgs
}

func (p *Protocol) expireRequested(now time.Time) {
	for k, at := range p.requested {
		if now.Sub(at) >= p.cfg.Gossip.AntiEntropyInterval || now.Before(at) {
			delete(p.requested, k)
		}
	}
	for m, at := range p.digestTo {
		if now.Sub(at) >= 4*p.cfg.Gossip.AntiEntropyInterval || now.Before(at) {
			delete(p.digestTo, m)
		}
	}
}

func (p *Protocol) observeBatchSize(n int) {
	p.avgBatch += (float64(n) - p.avgBatch) / 16
	p.avgBatch = max(p.avgBatch, 64)
}

// CompareKeysNewestFirst orders batch keys newest epoch first, then as
// codec.CompareKeys (origin, boot, part): the order pulls are answered in
// and Store.Missing returns keys.
func CompareKeysNewestFirst(a, b tracker.BatchKey) int {
	return cmp.Or(cmp.Compare(b.Epoch, a.Epoch), codec.CompareKeys(a, b))
}

// decodeReason maps a codec error to its rejection reason.
func decodeReason(err error) string {
	switch {
	case errors.Is(err, codec.ErrVersion):
		return RejectDecodeVersion
	case errors.Is(err, codec.ErrType):
		return RejectDecodeType
	case errors.Is(err, codec.ErrLayout):
		return RejectDecodeLayout
	case errors.Is(err, codec.ErrTooLarge):
		return RejectDecodeTooLarge
	default:
		return RejectDecodeMalformed
	}
}
