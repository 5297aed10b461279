package sim

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// Workload gives the latencies each node records, epoch by epoch, for runs
// whose nodes do not issue simulated requests themselves (the scale runs).
type Workload interface {
	// Samples calls record once per latency that node records during epoch,
	// with the destination and the latency in whole milliseconds. It must be
	// deterministic in (node, epoch): the simulator calls it once per pair,
	// at a time of its choosing.
	Samples(node int, epoch int64, record func(dest string, ms uint64))
}

// Config configures a simulation.
type Config struct {
	// Seed makes the run: the same Config gives the same events, bytes and
	// results. Default 0 (a valid seed).
	Seed uint64
	// Nodes is the number of simulated nodes, >= 1.
	Nodes int
	// Observers is how many nodes (the first ones: node 0, 1, …) run the
	// real tracker.Tracker and tracker.Fleet, decode every batch they receive
	// with the real codec and answer estimates. The others only hold bits
	// for the batches they have: a full fleet view per node does not fit
	// memory at 1000 nodes. 0..Nodes.
	Observers int
	// Tracker is every node's tracker configuration: the epoch grid, the
	// window and the histogram layout. Default tracker.DefaultConfig().
	Tracker tracker.Config
	// Fleet configures the observers' fleet views; Tracker and Self are
	// set by the simulator, and MaxOrigins is raised to 2·Nodes (at most
	// 4096) if lower. A zero value means tracker.DefaultFleetConfig().
	Fleet tracker.FleetConfig
	// Network models the links. Default DefaultNetworkConfig().
	Network NetworkConfig
	// Protocol is the dissemination protocol's timing.
	// Default DefaultProtocolConfig().
	Protocol ProtocolConfig
	// Workload gives the latencies nodes record each epoch; nil means none
	// (then the caller records into observers' trackers itself, and other
	// nodes send nothing).
	Workload Workload
	// Progress, when not nil, receives one line per simulated epoch.
	Progress func(format string, args ...any)
}

// DefaultConfig returns a config for n nodes with one observer and the
// defaults of every part.
func DefaultConfig(n int) Config {
	return Config{
		Nodes:     n,
		Observers: min(1, n),
		Tracker:   tracker.DefaultConfig(),
		Fleet:     tracker.DefaultFleetConfig(),
		Network:   DefaultNetworkConfig(),
		Protocol:  DefaultProtocolConfig(),
	}
}

// Validate reports every problem with c, joined.
func (c Config) Validate() error {
	var errs []error
	if c.Nodes < 1 || c.Nodes > codec.MaxKeyOrigins {
		errs = append(errs, fmt.Errorf("sim: Nodes must be in 1..%d", codec.MaxKeyOrigins))
	}
	if c.Observers < 0 || c.Observers > c.Nodes {
		errs = append(errs, errors.New("sim: Observers must be in 0..Nodes"))
	}
	errs = append(errs, c.Tracker.Validate(), c.Network.Validate(), c.Protocol.Validate())
	return errors.Join(errs...)
}

// simNode is one simulated node.
type simNode struct {
	name, member string
	boot         uint64
	held         bitset
	egressFree   time.Duration
	stats        NodeStats
	duplicates   uint64
	late         uint64

	// Observers only.
	tr    *tracker.Tracker[string]
	fleet *tracker.Fleet
	dec   *codec.Decoder
}

// NodeStats are one node's protocol counters since the start.
type NodeStats struct {
	// Bytes and Messages sent, by kind (index with MsgKind).
	Bytes    [numMsgKinds]uint64
	Messages [numMsgKinds]uint64
	// Lost counts messages this node sent that the network dropped.
	Lost uint64
	// Duplicates counts batches received that the node already held; Late
	// those received outside the accepted epochs.
	Duplicates, Late uint64
	// Held is the number of batches the node holds now.
	Held int
}

// TotalBytes is the sum of Bytes over every kind.
func (n NodeStats) TotalBytes() uint64 {
	var t uint64
	for _, b := range n.Bytes {
		t += b
	}
	return t
}

