package sim

// This file is the model of the cluster's dissemination protocol (DESIGN.md
// section 5), kept in one place so it can be swapped for the cluster
// package's pure protocol functions once they exist:
//
//   - seal: at each epoch boundary plus a per-node jitter (< SealJitter), a node
//     seals the finished epoch, inserts its own batch, and sends it to every
//     other alive member (one SendReliable each);
//   - anti-entropy: every AntiEntropyInterval a node sends a digest of the keys
//     it holds to one random member; that member pulls the keys it lacks and
//     the digest's sender answers each pulled key with the batch;
//   - acceptance: a node takes batches with epochs in [E−N−1, E+1] only, and
//     drops batches older than that at each epoch boundary.
//
// Every message is encoded with the real codec, so the byte counts are the
// real sizes. Bulk sync on join is not modelled: every node is there from the
// start.

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// ProtocolConfig sets the dissemination protocol's timing.
type ProtocolConfig struct {
	// SealJitter spreads each node's seal of an epoch uniformly over
	// [boundary, boundary+SealJitter), drawn per node and epoch, so the fleet
	// does not burst at once. Default 1s.
	SealJitter time.Duration
	// AntiEntropyInterval is how often each node sends a digest to one random
	// member (each node at its own random phase). Default 2s; 0 disables
	// anti-entropy.
	AntiEntropyInterval time.Duration
}

// DefaultProtocolConfig returns a 1 s seal jitter and a 2 s anti-entropy
// interval.
func DefaultProtocolConfig() ProtocolConfig {
	return ProtocolConfig{SealJitter: time.Second, AntiEntropyInterval: 2 * time.Second}
}

// Validate reports every problem with c, joined.
func (c ProtocolConfig) Validate() error {
	var errs []error
	if c.SealJitter < 0 {
		errs = append(errs, errors.New("sim: SealJitter must be >= 0"))
	}
	if c.AntiEntropyInterval < 0 {
		errs = append(errs, errors.New("sim: AntiEntropyInterval must be >= 0"))
	}
	return errors.Join(errs...)
}

// MsgKind names the protocol's messages, for byte counters.
type MsgKind uint8

const (
	// MsgBatch is a batch pushed by its origin at seal time.
	MsgBatch MsgKind = iota
	// MsgDigest is an anti-entropy digest of held keys.
	MsgDigest
	// MsgPull asks a digest's sender for the keys the receiver lacks.
	MsgPull
	// MsgPulledBatch is a batch sent in answer to a pull.
	MsgPulledBatch
	numMsgKinds
)

