package cluster

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
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

// Seeds of the protocol's two random streams, each a PCG seeded with the
// boot ID and one of these: the seal jitter, and the anti-entropy stream
// (waits, peer choice, bulk-sync shuffle).
const (
	seedJitter      = 0x5ea1
	seedAntiEntropy = 0x6055
)

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
	RejectStaleEpoch      = "stale_epoch"      // a batch below the accepted epochs [E−N−1, E+1]
	RejectFutureEpoch     = "future_epoch"     // a batch above the accepted epochs: the sender's clock is ahead, or ours behind
	RejectConflict        = "conflict"         // a batch whose key is held with other contents
	RejectQueueFull       = "queue_full"       // dropped before decoding: the message queue was full
)

// SealLimits caps the batch this node seals for one epoch, where it is
// sealed: a larger batch would be refused whole, by this node's Store and by
// every peer's. Set them to the fleet's per-member caps.
type SealLimits struct {
	// MaxDestinations is the most destinations one batch holds
	// (tracker.FleetConfig.MaxDestinations); < 1 means no cap.
	MaxDestinations int
	// MaxBuckets is the most sparse buckets one batch holds over all its
	// destinations (tracker.FleetConfig.MaxEpochBuckets); < 1 means no cap.
	MaxBuckets int
}

// ProtocolConfig configures a [Protocol].
type ProtocolConfig struct {
	// Name and BootID identify this process: its batches carry them, and
	// its digests and pulls MemberName(Name, BootID) as the sender. BootID
	// also seeds the protocol's random streams.
	Name   string
	BootID uint64
	// Tracker is the epoch grid and layout (Config.Tracker).
	Tracker tracker.Config
	// Gossip gives the schedule (seal jitter, anti-entropy interval, bulk
	// sync peers), the pull budget and the part size.
	Gossip Gossip
	// Store holds the fleet view.
	Store Store
	// Seal returns this node's sealed sub-window of epoch, destinations
	// sorted by name (tracker.SealedSubWindow of the local tracker). The
	// protocol calls it once per epoch, when the epoch is due, and cuts the
	// result to SealLimits. nil means this node has no latencies of its own.
	Seal func(epoch int64, now time.Time) []tracker.DestCounts
	// SealLimits caps each sealed batch. Zero means no cap.
	SealLimits SealLimits
	// BulkSyncDelay is how long the protocol waits, once it has members
	// after starting or after being alone, before its bulk sync: time for
	// the rest of the cluster to appear in the member list. The Cluster
	// sets 4 × Timing.GossipInterval; 0 syncs at once.
	BulkSyncDelay time.Duration
	// Logger receives seal warnings; nil discards them.
	Logger *slog.Logger

	// Owned and Aggregates are this node's stores for protocol v2
	// (destination-owned aggregation): the records of the destinations it
	// owns (*tracker.Owned) and the aggregates it reads (*tracker.Fleet,
	// usually Store itself). With both set and Gossip.Protocol 2, the
	// protocol runs v2 once every member up advertises it; nil runs v1
	// only.
	Owned      OwnedStore
	Aggregates AggregateStore
	// RelayFrom is the fewest members (this node included) at which first
	// owners send aggregates through relays under protocol v2, once every
	// member up is at Level4: 0 means DefaultRelayFrom, a negative value
	// never (every aggregate mailed to every member by its publisher).
	RelayFrom int
	// Level is the protocol level this node advertises (Member.Level);
	// 0 means CurrentLevel. It uses what a level brings only while it and
	// every member up speak that level.
	Level uint8
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
	// Outcome and, for an epoch out of range or a conflict, a reason too.
	Reject string
	// Inserted is true when a batch reached Store.Insert; Outcome is then
	// the Store's answer and Key the batch's key. For an aggregates
	// message (protocol v2) Outcome is InsertNew when it brought a new
	// aggregate, and Key.Epoch is then the newest new aggregate's epoch.
	Inserted bool
	Outcome  tracker.InsertOutcome
	Key      tracker.BatchKey
	// Repair is true for a new batch that this node had pulled.
	Repair bool
	// NewAggregates lists the aggregates of an aggregates message kept as
	// new (protocol v2).
	NewAggregates []tracker.AggregateEntry
}

// ProtocolStats counts what the protocol sealed; all counts are cumulative.
type ProtocolStats struct {
	// Seals counts epochs this node sealed with data; SealErrors those it
	// could not encode or its own Store refused.
	Seals, SealErrors uint64
	// DestinationsDropped counts the destinations left out of sealed
	// batches by SealLimits (those with the fewest samples).
	DestinationsDropped uint64
	// V2 counts what destination-owned aggregation did.
	V2 V2Stats
}

