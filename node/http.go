package node

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/pprof"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/node/dashboard"
)

// maxTimeoutDests is the most destinations GET /v1/timeout takes.
const maxTimeoutDests = 64

// route is one path of the API: the methods it answers and its handler.
type route struct {
	methods []string // GET implies HEAD
	h       http.Handler
}

func (rt route) allows(m string) bool {
	return slices.Contains(rt.methods, m) || m == http.MethodHead && slices.Contains(rt.methods, http.MethodGet)
}

func (rt route) allow() string {
	ms := slices.Clone(rt.methods)
	if slices.Contains(ms, http.MethodGet) {
		ms = append(ms, http.MethodHead)
	}
	return strings.Join(ms, ", ")
}

// newHandler builds the HTTP API. A request received on loopback with a
// foreign Host or Origin answers 403 (checkLoopbackRequest); then unknown
// paths answer 404 and wrong methods 405, all as {"error": ...}. POST
// endpoints and /debug/pprof/ require the bearer token when one is
// configured (401), then every POST a JSON Content-Type (415): each
// refused before the body is read.
func (n *Node) newHandler() http.Handler {
	get := func(f http.HandlerFunc) route { return route{[]string{http.MethodGet}, f} }
	exact := map[string]route{
		"/v1/record":   {[]string{http.MethodPost}, requireToken(n.token, requireJSON(http.HandlerFunc(n.serveRecord)))},
		"/v1/estimate": get(n.serveEstimate),
		"/v1/timeout":  get(n.serveTimeout),
		"/v1/members":  get(n.serveMembers),
		"/v1/status":   get(n.serveStatus),
		"/v1/history":  get(n.serveHistory),
		"/healthz":     get(n.serveHealth),
		"/metrics": get(promhttp.HandlerFor(n.gather, promhttp.HandlerOpts{
			ErrorHandling: promhttp.ContinueOnError,
		}).ServeHTTP),
		"/debug/pprof/cmdline": get(pprof.Cmdline),
		"/debug/pprof/profile": get(pprof.Profile),
		"/debug/pprof/trace":   get(pprof.Trace),
		"/debug/pprof/symbol":  {[]string{http.MethodGet, http.MethodPost}, requireJSON(http.HandlerFunc(pprof.Symbol))},
	}
	for p, rt := range exact {
		if strings.HasPrefix(p, "/debug/pprof/") {
			rt.h = requireToken(n.token, rt.h)
			exact[p] = rt
		}
	}
	pprofIndex := get(requireToken(n.token, http.HandlerFunc(pprof.Index)).ServeHTTP)
	dash := get(jsonNotFound(dashboard.Handler()).ServeHTTP)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkLoopbackRequest(r); err != nil {
			refuse(w, r, http.StatusForbidden, "%v", err)
			return
		}
		p := r.URL.Path
		rt, ok := exact[p]
		if !ok {
			switch {
			case strings.HasPrefix(p, "/debug/pprof/"):
				rt = pprofIndex
			case p == "/" || strings.HasPrefix(p, dashboard.AssetPrefix):
				rt = dash
			default:
				refuse(w, r, http.StatusNotFound, "no such path: %s", p)
				return
			}
		}
		if !rt.allows(r.Method) {
			w.Header().Set("Allow", rt.allow())
			refuse(w, r, http.StatusMethodNotAllowed, "method %s not allowed on %s; allowed: %s", r.Method, p, rt.allow())
			return
		}
		rt.h.ServeHTTP(w, r)
	})
}

// jsonNotFound turns h's 404 answers into the API's JSON error.
func jsonNotFound(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&notFoundWriter{ResponseWriter: w, path: r.URL.Path}, r)
	})
}

type notFoundWriter struct {
	http.ResponseWriter
	path    string
	swallow bool
}

