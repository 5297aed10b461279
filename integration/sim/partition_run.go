package sim

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// PartitionConfig configures one partition run (RunPartition): a cluster
// as in RunScale cut in two after a warm-up of one full window, the even
// nodes on one side and the odd ones on the other, then healed, while
// every observer's view of every destination is checked against the exact
// merge of what its side can see during the cut, and of every origin's
// records after the heal.
type PartitionConfig struct {
	// Seed makes the run. Default 0.
	Seed uint64
	// Nodes is the cluster size N, >= 4.
	Nodes int
	// Dests is the number of destinations D (ScaleDests). Default Nodes.
	Dests int
	// RatePerNode is how many latencies each node records per second.
	// Default 1000.
	RatePerNode float64
	// Observers is how many nodes keep a real fleet view (the first ones,
	// so both sides have half). In 2..Nodes; default min(Nodes, 8).
	Observers int
	// At is when the cut starts, since the start of the first epoch after
	// the warm-up. Default 5s: after every seal and publish of the epoch,
	// so its side sees the other side's records of the epochs before.
	At time.Duration
	// Cut is how long the cut lasts. Default 10s.
	Cut time.Duration
	// Detect is the member lists' detection delay (Cut.Detect): about
	// memberlist's at the LAN defaults for 50 members (a probe a second,
	// suspicion 4 × log10(50) × 1 s). Default 8s.
	Detect time.Duration
	// Unnoticed makes a cut the member lists never notice (Cut.Detect 0):
	// the protocol's streams are cut while membership probes pass.
	Unnoticed bool
	// OneWay cuts only what the even side sends (Cut.OneWay).
	OneWay bool
	// Stall is how long a send across the cut holds the sender's worker
	// (Cut.Stall). Default 0: it fails at once.
	Stall time.Duration
	// Merge is how long after the heal two sides that listed each other
	// dead list each other alive again (Sim.Heal). Default 1s: within
	// memberlist's GossipToTheDeadTime (30 s) of the deaths the first
	// gossip to the dead brings the refutations; later, the next re-join
	// of the seeds does (Timing.RejoinInterval, up to 36 s).
	Merge time.Duration
	// Epochs is how many epochs are checked after the epoch of the heal.
	// Default one window (Tracker.SubWindows) plus 2, so that views
	// waiting for the cut's epochs to slide out are exact in the run.
	Epochs int
	// Check is how often the views are compared. Default 100ms.
	Check time.Duration
	// Tracker, Network, Gossip, RelayFrom and Protocol are as in
	// ScaleConfig.
	Tracker   tracker.Config
	Network   NetworkConfig
	Gossip    cluster.Gossip
	RelayFrom int
	Protocol  int
	// Progress receives a line per simulated epoch when not nil.
	Progress func(format string, args ...any)
}

func (c *PartitionConfig) defaults() {
	orDefault(&c.Dests, c.Nodes)
	orDefault(&c.RatePerNode, 1000)
	orDefault(&c.Observers, min(c.Nodes, 8))
	orDefault(&c.At, 5*time.Second)
	orDefault(&c.Cut, 10*time.Second)
	orDefault(&c.Detect, 8*time.Second)
	orDefault(&c.Merge, time.Second)
	orDefault(&c.Tracker, tracker.DefaultConfig())
	orDefault(&c.Epochs, c.Tracker.SubWindows+2)
	orDefault(&c.Check, 100*time.Millisecond)
	orDefault(&c.Network, DefaultNetworkConfig())
	orDefault(&c.Gossip, cluster.DefaultGossip())
	if c.Protocol != 0 {
		c.Gossip.Protocol = c.Protocol
	}
	c.Protocol = c.Gossip.Protocol
}