// String returns the kind in snake_case.
func (k MsgKind) String() string {
	switch k {
	case MsgBatch:
		return "batch"
	case MsgDigest:
		return "digest"
	case MsgPull:
		return "pull"
	case MsgPulledBatch:
		return "pulled_batch"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// simBatch is one sealed batch, shared by every simulated node that holds
// it: nodes hold a bit, not a copy.
type simBatch struct {
	key    tracker.BatchKey
	origin int32
	msg    []byte        // the encoded batch message
	sealAt time.Duration // when its origin sealed it
	// holders counts the nodes holding it, origin included.
	holders int32
}

// message is what travels between nodes.
type message struct {
	kind  MsgKind
	size  int
	batch *simBatch // MsgBatch, MsgPulledBatch
	// MsgDigest: a copy of the sender's held bits and the epoch it was taken in.
	bits  []uint64
	epoch int64
	want  []*simBatch // MsgPull
}

// protocol holds the model's reusable encoding state.
type protocol struct {
	cfg     ProtocolConfig
	enc     codec.Encoder
	buf     []byte
	keys    []tracker.BatchKey
	seed    maphash.Seed
	digests map[uint64]int // digest size by hash of (held bits, epoch)
}

// seal makes node i seal epoch e: build its batch, insert it into its own
// fleet view, and push it to every other member.
func (s *Sim) seal(i int32, e int64) {
	n := s.nodes[i]
	var dests []tracker.DestCounts
	if n.tr != nil {
		dests = tracker.SealedSubWindow(n.tr, e, s.Now())
	} else if s.cfg.Workload != nil {
		dests = s.syntheticSeal(i, e)
	}
	if len(dests) == 0 {
		return
	}
	b := tracker.Batch{
		Key:    tracker.BatchKey{Origin: n.name, Boot: n.boot, Epoch: e},
		Layout: s.layout,
		Dests:  dests,
	}
	parts, err := s.proto.enc.BatchParts(b, codec.MaxMessageBytes)
	if err != nil {
		s.fail(fmt.Errorf("sim: encode batch of %s epoch %d: %w", n.name, e, err))
		return
	}
	if len(parts) != 1 {
		s.fail(fmt.Errorf("sim: batch of %s epoch %d needs %d parts; the model handles one", n.name, e, len(parts)))
		return
	}
	sb := &simBatch{key: b.Key, origin: i, msg: bytes.Clone(parts[0]), sealAt: s.now}
	slot := s.slot(e)
	s.store[slot][i] = sb
	s.hold(i, sb)
	if n.fleet != nil {
		n.fleet.Insert(b, s.Now())
	}
	for j := range s.nodes {
		if int32(j) != i {
			s.send(i, int32(j), &message{kind: MsgBatch, size: len(sb.msg), batch: sb})
		}
	}
}

// hold marks sb as held by node i and records its convergence.
func (s *Sim) hold(i int32, sb *simBatch) {
	s.nodes[i].held.set(s.bit(s.slot(sb.key.Epoch), sb.origin))
	sb.holders++
	if int(sb.holders) == len(s.nodes) {
		s.converged = append(s.converged, Convergence{Epoch: sb.key.Epoch, SealAt: sb.sealAt, Took: s.now - sb.sealAt})
	}
}

// accepts reports whether a batch of epoch e is accepted now.
func (s *Sim) accepts(e int64) bool {
	E := s.epoch
	return e >= E-int64(s.n)-1 && e <= E+1
}

// receiveBatch handles a batch arriving at node to.
func (s *Sim) receiveBatch(to int32, sb *simBatch) {
	n := s.nodes[to]
	if !s.accepts(sb.key.Epoch) || s.store[s.slot(sb.key.Epoch)][sb.origin] != sb {
		n.late++
		return
	}
	if n.held.has(s.bit(s.slot(sb.key.Epoch), sb.origin)) {
		n.duplicates++
		return
	}
	s.hold(to, sb)
	if n.fleet != nil {
		b, err := n.dec.DecodeBatch(sb.msg)
		if err != nil {
			s.fail(fmt.Errorf("sim: node %s decode: %w", n.name, err))
			return
		}
		if o := n.fleet.Insert(b, s.Now()); o != tracker.InsertNew {
			s.fail(fmt.Errorf("sim: node %s insert %v: %v", n.name, sb.key, o))
		}
	}
}

// antiEntropy makes node i send a digest of what it holds to a random member.
func (s *Sim) antiEntropy(i int32) {
	if len(s.nodes) < 2 {
		return
	}
	j := int32(s.rng.IntN(len(s.nodes) - 1))
	if j >= i {
		j++
	}
	n := s.nodes[i]
	size := s.digestSize(n)
	s.send(i, j, &message{kind: MsgDigest, size: size, bits: n.held.clone(), epoch: s.epoch})
}

// digestSize encodes node n's digest with the real codec and returns its
// size; sizes are cached by the held set, which most nodes share once a
// batch has spread.
func (s *Sim) digestSize(n *simNode) int {
	p := &s.proto
	var h maphash.Hash
	h.SetSeed(p.seed)
	for _, w := range n.held {
		var b [8]byte
		for k := range b {
			b[k] = byte(w >> (8 * k))
		}
		h.Write(b[:])
	}
	sum := h.Sum64() ^ uint64(s.epoch)
	if size, ok := p.digests[sum]; ok {
		return size
	}
	keys := p.keys[:0]
	for o := range s.nodes {
		for e := s.epoch - int64(s.n) - 1; e <= s.epoch+1; e++ {
			sb := s.store[s.slot(e)][o]
			if sb != nil && sb.key.Epoch == e && n.held.has(s.bit(s.slot(e), int32(o))) {
				keys = append(keys, sb.key)
			}
		}
	}
	p.keys = keys
	size := s.encodeKeys(codec.TypeDigest, n.member, keys)
	p.digests[sum] = size
	return size
}

// encodeKeys returns the size of a digest or pull carrying keys.
func (s *Sim) encodeKeys(t codec.MessageType, sender string, keys []tracker.BatchKey) int {
	p := &s.proto
	keys = codec.SortKeys(keys)
	var err error
	if t == codec.TypeDigest {
		p.buf, err = codec.AppendDigest(p.buf[:0], codec.Digest{Sender: sender, Keys: keys})
	} else {
		p.buf, err = codec.AppendPull(p.buf[:0], codec.Pull{Sender: sender, Keys: keys})
	}
	if err != nil {
		s.fail(fmt.Errorf("sim: encode %v: %w", t, err))
		return 0
	}
	return len(p.buf)
}

// receiveDigest handles node to receiving from's digest: pull what to lacks.
func (s *Sim) receiveDigest(to, from int32, m *message) {
	n := s.nodes[to]
	var want []*simBatch
	for w, word := range m.bits {
		missing := word &^ n.held[w]
		for missing != 0 {
			b := bits.TrailingZeros64(missing)
			missing &= missing - 1
			idx := w*64 + b
			slot, o := idx/len(s.nodes), int32(idx%len(s.nodes))
			e := s.slotEpochAt(slot, m.epoch)
			sb := s.store[slot][o]
			if sb != nil && sb.key.Epoch == e && s.accepts(e) {
				want = append(want, sb)
			}
		}
	}
	if len(want) == 0 {
		return
	}
	keys := s.proto.keys[:0]
	for _, sb := range want {
		keys = append(keys, sb.key)
	}
	s.proto.keys = keys
	size := s.encodeKeys(codec.TypePull, n.member, keys)
	s.send(to, from, &message{kind: MsgPull, size: size, want: want})
}

// receivePull handles node to being asked by from for batches: it sends
// those it still holds.
func (s *Sim) receivePull(to, from int32, m *message) {
	n := s.nodes[to]
	for _, sb := range m.want {
		slot := s.slot(sb.key.Epoch)
		if s.accepts(sb.key.Epoch) && s.store[slot][sb.origin] == sb && n.held.has(s.bit(slot, sb.origin)) {
			s.send(to, from, &message{kind: MsgPulledBatch, size: len(sb.msg), batch: sb})
		}
	}
}

// deliver dispatches a message that arrived at node to.
func (s *Sim) deliver(from, to int32, m *message) {
	switch m.kind {
	case MsgBatch, MsgPulledBatch:
		s.receiveBatch(to, m.batch)
	case MsgDigest:
		s.receiveDigest(to, from, m)
	case MsgPull:
		s.receivePull(to, from, m)
	}
}
