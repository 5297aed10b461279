// Package dashboard serves atnode's web dashboard: one page that plots, per
// destination over time, the local and fleet quantiles and the chosen
// timeout on a latency axis (log scale, every tick with its unit) and the
// peer count on its own axis, with a members table and a header of node
// facts and gossip counters. Each chart's legend shows the latest values
// until the cursor is over a chart, then the values under it; the timeout
// is drawn last, so it stays visible where it meets the peers line.
//
// [Handler] serves the page at "/" and its assets under [AssetPrefix]. The
// page, its script and style, and the charting library (uPlot, vendored
// from the npm registry under static/vendor with its version and update
// steps in static/vendor/README.md) are embedded with embed, so the
// dashboard works offline and the page makes no request to anything but
// the node that served it. It reads four endpoints of the node's JSON API
// (package node documents them), relative to the page:
//
//	GET v1/status              node, addresses, window, destinations, gossip counters, warnings
//	GET v1/members             the members table
//	GET v1/history?dest=D      the points plotted for destination D
//	GET v1/timeout?dest=A&...  which destinations are failing (up to 64 per request)
//
// and refreshes every 2 s. The "warnings" of /v1/status (a list of
// {"kind", "message"}: config_mismatch, name_conflict, clock_skew) show as
// a banner above the members table and as a count in the header. A
// destination that /v1/timeout lists in "failing" gets a red "failing"
// badge on its card and its timeout is labelled "timeout: fallback
// (failing)"; one without an estimate, "timeout: fallback"; one whose last
// history point is "guarded" (this node's own quantile, above the fleet's,
// decided), "timeout: local guard". The page
// sets window.__dashboard to its live state (updates, errors, failing
// destinations, warnings, the uPlot instances per destination) for tests.
//
// Concurrency: the handler is built once by Handler and never changes; it
// is safe for concurrent use.
//
// Time: the package reads no clock. Timestamps come from the API's points;
// the browser's clock only says how long ago the page last refreshed.
package dashboard