// PartitionResult is what one partition run measured. Times are -1 when
// the views were not the exact merge in every checked epoch from some
// epoch on (as in ChurnResult).
type PartitionResult struct {
	Nodes, Dests, Protocol, Owners int
	Cut, Detect, Merge, Stall      time.Duration
	Unnoticed, OneWay              bool
	// Detected tells whether the member lists listed the other side dead.
	Detected bool
	// CutShare is the share of the checks of the cut (every observer,
	// every destination) at which a view was its side's exact merge: every
	// record of its side's origins, and of the other side's the epochs
	// sealed before the cut while the other side is listed alive (none
	// once it is listed dead). NaN for a one-way cut (what a side sees
	// then depends on where each destination's owners are).
	CutShare float64
	// SidesExact is when, since the cut, every view was its side's exact
	// merge in every epoch up to the heal (-1: not by the heal).
	SidesExact time.Duration
	// HealExact is when, since the heal, every view was the exact merge
	// of every origin's records in every epoch to the end, and HealLagMax
	// the longest from an epoch's start to its views settling after that.
	HealExact, HealLagMax time.Duration
	// Held is what the views held after the heal, at +10 s and +30 s: the
	// share of the exact merge's samples over every view, and how many of
	// the observers' views were exact.
	Held []ChurnHeld
	// Overcounts counts the checks at which some view held more samples
	// in a bucket than the exact merge of every origin's records: a record
	// counted twice.
	Overcounts int
	// CutV2 sums what every node's protocol v2 did from the cut to the
	// heal, HealV2 from the heal to the end.
	CutV2, HealV2 cluster.V2Stats
	// HealKiBps is the mean sent per node per second from the heal to the
	// end, and HealRecordsKiBps its records and record pulls.
	HealKiBps, HealRecordsKiBps float64
	// Dropped counts the messages the cut dropped; Refused those refused
	// from a member the receiver listed dead; SendDrops those dropped
	// from the cut on because a send queue was full (Gossip.SendQueue).
	Dropped, Refused, SendDrops uint64
	Events                      uint64
	Wall                        time.Duration
}

// mergeMode is what a side can see of the others' records.
type mergeMode uint8

const (
	mergeAll    mergeMode = iota // every origin's records: no cut, or healed and merged
	mergeBefore                  // the other sides' records of the epochs before the cut
	mergeOwn                     // its own side's only: the others listed dead
)

// sideMerges computes (and caches until the next seal) the exact merge of
// dest's view of epoch e as side g sees it in mode.
type sideMerges struct {
	s        *Sim
	cutEpoch int64
	stamp    int
	cache    map[sideKey][]uint64
}

type sideKey struct {
	g    int
	dest string
	e    int64
	mode mergeMode
}

func (m *sideMerges) of(g int, dest string, e int64, mode mergeMode) []uint64 {
	s := m.s
	if mode == mergeAll {
		return s.unionView(dest, e)
	}
	if m.stamp != s.seals {
		m.stamp = s.seals
		clear(m.cache)
	}
	k := sideKey{g, dest, e, mode}
	if u, ok := m.cache[k]; ok {
		return u
	}
	var out []uint64
	for ep := e - int64(s.n) + 1; ep <= e-1; ep++ {
		for j, n := range s.nodes {
			if s.part.group[j] != g && (mode == mergeOwn || ep >= m.cutEpoch) {
				continue
			}
			for _, b := range n.sealed[aggSlot{dest, ep}] {
				if out == nil {
					out = make([]uint64, s.layout.CountsLen())
				}
				out[b.Index] += uint64(b.Count)
			}
		}
	}
	m.cache[k] = out
	return out
}

// equalCounts reports whether two dense views are equal, nil and all
// zeros alike.
func equalCounts(a, b []uint64) bool {
	for i := range max(len(a), len(b)) {
		var x, y uint64
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return false
		}
	}
	return true
}

// overcounts reports whether v holds more than u in some bucket.
func overcounts(v, u []uint64) bool {
	for i, x := range v {
		if i >= len(u) || x > u[i] {
			if x > 0 {
				return true
			}
		}
	}
	return false
}