func (w *notFoundWriter) WriteHeader(code int) {
	if code == http.StatusNotFound {
		w.swallow = true
		w.ResponseWriter.Header().Del("X-Content-Type-Options")
		writeError(w.ResponseWriter, code, "no such path: %s", w.path)
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *notFoundWriter) Write(p []byte) (int, error) {
	if w.swallow {
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

// serveRecord is POST /v1/record: a body declared over 1 MiB is refused
// unread, any other is decoded as a stream (decodeRecord) and refused at
// its first broken rule. The samples of a valid body are learned in body
// order: a completion, a timed-out attempt (censored at latency_ms) or a
// failed one (no sample), each counting for the failure detector.
func (n *Node) serveRecord(w http.ResponseWriter, r *http.Request) {
	if _, err := strictQuery(r); err != nil {
		refuse(w, r, http.StatusBadRequest, "%v", err)
		return
	}
	if r.ContentLength > maxRecordBody {
		refuse(w, r, http.StatusRequestEntityTooLarge, "%v", errBodyTooLarge)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxRecordBody)
	samples, err := decodeRecord(r.Body)
	switch {
	case errors.Is(err, errBodyTooLarge):
		refuse(w, r, http.StatusRequestEntityTooLarge, "%v", err)
		return
	case err != nil:
		refuse(w, r, http.StatusBadRequest, "%v", err)
		return
	}
	now := n.clock()
	for _, s := range samples { // in body order, for the failure detector
		o := s.Outcome()
		n.learn(s.Dest, o, latencyMillis(s.LatencyMs), now)
		n.met.outcome(o)
	}
	writeJSON(w, http.StatusOK, struct {
		Recorded int `json:"recorded"`
	}{len(samples)})
}

// checkDest validates a destination given in a query string by the rule
// of validDest, and says which part of it d breaks, naming it as name
// ("dest", or "dest[i]" among several).
func checkDest(name, d string) error {
	switch {
	case validDest(d):
		return nil
	case d == "":
		return fmt.Errorf("%s must not be empty", name)
	case len(d) > maxDestLen:
		return fmt.Errorf("%s is %d bytes, more than %d", name, len(d), maxDestLen)
	}
	return fmt.Errorf("%s is not valid UTF-8", name)
}

// oneDest reads the query of /v1/estimate and /v1/history, which takes
// the parameters known besides dest (strictQuery), and its single dest.
func oneDest(r *http.Request, known ...string) (url.Values, string, error) {
	q, err := strictQuery(r, append([]string{"dest"}, known...)...)
	if err != nil {
		return nil, "", err
	}
	ds := q["dest"]
	switch len(ds) {
	case 0:
		return nil, "", errors.New("missing query parameter dest")
	case 1:
		return q, ds[0], checkDest("dest", ds[0])
	}
	return nil, "", fmt.Errorf("want one dest, got %d", len(ds))
}

// serveEstimate is GET /v1/estimate?dest=D[&q=Q].
// effective_peers is rounded to 3 decimals.
func (n *Node) serveEstimate(w http.ResponseWriter, r *http.Request) {
	query, dest, err := oneDest(r, "q")
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	q := n.cfg.Timeout.Quantile
	if qs := query["q"]; len(qs) > 0 {
		v, err := strconv.ParseFloat(qs[0], 64)
		switch {
		case len(qs) > 1:
			writeError(w, http.StatusBadRequest, "want one q, got %d", len(qs))
			return
		case err != nil || math.IsNaN(v):
			writeError(w, http.StatusBadRequest, "q must be a number in (0, 1], got %q", qs[0])
			return
		case !(v > 0 && v <= 1):
			writeError(w, http.StatusBadRequest, "q must be in (0, 1], got %v", v)
			return
		}
		q = v
	}
	e, err := n.Estimate(dest, q)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	e.EffectivePeers = math.Round(e.EffectivePeers*1000) / 1000 // not 16 digits of a ratio
	writeJSON(w, http.StatusOK, e)
}

// intParam reads an optional integer query parameter.
func intParam(q url.Values, name string, def int) (int, error) {
	vs := q[name]
	switch len(vs) {
	case 0:
		return def, nil
	case 1:
		v, err := strconv.Atoi(vs[0])
		if err != nil {
			return 0, fmt.Errorf("%s must be a whole number, got %q", name, vs[0])
		}
		return v, nil
	}
	return 0, fmt.Errorf("want one %s, got %d", name, len(vs))
}

// serveTimeout is GET /v1/timeout?dest=A&dest=B[&attempt=1][&need=K].
func (n *Node) serveTimeout(w http.ResponseWriter, r *http.Request) {
	query, err := strictQuery(r, "dest", "attempt", "need")
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	dests := query["dest"]
	if len(dests) == 0 || len(dests) > maxTimeoutDests {
		writeError(w, http.StatusBadRequest, "want 1..%d dest parameters, got %d", maxTimeoutDests, len(dests))
		return
	}
	for i, d := range dests {
		if err := checkDest(fmt.Sprintf("dest[%d]", i), d); err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
	}
	attempt, err := intParam(query, "attempt", 1)
	if err == nil && attempt < 1 {
		err = fmt.Errorf("attempt must be >= 1, got %d", attempt)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	need, err := intParam(query, "need", len(dests))
	if err == nil && (need < 1 || need > len(dests)) {
		err = fmt.Errorf("need must be in 1..%d, got %d", len(dests), need)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	d, err := n.TimeoutQuorum(dests, need, attempt)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	// writeJSON's headers and bytes, without encoding/json: the answer is
	// most of this endpoint's cost.
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	var buf [256]byte
	_, _ = w.Write(append(d.appendJSON(buf[:0]), '\n')) // the client went away; nothing left to tell it
}

// memberJSON is one row of GET /v1/members. BootID is the full 64-bit
// boot ID as 16 lowercase hex digits, a string so that JavaScript does not
// round it; its last 8 digits are the suffix of the member name.
type memberJSON struct {
	Name   string `json:"name"`
	Member string `json:"member"`
	Addr   string `json:"addr"`
	State  string `json:"state"`
	BootID string `json:"boot_id"`
}

func bootHex(b uint64) string { return fmt.Sprintf("%016x", b) }

// members returns every member the cluster knows, and always this node
// (alone, before Start or with gossip disabled, with the gossip address if
// bound).
func (n *Node) members() []memberJSON {
	var ms []cluster.Member
	if n.cl != nil {
		ms = n.cl.Members()
	}
	out := make([]memberJSON, 0, len(ms)+1)
	self := false
	for _, m := range ms {
		self = self || m.Member == n.self
		out = append(out, memberJSON{m.Name, m.Member, m.Addr, m.State.String(), bootHex(m.BootID)})
	}
	if !self {
		out = append(out, memberJSON{n.cfg.Name, n.self, n.GossipAddr(), "alive", bootHex(n.boot)})
		slices.SortFunc(out, func(a, b memberJSON) int {
			if c := strings.Compare(a.Name, b.Name); c != 0 {
				return c
			}
			return strings.Compare(a.Member, b.Member)
		})
	}
	return out
}

// serveMembers is GET /v1/members.
func (n *Node) serveMembers(w http.ResponseWriter, r *http.Request) {
	if _, err := strictQuery(r); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, n.members())
}

// statusJSON is GET /v1/status.
type statusJSON struct {
	Node         string              `json:"node"`
	Member       string              `json:"member"`
	BootID       string              `json:"boot_id"`
	GossipAddr   string              `json:"gossip_addr"`
	HTTPAddr     string              `json:"http_addr"`
	WindowMs     int64               `json:"window_ms"`
	SubWindowMs  int64               `json:"sub_window_ms"`
	Quantile     float64             `json:"quantile"`
	Destinations []string            `json:"destinations"`
	MembersAlive int                 `json:"members_alive"`
	MinPeers     int                 `json:"min_peers"`
	Gossip       cluster.GossipStats `json:"gossip"`
	// Warnings are the operator mistakes this node sees now
	// (cluster.Warning: config_mismatch, name_conflict, clock_skew); [] when
	// none.
	Warnings []cluster.Warning `json:"warnings"`
}

// serveStatus is GET /v1/status.
func (n *Node) serveStatus(w http.ResponseWriter, r *http.Request) {
	if _, err := strictQuery(r); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	now := n.clock()
	n.poll(now)
	alive := 1
	if n.cl != nil {
		alive = max(n.cl.NumAlive(), 1)
	}
	writeJSON(w, http.StatusOK, statusJSON{
		Node:         n.cfg.Name,
		Member:       n.self,
		BootID:       bootHex(n.boot),
		GossipAddr:   n.GossipAddr(),
		HTTPAddr:     n.HTTPAddr(),
		WindowMs:     n.tcfg.Window.Milliseconds(),
		SubWindowMs:  n.tcfg.SubWindow().Milliseconds(),
		Quantile:     n.cfg.Timeout.Quantile,
		Destinations: n.destinations(now),
		MembersAlive: alive,
		MinPeers:     n.fleet.MinPeers(),
		Gossip:       n.gossipStats(),
		Warnings:     n.Warnings(),
	})
}

// historyJSON is GET /v1/history.
type historyJSON struct {
	Dest     string  `json:"dest"`
	Quantile float64 `json:"quantile"`
	// Tracked says whether this node keeps a history of Dest: at most
	// maxTrackedDests destinations have one, the first seen while they
	// stay in the local or fleet view. Points is empty when it is false,
	// for a destination known beyond the cap as for an unknown one.
	Tracked bool    `json:"tracked"`
	Points  []point `json:"points"`
}

// serveHistory is GET /v1/history?dest=D: the points sampled each second
// (oldest first, at most 300) of a destination in the local or fleet view.
// A destination without a history (beyond the 100 tracked, new since the
// last sample, or unknown: as GET /v1/estimate, which answers for any
// destination) has no points, and tracked false.
func (n *Node) serveHistory(w http.ResponseWriter, r *http.Request) {
	_, dest, err := oneDest(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	pts, tracked := n.hist.get(dest)
	writeJSON(w, http.StatusOK, historyJSON{Dest: dest, Quantile: n.cfg.Timeout.Quantile, Tracked: tracked, Points: pts})
}

// serveHealth is GET /healthz: 200 while the node is started and not
// closed, else 503.
func (n *Node) serveHealth(w http.ResponseWriter, r *http.Request) {
	if _, err := strictQuery(r); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if !n.serving.Load() {
		writeError(w, http.StatusServiceUnavailable, "not serving")
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Status string `json:"status"`
	}{"ok"})
}
