package cluster

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// keysPerMessage is the most keys one digest or pull carries: at worst
// (every key its own 256-byte origin) 2048 keys encode to ~600 KB, below
// codec.MaxMessageBytes and the default Limits.MaxMessageBytes, and 2048 is
// below codec.MaxKeys and codec.MaxKeyOrigins, so encoding never fails.
const keysPerMessage = 2048

// maxRequested bounds the keys a Protocol remembers having pulled.
const maxRequested = 1 << 16

// Rejection reasons, the keys of GossipStats.Rejected.
const (
	RejectDecodeVersion   = "decode_version"   // another protocol version
	RejectDecodeType      = "decode_type"      // an unknown message type
	RejectDecodeMalformed = "decode_malformed" // bytes that are not a valid message
	RejectDecodeTooLarge  = "decode_too_large" // over a size cap (codec's or Limits.MaxMessageBytes)
	RejectDecodeLayout    = "decode_layout"    // a histogram layout other than ours
	RejectUnknownOrigin   = "unknown_origin"   // a batch whose origin is not a current or recent member
	RejectOwnOrigin       = "own_origin"       // a batch claiming to be this process's: only it makes those
	RejectUnknownSender   = "unknown_sender"   // a digest or pull from a member that is not alive here
	RejectStaleEpoch      = "stale_epoch"      // a batch outside the accepted epochs [E−N−1, E+1]
	RejectConflict        = "conflict"         // a batch whose key is held with other contents
	RejectQueueFull       = "queue_full"       // dropped before decoding: the message queue was full
)

// ProtocolConfig configures a [Protocol].
type ProtocolConfig struct {
	// Name and BootID identify this process: its batches carry them, and
	// its digests and pulls MemberName(Name, BootID) as the sender.
	Name   string
	BootID uint64
	// Tracker is the epoch grid and layout (Config.Tracker).
	Tracker tracker.Config
	// Gossip gives the pull budget (BulkSyncBytes), the part size
	// (MaxPartBytes) and the anti-entropy interval.
	Gossip Gossip
	// Store holds the fleet view.
	Store Store
	// KnownOrigin reports whether (name, boot) is a current or recent
	// member; batches of any other origin are refused.
	KnownOrigin func(name string, boot uint64) bool
	// Up reports whether the member named member is alive or suspect;
	// digests and pulls from any other sender are refused.
	Up func(member string) bool
}

// Message is one message the protocol wants sent.
type Message struct {
	To      string            // member name of the receiver
	Type    codec.MessageType // what Payload is
	Payload []byte            // the encoded message; owned by the Message, never modified
	// Expires is when a batch becomes useless: from then on its epoch is
	// below every receiver's accepted range [E−N−1, E+1], so a sender
	// whose queue backed up drops it rather than sending what will be
	// refused as stale. Zero for digests and pulls: they never expire.
	Expires time.Time
}

// Receipt says what [Protocol.Receive] did with one message.
type Receipt struct {
	// Type is the message type, 0 when the header could not be read.
	Type codec.MessageType
	// Reject is the reason the message was refused (a Reject* constant),
	// "" when it was accepted. A batch refused by the Store carries its
	// Outcome and, for a stale epoch or a conflict, a reason too.
	Reject string
	// Inserted is true when a batch reached Store.Insert; Outcome is then
	// the Store's answer and Key the batch's key.
	Inserted bool
	Outcome  tracker.InsertOutcome
	Key      tracker.BatchKey
	// Repair is true for a new batch that this node had pulled.
	Repair bool
}

// Protocol is one node's dissemination logic without I/O: it decides what
// to send at an epoch boundary, how to answer a digest or a pull, and what
// to pull, taking time and the Store as arguments and returning
// [Message]s. [Cluster] drives it over memberlist; a simulator can drive
// it over anything. Not safe for concurrent use.
type Protocol struct {
	cfg    ProtocolConfig
	self   string // member name
	layout tracker.Layout
	enc    codec.Encoder
	dec    *codec.Decoder

	requested map[tracker.BatchKey]time.Time // keys pulled and when, to pull each from one member at a time
	digestTo  map[string]time.Time           // when a digest was last sent to each member
	avgBatch  float64                        // running mean of batch message sizes, to size pulls
}

