package sim

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
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
	// real tracker.Tracker and have a real tracker.Fleet as their
	// cluster.Store, answering estimates. The others' Store holds bits over
	// batches shared by the whole simulation: a full fleet view per node
	// does not fit memory at 1000 nodes. Every node runs a real
	// cluster.Protocol either way. 0..Nodes.
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
	// Gossip tunes every node's cluster.Protocol (its schedule, pulls and
	// parts) and the send queue around it (shell.go). Default
	// cluster.DefaultGossip().
	Gossip cluster.Gossip
	// RelayFrom is every node's cluster.ProtocolConfig.RelayFrom: the
	// fewest members at which protocol v2 publishes through relays (0:
	// cluster.DefaultRelayFrom, negative: never).
	RelayFrom int
	// Workload gives the latencies nodes record each epoch; nil means none
	// (then the caller records into observers' trackers itself, and other
	// nodes send nothing).
	Workload Workload
	// LateJoins are the nodes that start after the others: each is down,
	// and listed by no member, until its time, then starts with empty
	// stores as a restarted node does (Sim.Restart). Best off an epoch
	// boundary: a node records an epoch's samples only if it is up at the
	// epoch's start.
	LateJoins []LateJoin
	// Progress, when not nil, receives one line per simulated epoch.
	Progress func(format string, args ...any)
}

// LateJoin is a node that starts At (since the start of the run) rather
// than at the start.
type LateJoin struct {
	Node int
	At   time.Duration
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
		Gossip:    cluster.DefaultGossip(),
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
	late := map[int]bool{}
	for _, j := range c.LateJoins {
		if j.Node < 0 || j.Node >= c.Nodes || j.At <= 0 || late[j.Node] {
			errs = append(errs, fmt.Errorf("sim: late join %+v: Node must be in 0..Nodes-1, once, and At > 0", j))
		}
		late[j.Node] = true
	}
	errs = append(errs, c.Tracker.Validate(), c.Network.Validate(), c.Gossip.Validate())
	return errors.Join(errs...)
}

// simNode is one simulated node.
type simNode struct {
	name, member string
	boot         uint64
	store        cluster.Store
	sh           shellNode
	stats        NodeStats

	light *sharedStore // the others only

	// Protocol v2: every node's owner records (real), and its aggregates
	// (the observers' Fleet, the others' lightAggs).
	owned     *tracker.Owned
	aggs      cluster.AggregateStore
	lightAggs *lightAggs
	// unionEpoch is the newest epoch whose seal was added to the exact
	// union (a resend seals an epoch again).
	unionEpoch int64
	dead       bool
	// gen counts the node's restarts: messages are delivered only to the
	// boot they were addressed to (stamped with its gen), and a send
	// completion only frees a worker of the boot that sent it. upAt is
	// when the current boot started: it records only the epochs that
	// start at or after it. killedIn is the epoch its last boot was
	// killed in, and excluded how many of its boots the exact union
	// leaves out (the first ones).
	gen      uint32
	upAt     time.Duration
	killedIn int64
	excluded uint32
	// sealed is what the node sealed per (destination, epoch), kept only
	// in runs that kill nodes (Sim.perOrigin non-nil).
	sealed map[aggSlot][]tracker.Bucket

	// Observers only.
	tr    *tracker.Tracker[string]
	fleet *tracker.Fleet
}

