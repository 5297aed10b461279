package dashboard

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
)

// fakeAPI stands in for the node's JSON API (package node documents it),
// with the real node's shapes: boot IDs of 16 hex digits whose last 8 end the
// member name, whole milliseconds, the estimate sources "fleet", "local"
// and "none" (tracker.Source), the real gossip counters and reject reasons
// (cluster.GossipStats). TestFakeAPIShapes (realnode_test.go) compares its
// answers with a real node's field by field. Every scenario's /v1/status
// carries "warnings", [] unless "troubled", whose warnings read as the
// real node's do (cluster.Warning). Every scenario's /v1/timeout carries
// reason, failing ([] when none) and probe_ms (null unless a probe is due),
// as the node's does; "troubled" has a failing destination. Its clock is a
// tick counter that
// every /v1/status call advances by two seconds, so each refresh of the page
// sees a new point per destination and the data moves deterministically.
type fakeAPI struct {
	scenario string // a key of fakeScenarios

	mu   sync.Mutex
	tick int64
}

const (
	fakeBaseMs   = 1764480000000 // 2025-11-30T05:20:00Z
	fakeStepMs   = 1000          // one point a second
	fakeSpanMs   = 180_000       // three minutes of history
	fakeTickMs   = 2000          // clock advance per /v1/status
	fakeFloorMs  = 250
	fakeQuantile = 0.9999
)

// fakeDest describes one simulated destination.
type fakeDest struct {
	name    string
	localMs func(tMs int64) float64 // NaN: this node does not call it
	fleetMs func(tMs int64) float64 // NaN: not enough peers yet
	peers   func(tMs int64) int
	failing bool // every attempt times out: the timeout is the fallback
}

func steady(ms float64) func(int64) float64 { return func(int64) float64 { return ms } }
func absent(int64) float64                  { return math.NaN() }
func constPeers(n int) func(int64) int      { return func(int64) int { return n } }
func sinceStart(tMs int64) float64          { return float64(tMs-fakeBaseMs) / 1000 }
func degrading(from, to float64) func(int64) float64 {
	return func(tMs int64) float64 {
		s := sinceStart(tMs)
		if s < 120 {
			return from
		}
		return from + (to-from)*math.Min(1, (s-120)/60)
	}
}

var fakeScenarios = map[string][]fakeDest{
	"busy": {
		{name: "db-1", localMs: steady(12), fleetMs: steady(15), peers: constPeers(5)},
		{name: "db-2", localMs: steady(400), fleetMs: steady(210), peers: constPeers(5)}, // the local guard decides
		{name: "cache eu/west#1", localMs: degrading(3, 90), fleetMs: degrading(4, 70), peers: constPeers(4)},
		{name: "search", localMs: absent, fleetMs: func(tMs int64) float64 {
			if sinceStart(tMs) < 40 {
				return math.NaN() // below min peers at first
			}
			return 40
		}, peers: func(tMs int64) int { return 1 + int(sinceStart(tMs)/20)%3 }},
	},
	"quiet": {
		{name: "idle"}, // known, but no points: beyond the 100 tracked
		{name: "no-data", localMs: absent, fleetMs: absent, peers: constPeers(0)},
	},
	"empty": nil,
	// "troubled" has a failing destination and warnings in its status.
	"troubled": {
		{name: "db-1", localMs: steady(12), fleetMs: steady(15), peers: constPeers(3)},
		{name: "ledger-eu", localMs: steady(1000), fleetMs: steady(1000), peers: constPeers(3), failing: true},
	},
	// "broken" answers 500 for the history of the destination "broken".
	"broken": {
		{name: "db-1", localMs: steady(12), fleetMs: steady(15), peers: constPeers(5)},
		{name: "broken"},
	},
}

type fakeMember struct {
	Name   string `json:"name"`
	Member string `json:"member"`
	Addr   string `json:"addr"`
	State  string `json:"state"`
	BootID string `json:"boot_id"`
}

// member is a row as the node writes it: the boot ID as 16 lowercase hex
// digits, the member name the peer name and the boot ID's low 32 bits.
func member(name, addr, state string, boot uint64) fakeMember {
	return fakeMember{name, fmt.Sprintf("%s-%08x", name, uint32(boot)), addr, state, fmt.Sprintf("%016x", boot)}
}

// fakeSelf is n0, the node the fake API is.
var fakeSelf = member("n0", "127.0.0.1:7946", "alive", 0x7f3e9a001a2b3c4d)

