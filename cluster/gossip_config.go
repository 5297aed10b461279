package cluster

import (
	"errors"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/internal/fielderr"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// Store is the fleet view as dissemination needs it. It must be safe for
// concurrent use: *tracker.Fleet satisfies it. Insert must copy what it
// keeps; a batch returned by Lookup must never be modified afterwards.
type Store interface {
	Insert(b tracker.Batch, now time.Time) tracker.InsertOutcome
	Keys(now time.Time) []tracker.BatchKey
	Missing(theirs []tracker.BatchKey, now time.Time) []tracker.BatchKey
	Lookup(k tracker.BatchKey) (tracker.Batch, bool)
	Exclude(name string, boot uint64, now time.Time)
	Include(name string, boot uint64, now time.Time)
	SetLiveMembers(n int)
}

var _ Store = (*tracker.Fleet)(nil)

// Gossip tunes the dissemination of sealed sub-windows. Start from
// [DefaultGossip]; each field gives its unit, default and cost.
type Gossip struct {
	// AntiEntropyInterval is the mean time between digest exchanges with
	// one random alive member (each wait is drawn from ±25 % of it). A
	// lost batch is repaired within about one interval. Cost per node and
	// interval: one digest of ~2–3 bytes per held batch key plus the
	// header of each origin (N+3 epochs × members keys), and a reply
	// digest only when the peer holds something this node lacks.
	// Default 2s.
	AntiEntropyInterval time.Duration `yaml:"anti_entropy_interval"`

	// SealJitter is the largest per-node delay after an epoch boundary
	// before this node seals and sends the epoch that ended, so the fleet
	// does not burst at once. Each node's delay is fixed, drawn from its
	// boot ID in [0, SealJitter); a node with no peer seals at the
	// boundary. It adds to the seal-to-convergence time.
	// In [0, 1s); it is capped at half a sub-window. Default 500ms.
	SealJitter time.Duration `yaml:"seal_jitter"`

	// SendWorkers is how many sends with SendReliable may hold a worker
	// at once. Each member has its own queue with at most one send in
	// flight, and a send holds its worker for Timing.ProbeTimeout at most:
	// a member whose send failed or is still running then is backed off
	// until a send to it succeeds (its sends hold no worker, and at most
	// 16 of its messages wait, the oldest dropped and counted), so a slow
	// or unreachable member holds one worker for Timing.ProbeTimeout once.
	// A backed-off member's send still running after Timing.StreamTimeout
	// / 4 (at least Timing.ProbeTimeout) is set aside and its next message
	// sent as a new probe: at most 4 sends (goroutines and connects) in
	// flight per member backed off, and at most SendQueue set aside in all.
	// At least 1; default 8.
	SendWorkers int `yaml:"send_workers"`

	// SendQueue bounds the messages waiting to be sent, over all members;
	// more are dropped and counted (anti-entropy repairs them). A seal
	// queues parts × (members − 1) messages. At least 1; default 4096.
	SendQueue int `yaml:"send_queue"`

	// BulkSyncPeers is how many members a node exchanges digests with at
	// once when it joins (or rejoins after being alone), to catch up on
	// the whole window. 0 disables bulk sync (anti-entropy alone then
	// catches up, one member per interval). Default 3.
	BulkSyncPeers int `yaml:"bulk_sync_peers"`

	// BulkSyncBytes is the byte budget of the batches one pull is
	// answered with, newest epochs first; a puller asks each member for
	// about that much, so a joiner pulls up to BulkSyncPeers ×
	// BulkSyncBytes at once and the rest in later rounds. At least 1;
	// default 4 MiB (a 100-node × 100-destination window is ~8 MiB).
	BulkSyncBytes int `yaml:"bulk_sync_bytes"`

	// MaxPartBytes splits a sealed batch larger than this into parts by
	// destination (codec.Encoder.BatchParts; also at codec.MaxDests
	// destinations). In [1 KiB, Limits.MaxMessageBytes]; default 64 KiB
	// (about 800 destinations of typical latencies).
	MaxPartBytes int `yaml:"max_part_bytes"`

	// Protocol is the highest dissemination protocol this node speaks and
	// advertises: 2 (destination-owned aggregation, used once every member
	// up advertises 2) or 1 (every node holds every origin's batches). A
	// node of an older release advertises none and counts as 1, so a
	// rolling upgrade runs v1 until its last node is upgraded. Default 2.
	Protocol int `yaml:"protocol"`

	// Owners is how many members own each destination under protocol v2
	// (A): the first merges and publishes its aggregate, the second
	// cross-checks it and takes over when the first has not published
	// within FailoverDelay or died. Each origin sends each destination's
	// records to all its owners: the cost of records is A × what one owner
	// would take. In [1, 8]; default 2.
	Owners int `yaml:"owners"`

	// PublishDelay is how long a first owner waits after an epoch boundary
	// plus the largest seal jitter before merging and publishing the
	// epoch's aggregates: time for every origin's records to arrive. It
	// adds to the seal-to-convergence time; records later than it make a
	// second aggregate (RepublishDelay after the first late one, at most
	// once per destination and epoch). With the jitter it is at most 60 %
	// of a sub-window. Default 400ms.
	PublishDelay time.Duration `yaml:"publish_delay"`

	// FailoverDelay is how long after the first owner's publish time the
	// second owner checks that the aggregate arrived with its own
	// coverage, and publishes its own when none arrived or a smaller one.
	// At most a quarter sub-window. Default 1s.
	FailoverDelay time.Duration `yaml:"failover_delay"`

	// RepublishDelay is how long a publisher waits after the first record
	// that arrived after its publish before publishing again, to take in
	// the other late ones. Default 200ms.
	RepublishDelay time.Duration `yaml:"republish_delay"`
}

// DefaultGossip returns the defaults: anti-entropy every 2 s, seal jitter up
// to 500 ms, 8 send workers, 4096 queued sends, bulk sync from 3 members of
// 4 MiB each, parts of at most 64 KiB.
func DefaultGossip() Gossip {
	return Gossip{
		AntiEntropyInterval: 2 * time.Second,
		SealJitter:          500 * time.Millisecond,
		SendWorkers:         8,
		SendQueue:           4096,
		BulkSyncPeers:       3,
		BulkSyncBytes:       4 << 20,
		MaxPartBytes:        64 << 10,
		Protocol:            ProtocolV2,
		Owners:              2,
		PublishDelay:        400 * time.Millisecond,
		FailoverDelay:       time.Second,
		RepublishDelay:      200 * time.Millisecond,
	}
}

// Validate reports every problem with g, joined, with parts bounded by
// codec.MaxMessageBytes (Config.Validate bounds them by
// Limits.MaxMessageBytes too).
func (g Gossip) Validate() error { return errors.Join(g.validate(codec.MaxMessageBytes)...) }

// validate reports every problem with g; maxMessage is Limits.MaxMessageBytes.
func (g Gossip) validate(maxMessage int) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fielderr.Errorf("Gossip", "cluster: gossip: "+format, args...))
	}
	if g.AntiEntropyInterval <= 0 {
		bad("anti-entropy interval must be > 0, got %v", g.AntiEntropyInterval)
	}
	if g.SealJitter < 0 || g.SealJitter >= time.Second {
		bad("seal jitter must be in [0, 1s), got %v", g.SealJitter)
	}
	if g.SendWorkers < 1 {
		bad("send workers must be >= 1, got %d", g.SendWorkers)
	}
	if g.SendQueue < 1 {
		bad("send queue must be >= 1, got %d", g.SendQueue)
	}
	if g.BulkSyncPeers < 0 {
		bad("bulk sync peers must be >= 0, got %d", g.BulkSyncPeers)
	}
	if g.BulkSyncBytes < 1 {
		bad("bulk sync bytes must be >= 1, got %d", g.BulkSyncBytes)
	}
	if g.Protocol != 1 && g.Protocol != ProtocolV2 {
		bad("protocol must be 1 or 2, got %d", g.Protocol)
	}
	if g.Owners < 1 || g.Owners > 8 {
		bad("owners must be in [1, 8], got %d", g.Owners)
	}
	if g.PublishDelay < 0 || g.FailoverDelay <= 0 || g.RepublishDelay <= 0 {
		bad("publish delay must be >= 0, failover and republish delays > 0, got %v, %v, %v", g.PublishDelay, g.FailoverDelay, g.RepublishDelay)
	}
	limit := min(maxMessage, codec.MaxMessageBytes)
	if g.MaxPartBytes < 1024 || g.MaxPartBytes > limit {
		bad("max part bytes must be in [1024, %d], got %d", limit, g.MaxPartBytes)
	}
	return errs
}
