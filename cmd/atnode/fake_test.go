package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adaptivetimeout/adaptivetimeout/node"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// fakeNode stands in for *node.Node where a test counts the agent's calls
// (ReloadKeys on SIGHUP, Close on shutdown): a local SyncTracker, an HTTP listener
// on cfg.HTTP serving a handler with /, /v1/status and /v1/members, and no
// gossip (GossipAddr reports cfg.Cluster.Bind).
type fakeNode struct {
	cfg      node.Config
	tr       *tracker.SyncTracker[string]
	ln       net.Listener
	srv      *http.Server
	done     chan struct{}
	reloads  atomic.Int32
	closed   atomic.Int32
	closeOne sync.Once
}

func newFakeNode(cfg node.Config, _ *slog.Logger, _ prometheus.Registerer) (runtime, error) {
	tr, err := tracker.NewSync[string](cfg.TrackerConfig())
	if err != nil {
		return nil, err
	}
	return &fakeNode{cfg: cfg, tr: tr, done: make(chan struct{})}, nil
}

func (f *fakeNode) Start(ctx context.Context) error {
	if f.cfg.HTTP == "" {
		return nil
	}
	ln, err := net.Listen("tcp", f.cfg.HTTP)
	if err != nil {
		return err
	}
	f.ln = ln
	f.srv = &http.Server{Handler: f.Handler()}
	go func() { defer close(f.done); _ = f.srv.Serve(ln) }()
	return nil
}

func (f *fakeNode) Close() error {
	f.closeOne.Do(func() {
		f.closed.Add(1)
		if f.srv != nil {
			_ = f.srv.Close()
			<-f.done
		}
	})
	return nil
}

func (f *fakeNode) GossipAddr() string { return f.cfg.Cluster.Bind }

func (f *fakeNode) HTTPAddr() string {
	if f.ln == nil {
		return ""
	}
	return f.ln.Addr().String()
}

func (f *fakeNode) ReloadKeys() error { f.reloads.Add(1); return nil }

func (f *fakeNode) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>fake</html>")) })
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"node": f.cfg.Name})
	})
	mux.HandleFunc("GET /v1/members", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode([]map[string]string{{"name": f.cfg.Name, "state": "alive"}})
	})
	return mux
}

func (f *fakeNode) Record(dest string, latency time.Duration) { f.tr.Record(dest, latency, time.Now()) }

func (f *fakeNode) Estimate(dest string, q float64) (tracker.Estimate, error) {
	if q == 0 {
		q = f.cfg.Timeout.Quantile
	}
	now := time.Now()
	e := tracker.Estimate{Dest: dest, Quantile: q, Peers: 1}
	e.LocalSamples = f.tr.Samples(dest, now)
	e.LocalValueMillis, e.HasLocalValue = f.tr.QuantileMillis(dest, q, now)
	if e.HasLocalValue {
		e.Source, e.ValueMillis = tracker.SourceLocal, e.LocalValueMillis
	}
	return e, nil
}

func (f *fakeNode) Timeout(dests []string, attempt int) (decision, error) {
	d := timeout.Explain(f.cfg.Timeout, f.tr, dests, attempt, time.Now())
	out := decision{Timeout: d.Timeout, Fallback: d.Fallback}
	if d.DecidedBy >= 0 {
		out.DecidedBy, out.Source = dests[d.DecidedBy], "local"
	}
	return out, nil
}