// Protocol is one node's dissemination logic, with no goroutines, clock or
// I/O: it owns the schedule — when to seal each epoch (the boundary plus a
// fixed per-node jitter), when to swap a digest with a random member
// (anti-entropy) and when to bulk-sync — and the answers to peers'
// messages. It is advanced by [Protocol.Tick], [Protocol.Receive] and
// [Protocol.SetMembers], each taking the time: Tick and Receive return the
// [Message]s to send, SetMembers gives it the member table (what it sends
// follows at the next Tick); [Protocol.Next] says when it next needs a
// tick. Given its BootID and the same calls, it makes the same decisions.
// [Cluster] drives it over memberlist, a simulator over anything; a node
// without gossip is a Protocol with no members. Not safe for concurrent use
// (see [SyncProtocol]).
type Protocol struct {
	cfg    ProtocolConfig
	self   string // member name
	layout tracker.Layout
	enc    codec.Encoder
	dec    *codec.Decoder
	log    *slog.Logger
	jitter time.Duration // seal delay after each epoch boundary, when there are peers
	// maxJitter is the largest seal delay of any node: min(SealJitter, sub-window/2).
	maxJitter time.Duration
	lastNow   time.Time   // the latest time given to Tick, Receive or SetMembers
	rng       *mrand.Rand // anti-entropy waits, peer choice, bulk-sync shuffle

	// Membership, as last given to SetMembers.
	members  []Member
	byMember map[string]int // member name → index in members
	// origins holds the (Name, BootID) of each member whose member name is
	// MemberName(Name, BootID): the batch origins knownOrigin accepts.
	origins map[origin]struct{}
	peers   []string // member names of the other members up, in members' order
	given   bool     // SetMembers was called

	// Schedule.
	started    bool
	lastSealed int64     // newest epoch sealed
	aeNext     time.Time // next anti-entropy round
	bulkDue    bool      // bulk sync once members are there (after start, or after being alone)
	bulkAt     time.Time // when the due bulk sync runs; zero while not armed

	// Clocks (protocol_clock.go): members' clocks from their messages'
	// sent_at, and when this node last refused a peer batch as
	// future_epoch or stale_epoch, and last accepted one.
	clocks                        map[string]*peerClock
	futureAt, staleAt, acceptedAt time.Time

	requested map[tracker.BatchKey]time.Time // keys pulled and when, to pull each from one member at a time
	digestTo  map[string]time.Time           // when a digest was last sent to each member
	avgBatch  float64                        // running mean of batch message sizes, to size pulls

	stats ProtocolStats

	v2 v2 // destination-owned aggregation
}

// NewProtocol returns a Protocol, or an error if cfg's name, tracker
// config or gossip settings are invalid or the Store is missing. It has
// not started: its first Tick starts its schedule.
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
	if cfg.Store == nil {
		errs = append(errs, errors.New("cluster: protocol needs a Store"))
	}
	if cfg.BulkSyncDelay < 0 {
		errs = append(errs, fmt.Errorf("cluster: bulk sync delay must be >= 0, got %v", cfg.BulkSyncDelay))
	}
	errs = append(errs, cfg.Gossip.Validate())
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	layout := cfg.Tracker.Layout()
	dec, err := codec.NewDecoder(layout)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	l := cfg.Logger
	if l == nil {
		l = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	// A fixed per-node delay in [0, SealJitter), capped at half a
	// sub-window, drawn from the boot ID.
	maxJitter := min(cfg.Gossip.SealJitter, cfg.Tracker.SubWindow()/2)
	u := float64(mrand.New(mrand.NewPCG(cfg.BootID, seedJitter)).Uint64()>>11) / (1 << 53)
	return &Protocol{
		cfg:       cfg,
		self:      MemberName(cfg.Name, cfg.BootID),
		layout:    layout,
		dec:       dec,
		log:       l,
		jitter:    time.Duration(u * float64(maxJitter)),
		maxJitter: maxJitter,
		v2:        newV2(),
		rng:       mrand.New(mrand.NewPCG(cfg.BootID, seedAntiEntropy)),
		byMember:  map[string]int{},
		origins:   map[origin]struct{}{},
		clocks:    map[string]*peerClock{},
		bulkDue:   cfg.Gossip.BulkSyncPeers > 0,
		requested: make(map[tracker.BatchKey]time.Time),
		digestTo:  make(map[string]time.Time),
		avgBatch:  4096,
	}, nil
}

// MemberName returns the member name this protocol sends as.
func (p *Protocol) MemberName() string { return p.self }

// Jitter returns this node's seal delay after each epoch boundary while it
// has peers: fixed, drawn from the boot ID in [0, min(Gossip.SealJitter,
// sub-window/2)). A node with no peers seals at the boundary: there is no
// burst to spread.
func (p *Protocol) Jitter() time.Duration { return p.jitter }

// Stats returns the seal counters so far.
func (p *Protocol) Stats() ProtocolStats { return p.stats }

