// Package node is the one object a storage replica embeds to pick request
// timeouts from the latency its whole fleet observes (DESIGN.md sections 5
// and 7). It composes the local tracker, the fleet view, the cluster
// member and the timeout rules, and serves them over HTTP and Prometheus.
// It holds no global state: several nodes can live in one process.
//
// # A guided tour
//
// Build a [Config] (start from [DefaultConfig]; atnode fills it from flags
// and a YAML file), then:
//
//	n, err := node.New(cfg, logger, registry) // nil logger discards, nil registry is private
//	err = n.Start(ctx)                        // join the cluster, bind HTTP, start the loop
//	defer n.Close()                           // leave, stop serving, wait for goroutines
//
// On the request path, wrap each call to a destination in [Node.Do]:
//
//	err := n.Do(ctx, "db-1", attempt, func(ctx context.Context) error {
//		return call(ctx) // ends when the adaptive timeout expires
//	})
//	if errors.Is(err, node.ErrTimeout) { /* our timeout: retry with attempt+1 */ }
//
// Do picks the timeout, runs the call under it, and records the latency
// (a timed-out attempt at its timeout, so the tail is not lost). Callers
// that manage their own contexts use [Node.Timeout] or
// [Node.TimeoutQuorum] for the timeout and [Node.Record] or
// [Node.RecordSince] for the latency. [Node.Estimate] answers what backs a
// destination's quantile: the fleet's view if enough samples and peers
// back it, else the local view, else nothing (and timeouts fall back to
// exponential backoff).
//
// # How the views are kept
//
// Every latency goes into the local tracker (a sliding window of
// sub-windows on a wall-clock epoch grid shared by all nodes). When an
// epoch ends, its sealed sub-window becomes a batch in the fleet view,
// which sums the batches of every live member over the last N−1 sealed
// epochs. The sealing and the dissemination of batches belong to package
// cluster's protocol core (cluster.SyncProtocol): with gossip on, the
// cluster drives it and spreads every member's batches; with gossip off,
// the node owns one with no members, so its fleet view holds its own
// batches only. A node that is not gossiping (never started, gossip off, or
// closed) polls the core from its loop and before every query, so it
// seals on time and answers lazily (see gossip.go).
//
// # HTTP
//
// [Node.Handler] serves the JSON API of DESIGN.md section 7 (POST
// /v1/record, GET /v1/estimate, /v1/timeout, /v1/members, /v1/status,
// /v1/history), /healthz, /metrics, /debug/pprof/ and the dashboard at /.
// Errors are {"error": "..."}; unknown paths are 404 and wrong methods 405.
// With a token file, POST endpoints and /debug/pprof/ require
// "Authorization: Bearer <token>". In /v1/members, boot_id is the 64-bit
// boot ID as a string of 16 hex digits (JavaScript numbers would round
// it); its last 8 digits are the member name's suffix. /v1/history keeps
// one point a second for five minutes for up to 100 destinations, which
// are also the only ones with per-destination metrics.
//
// # Concurrency
//
// Every method is safe for concurrent use. Record costs the tracker's
// sharded record plus a lock-free map load; Estimate and Timeout take the
// fleet view's mutex once per destination. Start starts one loop (once a
// second: poll the protocol, slide the fleet view, sample the history),
// the HTTP server and the cluster's goroutines; Close stops them all and
// waits.
//
// # How time enters
//
// The node owns the clock: Config.Clock (default time.Now) gives every
// timestamp it records or queries at, and so the epoch; the pure packages
// below it take time as an argument. Do measures fn with the same clock,
// and its timeout is a context deadline, so tests run Do under
// testing/synctest. The loop ticks on real time (once a second) and reads
// Config.Clock for what it does.
package node
