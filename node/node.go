package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// Errors of the node's lifecycle.
var (
	ErrAlreadyStarted = errors.New("node: already started")
	ErrClosed         = errors.New("node: closed")
	// ErrGossipDisabled is returned by ReloadKeys when Config.DisableGossip is set.
	ErrGossipDisabled = errors.New("node: gossip is disabled")
)

// Node is one member of the fleet: the object a storage replica embeds. It
// records latencies per destination, holds the fleet view, answers
// estimates and timeout decisions, and (after Start) takes part in the
// cluster and serves the HTTP API. Create it with New. All methods are safe
// for concurrent use.
type Node struct {
	cfg   Config
	log   *slog.Logger
	clock func() time.Time
	tcfg  tracker.Config
	tocfg timeout.Config
	boot  uint64
	self  string // member name
	token string

	local *tracker.SyncTracker[string]
	fleet *tracker.Fleet
	// owned keeps the records of the destinations this node owns under
	// protocol v2 (nil without gossip).
	owned *tracker.Owned
	// dec decides every timeout on the fleet view, with this node's
	// failure detector and probe bookkeeping, and records what attempts
	// teach into local (which counts them for atnode_records_total).
	dec *timeout.Decider
	// hedge is DoHedged's token bucket (Config.HedgeBudget).
	hedge *timeout.HedgeBudget
	cl    *cluster.Cluster // nil when DisableGossip
	// proto seals this node's sub-windows: the cluster's with gossip on,
	// the node's own (with no members) with gossip off.
	proto *cluster.SyncProtocol

	hist    *history
	met     *metrics
	gather  prometheus.Gatherer
	handler http.Handler

	life     sync.Mutex
	started  bool
	closed   bool
	srv      *http.Server
	httpAddr atomic.Value // string; not under life, which Close holds while requests finish
	stop     chan struct{}
	wg       sync.WaitGroup
	serving  atomic.Bool
}

// New validates cfg (Config.Validate, the exposure rule included: a
// non-loopback gossip or HTTP address without a key or token is refused
// unless cfg.Insecure), reads the token file, builds the tracker, the fleet
// view and (unless cfg.DisableGossip) the cluster member, and registers the
// node's metrics on reg. A nil logger discards logs; a nil reg means a
// private registry (never the default one). The node does nothing in the
// background until Start. On error nothing is left behind: metrics already
// registered on reg are unregistered again.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("node: config: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg.Cluster.Seeds = slices.Clone(cfg.Cluster.Seeds)
	n := &Node{
		cfg:   cfg,
		log:   logger,
		clock: cfg.Clock,
		tcfg:  cfg.TrackerConfig(),
		tocfg: cfg.Timeout,
		stop:  make(chan struct{}),
		hedge: timeout.NewHedgeBudget(cfg.HedgeBudget),
	}
	if n.clock == nil {
		n.clock = time.Now
	}
	if cfg.HTTPTokenFile != "" {
		tok, err := ReadTokenFile(cfg.HTTPTokenFile)
		if err != nil {
			return nil, fmt.Errorf("-http-token-file: %w", err)
		}
		n.token = tok
	}
	var err error
	if n.local, err = tracker.NewSync[string](n.tcfg); err != nil {
		return nil, fmt.Errorf("node: tracker: %w", err)
	}
	if n.fleet, err = tracker.NewFleet(cfg.FleetConfig(), n.local); err != nil {
		return nil, fmt.Errorf("node: fleet: %w", err)
	}
	if n.dec, err = timeout.NewDecider(n.tocfg, n.tcfg, n.fleet, n.local); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if n.boot = cfg.Cluster.BootID; n.boot == 0 {
		if n.boot, err = cluster.NewBootID(); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	n.self = cluster.MemberName(cfg.Name, n.boot)
	if !cfg.DisableGossip {
		if n.owned, err = tracker.NewOwned(cfg.FleetConfig()); err != nil {
			return nil, fmt.Errorf("node: owner records: %w", err)
		}
		if n.cl, err = cluster.New(n.clusterConfig()); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
		n.proto = n.cl.Protocol()
	} else if n.proto, err = cluster.NewSyncProtocol(n.protocolConfig()); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n.hist = newHistory(maxTrackedDests, historyPoints)
	own := prometheus.NewRegistry()
	n.met = newMetrics(n)
	var registered []prometheus.Collector
	for _, c := range n.met.collectors() {
		own.MustRegister(c)
		if reg == nil {
			continue
		}
		if err := reg.Register(c); err != nil {
			// Leave the caller's registry as it was, and release the
			// cluster member (it holds nothing before Start, but Close
			// is its contract).
			for _, r := range registered {
				reg.Unregister(r)
			}
			if n.cl != nil {
				_ = n.cl.Close()
			}
			return nil, fmt.Errorf("node: registering metrics: %w", err)
		}
		registered = append(registered, c)
	}
	n.gather = own
	if g, ok := reg.(prometheus.Gatherer); ok {
		n.gather = g
	}
	n.handler = n.newHandler()
	return n, nil
}

