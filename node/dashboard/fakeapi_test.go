package dashboard

import (
	"encoding/json"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
)

// fakeAPI stands in for the node's JSON API (DESIGN.md section 7 and the
// shapes the dashboard is built against). Its clock is a tick counter that
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
		{name: "db-2", localMs: steady(180), fleetMs: steady(210), peers: constPeers(5)},
		{name: "cache eu/west#1", localMs: degrading(3, 90), fleetMs: degrading(4, 70), peers: constPeers(4)},
		{name: "search", localMs: absent, fleetMs: func(tMs int64) float64 {
			if sinceStart(tMs) < 40 {
				return math.NaN() // below min peers at first
			}
			return 40
		}, peers: func(tMs int64) int { return 1 + int(sinceStart(tMs)/20)%3 }},
	},
	"quiet": {
		{name: "idle"}, // known, but no points in the window
		{name: "no-data", localMs: absent, fleetMs: absent, peers: constPeers(0)},
	},
	"empty": nil,
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

// members returns the membership at tick; n3 flaps between alive and suspect.
func (f *fakeAPI) members(tick int64) []fakeMember {
	switch f.scenario {
	case "empty":
		return []fakeMember{}
	case "quiet", "broken":
		return []fakeMember{{"n0", "n0-1a2b3c4d", "127.0.0.1:7946", "alive", "1a2b3c4d"}}
	}
	n3 := "alive"
	if tick%2 == 1 {
		n3 = "suspect"
	}
	return []fakeMember{
		{"n0", "n0-1a2b3c4d", "127.0.0.1:7946", "alive", "1a2b3c4d"},
		{"n1", "n1-5e6f7a8b", "127.0.0.1:7947", "alive", "5e6f7a8b"},
		{"n2", "n2-9c0d1e2f", "127.0.0.1:7948", "alive", "9c0d1e2f"},
		{"n3", "n3-31415926", "127.0.0.1:7949", n3, "31415926"},
		{"n4", "n4-27182818", "127.0.0.1:7950", "left", "27182818"},
		{"n5", "n5-16180339", "127.0.0.1:7951", "dead", "16180339"},
	}
}

func (f *fakeAPI) now(tick int64) int64 { return fakeBaseMs + fakeSpanMs + tick*fakeTickMs }

func (f *fakeAPI) register(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/status", f.status)
	mux.HandleFunc("GET /v1/members", f.membersHandler)
	mux.HandleFunc("GET /v1/history", f.history)
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
	writeJSON(w, http.StatusOK, map[string]any{
		"node": "n0", "member": "n0-1a2b3c4d",
		"gossip_addr": "127.0.0.1:7946", "http_addr": "127.0.0.1:8080",
		"window_ms": 60000, "sub_window_ms": 6000,
		"destinations":  dests,
		"members_alive": alive,
		"gossip": map[string]any{
			"bytes_in": busy * tick * 48_213, "bytes_out": busy * tick * 51_007,
			"batches_in": busy * tick * 8, "batches_out": busy * tick * 4,
			"rejected": map[string]int64{"stale_epoch": busy * tick / 3},
		},
	})
}

func (f *fakeAPI) membersHandler(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	tick := f.tick
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, f.members(tick))
}

type fakePoint struct {
	TMs          int64    `json:"t_ms"`
	LocalMs      *float64 `json:"local_ms"`
	FleetMs      *float64 `json:"fleet_ms"`
	TimeoutMs    float64  `json:"timeout_ms"`
	Peers        int      `json:"peers"`
	Samples      int64    `json:"samples"`
	LocalSamples int64    `json:"local_samples"`
	Source       string   `json:"source"`
}

// jitter returns v times a deterministic factor in [0.85, 1.25) that
// depends only on the destination and the time, so that repeated queries
// agree on the past.
func jitter(dest string, tMs int64, v float64) *float64 {
	if math.IsNaN(v) {
		return nil
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(dest))
	r := rand.New(rand.NewPCG(h.Sum64(), uint64(tMs)))
	x := math.Round(v*(0.85+0.4*r.Float64())*100) / 100
	return &x
}

func (f *fakeAPI) history(w http.ResponseWriter, r *http.Request) {
	dest := r.URL.Query().Get("dest")
	if dest == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "missing dest"})
		return
	}
	var d *fakeDest
	for i := range fakeScenarios[f.scenario] {
		if fakeScenarios[f.scenario][i].name == dest {
			d = &fakeScenarios[f.scenario][i]
		}
	}
	if dest == "broken" {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "history store unavailable"})
		return
	}
	if d == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "unknown destination " + dest})
		return
	}
	f.mu.Lock()
	now := f.now(f.tick)
	f.mu.Unlock()
	points := []fakePoint{}
	if d.localMs != nil {
		for t := now - fakeSpanMs + fakeStepMs; t <= now; t += fakeStepMs {
			p := fakePoint{TMs: t, LocalMs: jitter(dest+"/local", t, d.localMs(t)), FleetMs: jitter(dest+"/fleet", t, d.fleetMs(t)), Peers: d.peers(t)}
			p.TimeoutMs, p.Source = fakeFloorMs, "fallback"
			if p.LocalMs != nil {
				p.LocalSamples = 24_000
				p.TimeoutMs, p.Source = math.Max(fakeFloorMs, 2**p.LocalMs), "local"
			}
			if p.FleetMs != nil {
				p.Samples = int64(p.Peers) * 24_000
				p.TimeoutMs, p.Source = math.Max(fakeFloorMs, 2**p.FleetMs), "fleet"
			}
			points = append(points, p)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"dest": dest, "quantile": fakeQuantile, "points": points})
}
