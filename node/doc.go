// Package node is the one object a storage replica embeds to pick request
// timeouts from the latency its whole fleet observes (docs/design.md, The
// node and HTTP API). It composes the local tracker, the fleet view, the
// cluster member and the timeout rules, and serves them over HTTP and
// Prometheus.
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
// (a timed-out attempt at its timeout, so the tail is not lost). When any
// of several replicas will do, [Node.DoHedged] tries the one with the
// lowest fleet median first and hedges to the next when it has not
// answered by its fleet quantile 1 − Config.HedgeBudget, within a token
// bucket of HedgeBudget of the calls. Callers
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
// [Node.Handler] serves the JSON API (docs/design.md, HTTP API: POST
// /v1/record, GET /v1/estimate, /v1/timeout, /v1/members, /v1/status,
// /v1/history), /healthz, /metrics, /debug/pprof/ and the dashboard at /.
// Errors are {"error": "..."}; unknown paths are 404 and wrong methods 405.
// With a token file, POST endpoints and /debug/pprof/ require
// "Authorization: Bearer <token>". In /v1/members, boot_id is the 64-bit
// boot ID as a string of 16 hex digits (JavaScript numbers would round
// it); its last 8 digits are the member name's suffix. /v1/history keeps
// one point a second for five minutes for up to 100 destinations, which
// are also the only ones with per-destination metrics; a destination
// without points (an unknown one too) answers 200 with none, as
// /v1/estimate answers for any destination.
//
// In /v1/timeout, source is the deciding destination's estimate source
// (what /v1/estimate says for decided_by): fleet or local, and none
// exactly when the exponential fallback decided (fallback true,
// decided_by ""), even if a requested destination has a trusted estimate
// whose timeout is below the fallback's. guarded is true when the local
// guard set the timeout: source stays fleet, but this node's own value,
// more than 20 % above the fleet's, was used. The metric
// atnode_timeout_chosen_seconds{source} uses the same source;
// atnode_timeout_guarded_total counts guarded decisions.
//
// On protocol v2 (which the nodes run once every member up can) a fleet
// view is made of aggregates, not batches: atnode_fleet_destinations
// counts the destinations with either, atnode_fleet_aggregates and
// atnode_fleet_aggregate_destinations the aggregates, and
// atnode_fleet_batches, _members and _peers count v1 batches only.
// atnode_gossip_protocol says which protocol runs, and
// atnode_gossip_records_sent_total, _aggregates_published_total,
// _takeovers_total, _record_pulls_total and the others what v2 did.
//
// The API is hardened against clients that misbehave on purpose. POST
// /v1/record decodes its body as a stream and refuses it
// at the first rule broken, having kept only the samples before it: 1 MiB
// of junk costs one 8 KiB buffer, not a copy of the body. Every POST needs
// Content-Type application/json (415). A request received on a loopback
// address must carry a Host that is a loopback IP or localhost and no
// Origin but its own (403): a web page on the same machine cannot use the
// API, even through a DNS name rebound to 127.0.0.1. A malformed query or
// an unknown parameter is a 400 naming it. These refusals, and 401, are
// answered before the body is read; the connection then closes. The server
// Start runs adds the bounds of [HTTPServerConfig]: a 30 s deadline to read
// a request (a stalled body is cut off), a 30 s deadline to write its
// answer and at most 1024 connections; an embedder serving Handler on its
// own server sets its own.
//
// # Concurrency
//
// Every method is safe for concurrent use. Record costs the tracker's
// sharded record (which also counts it: no shared counter); Estimate and
// Timeout read each destination's estimate from the cache in its tracker
// entry, under that entry's shard lock, and take the fleet view's mutex
// only after the fleet view or the destination's window changed. Start starts one loop (once a
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