// members returns the membership at tick; n3 flaps between alive and suspect.
func (f *fakeAPI) members(tick int64) []fakeMember {
	switch f.scenario {
	case "empty":
		return []fakeMember{}
	case "quiet", "broken":
		return []fakeMember{fakeSelf}
	case "troubled":
		return []fakeMember{
			fakeSelf,
			member("n1", "127.0.0.1:7947", "alive", 0x00000000_5e6f7a8b),
			member("n2", "127.0.0.1:7948", "alive", 0xc0ffee00_9c0d1e2f),
		}
	}
	n3 := "alive"
	if tick%2 == 1 {
		n3 = "suspect"
	}
	return []fakeMember{
		fakeSelf,
		member("n1", "127.0.0.1:7947", "alive", 0x00000000_5e6f7a8b),
		member("n2", "127.0.0.1:7948", "alive", 0xc0ffee00_9c0d1e2f),
		member("n3", "127.0.0.1:7949", n3, 0x12345678_31415926),
		member("n4", "127.0.0.1:7950", "left", 0xfedcba98_27182818),
		member("n5", "127.0.0.1:7951", "dead", 0x0badf00d_16180339),
	}
}

func (f *fakeAPI) now(tick int64) int64 { return fakeBaseMs + fakeSpanMs + tick*fakeTickMs }

func (f *fakeAPI) register(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/status", f.status)
	mux.HandleFunc("GET /v1/members", f.membersHandler)
	mux.HandleFunc("GET /v1/history", f.history)
	mux.HandleFunc("GET /v1/timeout", f.timeout)
}

// fakeWarnings are the troubled scenario's /v1/status warnings.
var fakeWarnings = []map[string]string{
	{"kind": "config_mismatch", "message": "member n7-0e5a1b2c (127.0.0.1:7953) advertises -window 30s (this node's is 60s) and -sub-window 3s (this node's is 6s): refused at join"},
	{"kind": "clock_skew", "message": "the clock of peer n2 (member n2-9c0d1e2f) is ~2.1s ahead of its peers' median"},
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeAPI) status(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	f.tick++
	tick := f.tick
	f.mu.Unlock()
	dests := []string{}
	for _, d := range fakeScenarios[f.scenario] {
		dests = append(dests, d.name)
	}
	alive := 0
	for _, m := range f.members(tick) {
		if m.State == "alive" {
			alive++
		}
	}
	busy := int64(0)
	if f.scenario == "busy" {
		busy = 1
	}
	rejected := map[string]int64{} // reasons are the cluster's Reject* constants
	if busy > 0 {
		rejected["stale_epoch"] = tick / 3
		rejected["unknown_origin"] = tick / 5
	}
	slices.Sort(dests)
	body := map[string]any{
		"node": fakeSelf.Name, "member": fakeSelf.Member, "boot_id": fakeSelf.BootID,
		"gossip_addr": "127.0.0.1:7946", "http_addr": "127.0.0.1:8080",
		"window_ms": 60000, "sub_window_ms": 6000, "quantile": fakeQuantile,
		"destinations":  dests,
		"members_alive": max(alive, 1), // the node counts itself
		"min_peers":     min(3, max(alive, 1)),
		"gossip": map[string]any{
			"bytes_in": busy * tick * 48_213, "bytes_out": busy * tick * 51_007,
			"bytes_in_by_type":  map[string]int64{"batch": busy * tick * 46_000, "digest": busy * tick * 2_013, "pull": busy * tick * 200},
			"bytes_out_by_type": map[string]int64{"batch": busy * tick * 48_794, "digest": busy * tick * 2_013, "pull": busy * tick * 200},
			"messages_in":       map[string]int64{"batch": busy * tick * 8, "digest": busy * tick * 10, "pull": busy * tick},
			"messages_out":      map[string]int64{"batch": busy * tick * 4, "digest": busy * tick * 10, "pull": busy * tick},
			"batches_in":        busy * tick * 8, "batches_out": busy * tick * 4,
			"outcomes":    map[string]int64{"new": busy * tick * 6, "duplicate": busy * tick * 2},
			"rejected":    rejected,
			"queue_drops": 0, "queue_discards": 0, "send_drops": 0, "send_errors": 0, "repairs": busy * tick / 4,
			"seals": busy * tick, "seal_errors": 0, "backed_off": 0,
			"seal_to_receive": map[string]any{
				"bounds": []float64{0.1, 0.5, 1, 2, 5}, "counts": []int64{0, busy * tick * 7, busy * tick, 0, 0, 0},
				"sum": float64(busy*tick) * 2.4, "count": busy * tick * 8,
			},
		},
	}
	body["warnings"] = []map[string]string{}
	if f.scenario == "troubled" {
		body["warnings"] = fakeWarnings
	}
	writeJSON(w, http.StatusOK, body)
}

func (f *fakeAPI) membersHandler(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	tick := f.tick
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, f.members(tick))
}

// fakePoint is a history point as the node writes it: quantiles and the
// timeout in whole milliseconds, the estimate's source fleet, local or none,
// and whether the local guard decided.
type fakePoint struct {
	TMs          int64   `json:"t_ms"`
	LocalMs      *uint64 `json:"local_ms"`
	FleetMs      *uint64 `json:"fleet_ms"`
	TimeoutMs    int64   `json:"timeout_ms"`
	Peers        int     `json:"peers"`
	Samples      uint64  `json:"samples"`
	LocalSamples uint64  `json:"local_samples"`
	Source       string  `json:"source"`
	Guarded      bool    `json:"guarded"`
}

