package node

import (
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// Bounds of the history and of the per-destination metrics.
const (
	// maxTrackedDests is how many destinations have a history and
	// per-destination metrics: those first seen, while they stay in the
	// local or fleet view. It bounds memory (historyPoints·~100 B each) and
	// the label cardinality of /metrics.
	maxTrackedDests = 100
	// historyPoints is the length of each history: one point a second, so
	// five minutes.
	historyPoints = 300
)

// point is one sample of a destination's history, the unit GET
// /v1/history returns (as its JSON) and the dashboard plots.
type point struct {
	TMs          int64     `json:"t_ms"`          // sample time, Unix ms
	Local        optMillis `json:"local_ms"`      // local view's quantile
	Fleet        optMillis `json:"fleet_ms"`      // fleet view's quantile
	TimeoutMs    int64     `json:"timeout_ms"`    // the first attempt's timeout for this destination alone
	Peers        int       `json:"peers"`         // peers in the fleet view
	Samples      uint64    `json:"samples"`       // samples in the fleet view
	LocalSamples uint64    `json:"local_samples"` // samples in the local view
	Source       string    `json:"source"`        // the estimate's source: fleet, local or none
	Guarded      bool      `json:"guarded"`       // the local guard decided the timeout: this node's quantile, above the fleet's
	EffPeers     float64   `json:"-"`             // effective peers (for metrics)
	Failing      bool      `json:"-"`             // the decision treats the destination as failing (for metrics)
}

// optMillis is a value in milliseconds that may be absent; its JSON is
// null then.
type optMillis struct {
	ms uint64
	ok bool
}

// MarshalJSON writes the value as a number, or null when it is absent.
func (o optMillis) MarshalJSON() ([]byte, error) {
	if !o.ok {
		return []byte("null"), nil
	}
	return strconv.AppendUint(nil, o.ms, 10), nil
}

// ring is a fixed-size ring of points, oldest overwritten first.
type ring struct {
	buf  []point
	next int
	full bool
}

func (r *ring) add(p point) {
	r.buf[r.next] = p
	r.next = (r.next + 1) % len(r.buf)
	r.full = r.full || r.next == 0
}

func (r *ring) points() []point {
	if !r.full {
		return slices.Clone(r.buf[:r.next])
	}
	return append(slices.Clone(r.buf[r.next:]), r.buf[:r.next]...)
}

// history holds the rings of the tracked destinations.
type history struct {
	maxDests, size int

	mu    sync.Mutex
	rings map[string]*ring
	lastS int64 // Unix second of the last sample
}

func newHistory(maxDests, size int) *history {
	return &history{maxDests: maxDests, size: size, rings: make(map[string]*ring), lastS: -1 << 62}
}

// tracked returns the tracked destinations, sorted.
func (h *history) tracked() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.rings))
	for d := range h.rings {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// get returns dest's points, oldest first, and whether dest has a history.
func (h *history) get(dest string) ([]point, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.rings[dest]; r != nil {
		return r.points(), true
	}
	return []point{}, false
}

// sampleHistory adds one point per tracked destination, at most once per
// wall-clock second: the set of destinations becomes local ∪ fleet, rings
// of destinations gone from both are dropped, and new destinations get a
// ring while fewer than maxTrackedDests have one.
func (n *Node) sampleHistory(now time.Time) {
	h := n.hist
	sec := now.Unix()
	h.mu.Lock()
	if sec == h.lastS {
		// At most once a second; a clock stepped back samples on (from
		// the second it went back to), rather than not until it is past
		// the second last sampled again.
		h.mu.Unlock()
		return
	}
	h.lastS = sec
	h.mu.Unlock()

	known := n.destinations(now)
	var pts []point
	var names []string
	h.mu.Lock()
	for d := range h.rings {
		if _, ok := slices.BinarySearch(known, d); !ok {
			delete(h.rings, d)
		}
	}
	for _, d := range known {
		if h.rings[d] == nil && len(h.rings) < h.maxDests {
			h.rings[d] = &ring{buf: make([]point, h.size)}
		}
		if h.rings[d] != nil {
			names = append(names, d)
		}
	}
	h.mu.Unlock()

	for _, d := range names {
		pts = append(pts, n.samplePoint(d, now))
	}
	h.mu.Lock()
	for i, d := range names {
		if r := h.rings[d]; r != nil {
			r.add(pts[i])
		}
	}
	h.mu.Unlock()
}

// samplePoint computes dest's point at now.
func (n *Node) samplePoint(dest string, now time.Time) point {
	p := point{TMs: now.UnixMilli()}
	if e, err := n.fleet.Estimate(dest, n.cfg.Timeout.Quantile, now); err == nil {
		p.Local = optMillis{e.LocalValueMillis, e.HasLocalValue}
		p.Fleet = optMillis{e.FleetValueMillis, e.HasFleetValue}
		p.Peers, p.Samples, p.LocalSamples = e.Peers, e.Samples, e.LocalSamples
		p.Source, p.EffPeers = e.Source.String(), e.EffectivePeers
	}
	d := n.decide([]string{dest}, 1, 1, now)
	p.TimeoutMs, p.Failing, p.Guarded = d.Timeout.Milliseconds(), len(d.Failing) > 0, d.Guarded
	return p
}

// failingCount returns how many destinations this node treats as failing
// at now: of dests (the local and fleet views' destinations, sorted) those
// whose estimate is failing, and those the failure detector names (a
// destination whose attempts all failed fast has no samples).
func (n *Node) failingCount(dests []string, now time.Time) int {
	q := n.cfg.Timeout.Quantile
	c := 0
	for _, d := range dests {
		if e, err := n.fleet.Estimate(d, q, now); err == nil && e.Failing || n.dec.Failing(d) {
			c++
		}
	}
	for _, d := range n.dec.Detected() {
		if _, ok := slices.BinarySearch(dests, d); !ok {
			c++
		}
	}
	return c
}

// destinations returns local ∪ fleet destinations at now, sorted.
func (n *Node) destinations(now time.Time) []string {
	out := append(n.fleet.Destinations(now), tracker.Destinations(n.local, now)...)
	slices.Sort(out)
	return slices.Compact(out)
}