// RunPartition runs one partition simulation: see PartitionConfig.
func RunPartition(cfg PartitionConfig) (PartitionResult, error) {
	cfg.defaults()
	if cfg.Nodes < 4 || cfg.Observers < 2 || cfg.Observers > cfg.Nodes {
		return PartitionResult{}, errors.New("sim: a partition run needs Nodes >= 4 and Observers in 2..Nodes")
	}
	wallStart := time.Now()
	dests := ScaleDests(cfg.Seed, cfg.Dests)
	sw := cfg.Tracker.SubWindow()
	w := newScaleWorkload(cfg.Seed, dests, cfg.RatePerNode*sw.Seconds()/float64(cfg.Dests))
	warm := time.Duration(cfg.Tracker.SubWindows+1) * sw
	res := PartitionResult{
		Nodes: cfg.Nodes, Dests: cfg.Dests, Protocol: cfg.Protocol, Owners: cfg.Gossip.Owners,
		Cut: cfg.Cut, Detect: cfg.Detect, Merge: cfg.Merge, Stall: cfg.Stall, Unnoticed: cfg.Unnoticed, OneWay: cfg.OneWay,
		CutShare: math.NaN(),
	}
	s, err := New(Config{
		Seed: cfg.Seed, Nodes: cfg.Nodes, Observers: cfg.Observers,
		Tracker: cfg.Tracker, Fleet: tracker.DefaultFleetConfig(),
		Network: cfg.Network, Gossip: cfg.Gossip, RelayFrom: cfg.RelayFrom,
		Workload: w, Progress: cfg.Progress,
	})
	if err != nil {
		return res, err
	}
	s.TrackKills() // keeps what each origin sealed; nobody is killed
	var sides [2][]int
	for i := range cfg.Nodes {
		sides[i%2] = append(sides[i%2], i)
	}
	cutAt := warm + cfg.At
	healAt := cutAt + cfg.Cut
	cut := Cut{Groups: sides[:], OneWay: cfg.OneWay, Stall: cfg.Stall}
	if !cfg.Unnoticed {
		cut.Detect = cfg.Detect
	}
	s.At(cutAt, func(time.Time) { s.Partition(cut) })
	s.At(healAt, func(time.Time) { s.Heal(cfg.Merge) })

	sm := &sideMerges{s: s, cutEpoch: cfg.Tracker.Epoch(s.Start().Add(cutAt)), cache: map[sideKey][]uint64{}}
	if cutAt-time.Duration(sm.cutEpoch-s.first)*sw <= cfg.Gossip.SealJitter {
		return res, errors.New("sim: a partition must start after its epoch's seals (At past Gossip.SealJitter in the epoch)")
	}
	healEpoch := cfg.Tracker.Epoch(s.Start().Add(healAt))
	end := time.Duration(healEpoch+int64(cfg.Epochs)+1-s.first) * sw
	cutSettle, healSettle := newSettle(sm.cutEpoch), newSettle(healEpoch)
	var cutChecks, cutExact int
	var detectEpoch int64 = -1
	heldAt := []time.Duration{healAt + 10*time.Second, healAt + 30*time.Second}
	check := func(now time.Time) {
		e := cfg.Tracker.Epoch(now)
		t := now.Sub(s.Start())
		p := s.part
		dead := p != nil && p.dead
		if dead && detectEpoch < 0 {
			detectEpoch = e
			res.Detected = true
		}
		inCut := t >= cutAt && t < healAt
		all := true
		var held, total uint64
		nexact := 0
		for o := range cfg.Observers {
			g := o % 2
			for _, d := range dests {
				v := s.Fleet(o).ViewCounts(d.Name, now)
				u := s.unionView(d.Name, e)
				// The view may be the aggregate of the epoch before
				// (the round's not arrived yet): a record counted twice
				// shows above the exact merge of either window.
				if overcounts(v, u) && overcounts(v, s.unionView(d.Name, e-1)) {
					res.Overcounts++
				}
				var ok bool
				switch {
				case dead:
					// In the epoch of the deaths either merge is exact:
					// the aggregates published before it or after.
					ok = equalCounts(v, sm.of(g, d.Name, e, mergeOwn)) ||
						e == detectEpoch && equalCounts(v, sm.of(g, d.Name, e, mergeBefore))
				case inCut:
					ok = equalCounts(v, sm.of(g, d.Name, e, mergeBefore))
				default:
					ok = equalCounts(v, u)
				}
				if inCut && !cfg.OneWay {
					cutChecks++
					if ok {
						cutExact++
					}
				}
				all = all && ok
				if ok {
					nexact++
				}
				held += min(sum(v), sum(u))
				total += sum(u)
			}
		}
		switch {
		case inCut:
			cutSettle.note(e, t, all)
		case t >= healAt:
			healSettle.note(e, t, all && !dead)
			if len(heldAt) > 0 && t >= heldAt[0] {
				heldAt = heldAt[1:]
				h := ChurnHeld{After: t - healAt, Exact: nexact}
				if total > 0 {
					h.Samples = float64(held) / float64(total)
				}
				res.Held = append(res.Held, h)
			}
		}
	}
	for t := cutAt; t < end; t += cfg.Check {
		s.At(t, check)
	}
	snap := func() []NodeStats {
		out := make([]NodeStats, cfg.Nodes)
		for i := range out {
			out[i] = s.NodeStats(i)
		}
		return out
	}
	if err := s.Run(cutAt - 1); err != nil {
		return res, err
	}
	atCut := snap()
	if err := s.Run(healAt - 1); err != nil {
		return res, err
	}
	atHeal := snap()
	if err := s.Run(end); err != nil {
		return res, err
	}
	last := snap()
	start := func(e int64) time.Duration { return time.Duration(e-s.first) * sw }
	res.SidesExact, _ = cutSettle.result(func(e int64) time.Duration { return max(cutAt, start(e)) }, cutAt)
	res.HealExact, res.HealLagMax = healSettle.result(func(e int64) time.Duration { return max(healAt, start(e)) }, healAt)
	if cutChecks > 0 {
		res.CutShare = float64(cutExact) / float64(cutChecks)
	}
	var bytes, records uint64
	for i := range cfg.Nodes {
		res.CutV2 = addV2(res.CutV2, atHeal[i].V2, atCut[i].V2)
		res.HealV2 = addV2(res.HealV2, last[i].V2, atHeal[i].V2)
		res.Dropped += last[i].Cut - atCut[i].Cut
		res.Refused += last[i].Refused - atCut[i].Refused
		res.SendDrops += last[i].SendDrops - atCut[i].SendDrops
		bytes += last[i].TotalBytes() - atHeal[i].TotalBytes()
		records += last[i].Bytes[MsgRecords] - atHeal[i].Bytes[MsgRecords] + last[i].Bytes[MsgRecordPull] - atHeal[i].Bytes[MsgRecordPull]
	}
	secs := (end - healAt).Seconds() * float64(cfg.Nodes) * 1024
	res.HealKiBps, res.HealRecordsKiBps = float64(bytes)/secs, float64(records)/secs
	res.Events = s.Events()
	res.Wall = time.Since(wallStart)
	return res, nil
}