// jitter returns v times a deterministic factor in [0.85, 1.25), in whole
// milliseconds, that depends only on the destination and the time, so that
// repeated queries agree on the past.
func jitter(dest string, tMs int64, v float64) *uint64 {
	if math.IsNaN(v) {
		return nil
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(dest))
	r := rand.New(rand.NewPCG(h.Sum64(), uint64(tMs)))
	x := uint64(math.Round(v * (0.85 + 0.4*r.Float64())))
	return &x
}

// point is d's history point at tMs.
func (d *fakeDest) point(tMs int64) fakePoint {
	p := fakePoint{TMs: tMs, LocalMs: jitter(d.name+"/local", tMs, d.localMs(tMs)), FleetMs: jitter(d.name+"/fleet", tMs, d.fleetMs(tMs)), Peers: d.peers(tMs)}
	p.TimeoutMs, p.Source = fakeFloorMs, "none" // the backoff fallback
	if p.LocalMs != nil {
		p.LocalSamples = 24_000
		p.TimeoutMs, p.Source = max(fakeFloorMs, 2*int64(*p.LocalMs)), "local"
	}
	if p.FleetMs != nil {
		p.Samples = uint64(p.Peers) * 24_000
		p.TimeoutMs, p.Source = max(fakeFloorMs, 2*int64(*p.FleetMs)), "fleet"
		// The local guard: a local quantile more than 20 % above the
		// fleet's decides, unless the floor is higher still.
		if l := p.LocalMs; l != nil && 5**l > 6**p.FleetMs && 2*int64(*l) > fakeFloorMs {
			p.TimeoutMs, p.Guarded = 2*int64(*l), true
		}
	}
	if d.failing {
		p.TimeoutMs, p.Source = fakeFloorMs, "none"
	}
	return p
}

// dest returns the scenario's destination named name, or nil.
func (f *fakeAPI) dest(name string) *fakeDest {
	for i := range fakeScenarios[f.scenario] {
		if fakeScenarios[f.scenario][i].name == name {
			return &fakeScenarios[f.scenario][i]
		}
	}
	return nil
}

// timeout is GET /v1/timeout?dest=A&dest=B for a first attempt that needs
// every destination: the largest of their timeouts decides. A destination
// without points (unknown, or without a history here) gets the fallback.
// reason, failing and probe_ms follow the node's rules (node.Decision).
func (f *fakeAPI) timeout(w http.ResponseWriter, r *http.Request) {
	dests := r.URL.Query()["dest"]
	if len(dests) == 0 || len(dests) > 64 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("want 1..64 dest parameters, got %d", len(dests))})
		return
	}
	f.mu.Lock()
	now := f.now(f.tick)
	f.mu.Unlock()
	timeoutMs, decidedBy, source, guarded := int64(0), "", "none", false
	failing := []string{}
	decidedFailing := false
	for _, name := range dests {
		p := fakePoint{TimeoutMs: fakeFloorMs, Source: "none"}
		d := f.dest(name)
		if d != nil && d.localMs != nil {
			p = d.point(now)
		}
		if d != nil && d.failing {
			failing = append(failing, name)
		}
		if p.TimeoutMs > timeoutMs {
			timeoutMs, source, guarded, decidedFailing = p.TimeoutMs, p.Source, p.Guarded, d != nil && d.failing
			decidedBy = name
			if p.Source == "none" {
				decidedBy = ""
			}
		}
	}
	body := map[string]any{
		"timeout_ms": timeoutMs, "attempt": 1, "need": len(dests),
		"decided_by": decidedBy, "source": source, "guarded": guarded, "fallback": source == "none",
	}
	reason := "estimate"
	switch {
	case source == "none" && len(failing) > 0:
		reason = "failing"
	case source == "none":
		reason = "fallback"
	}
	body["reason"], body["failing"], body["probe_ms"] = reason, failing, nil
	if decidedFailing {
		body["probe_ms"] = 2000 // the rule on the failing view's quantile
	}
	writeJSON(w, http.StatusOK, body)
}

func (f *fakeAPI) history(w http.ResponseWriter, r *http.Request) {
	dest := r.URL.Query().Get("dest")
	if dest == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "missing dest"})
		return
	}
	d := f.dest(dest)
	if dest == "broken" {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "history store unavailable"})
		return
	}
	if d == nil { // unknown: no points, as the node answers
		writeJSON(w, http.StatusOK, map[string]any{"dest": dest, "quantile": fakeQuantile, "tracked": false, "points": []fakePoint{}})
		return
	}
	f.mu.Lock()
	now := f.now(f.tick)
	f.mu.Unlock()
	points := []fakePoint{}
	if d.localMs != nil {
		for t := now - fakeSpanMs + fakeStepMs; t <= now; t += fakeStepMs {
			points = append(points, d.point(t))
		}
	}
	// A known destination without points stands for one beyond the node's
	// 100 tracked: no history kept (tracked false).
	writeJSON(w, http.StatusOK, map[string]any{"dest": dest, "quantile": fakeQuantile, "tracked": len(points) > 0, "points": points})
}