// NodeStats are one node's protocol counters since the start.
type NodeStats struct {
	// Bytes and Messages sent, by kind (index with MsgKind).
	Bytes    [numMsgKinds]uint64
	Messages [numMsgKinds]uint64
	// Lost counts messages this node sent that the network dropped; Cut
	// those a partition dropped (Sim.Partition).
	Lost, Cut uint64
	// SendDrops counts messages the node's send queue dropped: it was
	// full (Gossip.SendQueue), the oldest waiting for a backed-off member,
	// a message expired while it waited, or what waited for a member the
	// node's member list shows down.
	SendDrops uint64
	// Refused counts messages the node refused that a run may expect:
	// from a member it holds dead (after a kill). Any other refusal fails
	// the run.
	Refused uint64
	// Duplicates counts batches received that the node already held; Late
	// those received outside the accepted epochs.
	Duplicates, Late uint64
	// Held is the number of batches (parts) the node holds now.
	Held int
	// V2 is what the node's protocol v2 did (its cluster.V2Stats).
	V2 cluster.V2Stats
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
// whose nodes run the real dissemination protocol (cluster.Protocol) over
// a simulated network, with a simulated clock passed as time.Time into the
// protocol, tracker, fleet and codec.
//
// A Sim is not safe for concurrent use. Run receives bursts of messages on
// up to GOMAXPROCS goroutines, which end before it returns; the results do
// not depend on how many.
type Sim struct {
	cfg    Config
	n      int // sub-windows per window
	layout tracker.Layout
	start  time.Time
	now    time.Duration
	epoch  int64 // current epoch on the grid
	first  int64 // the first epoch of the run
	q      eventQueue
	net    network
	nodes  []*simNode
	table  *batchTable

	// Deliveries within lookahead of each other are received in parallel
	// by up to workers goroutines (receiveBurst); burst and results are
	// its reusable buffers.
	lookahead time.Duration
	workers   int
	burst     []event
	results   []received
	// perWorker is the fewest deliveries per goroutine (minBurstPerWorker);
	// parallelBursts counts the bursts received on several goroutines.
	perWorker, parallelBursts int

	memberList []cluster.Member     // every member listed, dead ones too, for Protocol.SetMembers
	part       *partition           // the network partition, once cut (Sim.Partition)
	sealing    []int64              // epochs the ticking node sealed with data (sealFunc)
	byMember   map[string]memberRef // member name → node and boot
	fleetCfg   tracker.FleetConfig  // the observers' fleet views' and every node's owned records' config

	converged          []Convergence
	expiredUnconverged []time.Duration // seal times

	// Protocol v2.
	v2       bool
	aggTable *aggTable
	aggDone  []aggResult // (destination, epoch) convergences of expired epochs
	union    map[aggSlot][]uint64
	seals    int // sub-windows added to union
	// perOrigin lists the nodes listed dead, whose sealed counts leave the
	// exact union; non-nil (tracking what each node sealed) only in runs
	// that kill nodes (TrackKills).
	perOrigin []deadOrigin
	aggDec    *codec.Decoder
	lastAgg   *byte // the last aggregates payload registered (one payload goes to every member)
	events    uint64
	err       error

	// beforeSeal, when set, runs before an observer's tracker is sealed
	// (RunDecision applies the node's pending completions there).
	beforeSeal func(node int)

	peakHeap uint64
	scratch  *tracker.Tracker[string]
	// sealMu serialises the seals: a protocol v2 node seals an old epoch
	// again inside Receive (records resent to new owners, a record pull
	// answered), which receiveBurst runs on several nodes at once, and
	// the seals share the scratch tracker, the exact union and sealing.
	sealMu     sync.Mutex
	scratchNow time.Time
	wall       time.Time
}

// memberRef is a member: a node and which of its boots (simNode.gen).
type memberRef struct {
	node int32
	gen  uint32
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
		cfg:       cfg,
		n:         cfg.Tracker.SubWindows,
		layout:    cfg.Tracker.Layout(),
		net:       network{cfg: cfg.Network, seed: splitmix64(cfg.Seed ^ 2), rng: newRand(cfg.Seed, 3)},
		byMember:  make(map[string]memberRef, cfg.Nodes),
		workers:   runtime.GOMAXPROCS(0),
		perWorker: minBurstPerWorker,
	}
	// The soonest a received message can cause another event is its reply's
	// connect: HandshakeTrips trips of at least 0.9·LatencyMin each (less
	// a microsecond for rounding).
	s.lookahead = time.Duration(cfg.Network.HandshakeTrips) * max(0, cfg.Network.LatencyMin*9/10-time.Microsecond)
	s.first = cfg.Tracker.Epoch(time.Unix(1_700_000_000, 0)) + 1
	s.start = cfg.Tracker.EpochStart(s.first)
	s.epoch = s.first
	late := map[int]time.Duration{}
	for _, j := range cfg.LateJoins {
		late[j.Node] = j.At
	}
	names := make([]string, cfg.Nodes)
	boots := make([]uint64, cfg.Nodes)
	for i := range cfg.Nodes {
		names[i] = fmt.Sprintf("n%04d", i)
		boots[i] = splitmix64(cfg.Seed^uint64(i)<<20) | 1 // never 0: Membership skips boot 0
		member := cluster.MemberName(names[i], boots[i])
		s.byMember[member] = memberRef{node: int32(i)}
		if _, ok := late[i]; !ok {
			s.memberList = append(s.memberList, cluster.Member{Name: names[i], Member: member, BootID: boots[i], State: cluster.StateAlive})
		}
	}
	s.table = newBatchTable(cfg.Tracker, names, boots)
	s.v2 = cfg.Gossip.Protocol >= cluster.ProtocolV2
	s.union = map[aggSlot][]uint64{}
	if s.v2 {
		s.aggTable = newAggTable(cfg.Nodes)
		var err error
		if s.aggDec, err = codec.NewDecoder(cfg.Tracker.Layout()); err != nil {
			return nil, err
		}
		for i := range s.memberList {
			s.memberList[i].Level = cluster.CurrentLevel
		}
	}
	s.fleetCfg = cfg.Fleet
	s.fleetCfg.Tracker = cfg.Tracker
	s.fleetCfg.MaxOrigins = max(s.fleetCfg.MaxOrigins, min(2*cfg.Nodes, 4096))
	for i := range cfg.Nodes {
		n := &simNode{name: names[i], boot: boots[i], member: cluster.MemberName(names[i], boots[i])}
		s.nodes = append(s.nodes, n)
		if at, ok := late[i]; ok {
			n.dead = true
			if s.aggTable != nil {
				s.aggTable.kill(int32(i), 0)
			}
			s.At(at, func(time.Time) { s.up(i) })
		}
	}
	for i, n := range s.nodes {
		if n.dead {
			continue
		}
		if err := s.boot(i, len(s.memberList)); err != nil {
			return nil, err
		}
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
	s.startShells()
	return s, nil
}

// boot gives node i's current boot empty stores (a tracker and fleet view
// for an observer, else a shared store; owned records and aggregates under
// protocol v2) and a new Protocol with the member list, at now; live is
// the number of members alive.
func (s *Sim) boot(i, live int) error {
	n := s.nodes[i]
	n.tr, n.fleet, n.light, n.owned, n.aggs, n.lightAggs = nil, nil, nil, nil, nil, nil
	fc := s.fleetCfg
	if i < s.cfg.Observers {
		var err error
		if n.tr, err = tracker.New[string](s.cfg.Tracker); err != nil {
			return err
		}
		fc.Self = n.name
		if n.fleet, err = tracker.NewFleet(fc, n.tr); err != nil {
			return err
		}
		n.store = n.fleet
	} else {
		n.light = newSharedStore(s.table, int32(i))
		n.store = n.light
	}
	n.store.SetLiveMembers(live)
	if s.v2 {
		var err error
		oc := fc
		oc.Self = n.name
		if n.owned, err = tracker.NewOwned(oc); err != nil {
			return err
		}
		if n.fleet != nil {
			n.aggs = n.fleet
		} else {
			n.lightAggs = newLightAggs(s.aggTable, s.cfg.Tracker)
			n.aggs = n.lightAggs
		}
	}
	return s.newShell(i, n.store)
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
// there. It returns the first error the simulation met (a seal the
// protocol could not encode, a message a node refused, a conflict between
// two copies of a batch), which stops the run.
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
			if s.lookahead > 0 {
				s.receiveBurst(ev, until)
			} else {
				s.receive(&ev)
			}
		case evSent:
			s.sent(&ev)
		case evSlow:
			s.slow(&ev)
		case evSetAside:
			s.setAside(&ev)
		case evTick:
			s.tick(ev.to, ev.at)
		case evEpoch:
			s.startEpoch(ev.epoch)
		}
	}
	if s.err == nil && until > s.now {
		s.now = until
	}
	return s.err
}