// Start binds the HTTP API (unless Config.HTTP is empty), joins the
// cluster (unless gossip is disabled), and starts the background loop that
// seals epochs and samples the history once a second. The API answers
// from before the joins, which may take memberlist's TCP timeout (10 s)
// per seed that does not answer: a sidecar's application gets this
// node's own estimates meanwhile, and /healthz answers 503 until Start
// has returned. ctx bounds the initial joins only. Start may be called
// once; on error everything it started is stopped again, and the node
// should be closed.
func (n *Node) Start(ctx context.Context) error {
	n.life.Lock()
	defer n.life.Unlock()
	switch {
	case n.closed:
		return ErrClosed
	case n.started:
		return ErrAlreadyStarted
	}
	n.started = true
	if n.cfg.HTTP != "" {
		ln, err := net.Listen("tcp", n.cfg.HTTP)
		if err != nil {
			return fmt.Errorf("node: -http: %w", err)
		}
		n.httpAddr.Store(ln.Addr().String())
		hc := n.cfg.HTTPServer
		n.srv = hc.server(n.handler, slog.NewLogLogger(n.log.Handler(), slog.LevelDebug))
		ln = hc.listen(ln, n.met)
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := n.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				n.log.Error("node: http server stopped", "err", err)
			}
		}()
	}
	if n.cl != nil {
		if err := n.cl.Start(ctx); err != nil {
			if n.srv != nil {
				_ = n.srv.Close()
				n.wg.Wait()
			}
			return fmt.Errorf("node: %w", err)
		}
		n.fleet.SetLiveMembers(n.cl.NumAlive())
	}
	n.step(n.clock())
	n.wg.Add(1)
	go n.loop()
	n.serving.Store(true)
	n.log.Info("node: started", "member", n.self, "gossip", n.GossipAddr(), "http", n.HTTPAddr())
	return nil
}

// loop does the node's periodic work once a second until Close.
func (n *Node) loop() {
	defer n.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			n.step(n.clock())
		}
	}
}

// step is one round of the periodic work at now: refresh the live member
// count, let the protocol seal finished epochs (when the cluster does not
// drive it), slide the fleet view, drop the failure detector's state that
// holds nothing any more, and sample the history.
func (n *Node) step(now time.Time) {
	if n.cl != nil { // also covers membership events the cluster dropped
		n.fleet.SetLiveMembers(n.cl.NumAlive())
	}
	n.poll(now)
	n.fleet.Advance(now)
	if n.owned != nil {
		n.owned.Advance(now)
	}
	n.dec.Sweep(now)
	n.sampleHistory(now)
}

// Close leaves the cluster, then stops serving HTTP, in that order, so that
// peers hear of the leave while the API still answers and a request in
// flight cannot delay the leave. /healthz answers 503 from
// the start of Close. Leaving waits for the leave broadcast (up to the
// cluster's LeaveTimeout, 5 s by default); requests in flight then have up
// to 5 s to finish. Close also stops the background loop and waits for
// every goroutine the node started. It returns what went wrong on the way,
// and nil on every later call. The node still answers Record, Estimate and
// Timeout after Close, from its local state.
func (n *Node) Close() error {
	n.life.Lock()
	defer n.life.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	n.serving.Store(false)
	close(n.stop)
	var errs []error
	if n.cl != nil {
		if err := n.cl.Close(); err != nil {
			errs = append(errs, fmt.Errorf("node: %w", err))
		}
	}
	if n.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := n.srv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("node: http shutdown: %w", err))
			_ = n.srv.Close()
		}
		cancel()
	}
	n.wg.Wait()
	n.log.Info("node: closed")
	return errors.Join(errs...)
}

// Name returns the peer name (Config.Name).
func (n *Node) Name() string { return n.cfg.Name }

// MemberName returns this process's member name: the peer name and the low
// 32 bits of the boot ID in hex (cluster.MemberName).
func (n *Node) MemberName() string { return n.self }

// BootID returns the random ID of this process start.
func (n *Node) BootID() uint64 { return n.boot }

// GossipAddr returns the gossip address actually bound ("ip:port"), or ""
// before Start and when gossip is disabled.
func (n *Node) GossipAddr() string {
	if n.cl == nil {
		return ""
	}
	if a := n.cl.Addr(); a.IsValid() {
		return a.String()
	}
	return ""
}

// HTTPAddr returns the HTTP address actually bound, or "" before Start and
// when Config.HTTP is empty.
func (n *Node) HTTPAddr() string {
	a, _ := n.httpAddr.Load().(string)
	return a
}

// ReloadKeys re-reads the gossip key file (atnode does it on SIGHUP); see
// cluster.Cluster.ReloadKeys. Each reload is counted in
// atnode_key_reloads_total by result. The read gives up after
// cluster.KeyFileTimeout (a hung mount), and a FIFO is refused at once.
func (n *Node) ReloadKeys() error {
	if n.cl == nil {
		return ErrGossipDisabled
	}
	if err := n.cl.ReloadKeys(); err != nil {
		n.met.reloads.WithLabelValues("error").Inc()
		return fmt.Errorf("node: %w", err)
	}
	n.met.reloads.WithLabelValues("ok").Inc()
	return nil
}

// Handler returns the HTTP API (docs/design.md, HTTP API), the dashboard,
// /metrics and /debug/pprof/. It is what Start serves on Config.HTTP; an
// embedder may mount it on its own server instead.
func (n *Node) Handler() http.Handler { return n.handler }

// Cluster returns the cluster member, or nil when gossip is disabled. Its
// lifecycle belongs to the node: do not Start or Close it.
func (n *Node) Cluster() *cluster.Cluster { return n.cl }

// Fleet returns the fleet view, for inspection (ViewCounts, Stats). Its
// state belongs to the node.
func (n *Node) Fleet() *tracker.Fleet { return n.fleet }
