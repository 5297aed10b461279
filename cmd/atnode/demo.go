package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/node"
)

const demoUsage = `Usage: atnode demo [flags]

Starts a cluster of -nodes nodes in this process, gossiping on loopback,
and feeds them simulated traffic to five destinations:

  cache      fast; its timeout sits at the backoff floor (250ms)
  db         steady, with rare stalls
  search     slow: hundreds of milliseconds, stalls of seconds
  payments   healthy, then degrades halfway through the run (after 60s
             when there is no -duration)
  ledger-eu  called by every node but node 0: node 0 still gets a timeout
             for it from the fleet view (with -nodes 4 or more: the fleet
             view is trusted once 3 peers back it)

Node 0 serves the whole HTTP API and the dashboard at -http (on loopback
only: the demo has no token); a table of node 0's view is printed every
-refresh. Ctrl-C stops.

Flags:
`

// demoConfig is the demo's flags.
type demoConfig struct {
	nodes     int
	duration  time.Duration
	http      string
	window    time.Duration
	subWindow time.Duration
	refresh   time.Duration
	rate      float64
	seed      uint64
	logLevel  string
}

func parseDemoConfig(args []string, stderr io.Writer) (demoConfig, error) {
	c := demoConfig{}
	fs := flag.NewFlagSet("atnode demo", flag.ContinueOnError)
	fs.IntVar(&c.nodes, "nodes", 5, "nodes in the cluster, 1..50")
	fs.DurationVar(&c.duration, "duration", 0, "how long to run; 0 runs until interrupted")
	fs.StringVar(&c.http, "http", "127.0.0.1:8080", "loopback `host:port` of node 0's HTTP API and dashboard; port 0 picks a free port")
	fs.DurationVar(&c.window, "window", 30*time.Second, "sliding window (short, so that the demo shows something within seconds)")
	fs.DurationVar(&c.subWindow, "sub-window", 2*time.Second, "sub-window: the window slides and gossips by this much")
	fs.DurationVar(&c.refresh, "refresh", 3*time.Second, "how often the table is printed")
	fs.Float64Var(&c.rate, "rate", 500, "simulated requests per second from each node to each destination it calls")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the simulated latencies")
	fs.StringVar(&c.logLevel, "log-level", "warn", "debug, info, warn or error (logs go to stderr)")
	if err := parseFlags(fs, args, demoUsage, stderr); err != nil {
		return c, err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if c.nodes < 1 || c.nodes > 50 {
		errs = append(errs, fmt.Errorf("-nodes: must be in 1..50, got %d", c.nodes))
	}
	if c.duration < 0 {
		errs = append(errs, fmt.Errorf("-duration: must be >= 0, got %v", c.duration))
	}
	if c.refresh < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("-refresh: must be >= 100ms, got %v", c.refresh))
	}
	if !(c.rate > 0 && c.rate <= 100_000) {
		errs = append(errs, fmt.Errorf("-rate: must be in (0, 100000], got %v", c.rate))
	}
	// The node settings are checked by node.Config.Validate, naming the
	// flag; the demo's own rule for -http comes first: it serves without a
	// token, so only on loopback (node's -insecure and -http-token-file
	// are not the demo's flags).
	cfg := c.nodeConfig(0, nil)
	if c.http == "" { // a node's "no listener": the demo is its dashboard
		errs = append(errs, errors.New("-http: the demo serves its dashboard there: give a loopback host:port (try -http 127.0.0.1:0)"))
	} else if cluster.CheckHostPort(c.http) == nil && !node.IsLoopback(c.http) {
		errs = append(errs, fmt.Errorf("-http: the demo serves its API without a token, so on loopback only: %s is not a loopback address (try -http 127.0.0.1:8080)", c.http))
		cfg.HTTP = ""
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return c, usageError(errors.Join(errs...))
	}
	return c, nil
}

// nodeConfig is demo node i's configuration: loopback gossip on a free
// port with memberlist timing for a cluster on loopback (failures seen in
// about a second, leaves within a second, not for real networks); node 0
// serves the HTTP API and the dashboard on -http (so its /v1/status
// reports the address bound), the others serve no HTTP.
func (c demoConfig) nodeConfig(i int, join []string) node.Config {
	cfg := node.DefaultConfig()
	cfg.Name = fmt.Sprintf("node-%d", i)
	cfg.Cluster.Bind = "127.0.0.1:0"
	cfg.Cluster.Seeds = join
	cfg.Cluster.Timing = cluster.FastTiming()
	cfg.HTTP = ""
	if i == 0 {
		cfg.HTTP = c.http
	}
	cfg.Tracker.Window = c.window
	cfg.SubWindow = c.subWindow
	cfg.LogLevel = c.logLevel
	return cfg
}

// profile is a latency distribution: a lognormal body (median, sigma) and
// rare stalls drawn uniformly from [stallMin, stallMax].
type profile struct {
	median             time.Duration
	sigma              float64
	stallP             float64
	stallMin, stallMax time.Duration
}