// PeakHeap returns the largest heap (runtime.MemStats.HeapAlloc, this
// simulation and anything else in the process) seen at an epoch boundary.
func (s *Sim) PeakHeap() uint64 { return s.peakHeap }

// Events returns the number of events processed so far.
func (s *Sim) Events() uint64 { return s.events }

// NodeStats returns node i's counters.
func (s *Sim) NodeStats(i int) NodeStats {
	n := s.nodes[i]
	st := n.stats
	if n.sh.proto != nil {
		st.V2 = n.sh.proto.Stats().V2
	}
	if n.light != nil {
		st.Held = n.light.n
	} else if n.fleet != nil {
		st.Held = n.fleet.Stats().Batches
	}
	return st
}

// Converged returns every batch that reached all nodes so far, in the order
// they did.
func (s *Sim) Converged() []Convergence { return s.converged }

// Unconverged returns the number of batches sealed in [from, to) (times
// since the start) that some node still lacks, or lacked when they expired.
func (s *Sim) Unconverged(from, to time.Duration) int {
	c := 0
	s.table.each(func(sb *sharedBatch) {
		if sb.sealAt >= from && sb.sealAt < to && int(sb.holders) < len(s.nodes) {
			c++
		}
	})
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
	t := 0
	s.table.each(func(sb *sharedBatch) {
		if _, ok := s.nodes[i].store.Lookup(sb.b.Key); ok {
			t += sb.size
		}
	})
	return t
}

