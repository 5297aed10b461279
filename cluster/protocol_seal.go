package cluster

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// sealDue seals every epoch that ended (and is past the seal delay) since
// the last seal and that the tracker's ring still holds.
func (p *Protocol) sealDue(now time.Time, msgs []Message) []Message {
	if p.cfg.Seal == nil {
		return msgs
	}
	trk := p.cfg.Tracker
	e := trk.Epoch(now)
	if now.Before(trk.EpochStart(e).Add(p.sealDelay())) {
		e-- // within the delay of a new epoch: the one before it is not due
	}
	from := max(p.lastSealed+1, e-int64(trk.SubWindows)+1)
	p.lastSealed = max(p.lastSealed, e-1)
	for ep := from; ep <= e-1; ep++ {
		dests := p.cfg.Seal(ep, now)
		kept, dropped := tracker.CutMostSamples(dests, p.cfg.SealLimits.MaxDestinations, p.cfg.SealLimits.MaxBuckets)
		if dropped > 0 {
			p.stats.DestinationsDropped += uint64(dropped)
			p.log.Warn("cluster: sealed sub-window cut to the fleet's per-member caps, fewest samples dropped",
				"epoch", ep, "destinations", len(dests), "dropped", dropped,
				"max_destinations", p.cfg.SealLimits.MaxDestinations, "max_buckets", p.cfg.SealLimits.MaxBuckets)
		}
		if p.v2.on {
			if len(kept) > 0 {
				p.stats.Seals++
			}
			p.sealV2(ep, kept, now) // with nothing of its own: the manifests of the window
			continue
		}
		if len(kept) == 0 {
			continue
		}
		p.stats.Seals++
		if p.speaksV2() { // what v2 sends again after a switch
			names := make([]string, len(kept))
			for i := range kept {
				names[i] = kept[i].Dest
				p.see(kept[i].Dest, ep)
			}
			p.v2.own[ep] = names
		}
		out, err := p.seal(ep, kept, now)
		if err != nil {
			p.stats.SealErrors++
			p.log.Warn("cluster: seal", "epoch", ep, "err", err)
		}
		msgs = append(msgs, out...)
	}
	return msgs
}

// seal turns this node's sealed sub-window of epoch into its batch: split
// into parts of at most Gossip.MaxPartBytes, inserted into the Store
// exactly as peers will decode it, and addressed to every peer. The error
// reports a sub-window that cannot be encoded (nothing is sent) or a part
// the Store refused (the messages are still returned).
func (p *Protocol) seal(epoch int64, dests []tracker.DestCounts, now time.Time) ([]Message, error) {
	b := tracker.Batch{
		Key:    tracker.BatchKey{Origin: p.cfg.Name, Boot: p.cfg.BootID, Epoch: epoch},
		Layout: p.layout,
		Dests:  dests,
	}
	parts, err := p.enc.BatchPartsAt(b, p.cfg.Gossip.MaxPartBytes, clockMillis(now))
	if err != nil {
		return nil, fmt.Errorf("cluster: seal epoch %d: %w", epoch, err)
	}
	var msgs []Message
	var errs []error
	for _, part := range parts {
		payload := slices.Clone(part)
		p.observeBatchSize(len(payload))
		own, err := p.dec.DecodeBatch(payload)
		if err != nil { // cannot happen: the encoder writes what the decoder reads
			return nil, fmt.Errorf("cluster: seal epoch %d: own part: %w", epoch, err)
		}
		if o := p.cfg.Store.Insert(own, now); o != tracker.InsertNew && o != tracker.InsertDuplicate {
			errs = append(errs, fmt.Errorf("cluster: seal epoch %d part %d: store refused own batch: %s", epoch, own.Key.Part, o))
		}
		for _, to := range p.peers {
			msgs = append(msgs, Message{To: to, Type: codec.TypeBatch, Payload: payload, Expires: p.batchExpiry(epoch)})
		}
	}
	return msgs, errors.Join(errs...)
}

// batchExpiry is when a batch of epoch stops being accepted anywhere: at
// the start of epoch+N+2, when every receiver's accepted range begins above
// it.
func (p *Protocol) batchExpiry(epoch int64) time.Time {
	return p.cfg.Tracker.EpochStart(epoch + int64(p.cfg.Tracker.SubWindows) + 2)
}