func (p profile) draw(r *rand.Rand) time.Duration {
	if r.Float64() < p.stallP {
		return p.stallMin + time.Duration(r.Int64N(int64(p.stallMax-p.stallMin)+1))
	}
	return time.Duration(float64(p.median) * math.Exp(p.sigma*r.NormFloat64()))
}

// destination is one simulated destination.
type destination struct {
	name     string
	normal   profile
	degraded *profile // from degradeAt on, when set
	calledBy func(i, n int) bool
	note     string
}

func allNodes(int, int) bool { return true }

// allButNodeZero calls from every node except node 0 (from node 0 when it
// is alone). With 4 or more nodes, 3 or more peers back the fleet view,
// enough to trust it, so node 0 picks timeouts for a destination it never
// called.
func allButNodeZero(i, n int) bool { return i != 0 || n == 1 }

// demoDestinations are the simulated destinations of a demo of n nodes.
func demoDestinations(n int) []destination {
	ms := time.Millisecond
	ledgerNote := "not called by node 0: its timeout comes from the peers"
	if n == 1 {
		ledgerNote = "called by node 0 (alone, it is the only caller)"
	}
	return []destination{
		{name: "cache", normal: profile{2 * ms, 0.35, 1e-4, 30 * ms, 80 * ms}, calledBy: allNodes,
			note: "fast: timeout at the backoff floor"},
		{name: "db", normal: profile{6 * ms, 0.45, 2e-4, 120 * ms, 300 * ms}, calledBy: allNodes,
			note: "steady, rare stalls"},
		{name: "search", normal: profile{120 * ms, 0.5, 5e-4, 1500 * ms, 4000 * ms}, calledBy: allNodes,
			note: "slow"},
		{name: "payments", normal: profile{15 * ms, 0.4, 1e-4, 150 * ms, 250 * ms},
			degraded: &profile{60 * ms, 0.8, 3e-3, 800 * ms, 2500 * ms}, calledBy: allNodes},
		{name: "ledger-eu", normal: profile{35 * ms, 0.5, 3e-4, 400 * ms, 900 * ms}, calledBy: allButNodeZero,
			note: ledgerNote},
	}
}

// demo runs "atnode demo" until ctx is cancelled or -duration ends.
func (a app) demo(ctx context.Context, args []string) int {
	c, err := parseDemoConfig(args, a.stderr)
	if err != nil {
		return a.parseExit("demo", err)
	}
	var level slog.LevelVar
	level.Set(node.Config{LogLevel: c.logLevel}.SlogLevel())
	logger := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: &level}))

	if c.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.duration)
		defer cancel()
	}

	// Node 0 starts first and binds -http itself: a busy port is the
	// likeliest failure of a first run and is said plainly.
	nodes, err := a.startDemoNodes(ctx, c, logger)
	switch {
	case errors.Is(err, syscall.EADDRINUSE): // a runtime failure, not bad usage: exit 1
		fmt.Fprintf(a.stderr, "atnode demo: %s is already in use (another atnode demo?).\n"+
			"atnode demo: choose another address, e.g. -http 127.0.0.1:0 to pick a free port.\n", c.http)
		return 1
	case err != nil:
		printErr(a.stderr, "demo", err)
		return 1
	}

	degradeAt := 60 * time.Second
	if c.duration > 0 {
		degradeAt = c.duration / 2
	}
	start := time.Now()
	fmt.Fprintf(a.stdout, "atnode demo: %s on loopback, window %v in %v sub-windows; payments degrades at %v.\n",
		nodesText(c.nodes), c.window, c.subWindow, degradeAt)
	fmt.Fprintf(a.stdout, "dashboard: http://%s/\n", nodes[0].HTTPAddr())
	if c.duration > 0 {
		fmt.Fprintf(a.stdout, "running for %v; Ctrl-C stops.\n", c.duration)
	} else {
		fmt.Fprintln(a.stdout, "Ctrl-C stops.")
	}

	dests := demoDestinations(c.nodes)
	var wg sync.WaitGroup
	wg.Go(func() { simulate(ctx, nodes, dests, c, start, degradeAt) })

	tick := time.NewTicker(c.refresh)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			printTable(a.stdout, nodes[0], dests, time.Since(start), degradeAt)
		}
	}
	tick.Stop()
	wg.Wait()

	fmt.Fprintln(a.stdout, "atnode demo: stopping: the nodes leave the cluster.")
	if level.Level() > slog.LevelDebug {
		// While the nodes close one by one, memberlist logs errors about
		// probes to members that just closed: expected, and only noise
		// at the end of a demo. -log-level debug keeps them.
		level.Set(slog.LevelError + 4)
	}
	closeAll(nodes, logger) // node 0, closed last, serves the dashboard until then
	return 0
}