// ReleaseObservers drops the observers' trackers, fleet views and
// protocols (to measure their memory by difference); the Sim cannot run
// afterwards, and observers answer nothing.
func (s *Sim) ReleaseObservers() {
	s.ReleaseObserverFleets()
	s.ReleaseObserverTrackers()
}

// ReleaseObserverFleets drops the observers' fleet state (fleet views,
// owned records, protocols and their shells) but not their local trackers,
// so that the two are measured apart: first the fleet state by difference,
// then the trackers (ReleaseObserverTrackers). The Sim cannot run
// afterwards.
func (s *Sim) ReleaseObserverFleets() {
	for _, n := range s.nodes[:s.cfg.Observers] {
		n.fleet, n.store, n.sh, n.owned, n.aggs = nil, nil, shellNode{}, nil, nil
	}
}

// ReleaseObserverTrackers drops the observers' local trackers (after
// ReleaseObserverFleets: a fleet view holds its local tracker).
func (s *Sim) ReleaseObserverTrackers() {
	for _, n := range s.nodes[:s.cfg.Observers] {
		n.tr = nil
	}
}

func (s *Sim) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

// startEpoch handles the boundary into epoch e: expire the oldest slot,
// slide the observers' fleet views, record their samples for e. (Each
// node's protocol seals e−1 on its own schedule.)
func (s *Sim) startEpoch(e int64) {
	s.epoch = e
	old := e - int64(s.n) - 2 // no longer accepted anywhere
	s.table.expire(old, func(sb *sharedBatch) {
		if sb.sealAt >= 0 && int(sb.holders) < len(s.nodes) {
			s.expiredUnconverged = append(s.expiredUnconverged, sb.sealAt)
		}
	})
	for _, n := range s.nodes {
		if n.light != nil {
			n.light.drop(old)
		}
		if n.lightAggs != nil {
			n.lightAggs.drop(e - 3)
		}
	}
	if s.v2 {
		s.aggTable.expire(e-3, func(k aggSlot, c *aggConv) {
			s.aggDone = append(s.aggDone, s.aggResultOf(k, c))
		})
	}
	for k := range s.union {
		if k.epoch < old {
			delete(s.union, k)
		}
	}
	now := s.Now()
	for i, n := range s.nodes {
		if n.fleet != nil {
			n.fleet.Advance(now)
		}
		if n.owned != nil {
			n.owned.Advance(now)
		}
		if n.tr != nil && !n.dead && s.cfg.Workload != nil && s.now >= n.upAt {
			s.cfg.Workload.Samples(i, e, func(dest string, ms uint64) { n.tr.RecordMillis(dest, ms, now) })
		}
	}
	s.q.push(event{at: s.now + s.cfg.Tracker.SubWindow(), kind: evEpoch, epoch: e + 1})
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.peakHeap = max(s.peakHeap, ms.HeapAlloc)
	if s.cfg.Progress != nil {
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

// aggResult is the convergence of one (destination, epoch) aggregate.
type aggResult struct {
	slot        aggSlot
	firstAt     time.Duration
	convergedAt time.Duration // -1: never
	exact       bool          // its largest coverage is the exact union
}

// AggregateConvergence returns, for every (destination, epoch) aggregate
// published so far (protocol v2), the epoch and when every live node held
// the one with the largest coverage (-1: not yet).
func (s *Sim) aggregateConvergence() []aggResult {
	out := slices.Clone(s.aggDone)
	for k, c := range s.aggTable.conv {
		out = append(out, s.aggResultOf(k, c))
	}
	return out
}

// aggResultOf is the convergence of slot k, and whether its largest
// coverage published is bucket for bucket the exact union of every
// origin's sealed counts over its window.
func (s *Sim) aggResultOf(k aggSlot, c *aggConv) aggResult {
	r := aggResult{slot: k, firstAt: c.firstAt, convergedAt: c.convergedAt}
	if v := s.aggTable.versions[aggVersion{k.dest, k.epoch, c.best}]; v != nil {
		u := s.unionView(k.dest, k.epoch+1)
		r.exact = true
		for _, b := range v.Buckets {
			if u == nil || u[b.Index] != uint64(b.Count) {
				r.exact = false
				break
			}
		}
		var total uint64
		for _, c := range u {
			total += c
		}
		r.exact = r.exact && total == v.Total
	}
	return r
}

// addUnion adds node's sealed sub-window of epoch e to the exact union, once.
func (s *Sim) addUnion(n *simNode, e int64, dests []tracker.DestCounts) {
	if e <= n.unionEpoch {
		return
	}
	n.unionEpoch = e
	s.seals++
	cl := s.cfg.Tracker.Layout().CountsLen()
	for _, dc := range dests {
		k := aggSlot{dc.Dest, e}
		u := s.union[k]
		if u == nil {
			u = make([]uint64, cl)
			s.union[k] = u
		}
		for _, b := range dc.Buckets {
			u[b.Index] += uint64(b.Count)
		}
		if s.perOrigin != nil { // kept to take a killed origin out
			if n.sealed == nil {
				n.sealed = map[aggSlot][]tracker.Bucket{}
			}
			n.sealed[k] = slices.Clone(dc.Buckets)
		}
	}
}

// unionView returns the exact union of every origin's sealed counts of
// dest over the view of epoch E, [E−N+1, E−1] (nil when empty): v1's
// fleet view, with every batch arrived.
func (s *Sim) unionView(dest string, e int64) []uint64 { return s.unionViewOf(dest, e, false) }

// unionViewOf is unionView; early (protocol v2) also leaves out the boots
// excluded during epoch E itself, as the aggregates of E−1 published after
// the exclusion do (the first owner's publish missed, its failover after):
// in the epoch of an exclusion either union is an exact merge.
func (s *Sim) unionViewOf(dest string, e int64, early bool) []uint64 {
	var out []uint64
	for ep := e - int64(s.n) + 1; ep <= e-1; ep++ {
		u := s.union[aggSlot{dest, ep}]
		if u == nil {
			continue
		}
		if out == nil {
			out = make([]uint64, len(u))
		}
		for i, c := range u {
			out[i] += c
		}
		// A boot listed dead (or replaced by the next) leaves the views
		// with the first aggregates published after (v1 excludes its
		// batches at once).
		for _, d := range s.perOrigin {
			if e < d.since || e == d.since && !early || ep > d.upto {
				continue
			}
			for _, b := range s.nodes[d.node].sealed[aggSlot{dest, ep}] {
				out[b.Index] -= uint64(b.Count)
			}
		}
	}
	return out
}

// deadOrigin is a boot of node that the others no longer count from
// epoch since on (listed dead, or replaced by its next boot): its sealed
// counts of epochs up to upto (the boot's last) leave the exact union.
type deadOrigin struct {
	node        int32
	since, upto int64
}

// TrackKills makes the exact union leave out the boots Kill kills, from
// when the others list them dead or see their next boot (Restart): call it
// before Run.
func (s *Sim) TrackKills() {
	if s.perOrigin == nil {
		s.perOrigin = []deadOrigin{}
	}
}

// Kill stops node i at now: it no longer ticks, receives or sends, and
// every other node lists it dead after detect (its failure detector).
func (s *Sim) Kill(i int, detect time.Duration) {
	n := s.nodes[i]
	if n.dead {
		return
	}
	n.dead = true
	n.killedIn = s.cfg.Tracker.Epoch(s.Now())
	n.sh.peers, n.sh.ready, n.sh.probes, n.sh.queued, n.sh.aside = map[int32]*peerQueue{}, nil, nil, 0, 0
	if s.aggTable != nil {
		s.aggTable.kill(int32(i), s.now)
	}
	member, gen := n.member, n.gen
	s.At(s.now+detect, func(time.Time) {
		for k := range s.memberList {
			if s.memberList[k].Member == member {
				s.memberList[k].State = cluster.StateDead
			}
		}
		s.exclude(i, gen)
		s.membersChanged(-1)
	})
}

// Restart starts node i, which Kill stopped, again now: the same peer
// name with a new boot ID, empty stores (a new tracker and fleet view for
// an observer, else a new shared store) and a new Protocol, as a process
// restarted on its host. Every member up lists the new boot alive at once
// (a join's push/pull takes milliseconds) and the old boot as it was: dead
// after Kill's detection delay, until then alive, though its messages go
// nowhere. Messages still on their way to the old boot are lost.
func (s *Sim) Restart(i int) {
	n := s.nodes[i]
	if !n.dead || n.sh.proto == nil {
		s.fail(fmt.Errorf("sim: Restart of node %s, which is not a killed node", n.name))
		return
	}
	// The old boot's holdings leave the batches' holder counts.
	s.table.each(func(sb *sharedBatch) {
		if _, ok := n.store.Lookup(sb.b.Key); ok {
			sb.holders--
		}
	})
	s.exclude(i, n.gen) // its next boot replaces it in the views
	n.gen++
	n.boot = splitmix64(s.cfg.Seed^uint64(i)<<20^uint64(n.gen)<<44) | 1
	n.member = cluster.MemberName(n.name, n.boot)
	s.table.reboot(int32(i), n.boot)
	s.up(i)
}

// up starts node i's current boot now (a late join, or Restart): listed
// alive by every member up, empty stores, a new Protocol.
func (s *Sim) up(i int) {
	n := s.nodes[i]
	n.dead, n.upAt = false, s.now
	s.byMember[n.member] = memberRef{node: int32(i), gen: n.gen}
	m := cluster.Member{Name: n.name, Member: n.member, BootID: n.boot, State: cluster.StateAlive, Since: s.Now()}
	if s.v2 {
		m.Level = cluster.CurrentLevel
	}
	s.memberList = append(s.memberList, m)
	if s.part != nil {
		s.part.lists = nil
	}
	if s.aggTable != nil {
		s.aggTable.revive(int32(i))
	}
	if err := s.boot(i, s.alive()); err != nil {
		s.fail(err)
		return
	}
	s.membersChanged(int32(i))
	s.schedule(int32(i))
}

// membersChanged gives every member up but skip its member list again
// (its side's during a partition), and its store the number alive there.
func (s *Sim) membersChanged(skip int32) {
	now := s.Now()
	if s.part != nil {
		s.part.lists = nil
	}
	for j, m := range s.nodes {
		if m.dead || int32(j) == skip {
			continue
		}
		m.sh.proto.SetMembers(s.membersOf(int32(j)), now)
		s.dropDown(int32(j))
		if m.store != nil {
			m.store.SetLiveMembers(s.aliveFor(int32(j)))
		}
		s.schedule(int32(j))
	}
}

// exclude takes node i's boot gen out of the exact union from now on, once
// (after TrackKills). Protocol v1 drops its batches from the views at once,
// v2 from the first aggregates published after.
func (s *Sim) exclude(i int, gen uint32) {
	n := s.nodes[i]
	if s.perOrigin == nil || gen < n.excluded {
		return
	}
	n.excluded = gen + 1
	since := s.cfg.Tracker.Epoch(s.Now())
	if !s.v2 {
		since--
	}
	s.perOrigin = append(s.perOrigin, deadOrigin{node: int32(i), since: since, upto: n.killedIn})
}

// alive is the number of nodes not killed.
func (s *Sim) alive() int {
	n := 0
	for _, m := range s.nodes {
		if !m.dead {
			n++
		}
	}
	return n
}

// Owners returns node i's owners of dest (protocol v2), first first.
func (s *Sim) Owners(i int, dest string) []string {
	return s.nodes[i].sh.proto.Owners(dest, s.Now())
}

// orDefault sets *p to def when it holds its type's zero value: one line
// per default in the configs' defaults methods.
func orDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}