// PartitionTable formats results as a markdown table.
func PartitionTable(rs []PartitionResult) string {
	var b strings.Builder
	b.WriteString("| cut | detect / merge | listed dead | views = side's merge during the cut | sides exact after | views exact after heal | then settle within | samples held (views exact) at +10 s / +30 s | overcounts | send drops | takeovers cut / after | record pulls after | resent after | KiB/s per node after (records) | wall |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	dur := func(d time.Duration) string {
		if d < 0 {
			return "never"
		}
		return d.Round(time.Millisecond).String()
	}
	for _, r := range rs {
		cut := r.Cut.String()
		if r.OneWay {
			cut += " one way"
		}
		if r.Stall > 0 {
			cut += fmt.Sprintf(", sends stall %v", r.Stall)
		}
		detect := fmt.Sprintf("%v / %v", r.Detect, r.Merge)
		if r.Unnoticed {
			detect = "never"
		}
		share := "—"
		if !math.IsNaN(r.CutShare) {
			share = fmt.Sprintf("%.1f %%", 100*r.CutShare)
		}
		var held []string
		for _, h := range r.Held {
			held = append(held, fmt.Sprintf("%.2f %% (%d)", 100*h.Samples, h.Exact))
		}
		fmt.Fprintf(&b, "| %s | %s | %v | %s | %s | %s | %s | %s | %d | %d | %d / %d | %d | %d | %.1f (%.1f) | %v |\n",
			cut, detect, map[bool]string{true: "yes", false: "no"}[r.Detected], share, dur(r.SidesExact),
			dur(r.HealExact), dur(r.HealLagMax), strings.Join(held, " / "), r.Overcounts, r.SendDrops,
			r.CutV2.Takeovers, r.HealV2.Takeovers, r.HealV2.RecordPulls, r.HealV2.Resent,
			r.HealKiBps, r.HealRecordsKiBps, r.Wall.Round(100*time.Millisecond))
	}
	return b.String()
}