// startDemoNodes starts node 0, then the others joining it.
func (a app) startDemoNodes(ctx context.Context, c demoConfig, logger *slog.Logger) ([]runtime, error) {
	var nodes []runtime
	var seed []string
	for i := range c.nodes {
		cfg := c.nodeConfig(i, seed)
		n, err := a.newNode(cfg, logger.With("node", cfg.Name), prometheus.NewRegistry())
		if err == nil {
			if err = n.Start(ctx); err != nil {
				nodes = append(nodes, n) // Close it below
			}
		}
		if err != nil {
			closeAll(nodes, logger)
			return nil, fmt.Errorf("starting %s: %w", cfg.Name, err)
		}
		nodes = append(nodes, n)
		if i == 0 {
			seed = []string{n.GossipAddr()}
		}
	}
	return nodes, nil
}

// closeAll closes the nodes one at a time, the last started first, so
// that each leave is broadcast to members that are still running (closing
// them all at once makes their leaves time out against closed sockets).
func closeAll(nodes []runtime, logger *slog.Logger) {
	for _, n := range slices.Backward(nodes) {
		if err := n.Close(); err != nil {
			logger.Warn("closing a node", "err", err)
		}
	}
}

// nodesText says how many nodes run and how: "1 node alone", "5 nodes
// gossiping".
func nodesText(n int) string {
	if n == 1 {
		return "1 node alone"
	}
	return fmt.Sprintf("%d nodes gossiping", n)
}

// newDemoRand is node i's generator of simulated latencies.
func newDemoRand(seed uint64, i int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, uint64(i)))
}

// simTick is how often simulate records a burst of samples.
const simTick = 20 * time.Millisecond

// simulate records rate samples per second from every node to every
// destination it calls, until ctx is done. Latencies are drawn from a
// seeded generator per node; they are recorded at once with the node's
// clock (the demo does not wait for them), as a client would after the
// response arrived.
func simulate(ctx context.Context, nodes []runtime, dests []destination, c demoConfig, start time.Time, degradeAt time.Duration) {
	rngs := make([]*rand.Rand, len(nodes))
	for i := range rngs {
		rngs[i] = newDemoRand(c.seed, i)
	}
	perTick := c.rate * simTick.Seconds()
	carry := 0.0
	t := time.NewTicker(simTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		carry += perTick
		k := int(carry)
		carry -= float64(k)
		degraded := time.Since(start) >= degradeAt
		for i, n := range nodes {
			for _, d := range dests {
				if !d.calledBy(i, len(nodes)) {
					continue
				}
				p := d.normal
				if degraded && d.degraded != nil {
					p = *d.degraded
				}
				for range k {
					n.Record(d.name, p.draw(rngs[i]))
				}
			}
		}
	}
}

// destWidth pads the DEST column so that it reads left-aligned in a table
// whose other columns are right-aligned.
const destWidth = 10

// printTable writes node 0's view of every destination.
func printTable(w io.Writer, n runtime, dests []destination, elapsed, degradeAt time.Duration) {
	alive, total := countMembers(n.Handler())
	fmt.Fprintf(w, "\n%s  node-0 sees %s members alive\n", elapsed.Truncate(time.Second), membersText(alive, total))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\tLOCAL P99.99\tFLEET P99.99\tPEERS\tFLEET SAMPLES\tSOURCE\tTIMEOUT\t  NOTE\n", destWidth, "DEST")
	for _, d := range dests {
		note := d.note
		if d.degraded != nil {
			if elapsed >= degradeAt {
				note = "DEGRADED since " + degradeAt.String()
			} else {
				note = "healthy; degrades at " + degradeAt.String()
			}
		}
		e, err := n.Estimate(d.name, 0)
		if err != nil {
			fmt.Fprintf(tw, "%-*s\t%v\t\t\t\t\t\t  %s\n", destWidth, d.name, err, note)
			continue
		}
		timeoutText := "-"
		if dec, err := n.Timeout([]string{d.name}, 1); err == nil {
			timeoutText = fmtDuration(dec.Timeout)
			switch {
			case dec.Fallback:
				timeoutText += " (backoff)"
			case dec.Guarded:
				timeoutText += " (local guard)"
			}
		}
		fmt.Fprintf(tw, "%-*s\t%s\t%s\t%d\t%d\t%s\t%s\t  %s\n", destWidth, d.name,
			fmtMillis(e.LocalValueMillis, e.HasLocalValue), fmtMillis(e.FleetValueMillis, e.HasFleetValue),
			e.Peers, e.Samples, e.Source, timeoutText, note)
	}
	tw.Flush()
}

func fmtMillis(v uint64, ok bool) string {
	if !ok {
		return "-"
	}
	return fmtDuration(time.Duration(v) * time.Millisecond)
}

func fmtDuration(d time.Duration) string {
	if d >= 10*time.Second {
		return d.Truncate(100 * time.Millisecond).String()
	}
	return d.String()
}

func membersText(alive, total int) string {
	if total < 0 {
		return "?"
	}
	return fmt.Sprintf("%d/%d", alive, total)
}

// countMembers asks h's GET /v1/members in memory; -1 when it cannot.
func countMembers(h http.Handler) (alive, total int) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/members", nil))
	var members []struct {
		State string `json:"state"`
	}
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &members) != nil {
		return -1, -1
	}
	for _, m := range members {
		if strings.EqualFold(m.State, "alive") {
			alive++
		}
	}
	return alive, len(members)
}