// Convergence is one batch's spread: when its origin sealed it (since the
// start of the run) and how long until every node held it.
type Convergence struct {
	Epoch  int64
	SealAt time.Duration
	Took   time.Duration
}

// Sim is a seeded, deterministic discrete-event simulation of a cluster
// running the dissemination protocol over a simulated network, with a
// simulated clock passed as time.Time into the real tracker, fleet and codec.
//
// A Sim is not safe for concurrent use; it starts no goroutines.
type Sim struct {
	cfg    Config
	n      int // sub-windows per window
	layout tracker.Layout
	start  time.Time
	now    time.Duration
	epoch  int64 // current epoch on the grid
	first  int64 // the first epoch of the run
	q      eventQueue
	rng    *rand.Rand
	net    network
	proto  protocol
	nodes  []*simNode
	ring   int
	store  [][]*simBatch // [slot][origin]

	converged          []Convergence
	expiredUnconverged []time.Duration // seal times
	events             uint64
	err                error

	scratch    *tracker.Tracker[string]
	scratchNow time.Time
	wall       time.Time
}

// New returns a simulation at its start: time zero is the start of an epoch.
func New(cfg Config) (*Sim, error) {
	if cfg.Fleet == (tracker.FleetConfig{}) {
		cfg.Fleet = tracker.DefaultFleetConfig()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Sim{
		cfg:    cfg,
		n:      cfg.Tracker.SubWindows,
		layout: cfg.Tracker.Layout(),
		rng:    newRand(cfg.Seed, 1),
		net:    network{cfg: cfg.Network, seed: splitmix64(cfg.Seed ^ 2), rng: newRand(cfg.Seed, 3)},
		proto:  protocol{cfg: cfg.Protocol, seed: maphash.MakeSeed(), digests: map[uint64]int{}},
	}
	s.first = cfg.Tracker.Epoch(time.Unix(1_700_000_000, 0)) + 1
	s.start = cfg.Tracker.EpochStart(s.first)
	s.epoch = s.first
	s.ring = s.n + 4
	s.store = make([][]*simBatch, s.ring)
	for i := range s.store {
		s.store[i] = make([]*simBatch, cfg.Nodes)
	}
	fc := cfg.Fleet
	fc.Tracker = cfg.Tracker
	fc.MaxOrigins = max(fc.MaxOrigins, min(2*cfg.Nodes, 4096))
	for i := range cfg.Nodes {
		n := &simNode{
			name: fmt.Sprintf("n%04d", i),
			boot: splitmix64(cfg.Seed^uint64(i)<<20) & 0xffffffff,
			held: newBitset(s.ring * cfg.Nodes),
		}
		n.member = fmt.Sprintf("%s-%08x", n.name, n.boot)
		if i < cfg.Observers {
			var err error
			if n.tr, err = tracker.New[string](cfg.Tracker); err != nil {
				return nil, err
			}
			fc.Self = n.name
			if n.fleet, err = tracker.NewFleet(fc, n.tr); err != nil {
				return nil, err
			}
			n.fleet.SetLiveMembers(cfg.Nodes)
			if n.dec, err = codec.NewDecoder(s.layout); err != nil {
				return nil, err
			}
		}
		s.nodes = append(s.nodes, n)
	}
	if cfg.Workload != nil && cfg.Observers < cfg.Nodes {
		sc := cfg.Tracker
		sc.SubWindows, sc.Window = 2, 2*cfg.Tracker.SubWindow()
		var err error
		if s.scratch, err = tracker.New[string](sc); err != nil {
			return nil, err
		}
		s.scratchNow = s.start
	}
	s.q.push(event{at: 0, kind: evEpoch, epoch: s.first})
	if iv := cfg.Protocol.AntiEntropyInterval; iv > 0 && cfg.Nodes > 1 {
		for i := range cfg.Nodes {
			s.q.push(event{at: time.Duration(s.rng.Int64N(int64(iv))), kind: evAntiEntropy, to: int32(i)})
		}
	}
	return s, nil
}

// Now returns the simulated time.
func (s *Sim) Now() time.Time { return s.start.Add(s.now) }

// Elapsed returns the simulated time since the start.
func (s *Sim) Elapsed() time.Duration { return s.now }

// Start returns the simulated wall-clock time of the run's start.
func (s *Sim) Start() time.Time { return s.start }

// Nodes returns the number of nodes.
func (s *Sim) Nodes() int { return len(s.nodes) }

// Name returns node i's peer name.
func (s *Sim) Name(i int) string { return s.nodes[i].name }

// Tracker returns observer i's tracker, or nil for a node that is not an
// observer. Callers may record into it at times of their own events.
func (s *Sim) Tracker(i int) *tracker.Tracker[string] { return s.nodes[i].tr }

// Fleet returns observer i's fleet view, or nil for a node that is not an
// observer.
func (s *Sim) Fleet(i int) *tracker.Fleet { return s.nodes[i].fleet }

// At schedules fn at simulated time start+d (not before the current time).
// Events at the same time fire in the order they were scheduled.
func (s *Sim) At(d time.Duration, fn func(now time.Time)) {
	s.q.push(event{at: max(d, s.now), kind: evFunc, fn: fn})
}

// Run processes events until simulated time start+until, then sets the clock
// there. It returns the first error the model met (an encoding or decoding
// failure, a refused insert), which stops the run.
func (s *Sim) Run(until time.Duration) error {
	if s.wall.IsZero() {
		s.wall = time.Now()
	}
	for s.err == nil && s.q.Len() > 0 && s.q.peek() <= until {
		ev := s.q.pop()
		s.now = ev.at
		s.events++
		switch ev.kind {
		case evFunc:
			ev.fn(s.Now())
		case evDeliver:
			s.deliver(ev.from, ev.to, ev.msg)
		case evSeal:
			s.seal(ev.to, ev.epoch)
		case evAntiEntropy:
			s.antiEntropy(ev.to)
			s.q.push(event{at: s.now + s.cfg.Protocol.AntiEntropyInterval, kind: evAntiEntropy, to: ev.to})
		case evEpoch:
			s.startEpoch(ev.epoch)
		}
	}
	if s.err == nil && until > s.now {
		s.now = until
	}
	return s.err
}

// Events returns the number of events processed so far.
func (s *Sim) Events() uint64 { return s.events }

// NodeStats returns node i's counters.
func (s *Sim) NodeStats(i int) NodeStats {
	n := s.nodes[i]
	st := n.stats
	st.Duplicates, st.Late, st.Held = n.duplicates, n.late, n.held.count()
	return st
}

// Converged returns every batch that reached all nodes so far, in the order
// they did.
func (s *Sim) Converged() []Convergence { return s.converged }

// Unconverged returns the number of batches sealed in [from, to) (times
// since the start) that some node still lacks, or lacked when they expired.
func (s *Sim) Unconverged(from, to time.Duration) int {
	c := 0
	for _, slot := range s.store {
		for _, sb := range slot {
			if sb != nil && sb.sealAt >= from && sb.sealAt < to && int(sb.holders) < len(s.nodes) {
				c++
			}
		}
	}
	for _, at := range s.expiredUnconverged {
		if at >= from && at < to {
			c++
		}
	}
	return c
}

// HeldBytes returns the encoded bytes of the batches node i holds: what a
// node keeps if it stores batches as received.
func (s *Sim) HeldBytes(i int) int {
	n := s.nodes[i]
	t := 0
	for slot := range s.store {
		for o, sb := range s.store[slot] {
			if sb != nil && n.held.has(s.bit(slot, int32(o))) {
				t += len(sb.msg)
			}
		}
	}
	return t
}

// ReleaseObservers drops the observers' fleet views (to measure their
// memory by difference); they answer nothing afterwards.
func (s *Sim) ReleaseObservers() {
	for _, n := range s.nodes {
		n.fleet, n.tr, n.dec = nil, nil, nil
	}
}

func (s *Sim) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

// startEpoch handles the boundary into epoch e: expire the oldest slot,
// schedule every node's seal of e−1, record the observers' samples for e.
func (s *Sim) startEpoch(e int64) {
	s.epoch = e
	old := s.slot(e - int64(s.n) - 2)
	for o, sb := range s.store[old] {
		if sb != nil && int(sb.holders) < len(s.nodes) {
			s.expiredUnconverged = append(s.expiredUnconverged, sb.sealAt)
		}
		s.store[old][o] = nil
	}
	for _, n := range s.nodes {
		n.held.clearRange(old*len(s.nodes), (old+1)*len(s.nodes))
	}
	clear(s.proto.digests)
	now := s.Now()
	for i, n := range s.nodes {
		if n.fleet != nil {
			n.fleet.Advance(now)
		}
		if e > s.first {
			j := time.Duration(0)
			if js := s.cfg.Protocol.SealJitter; js > 0 {
				j = time.Duration(s.rng.Int64N(int64(js)))
			}
			s.q.push(event{at: s.now + j, kind: evSeal, to: int32(i), epoch: e - 1})
		}
		if n.tr != nil && s.cfg.Workload != nil {
			s.cfg.Workload.Samples(i, e, func(dest string, ms uint64) { n.tr.RecordMillis(dest, ms, now) })
		}
	}
	s.q.push(event{at: s.now + s.cfg.Tracker.SubWindow(), kind: evEpoch, epoch: e + 1})
	if s.cfg.Progress != nil {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s.cfg.Progress("sim: %d nodes, epoch %d at %v simulated, %d events, queue %d, heap %d MiB, %v wall",
			len(s.nodes), e-s.first, s.now, s.events, s.q.Len(), ms.HeapAlloc>>20, time.Since(s.wall).Round(time.Millisecond))
	}
}

// syntheticSeal builds node i's sealed sub-window for epoch e from the
// workload, through a scratch tracker on a private time line: the real
// tracker's bucketing and sealing, without a tracker per simulated node.
func (s *Sim) syntheticSeal(i int32, e int64) []tracker.DestCounts {
	t := s.scratchNow
	s.cfg.Workload.Samples(int(i), e, func(dest string, ms uint64) { s.scratch.RecordMillis(dest, ms, t) })
	next := t.Add(s.cfg.Tracker.SubWindow())
	out := tracker.SealedSubWindow(s.scratch, s.scratch.Config().Epoch(t), next)
	s.scratchNow = next
	return out
}

// send puts m on the wire from node from to node to: it waits for the
// sender's link, counts its bytes at the sender, and arrives after the
// link's transit time unless lost.
func (s *Sim) send(from, to int32, m *message) {
	n := s.nodes[from]
	n.stats.Bytes[m.kind] += uint64(m.size)
	n.stats.Messages[m.kind]++
	depart := max(s.now, n.egressFree) + s.net.serialize(m.size)
	n.egressFree = depart
	d, lost := s.net.transit(from, to)
	if lost {
		n.stats.Lost++
		return
	}
	s.q.push(event{at: depart + d, kind: evDeliver, from: from, to: to, msg: m})
}

// slot is the ring slot of epoch e.
func (s *Sim) slot(e int64) int {
	r := int64(s.ring)
	return int(((e % r) + r) % r)
}

// slotEpochAt is the epoch that slot stood for while the current epoch was
// at: the one in [at−N−1, at+1] congruent to slot.
func (s *Sim) slotEpochAt(slot int, at int64) int64 {
	top := at + 1
	return top - int64((s.slot(top)-slot+s.ring)%s.ring)
}

// bit is the index of (slot, origin) in a node's held set.
func (s *Sim) bit(slot int, origin int32) int { return slot*len(s.nodes) + int(origin) }

// bitset is a fixed-size set of small integers.
type bitset []uint64

func newBitset(n int) bitset    { return make(bitset, (n+63)/64) }
func (b bitset) set(i int)      { b[i/64] |= 1 << (i % 64) }
func (b bitset) has(i int) bool { return b[i/64]&(1<<(i%64)) != 0 }
func (b bitset) clone() bitset  { return append(bitset(nil), b...) }
func (b bitset) clearRange(lo, hi int) {
	for i := lo; i < hi; i++ {
		b[i/64] &^= 1 << (i % 64)
	}
}
func (b bitset) count() int {
	c := 0
	for _, w := range b {
		c += bits.OnesCount64(w)
	}
	return c
}
