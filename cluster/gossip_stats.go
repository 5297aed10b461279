package cluster

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// GossipStats counts what dissemination did; all counts are cumulative
// but BackedOff, a gauge. The JSON form is node's /v1/status "gossip"
// object.
type GossipStats struct {
	// BytesIn and BytesOut count gossip message bytes received (taken from
	// the message queue) and sent (SendReliable succeeded).
	BytesIn  uint64 `json:"bytes_in"`
	BytesOut uint64 `json:"bytes_out"`
	// BytesInByType and BytesOutByType split BytesIn and BytesOut by
	// message type, with the keys of MessagesIn and MessagesOut; each
	// map's values sum to its total.
	BytesInByType  map[string]uint64 `json:"bytes_in_by_type"`
	BytesOutByType map[string]uint64 `json:"bytes_out_by_type"`
	// MessagesIn and MessagesOut count messages by type: "batch",
	// "digest", "pull" (and "invalid" in for messages whose header could
	// not be read).
	MessagesIn  map[string]uint64 `json:"messages_in"`
	MessagesOut map[string]uint64 `json:"messages_out"`
	// BatchesIn counts batches received and decoded; BatchesOut batch
	// messages sent (own parts and answers to pulls).
	BatchesIn  uint64 `json:"batches_in"`
	BatchesOut uint64 `json:"batches_out"`
	// Outcomes counts the Store's answers to received batches, by
	// tracker.InsertOutcome.String(): "new", "duplicate", "conflict", ….
	Outcomes map[string]uint64 `json:"outcomes"`
	// Rejected counts refused messages by reason (the Reject* constants,
	// and "store_<outcome>" for other refusals by the Store).
	Rejected map[string]uint64 `json:"rejected"`
	// QueueDrops counts received messages dropped because the message
	// queue (Limits.MessageQueue) was full (also in Rejected["queue_full"]).
	QueueDrops uint64 `json:"queue_drops"`
	// QueueDiscards counts received messages never handled because the
	// cluster closed: still in the message queue at Close, or arriving
	// after it. Every message that reached the queue is in MessagesIn,
	// QueueDrops or QueueDiscards once the cluster is closed.
	QueueDiscards uint64 `json:"queue_discards"`
	// SendDrops counts messages never sent: the send queue
	// (Gossip.SendQueue) was full, their member went dead or left, the
	// cluster closed, or a batch waited until it expired (Message.Expires).
	SendDrops uint64 `json:"send_drops"`
	// SendErrors counts SendReliable calls that failed.
	SendErrors uint64 `json:"send_errors"`
	// BackedOff is the number of members backed off now: their last send
	// failed or ran past Timing.ProbeTimeout, and none has succeeded
	// since (see Gossip.SendWorkers). A gauge, not cumulative.
	BackedOff int `json:"backed_off"`
	// Repairs counts new batches obtained through anti-entropy pulls.
	Repairs uint64 `json:"repairs"`
	// Seals counts epochs this node sealed with data; SealErrors those it
	// could not encode or the Store refused.
	Seals      uint64 `json:"seals"`
	SealErrors uint64 `json:"seal_errors"`
	// SealToReceive is the delay from the end of a received new batch's
	// epoch to its receipt, in seconds.
	SealToReceive Histogram `json:"seal_to_receive"`
}

// Histogram is a distribution with fixed buckets, in a form that maps to
// a Prometheus histogram (prometheus.MustNewConstHistogram takes the
// cumulative sums of Counts).
type Histogram struct {
	// Bounds are the buckets' upper bounds in seconds, ascending.
	Bounds []float64 `json:"bounds"`
	// Counts are per bucket, not cumulative: Counts[i] observations were
	// at most Bounds[i] and above Bounds[i−1]; the last, len(Bounds), is
	// above every bound (+Inf).
	Counts []uint64 `json:"counts"`
	// Sum is the sum of the observations; Count their number.
	Sum   float64 `json:"sum"`
	Count uint64  `json:"count"`
}

// sealToReceiveBounds are SealToReceive's buckets, in seconds.
var sealToReceiveBounds = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60}

// observe adds one observation of v seconds.
func (h *Histogram) observe(v float64) {
	i, _ := slices.BinarySearch(h.Bounds, v) // first bound >= v
	h.Counts[i]++
	h.Sum += v
	h.Count++
}

// gossipCounters are GossipStats as they accumulate.
type gossipCounters struct {
	mu sync.Mutex
	s  GossipStats
}

func newGossipCounters() *gossipCounters { return &gossipCounters{s: NewGossipStats()} }

// NewGossipStats returns GossipStats with every count zero and every map
// and histogram made, as a cluster reports before it has gossiped (and as a
// node without gossip reports), so JSON always carries objects.
func NewGossipStats() GossipStats {
	return GossipStats{
		BytesInByType:  map[string]uint64{},
		BytesOutByType: map[string]uint64{},
		MessagesIn:     map[string]uint64{},
		MessagesOut:    map[string]uint64{},
		Outcomes:       map[string]uint64{},
		Rejected:       map[string]uint64{},
		SealToReceive: Histogram{
			Bounds: sealToReceiveBounds,
			Counts: make([]uint64, len(sealToReceiveBounds)+1),
		},
	}
}

func typeName(t codec.MessageType) string {
	if t >= codec.TypeBatch && t <= codec.TypePackedAggregates {
		return t.String()
	}
	return "invalid"
}

// received counts one message taken from the queue and what became of it.
func (g *gossipCounters) received(n int, r Receipt, epochEnd time.Time, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := &g.s
	typ := typeName(r.Type)
	s.BytesIn += uint64(n)
	s.BytesInByType[typ] += uint64(n)
	s.MessagesIn[typ]++
	if r.Reject != "" {
		s.Rejected[r.Reject]++
	}
	if r.Type == codec.TypeBatch && (r.Inserted || r.Reject == RejectUnknownOrigin || r.Reject == RejectOwnOrigin) {
		s.BatchesIn++
	}
	if !r.Inserted {
		return
	}
	s.Outcomes[r.Outcome.String()]++
	if r.Repair {
		s.Repairs++
	}
	if r.Outcome == tracker.InsertNew {
		s.SealToReceive.observe(max(0, now.Sub(epochEnd).Seconds()))
	}
}

func (g *gossipCounters) sent(m Message, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		g.s.SendErrors++
		return
	}
	typ := typeName(m.Type)
	g.s.BytesOut += uint64(len(m.Payload))
	g.s.BytesOutByType[typ] += uint64(len(m.Payload))
	g.s.MessagesOut[typ]++
	if m.Type == codec.TypeBatch {
		g.s.BatchesOut++
	}
}

func (g *gossipCounters) add(f func(s *GossipStats)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(&g.s)
}

// snapshot returns a deep copy.
func (g *gossipCounters) snapshot() GossipStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.s
	s.BytesInByType, s.BytesOutByType = maps.Clone(s.BytesInByType), maps.Clone(s.BytesOutByType)
	s.MessagesIn, s.MessagesOut = maps.Clone(s.MessagesIn), maps.Clone(s.MessagesOut)
	s.Outcomes, s.Rejected = maps.Clone(s.Outcomes), maps.Clone(s.Rejected)
	s.SealToReceive.Bounds = slices.Clone(s.SealToReceive.Bounds)
	s.SealToReceive.Counts = slices.Clone(s.SealToReceive.Counts)
	return s
}
