package sim

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// ChurnConfig configures one churn run (RunChurn): a cluster as in
// RunScale in which, after a warm-up of one full window, one member
// restarts (Kill, then Restart after Down) or joins late (a node that
// starts only then), while every view is checked against the exact merge
// of what every origin sealed.
type ChurnConfig struct {
	// Seed makes the run. Default 0.
	Seed uint64
	// Nodes is the cluster size N, >= 2.
	Nodes int
	// Dests is the number of destinations D (ScaleDests). Default Nodes.
	Dests int
	// RatePerNode is how many latencies each node records per second.
	// Default 1000.
	RatePerNode float64
	// Observers is how many nodes keep a real fleet view (the first ones);
	// the churned node is one of them, so that its own view is measured.
	// In 2..Nodes; default min(Nodes, 8).
	Observers int
	// Join makes the run a late join: the last observer starts At, after
	// the others. Otherwise the run restarts an owner: the observer (other
	// than node 0) that is the first owner of the most destinations (under
	// protocol 1, the last observer) is killed At and starts again Down
	// later, with a new boot and empty stores; the others list it dead
	// DetectAfter after the kill, even when it is back before.
	Join bool
	// At is when the member is killed or joins, since the start of the
	// first epoch after the warm-up. Default 50ms (before the epoch's
	// aggregates are published).
	At time.Duration
	// Down is how long a restarted member is down. Default 10s.
	Down time.Duration
	// DetectAfter is the failure detector's delay (about memberlist's on a
	// LAN). Default 2s.
	DetectAfter time.Duration
	// Epochs is how many epochs are checked after the epoch of the return
	// (or join). Default one window (Tracker.SubWindows) plus 2, so that a
	// view waiting for the window to refill would converge in the run.
	Epochs int
	// Check is how often the views are compared with the exact merge.
	// Default 100ms.
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

func (c *ChurnConfig) defaults() {
	orDefault(&c.Dests, c.Nodes)
	orDefault(&c.RatePerNode, 1000)
	orDefault(&c.Observers, min(c.Nodes, 8))
	orDefault(&c.At, 50*time.Millisecond)
	orDefault(&c.Down, 10*time.Second)
	orDefault(&c.DetectAfter, 2*time.Second)
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

// ChurnHeld is what the churned member's own view held some time after it
// came up: the share of the exact merge's samples, over every destination,
// and how many destinations' views were the exact merge.
type ChurnHeld struct {
	After   time.Duration
	Samples float64
	Exact   int
}

// ChurnResult is what one churn run measured. Times are since the member
// came up (the restart or the join) and are -1 when the views were not the
// exact merge in every checked epoch from some epoch on.
//
// A view is "exact in epoch E" when, from some check in E to the epoch's
// end, every check found it bucket for bucket the exact merge of every
// origin's sealed counts over E's view (the boots listed dead, or replaced
// by their next one, left out); the first moment of that run of checks is
// when it settled in E. Every view is briefly stale after each epoch
// boundary, until that epoch's aggregates (v2) or batches (v1) arrive.
type ChurnResult struct {
	// Owners is Gossip.Owners (protocol 2).
	Nodes, Dests, Protocol, Owners int
	// Join tells a late join from a restart; Down and DetectAfter are the
	// restart's (0 for a join).
	Join              bool
	Down, DetectAfter time.Duration
	// Node is the churned member's peer name; Owned how many destinations
	// it owns once up (protocol 2; under protocol 1, where no member owns
	// any, every destination is checked and Owned is D).
	Node  string
	Owned int
	// ViewsExact is when the other observers' views of the destinations
	// it owns settled in the first epoch from which they were exact in
	// every checked epoch; ViewsLagMax is, over the epochs after that one,
	// the longest from an epoch's start to its views settling (the
	// steady state: seal, publish and spread).
	ViewsExact, ViewsLagMax time.Duration
	// SelfExact is the same for the member's own view of every
	// destination; Self what its view held 1 s after it came up, and in
	// the middle of the next two epochs (of the epoch after the one it
	// came up in, and of the one after that).
	SelfExact time.Duration
	Self      []ChurnHeld
	// V2 sums what every node's protocol v2 did from the member's return
	// to the end (records resent, owner changes, takeovers).
	V2 cluster.V2Stats
	// Refused counts messages refused from a boot that is gone.
	Refused uint64
	Events  uint64
	Wall    time.Duration
}

// settle follows, check by check, whether a set of views is exact, and
// when it settled in each epoch (-1: not exact at the epoch's last check).
type settle struct {
	epoch   int64
	run     time.Duration // start of the current run of exact checks; -1 none
	settled []time.Duration
	first   int64
}

func newSettle(first int64) *settle {
	return &settle{epoch: first, run: -1, first: first}
}

// note records one check at t, in epoch e.
func (s *settle) note(e int64, t time.Duration, exact bool) {
	for s.epoch < e {
		s.settled = append(s.settled, s.run)
		s.epoch++
		s.run = -1
	}
	switch {
	case !exact:
		s.run = -1
	case s.run < 0:
		s.run = t
	}
}

// result closes the last epoch and returns when the views settled in the
// first epoch from which they were exact in every epoch, and the longest
// lag (since start(e) of epoch e) after it.
func (s *settle) result(start func(int64) time.Duration, from time.Duration) (at, lag time.Duration) {
	s.settled = append(s.settled, s.run)
	s.run = -1
	k := len(s.settled)
	for k > 0 && s.settled[k-1] >= 0 {
		k--
	}
	if k == len(s.settled) {
		return -1, -1
	}
	at = s.settled[k] - from
	lag = 0
	for j := k + 1; j < len(s.settled); j++ {
		lag = max(lag, s.settled[j]-start(s.first+int64(j)))
	}
	return at, lag
}

// RunChurn runs one churn simulation: see ChurnConfig.
func RunChurn(cfg ChurnConfig) (ChurnResult, error) {
	cfg.defaults()
	if cfg.Nodes < 2 || cfg.Observers < 2 || cfg.Observers > cfg.Nodes {
		return ChurnResult{}, errors.New("sim: a churn run needs Nodes >= 2 and Observers in 2..Nodes")
	}
	wallStart := time.Now()
	dests := ScaleDests(cfg.Seed, cfg.Dests)
	sw := cfg.Tracker.SubWindow()
	w := newScaleWorkload(cfg.Seed, dests, cfg.RatePerNode*sw.Seconds()/float64(cfg.Dests))
	warm := time.Duration(cfg.Tracker.SubWindows+1) * sw
	res := ChurnResult{Nodes: cfg.Nodes, Dests: cfg.Dests, Protocol: cfg.Protocol, Owners: cfg.Gossip.Owners, Join: cfg.Join}
	sc := Config{
		Seed: cfg.Seed, Nodes: cfg.Nodes, Observers: cfg.Observers,
		Tracker: cfg.Tracker, Fleet: tracker.DefaultFleetConfig(),
		Network: cfg.Network, Gossip: cfg.Gossip, RelayFrom: cfg.RelayFrom,
		Workload: w, Progress: cfg.Progress,
	}
	node := -1
	up := warm + cfg.At // when the member comes up
	if cfg.Join {
		node = cfg.Observers - 1
		sc.LateJoins = []LateJoin{{Node: node, At: up}}
	} else {
		res.Down, res.DetectAfter = cfg.Down, cfg.DetectAfter
		up += cfg.Down
	}
	s, err := New(sc)
	if err != nil {
		return res, err
	}
	s.TrackKills()
	if !cfg.Join {
		s.At(warm+cfg.At, func(now time.Time) {
			node = cfg.Observers - 1 // protocol 1: no member owns a destination
			if s.v2 {
				node = firstOwnerObserver(s, dests, cfg.Observers)
			}
			if node < 0 {
				s.fail(errors.New("sim: no observer but node 0 is the first owner of a destination"))
				return
			}
			s.Kill(node, cfg.DetectAfter)
		})
		s.At(up, func(time.Time) { s.Restart(node) })
	}
	if err := s.Run(up - 1); err != nil {
		return res, err
	}
	before := make([]NodeStats, cfg.Nodes)
	for i := range before {
		before[i] = s.NodeStats(i)
	}
	if err := s.Run(up); err != nil {
		return res, err
	}
	if !cfg.Join {
		before[node].V2 = cluster.V2Stats{} // the new boot's protocol counts from 0
	}
	res.Node = s.Name(node)
	var owned []string
	for _, d := range dests {
		if !s.v2 || slices.Contains(s.Owners(0, d.Name), res.Node) {
			owned = append(owned, d.Name)
		}
	}
	res.Owned = len(owned)

	upEpoch := cfg.Tracker.Epoch(s.Now())
	end := time.Duration(upEpoch+int64(cfg.Epochs)+1-s.first) * sw
	start := func(e int64) time.Duration { return max(up, time.Duration(e-s.first)*sw) }
	views, self := newSettle(upEpoch), newSettle(upEpoch)
	next := time.Duration(upEpoch+1-s.first) * sw // the start of the epoch after the return's
	heldAt := []time.Duration{up + time.Second, next + sw/2, next + sw + sw/2}
	check := func(now time.Time) {
		e := cfg.Tracker.Epoch(now)
		t := now.Sub(s.Start())
		exact := true
		for o := range cfg.Observers {
			if o == node {
				continue
			}
			for _, d := range owned {
				if _, ok := exactView(s, s.Fleet(o).ViewCounts(d, now), d, e); !ok {
					exact = false
				}
			}
		}
		views.note(e, t, exact)
		var held, total uint64
		nexact := 0
		for _, d := range dests {
			v := s.Fleet(node).ViewCounts(d.Name, now)
			u, ok := exactView(s, v, d.Name, e)
			if ok {
				nexact++
			}
			total += sum(u)
			held += sum(v)
		}
		self.note(e, t, nexact == len(dests))
		if len(heldAt) > 0 && t >= heldAt[0] {
			heldAt = heldAt[1:]
			h := ChurnHeld{After: t - up, Exact: nexact}
			if total > 0 {
				h.Samples = float64(held) / float64(total)
			}
			res.Self = append(res.Self, h)
		}
	}
	for t := up; t < end; t += cfg.Check {
		s.At(t, check)
	}
	if err := s.Run(end); err != nil {
		return res, err
	}
	res.ViewsExact, res.ViewsLagMax = views.result(start, up)
	res.SelfExact, _ = self.result(start, up)
	for i := range cfg.Nodes {
		st := s.NodeStats(i)
		res.V2 = addV2(res.V2, st.V2, before[i].V2)
		res.Refused += st.Refused - before[i].Refused
	}
	res.Events = s.Events()
	res.Wall = time.Since(wallStart)
	return res, nil
}

// exactView reports whether v, a view of dest in epoch e, is an exact
// merge: the exact union, or under protocol v2 in the epoch of an
// exclusion the union without the boot excluded (unionViewOf). It returns
// the union v matched, or the exact union if none.
func exactView(s *Sim, v []uint64, dest string, e int64) ([]uint64, bool) {
	u := s.unionView(dest, e)
	if slices.Equal(v, u) {
		return u, true
	}
	if s.v2 {
		if w := s.unionViewOf(dest, e, true); slices.Equal(v, w) {
			return w, true
		}
	}
	return u, false
}

// firstOwnerObserver returns the observer other than node 0 that is the
// first owner (as node 0 sees it) of the most destinations, the lowest
// such node on a tie; -1 if none is.
func firstOwnerObserver(s *Sim, dests []NamedDist, observers int) int {
	count := make([]int, observers)
	for _, d := range dests {
		if owners := s.Owners(0, d.Name); len(owners) > 0 {
			for o := 1; o < observers; o++ {
				if owners[0] == s.Name(o) {
					count[o]++
				}
			}
		}
	}
	best := -1
	for o := 1; o < observers; o++ {
		if count[o] > 0 && (best < 0 || count[o] > count[best]) {
			best = o
		}
	}
	return best
}

func sum(xs []uint64) uint64 {
	var t uint64
	for _, x := range xs {
		t += x
	}
	return t
}

// ChurnTable formats results as a markdown table.
func ChurnTable(rs []ChurnResult) string {
	var b strings.Builder
	b.WriteString("| event | protocol | owners | N | D | down / detect | owns | others' views exact after | then settle within | own view exact after | own view: samples held (dests exact) at +1 s / mid next epoch / mid 2nd epoch | resent | takeovers | wall |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	dur := func(d time.Duration) string {
		if d < 0 {
			return "never"
		}
		return d.Round(time.Millisecond).String()
	}
	for _, r := range rs {
		event, down := "restart", fmt.Sprintf("%v / %v", r.Down, r.DetectAfter)
		if r.Join {
			event, down = "late join", "—"
		}
		var held []string
		for _, h := range r.Self {
			held = append(held, fmt.Sprintf("%.0f %% (%d)", 100*h.Samples, h.Exact))
		}
		owners := "—" // protocol 1: no owners
		if r.Protocol >= cluster.ProtocolV2 {
			owners = fmt.Sprint(r.Owners)
		}
		fmt.Fprintf(&b, "| %s | v%d | %s | %d | %d | %s | %d | %s | %s | %s | %s | %d | %d | %v |\n",
			event, r.Protocol, owners, r.Nodes, r.Dests, down, r.Owned,
			dur(r.ViewsExact), dur(r.ViewsLagMax), dur(r.SelfExact), strings.Join(held, " / "),
			r.V2.Resent, r.V2.Takeovers, r.Wall.Round(100*time.Millisecond))
	}
	return b.String()
}