// NewProtocol returns a Protocol, or an error if cfg's tracker config or
// name is invalid or a callback is missing.
func NewProtocol(cfg ProtocolConfig) (*Protocol, error) {
	var errs []error
	if err := validName(cfg.Name); err != nil {
		errs = append(errs, err)
	}
	if err := cfg.Tracker.Validate(); err != nil {
		errs = append(errs, err)
	}
	if n := len(MemberName(cfg.Name, cfg.BootID)); n > codec.MaxNameBytes {
		errs = append(errs, fmt.Errorf("cluster: member name is %d bytes, at most %d with gossip (name at most %d)",
			n, codec.MaxNameBytes, codec.MaxNameBytes-9))
	}
	if cfg.Store == nil || cfg.KnownOrigin == nil || cfg.Up == nil {
		errs = append(errs, errors.New("cluster: protocol needs a Store, KnownOrigin and Up"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	layout := cfg.Tracker.Layout()
	dec, err := codec.NewDecoder(layout)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return &Protocol{
		cfg:       cfg,
		self:      MemberName(cfg.Name, cfg.BootID),
		layout:    layout,
		dec:       dec,
		requested: make(map[tracker.BatchKey]time.Time),
		digestTo:  make(map[string]time.Time),
		avgBatch:  4096,
	}, nil
}

// MemberName returns the member name this protocol sends as.
func (p *Protocol) MemberName() string { return p.self }

// Seal turns this node's sealed sub-window of epoch into its batch: split
// into parts of at most Gossip.MaxPartBytes, inserted into the Store
// exactly as peers will decode it, and addressed to every member in peers
// (member names; this node's own is skipped). An empty sub-window gives
// nothing. The error reports a sub-window that cannot be encoded (nothing
// is sent) or a part the Store refused (the messages are still returned).
func (p *Protocol) Seal(epoch int64, dests []tracker.DestCounts, peers []string, now time.Time) ([]Message, error) {
	if len(dests) == 0 {
		return nil, nil
	}
	b := tracker.Batch{
		Key:    tracker.BatchKey{Origin: p.cfg.Name, Boot: p.cfg.BootID, Epoch: epoch},
		Layout: p.layout,
		Dests:  dests,
	}
	parts, err := p.enc.BatchParts(b, p.cfg.Gossip.MaxPartBytes)
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
		for _, to := range peers {
			if to != p.self {
				msgs = append(msgs, Message{To: to, Type: codec.TypeBatch, Payload: payload, Expires: p.batchExpiry(epoch)})
			}
		}
	}
	return msgs, errors.Join(errs...)
}

// Digests returns the digest messages advertising every key the Store
// holds, for member to: one message per keysPerMessage keys, newest epochs
// in the first. It remembers sending them, so that to's digest in reply is
// not answered with another digest.
func (p *Protocol) Digests(to string, now time.Time) []Message {
	p.digestTo[to] = now
	return p.keyMessages(to, codec.TypeDigest, p.cfg.Store.Keys(now))
}

// keyMessages encodes keys (any order; newest first if they are to be
// split that way) as digest or pull messages to member to.
func (p *Protocol) keyMessages(to string, t codec.MessageType, keys []tracker.BatchKey) []Message {
	var msgs []Message
	for first := true; len(keys) > 0 || (first && t == codec.TypeDigest); first = false {
		n := min(len(keys), keysPerMessage)
		chunk := codec.SortKeys(slices.Clone(keys[:n]))
		keys = keys[n:]
		var payload []byte
		var err error
		if t == codec.TypeDigest {
			payload, err = codec.AppendDigest(nil, codec.Digest{Sender: p.self, Keys: chunk})
		} else {
			payload, err = codec.AppendPull(nil, codec.Pull{Sender: p.self, Keys: chunk})
		}
		if err != nil {
			continue // cannot happen: names were validated by the Store, sizes bounded by keysPerMessage
		}
		msgs = append(msgs, Message{To: to, Type: t, Payload: payload})
	}
	return msgs
}

// Receive handles one message from a peer: a batch is checked and inserted
// into the Store; a digest is answered with a pull of what this node lacks
// (and with this node's own digest when the sender lacks something and was
// not just sent one); a pull is answered with the batches asked for,
// newest epochs first, within Gossip.BulkSyncBytes. msg is not retained.
func (p *Protocol) Receive(msg []byte, now time.Time) (Receipt, []Message) {
	var r Receipt
	t, err := p.dec.Type(msg)
	r.Type = t
	if err != nil {
		r.Reject = decodeReason(err)
		return r, nil
	}
	switch t {
	case codec.TypeBatch:
		p.receiveBatch(msg, now, &r)
		return r, nil
	case codec.TypeDigest:
		d, err := p.dec.DecodeDigest(msg)
		if err != nil {
			r.Reject = decodeReason(err)
			return r, nil
		}
		if r.Reject = p.checkSender(d.Sender); r.Reject != "" {
			return r, nil
		}
		return r, p.answerDigest(d, now)
	default: // codec.TypePull; Type refuses every other type
		pl, err := p.dec.DecodePull(msg)
		if err != nil {
			r.Reject = decodeReason(err)
			return r, nil
		}
		if r.Reject = p.checkSender(pl.Sender); r.Reject != "" {
			return r, nil
		}
		return r, p.answerPull(pl)
	}
}

func (p *Protocol) checkSender(sender string) string {
	if sender == p.self || !p.cfg.Up(sender) {
		return RejectUnknownSender
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
	switch {
	case b.Key.Origin == p.cfg.Name && b.Key.Boot == p.cfg.BootID:
		r.Reject = RejectOwnOrigin
		return
	case !p.cfg.KnownOrigin(b.Key.Origin, b.Key.Boot):
		r.Reject = RejectUnknownOrigin
		return
	}
	p.observeBatchSize(len(msg))
	r.Inserted, r.Outcome = true, p.cfg.Store.Insert(b, now)
	if _, ok := p.requested[b.Key]; ok {
		delete(p.requested, b.Key)
		r.Repair = r.Outcome == tracker.InsertNew
	}
	switch r.Outcome {
	case tracker.InsertNew, tracker.InsertDuplicate:
	case tracker.InsertTooOld, tracker.InsertTooNew:
		r.Reject = RejectStaleEpoch
	case tracker.InsertConflict:
		r.Reject = RejectConflict
	case tracker.InsertLayoutMismatch:
		r.Reject = RejectDecodeLayout
	default:
		r.Reject = "store_" + r.Outcome.String()
	}
}

// answerDigest returns the pull of what d's sender holds and this node
// lacks, and this node's digest when the sender lacks something.
func (p *Protocol) answerDigest(d codec.Digest, now time.Time) []Message {
	p.expireRequested(now)
	theirs := make([]tracker.BatchKey, 0, len(d.Keys))
	for _, k := range d.Keys {
		if (k.Origin != p.cfg.Name || k.Boot != p.cfg.BootID) && p.cfg.KnownOrigin(k.Origin, k.Boot) {
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
	msgs := p.keyMessages(d.Sender, codec.TypePull, want)
	mine := p.cfg.Store.Keys(now)
	if last, ok := p.digestTo[d.Sender]; (!ok || now.Sub(last) >= p.cfg.Gossip.AntiEntropyInterval/2) && lacks(d.Keys, mine) {
		msgs = append(msgs, p.Digests(d.Sender, now)...)
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
// epochs first, within Gossip.BulkSyncBytes (at least one).
func (p *Protocol) answerPull(pl codec.Pull) []Message {
	keys := slices.Clone(pl.Keys)
	slices.SortFunc(keys, compareNewestFirst)
	var msgs []Message
	budget := p.cfg.Gossip.BulkSyncBytes
	for _, k := range keys {
		b, ok := p.cfg.Store.Lookup(k)
		if !ok {
			continue
		}
		payload, err := codec.AppendBatch(nil, b)
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

// batchExpiry is when a batch of epoch stops being accepted anywhere: at
// the start of epoch+N+2, when every receiver's accepted range begins above
// it.
func (p *Protocol) batchExpiry(epoch int64) time.Time {
	return p.cfg.Tracker.EpochStart(epoch + int64(p.cfg.Tracker.SubWindows) + 2)
}

// Forget drops what the protocol remembers about member (a member name):
// call it when the member is gone for good.
func (p *Protocol) Forget(member string) { delete(p.digestTo, member) }

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

// Membership brings the Store's exclusions and live-member count in line
// with members (Cluster.Members): every member alive or suspect is
// included, unless another boot of the same peer name is its current one
// (this process for its own name, else the up member seen up most
// recently); every other member — dead, left, or a restarted peer's old
// boot — is excluded. SetLiveMembers gets the number alive or suspect.
func (p *Protocol) Membership(members []Member, now time.Time) {
	current := map[string]Member{}
	live := 0
	for _, m := range members {
		if !m.State.Up() {
			continue
		}
		live++
		if c, ok := current[m.Name]; !ok || m.Since.After(c.Since) {
			current[m.Name] = m
		}
	}
	for _, m := range members {
		if m.BootID == 0 {
			continue // metadata unusable: no batch can name it
		}
		cur := m.State.Up() && current[m.Name].BootID == m.BootID
		if m.Name == p.cfg.Name {
			cur = m.BootID == p.cfg.BootID
		}
		if cur {
			p.cfg.Store.Include(m.Name, m.BootID, now)
		} else {
			p.cfg.Store.Exclude(m.Name, m.BootID, now)
		}
	}
	p.cfg.Store.SetLiveMembers(live)
}

func compareNewestFirst(a, b tracker.BatchKey) int {
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