// Tick does what is due at now and returns the messages to send: it seals
// every epoch that ended (and is past this node's jitter) since the last
// seal and that the tracker still holds, addressed to every peer; runs the
// bulk sync when it is due (digests to Gossip.BulkSyncPeers random
// members); and runs an anti-entropy round when it is due (the Store's
// membership re-applied, a digest to one random member). The first Tick
// starts the schedule: it seals what the tracker already holds, and the
// first anti-entropy round and bulk sync come later. A Tick before Next
// does nothing.
func (p *Protocol) Tick(now time.Time) []Message {
	p.lastNow = later(p.lastNow, now)
	if !p.started {
		p.started = true
		p.lastSealed = p.cfg.Tracker.Epoch(now) - int64(p.cfg.Tracker.SubWindows)
		p.aeNext = now.Add(p.antiEntropyWait())
		p.armBulk(now)
	}
	msgs := p.sealDue(now, nil)
	msgs = p.bulkSyncDue(now, msgs)
	msgs = p.antiEntropyDue(now, msgs)
	if p.v2.on {
		p.ownersNow(now)
		p.publishDue(now)
	}
	return p.flush(msgs)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Next returns when the protocol next needs a Tick: the earliest of the
// next seal (the end of the epoch after the last sealed, plus the jitter
// while there are peers), the next anti-entropy round and the armed bulk
// sync. The zero time (before the first Tick) means at once.
func (p *Protocol) Next() time.Time {
	if !p.started {
		return time.Time{}
	}
	next := p.aeNext
	if p.cfg.Seal != nil {
		if s := p.nextSeal(); s.Before(next) {
			next = s
		}
	}
	if p.bulkArmed() && p.bulkAt.Before(next) {
		next = p.bulkAt
	}
	if v := p.nextV2(); !v.IsZero() && v.Before(next) {
		next = v
	}
	return next
}

// sealDelay is the delay after an epoch boundary before the epoch that
// ended is due.
func (p *Protocol) sealDelay() time.Duration {
	if len(p.peers) == 0 {
		return 0
	}
	return p.jitter
}

// nextSeal is when the epoch after the last sealed one is due.
func (p *Protocol) nextSeal() time.Time {
	return p.cfg.Tracker.EpochStart(p.lastSealed + 2).Add(p.sealDelay())
}

func (p *Protocol) antiEntropyWait() time.Duration {
	return time.Duration(float64(p.cfg.Gossip.AntiEntropyInterval) * (0.75 + 0.5*p.rng.Float64()))
}

// antiEntropyDue runs one anti-entropy round if it is due: membership
// re-applied to the Store (in case a change was missed), then a digest to
// one random peer; with no peer, a bulk sync becomes due for when members
// appear.
func (p *Protocol) antiEntropyDue(now time.Time, msgs []Message) []Message {
	if now.Before(p.aeNext) {
		return msgs
	}
	if p.given {
		p.applyMembership(now)
	}
	if len(p.peers) > 0 {
		to := p.peers[p.rng.IntN(len(p.peers))]
		if p.v2.on {
			msgs = append(msgs, p.aggDigests(to, now)...)
		} else {
			msgs = append(msgs, p.digests(to, now)...)
		}
	} else {
		p.alone()
	}
	p.aeNext = now.Add(p.antiEntropyWait())
	return msgs
}

// bulkArmed reports whether a bulk sync is due at bulkAt.
func (p *Protocol) bulkArmed() bool { return p.bulkDue && !p.bulkAt.IsZero() && len(p.peers) > 0 }

// armBulk sets the time of a due bulk sync once there are peers.
func (p *Protocol) armBulk(now time.Time) {
	if p.bulkDue && p.bulkAt.IsZero() && len(p.peers) > 0 {
		p.bulkAt = now.Add(p.cfg.BulkSyncDelay)
	}
}

// alone makes a bulk sync due for when members appear.
func (p *Protocol) alone() {
	p.bulkDue, p.bulkAt = p.cfg.Gossip.BulkSyncPeers > 0, time.Time{}
}

// bulkSyncDue exchanges digests with Gossip.BulkSyncPeers random peers if
// the bulk sync is due, so a joiner catches up on the whole window at once.
func (p *Protocol) bulkSyncDue(now time.Time, msgs []Message) []Message {
	if !p.bulkArmed() || now.Before(p.bulkAt) {
		return msgs
	}
	p.bulkDue, p.bulkAt = false, time.Time{}
	peers := append([]string(nil), p.peers...)
	p.rng.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
	for _, to := range peers[:min(len(peers), p.cfg.Gossip.BulkSyncPeers)] {
		if p.v2.on {
			msgs = append(msgs, p.aggDigests(to, now)...)
		} else {
			msgs = append(msgs, p.digests(to, now)...)
		}
	}
	return msgs
}
