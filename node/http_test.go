package node

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// samplesBody builds a POST /v1/record body of dest with each latency.
func samplesBody(dest string, latencies ...float64) string {
	var b strings.Builder
	b.WriteString(`{"samples":[`)
	for i, l := range latencies {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"dest":%q,"latency_ms":%v}`, dest, l)
	}
	b.WriteString(`]}`)
	return b.String()
}

func post(t *testing.T, n *Node, body string, hdr ...string) {
	t.Helper()
	code, resp := do(t, n.Handler(), http.MethodPost, "/v1/record", body, hdr...)
	require.Equal(t, http.StatusOK, code, "%s", resp)
}

// handDataset records, through POST /v1/record:
//
//	epoch e0:   db 1..100 ms (as k+0.9, truncated to k); cache 10×5 ms; api 10×1000 ms
//	epoch e0+1: db 3×200 ms; new 2×7 ms
//
// and leaves the clock at e0+1 plus 1.5 s. With N = 10 the fleet view at
// e0+1 is epoch e0 (the node's own sealed batch), the local view e0..e0+1.
func handDataset(t *testing.T, hdr ...string) (*Node, *testClock) {
	clk := &testClock{now: epochStart(e0).Add(100 * time.Millisecond)}
	n := newAlone(t, clk, func(c *Config) {
		if len(hdr) > 0 {
			c.HTTPTokenFile = writeToken(t, strings.TrimPrefix(hdr[1], "Bearer "))
		}
	})
	db := make([]float64, 100)
	for i := range db {
		db[i] = float64(i) + 1.9 // fractional latencies truncate
	}
	post(t, n, samplesBody("db", db...), hdr...)
	post(t, n, samplesBody("cache", 5, 5, 5, 5, 5, 5, 5, 5, 5, 5.5), hdr...)
	post(t, n, samplesBody("api", 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000), hdr...)
	clk.Set(epochStart(e0 + 1).Add(1500 * time.Millisecond))
	post(t, n, samplesBody("db", 200, 200, 200.99), hdr...)
	post(t, n, samplesBody("new", 7, 7), hdr...)
	return n, clk
}

func writeToken(t *testing.T, tok string) string {
	return writeFile(t, t.TempDir(), "token", tok+"\n")
}

func TestEstimateFieldByField(t *testing.T) {
	n, _ := handDataset(t)
	h := n.Handler()
	null := any(nil)
	num := func(v any) json.Number { return json.Number(fmt.Sprint(v)) }
	// db: fleet = e0's 1..100, P99.99 rank ceil(99.99) = 100 → 100;
	// local = 1..100 + 3×200, rank ceil(102.9897) = 103 → 200.
	// staleness = now − end of e0 = 1.5 s. Nothing timed out: no censored
	// samples, max_completed_ms is the source view's highest bucket.
	// Every field of every answer is compared: each case gives the fields
	// over those it shares with the others of its source.
	with := func(shared, fields map[string]any) map[string]any {
		m := maps.Clone(shared)
		maps.Copy(m, fields)
		return m
	}
	fleet := map[string]any{"source": "fleet", "peers": num(1), "effective_peers": num(1), "staleness_ms": num(1500),
		"trusted": true, "censored": num(0), "local_censored": num(0), "failing": false}
	none := map[string]any{"source": "none", "value_ms": null, "fleet_value_ms": null, "samples": num(0),
		"peers": num(0), "effective_peers": num(0), "staleness_ms": null, "trusted": false,
		"censored": num(0), "local_censored": num(0), "max_completed_ms": null, "failing": false}
	tests := []struct {
		target string
		want   map[string]any
	}{
		{"/v1/estimate?dest=db", with(fleet, map[string]any{
			"dest": "db", "quantile": num(0.9999), "value_ms": num(100), "fleet_value_ms": num(100),
			"local_value_ms": num(200), "samples": num(100), "local_samples": num(103), "max_completed_ms": num(100),
		})},
		// P50: fleet rank 50 → 50; local rank ceil(51.5) = 52 → 52.
		{"/v1/estimate?dest=db&q=0.5", with(fleet, map[string]any{
			"dest": "db", "quantile": num(0.5), "value_ms": num(50), "fleet_value_ms": num(50),
			"local_value_ms": num(52), "samples": num(100), "local_samples": num(103), "max_completed_ms": num(100),
		})},
		{"/v1/estimate?dest=cache&q=1", with(fleet, map[string]any{
			"dest": "cache", "quantile": num(1), "value_ms": num(5), "fleet_value_ms": num(5),
			"local_value_ms": num(5), "samples": num(10), "local_samples": num(10), "max_completed_ms": num(5),
		})},
		// new: 2 local samples < MinSamples 3, none sealed yet.
		{"/v1/estimate?dest=new", with(none, map[string]any{
			"dest": "new", "quantile": num(0.9999), "local_value_ms": num(7), "local_samples": num(2),
		})},
		{"/v1/estimate?dest=nothing", with(none, map[string]any{
			"dest": "nothing", "quantile": num(0.9999), "local_value_ms": null, "local_samples": num(0),
		})},
	}
	for _, tc := range tests {
		t.Run(tc.target, func(t *testing.T) {
			require.Equal(t, tc.want, getJSON(t, h, tc.target))
		})
	}

	t.Run("Go API equals the JSON", func(t *testing.T) {
		e, err := n.Estimate("db", 0)
		require.NoError(t, err)
		require.Equal(t, 0.9999, e.Quantile)
		require.EqualValues(t, 100, e.ValueMillis)
		require.Equal(t, 1500*time.Millisecond, e.Staleness)
		for _, q := range []float64{-0.1, 1.01, 2} {
			_, err := n.Estimate("db", q)
			require.ErrorIs(t, err, ErrQuantile)
		}
	})
}

func TestTimeoutDecisions(t *testing.T) {
	n, _ := handDataset(t)
	h := n.Handler()
	dec := func(ms int, attempt, need int, by, src string, fb bool) map[string]any {
		return map[string]any{
			"timeout_ms": json.Number(fmt.Sprint(ms)), "attempt": json.Number(fmt.Sprint(attempt)),
			"need": json.Number(fmt.Sprint(need)), "decided_by": by, "source": src, "fallback": fb,
			"guarded": by == "db", // the only destination the guard applies to
			// Nothing here timed out: no destination is failing or capped, no probe is due.
			"reason": map[bool]string{false: "estimate", true: "fallback"}[fb], "failing": []any{}, "probe_ms": nil,
		}
	}
	// db: fleet 100, local 200 > 1.2×100, so the local guard uses 200: 2×200 = 400 ms;
	// source stays db's estimate source, fleet (as GET /v1/estimate says), and
	// guarded says the guard applied.
	// api: fleet = local = 1003 (1000's bucket in 512..1023 is 4 ms wide; its
	// highest equivalent value): 2006 ms from the fleet. cache: 2×5 → the 250 ms floor.
	tests := []struct {
		query string
		want  map[string]any
	}{
		{"dest=db", dec(400, 1, 1, "db", "fleet", false)},
		{"dest=db&attempt=2", dec(800, 2, 1, "db", "fleet", false)},
		{"dest=api", dec(2006, 1, 1, "api", "fleet", false)},
		{"dest=cache", dec(250, 1, 1, "", "none", true)},
		{"dest=nothing&attempt=3", dec(1000, 3, 1, "", "none", true)},
		{"dest=db&dest=cache", dec(400, 1, 2, "db", "fleet", false)},
		{"dest=db&dest=api", dec(2006, 1, 2, "api", "fleet", false)},
		{"dest=db&dest=api&need=1", dec(400, 1, 1, "db", "fleet", false)},
		{"dest=db&dest=cache&need=1", dec(250, 1, 1, "", "none", true)},
		{"dest=db&dest=x1&dest=x2&need=2", dec(250, 1, 2, "", "none", true)},
		{"dest=db&dest=x1&dest=x2&need=3", dec(400, 1, 3, "db", "fleet", false)},
		{"dest=api&dest=api", dec(2006, 1, 2, "api", "fleet", false)},
		{"attempt=50&dest=nothing", dec(60000, 50, 1, "", "none", true)},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			require.Equal(t, tc.want, getJSON(t, h, "/v1/timeout?"+tc.query))
		})
	}

	t.Run("Go API", func(t *testing.T) {
		d, err := n.Timeout([]string{"x", "db"}, 1)
		require.NoError(t, err)
		require.Equal(t, Decision{Timeout: 400 * time.Millisecond, Attempt: 1, Need: 2, DecidedBy: "db",
			Source: tracker.SourceFleet, Guarded: true}, d)
		d, err = n.Timeout([]string{"api"}, 1)
		require.NoError(t, err)
		require.Equal(t, Decision{Timeout: 2006 * time.Millisecond, Attempt: 1, Need: 1, DecidedBy: "api",
			Source: tracker.SourceFleet}, d, "no guard: local = fleet")
		d, err = n.Timeout([]string{"cache"}, 1)
		require.NoError(t, err)
		require.Equal(t, Decision{Timeout: 250 * time.Millisecond, Attempt: 1, Need: 1, Source: tracker.SourceNone, Fallback: true,
			Reason: timeout.ReasonFallback}, d)
		b, err := json.Marshal(Decision{Timeout: time.Second, Attempt: 1, Need: 1, DecidedBy: "db", Source: tracker.SourceFleet, Guarded: true})
		require.NoError(t, err)
		require.JSONEq(t, `{"timeout_ms":1000,"attempt":1,"need":1,"decided_by":"db","source":"fleet","guarded":true,"fallback":false,
			"reason":"estimate","failing":[],"probe_ms":null}`, string(b))
		b, err = json.Marshal(Decision{Timeout: 250 * time.Millisecond, Attempt: 1, Need: 2, Fallback: true,
			Reason: timeout.ReasonFailing, Failing: []string{"a", "b"}, ProbeTimeout: 1500 * time.Millisecond})
		require.NoError(t, err)
		require.JSONEq(t, `{"timeout_ms":250,"attempt":1,"need":2,"decided_by":"","source":"none","guarded":false,"fallback":true,
			"reason":"failing","failing":["a","b"],"probe_ms":1500}`, string(b))
		_, err = n.Timeout(nil, 1)
		require.ErrorIs(t, err, ErrNoDestinations)
		_, err = n.Timeout([]string{"db"}, 0)
		require.ErrorIs(t, err, ErrAttempt)
		_, err = n.TimeoutQuorum([]string{"db"}, 2, 1)
		require.ErrorIs(t, err, ErrNeed)
		_, err = n.TimeoutQuorum([]string{"db"}, 0, 1)
		require.ErrorIs(t, err, ErrNeed)
		many := make([]string, 100) // the Go API has no 64 limit
		for i := range many {
			many[i] = fmt.Sprint("d", i)
		}
		many[77] = "api"
		d, err = n.Timeout(many, 1)
		require.NoError(t, err)
		require.Equal(t, "api", d.DecidedBy)
	})
}

// TestTimeoutSourceIsEstimateSource checks docs/design.md, HTTP API and The
// node: the source of GET /v1/timeout is the deciding destination's estimate source, the
// source GET /v1/estimate reports, whether or not the local guard applied.
func TestTimeoutSourceIsEstimateSource(t *testing.T) {
	n, _ := handDataset(t)
	// "solo" has only local samples: source local without any guard.
	post(t, n, samplesBody("solo", 300, 300, 300))
	h := n.Handler()
	for _, dest := range []string{"db", "api", "solo"} {
		est := getJSON(t, h, "/v1/estimate?dest="+dest).(map[string]any)
		to := getJSON(t, h, "/v1/timeout?dest="+dest).(map[string]any)
		require.Equal(t, dest, to["decided_by"], dest)
		require.Equal(t, est["source"], to["source"], dest)
	}
	require.Equal(t, "fleet", getJSON(t, h, "/v1/timeout?dest=db").(map[string]any)["source"], "db is guarded, its estimate is the fleet's")
	require.Equal(t, "local", getJSON(t, h, "/v1/timeout?dest=solo").(map[string]any)["source"])
}

// TestDecisionValueMatchesTracker checks that the decision input decide
// reads from an estimate (Estimate.DecisionValue) is the fleet's value as a
// timeout.Estimator (Fleet.QuantileMillis), guarded exactly when the
// estimate says fleet and the decision local.
func TestDecisionValueMatchesTracker(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[string]int{}
	for round := range 20 {
		clk := &testClock{now: epochStart(e0 + int64(round)).Add(100 * time.Millisecond)}
		n := newAlone(t, clk, func(c *Config) { c.Tracker.MinSamples = uint32(1 + rng.IntN(5)) })
		dests := []string{"a", "b", "c", "d", "e"}
		// Two epochs: the first sealed into the fleet view, the second
		// local only, with each destination's latencies scaled at random
		// so that the local view is sometimes well above the fleet's.
		for epoch := range 2 {
			clk.Set(epochStart(e0 + int64(round+epoch)).Add(100 * time.Millisecond))
			for _, d := range dests {
				base := 1 + rng.IntN(500)
				for range rng.IntN(8) {
					n.Record(d, time.Duration(base+rng.IntN(base))*time.Millisecond)
				}
			}
		}
		now := clk.Now()
		n.poll(now)
		for _, d := range dests {
			ms, ok := n.fleet.QuantileMillis(d, n.cfg.Timeout.Quantile, now)
			e, err := n.fleet.Estimate(d, n.cfg.Timeout.Quantile, now)
			require.NoError(t, err)
			vms, vok := e.DecisionValue()
			guarded := e.Decision.Guarded
			require.Equal(t, ok, vok, "%s", d)
			require.Equal(t, ms, vms, "%s", d)
			require.Equal(t, e.DecisionSource() == tracker.SourceLocal && e.Source == tracker.SourceFleet, guarded, "%s", d)
			seen[fmt.Sprint(e.Source, " guarded=", guarded)]++
		}
	}
	for _, c := range []string{"fleet guarded=true", "fleet guarded=false", "none guarded=false"} {
		require.NotZero(t, seen[c], "no case %q in %v", c, seen)
	}
}

func TestBadRequests(t *testing.T) {
	n, _ := handDataset(t)
	h := n.Handler()
	long := strings.Repeat("x", 257)
	many := strings.Repeat("dest=a&", 65)
	tests := []struct {
		method, target, body string
		code                 int
		err                  string
	}{
		{"GET", "/v1/estimate", "", 400, "missing query parameter dest"},
		{"GET", "/v1/estimate?dest=", "", 400, "dest must not be empty"},
		{"GET", "/v1/estimate?dest=" + long, "", 400, "dest is 257 bytes, more than 256"},
		{"GET", "/v1/estimate?dest=%ff", "", 400, "dest is not valid UTF-8"},
		{"GET", "/v1/estimate?dest=a&dest=b", "", 400, "want one dest, got 2"},
		{"GET", "/v1/estimate?dest=a&q=0", "", 400, "q must be in (0, 1], got 0"},
		{"GET", "/v1/estimate?dest=a&q=1.5", "", 400, "q must be in (0, 1], got 1.5"},
		{"GET", "/v1/estimate?dest=a&q=-1", "", 400, "q must be in (0, 1]"},
		{"GET", "/v1/estimate?dest=a&q=NaN", "", 400, `q must be a number in (0, 1], got "NaN"`},
		{"GET", "/v1/estimate?dest=a&q=x", "", 400, `got "x"`},
		{"GET", "/v1/estimate?dest=a&q=0.5&q=0.6", "", 400, "want one q, got 2"},
		{"GET", "/v1/timeout", "", 400, "want 1..64 dest parameters, got 0"},
		{"GET", "/v1/timeout?" + many, "", 400, "want 1..64 dest parameters, got 65"},
		{"GET", "/v1/timeout?dest=a&dest=", "", 400, "dest[1] must not be empty"},
		{"GET", "/v1/timeout?dest=" + long, "", 400, "dest[0] is 257 bytes, more than 256"},
		{"GET", "/v1/timeout?dest=a&attempt=0", "", 400, "attempt must be >= 1, got 0"},
		{"GET", "/v1/timeout?dest=a&attempt=-3", "", 400, "attempt must be >= 1, got -3"},
		{"GET", "/v1/timeout?dest=a&attempt=1.5", "", 400, `attempt must be a whole number, got "1.5"`},
		{"GET", "/v1/timeout?dest=a&attempt=1&attempt=2", "", 400, "want one attempt, got 2"},
		{"GET", "/v1/timeout?dest=a&need=2", "", 400, "need must be in 1..1, got 2"},
		{"GET", "/v1/timeout?dest=a&dest=b&need=0", "", 400, "need must be in 1..2, got 0"},
		{"GET", "/v1/timeout?dest=a&need=x", "", 400, `need must be a whole number, got "x"`},
		{"GET", "/v1/history", "", 400, "missing query parameter dest"},
		// Malformed and unknown parameters are refused, never shortened
		// or ignored (issues 20 and 25).
		{"GET", "/v1/timeout?dest=a&dest=%zz", "", 400, `malformed query: invalid URL escape "%zz"`},
		{"GET", "/v1/estimate?dest=a;b", "", 400, "malformed query: invalid semicolon separator in query"},
		{"GET", "/v1/timeout?" + strings.Repeat("dest=a&", 10_000) + "dest=a", "", 400, "query has more than 10000 parameters"},
		{"GET", "/v1/status?" + strings.Repeat("&", 10_000), "", 400, "query has more than 10000 parameters"},
		{"GET", "/v1/estimate?dest=a&quantile=0.5", "", 400, `unknown query parameter "quantile": /v1/estimate takes dest, q`},
		{"GET", "/v1/timeout?dest=a&attempts=2&Need=1", "", 400, `unknown query parameters "Need", "attempts": /v1/timeout takes dest, attempt, need`},
		{"GET", "/v1/history?dest=a&q=0.5", "", 400, `unknown query parameter "q": /v1/history takes dest`},
		{"GET", "/v1/status?verbose", "", 400, `unknown query parameter "verbose": /v1/status takes none`},
		{"GET", "/v1/members?a=1&b=2&c=3&d=4&e=5&f=6&g=7", "", 400, `unknown query parameters "a", "b", "c", "d", "e" and 2 more`},
		{"GET", "/healthz?x=1", "", 400, `unknown query parameter "x"`},
		{"POST", "/v1/record?dest=a", `{"samples":[{"dest":"a","latency_ms":1}]}`, 400, `unknown query parameter "dest": /v1/record takes none`},
		{"GET", "/v1/history?dest=a&dest=b", "", 400, "want one dest, got 2"},
		{"GET", "/v1/timeout?dest=a&need=1&need=1", "", 400, "want one need, got 2"},
		{"POST", "/v1/record", `{`, 400, "not a JSON object"},
		{"POST", "/v1/record", `{"samples":[{"dest":"a","latency_ms":1},{"dest":"a","latency_ms":-1}]}`, 400, `samples[1]: "latency_ms" must be a finite number >= 0, got -1`},
		{"POST", "/v1/record", `{"samples":[{"dest":"","latency_ms":1}]}`, 400, `samples[0]: "dest" must not be empty`},
		{"POST", "/v1/record", `{"samples":[]}`, 400, "want 1..10000 samples, got 0"},
		{"POST", "/v1/record", `{"samples":[{"latency_ms":1}]}`, 400, `samples[0]: missing field "dest"`},
		{"POST", "/v1/record", `{"samples":[{"dest":"a","latency_ms":"1"}]}`, 400, `samples[0]: "latency_ms" must be a number`},
		{"POST", "/v1/record", `{"samples":[{"dest":"` + long + `","latency_ms":1}]}`, 400, `samples[0]: "dest" is 257 bytes`},
		{"POST", "/v1/record", `{"samples":[{"dest":"a","latency_ms":1}]}` + strings.Repeat(" ", 1<<20), 413, "body exceeds 1 MiB"},
		{"POST", "/v1/record", `{"samples":[{"dest":"a","latency_ms":1}],"x":"` + strings.Repeat("y", 1<<20) + `"}`, 413, "body exceeds 1 MiB"},
		{"POST", "/v1/record", `{"samples":[{}` + strings.Repeat(",{}", 400_000) + `]}`, 413, "body exceeds 1 MiB"}, // declared: refused unread
		{"GET", "/v1/nope", "", 404, "no such path: /v1/nope"},
		{"GET", "/static/nope.js", "", 404, "no such path: /static/nope.js"},
		{"GET", "/debug/pprofx", "", 404, "no such path"},
		{"GET", "/v1/record", "", 405, "method GET not allowed on /v1/record; allowed: POST"},
		{"POST", "/v1/estimate?dest=a", "", 405, "allowed: GET, HEAD"},
		{"DELETE", "/v1/status", "", 405, "method DELETE not allowed"},
		{"PUT", "/", "", 405, "not allowed on /"},
		{"POST", "/metrics", "", 405, "not allowed on /metrics"},
		{"POST", "/healthz", "", 405, "not allowed"},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.target[:min(len(tc.target), 60)], func(t *testing.T) {
			code, body := do(t, h, tc.method, tc.target, tc.body)
			requireError(t, code, body, tc.code, tc.err)
		})
	}

	t.Run("nothing of a bad request is recorded", func(t *testing.T) {
		before := getJSON(t, h, "/v1/estimate?dest=a")
		code, body := do(t, h, "POST", "/v1/record", `{"samples":[{"dest":"a","latency_ms":1},{"dest":"a","latency_ms":2},{"dest":"a","latency_ms":"x"}]}`, "")
		requireError(t, code, body, 400, "samples[2]")
		require.Equal(t, before, getJSON(t, h, "/v1/estimate?dest=a"))
		require.Equal(t, json.Number("0"), before.(map[string]any)["local_samples"])
	})
	t.Run("405 carries Allow", func(t *testing.T) {
		r := httptestRecorder(h, "PUT", "/v1/record")
		require.Equal(t, "POST", r.Header().Get("Allow"))
		r = httptestRecorder(h, "PUT", "/v1/status")
		require.Equal(t, "GET, HEAD", r.Header().Get("Allow"))
	})
}

func TestRecordEndpoint(t *testing.T) {
	clk := &testClock{now: epochStart(e0)}
	n := newAlone(t, clk, nil)
	h := n.Handler()
	code, body := do(t, h, "POST", "/v1/record", `{"samples":[{"dest":"a","latency_ms":12.9,"x":1},{"dest":"a","latency_ms":12},{"dest":"b","latency_ms":1e300},{"dest":"a","latency_ms":0}]}`, "")
	require.Equal(t, 200, code, "%s", body)
	require.JSONEq(t, `{"recorded":4}`, string(body))
	e, err := n.Estimate("a", 1)
	require.NoError(t, err)
	require.EqualValues(t, 12, e.LocalValueMillis) // 12.9 truncated
	require.EqualValues(t, 3, e.LocalSamples)
	e, err = n.Estimate("a", 0.01)
	require.NoError(t, err)
	require.EqualValues(t, 0, e.LocalValueMillis)
	e, err = n.Estimate("b", 1)
	require.NoError(t, err)
	require.EqualValues(t, 60159, e.LocalValueMillis) // clamped to 60 s, highest equivalent
	require.EqualValues(t, 1, e.LocalSamples)

	t.Run("U+FFFD is a character like any other", func(t *testing.T) {
		// Raw and escaped U+FFFD name the same destination, which the Go
		// API records too; lone surrogates are refused and record nothing.
		code, body := do(t, h, "POST", "/v1/record", `{"samples":[{"dest":"db-`+"\uFFFD"+`","latency_ms":5},{"dest":"db-\ufffd","latency_ms":5}]}`, "")
		require.Equal(t, 200, code, "%s", body)
		n.Record("db-\uFFFD", 5*time.Millisecond)
		e, err := n.Estimate("db-\uFFFD", 1)
		require.NoError(t, err)
		require.EqualValues(t, 3, e.LocalSamples)

		code, body = do(t, h, "POST", "/v1/record", `{"samples":[{"dest":"db-\ufffd","latency_ms":5},{"dest":"db-\ud800","latency_ms":5}]}`, "")
		requireError(t, code, body, 400, `samples[1]: "dest" is not valid UTF-8`)
		code, body = do(t, h, "POST", "/v1/record", "{\"samples\":[{\"dest\":\"db-\xff\",\"latency_ms\":5}]}", "")
		requireError(t, code, body, 400, `samples[0]: "dest" is not valid UTF-8`)
		e, err = n.Estimate("db-\uFFFD", 1)
		require.NoError(t, err)
		require.EqualValues(t, 3, e.LocalSamples, "nothing of a refused request is recorded")
	})
}

func httptestRecorder(h http.Handler, method, target string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, target, nil))
	return w
}

// gatheredNames returns the names of the metric families g gathers.
func gatheredNames(t *testing.T, g prometheus.Gatherer) []string {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	var out []string
	for _, mf := range mfs {
		out = append(out, mf.GetName())
	}
	return out
}

// newPromRegistry is a registry holding one metric of the embedder's.
func newPromRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "extra_metric", Help: "The embedder's."})
	g.Set(1)
	reg.MustRegister(g)
	return reg
}

func TestAuth(t *testing.T) {
	const tok = "s3cret-token"
	auth := []string{"Authorization", "Bearer " + tok}
	n, _ := handDataset(t, auth...) // every record needed the token
	h := n.Handler()
	body := samplesBody("db", 1)
	for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", tok}, {"Authorization", "Basic " + tok}} {
		code, resp := do(t, h, "POST", "/v1/record", body, hdr...)
		requireError(t, code, resp, 401, "missing or wrong bearer token")
		code, resp = do(t, h, "GET", "/debug/pprof/", "", hdr...)
		requireError(t, code, resp, 401, "bearer token")
		code, resp = do(t, h, "GET", "/debug/pprof/cmdline", "", hdr...)
		requireError(t, code, resp, 401, "bearer token")
	}
	code, _ := do(t, h, "GET", "/debug/pprof/", "", auth...)
	require.Equal(t, 200, code)
	code, _ = do(t, h, "GET", "/debug/pprof/goroutine?debug=1", "", auth...)
	require.Equal(t, 200, code)
	// The auth-scheme is case-insensitive (RFC 9110), the token is not.
	code, resp := do(t, h, "POST", "/v1/record", body, "Authorization", "bearer "+tok)
	require.Equal(t, 200, code, "%s", resp)
	code, _ = do(t, h, "GET", "/debug/pprof/", "", "Authorization", "BEARER "+tok)
	require.Equal(t, 200, code)
	code, resp = do(t, h, "POST", "/v1/record", body, "Authorization", "bearer "+strings.ToUpper(tok))
	requireError(t, code, resp, 401, "missing or wrong bearer token")
	// The method is checked before the token.
	code, resp = do(t, h, "GET", "/v1/record", "")
	requireError(t, code, resp, 405, "allowed: POST")
	// Read-only GETs stay open.
	for _, p := range []string{"/v1/estimate?dest=db", "/v1/timeout?dest=db", "/v1/members", "/v1/status", "/v1/history?dest=db", "/metrics", "/"} {
		code, resp := do(t, h, "GET", p, "")
		require.Equal(t, 200, code, "%s: %s", p, resp)
	}

	t.Run("token file", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.DisableGossip, cfg.HTTP = true, ""
		cfg.HTTPTokenFile = writeToken(t, "  \n")
		_, err := New(cfg, nil, nil)
		require.ErrorContains(t, err, "is empty")
		cfg.HTTPTokenFile = filepath.Join(t.TempDir(), "missing")
		_, err = New(cfg, nil, nil)
		require.ErrorContains(t, err, "-http-token-file")
	})
}

func TestMembersStatusHistory(t *testing.T) {
	n, clk := handDataset(t)
	h := n.Handler()
	boot := fmt.Sprintf("%016x", n.BootID())
	require.Regexp(t, regexp.MustCompile(`^n0-[0-9a-f]{8}$`), n.MemberName())
	require.Equal(t, n.MemberName()[3:], boot[8:])

	require.Equal(t, []any{map[string]any{
		"name": "n0", "member": n.MemberName(), "addr": "", "state": "alive", "boot_id": boot,
	}}, getJSON(t, h, "/v1/members"))

	// With gossip off the counters have the shape a cluster reports before
	// it has gossiped: every map empty, the histogram's bounds, zero counts.
	var bounds, counts []any
	for _, b := range cluster.NewGossipStats().SealToReceive.Bounds {
		bounds = append(bounds, json.Number(strconv.FormatFloat(b, 'g', -1, 64)))
		counts = append(counts, json.Number("0"))
	}
	counts = append(counts, json.Number("0"))
	zeroGossip := map[string]any{
		"bytes_in": json.Number("0"), "bytes_out": json.Number("0"),
		"bytes_in_by_type": map[string]any{}, "bytes_out_by_type": map[string]any{}, "queue_discards": json.Number("0"),
		"messages_in": map[string]any{}, "messages_out": map[string]any{},
		"batches_in": json.Number("0"), "batches_out": json.Number("0"),
		"outcomes": map[string]any{}, "rejected": map[string]any{},
		"queue_drops": json.Number("0"), "send_drops": json.Number("0"), "repairs": json.Number("0"), "send_errors": json.Number("0"), "seals": json.Number("0"), "seal_errors": json.Number("0"),
		"backed_off":      json.Number("0"),
		"seal_to_receive": map[string]any{"bounds": bounds, "counts": counts, "sum": json.Number("0"), "count": json.Number("0")},
	}
	require.Equal(t, map[string]any{
		"node": "n0", "member": n.MemberName(), "boot_id": boot, "gossip_addr": "", "http_addr": "",
		"window_ms": json.Number("60000"), "sub_window_ms": json.Number("6000"), "quantile": json.Number("0.9999"),
		"destinations":  []any{"api", "cache", "db", "new"},
		"members_alive": json.Number("1"), "min_peers": json.Number("1"),
		"gossip": zeroGossip, "warnings": []any{},
	}, getJSON(t, h, "/v1/status"))

	// Before the loop samples, a known destination has no points.
	require.Equal(t, map[string]any{"dest": "db", "quantile": json.Number("0.9999"), "tracked": false, "points": []any{}},
		getJSON(t, h, "/v1/history?dest=db"))
	now := clk.Now()
	n.step(now)
	n.step(now) // at most one point per second
	clk.Set(now.Add(time.Second))
	n.step(clk.Now())
	hdb := getJSON(t, h, "/v1/history?dest=db").(map[string]any)
	require.Equal(t, true, hdb["tracked"])
	got := hdb["points"].([]any)
	require.Len(t, got, 2)
	require.Equal(t, map[string]any{
		"t_ms": json.Number(fmt.Sprint(now.UnixMilli())), "local_ms": json.Number("200"), "fleet_ms": json.Number("100"),
		"timeout_ms": json.Number("400"), "peers": json.Number("1"), "samples": json.Number("100"),
		"local_samples": json.Number("103"), "source": "fleet", "guarded": true, // 400 = 2 × the local 200
	}, got[0])
	got = getJSON(t, h, "/v1/history?dest=new").(map[string]any)["points"].([]any)
	require.Equal(t, map[string]any{
		"t_ms": json.Number(fmt.Sprint(now.UnixMilli())), "local_ms": json.Number("7"), "fleet_ms": nil,
		"timeout_ms": json.Number("250"), "peers": json.Number("0"), "samples": json.Number("0"),
		"local_samples": json.Number("2"), "source": "none", "guarded": false,
	}, got[0])

	// Once the window has passed and the fleet has dropped the batch (older
	// than E−N−1), every destination is gone, and so are histories.
	clk.Set(now.Add(75 * time.Second))
	n.step(clk.Now())
	require.Equal(t, []any{}, getJSON(t, h, "/v1/status").(map[string]any)["destinations"])
	// An unknown destination has a history without points, as it has an
	// estimate without values: 200, not 404 (issue 25).
	require.Equal(t, map[string]any{"dest": "db", "quantile": json.Number("0.9999"), "tracked": false, "points": []any{}},
		getJSON(t, h, "/v1/history?dest=db"))
	require.Equal(t, map[string]any{"dest": "nosuch", "quantile": json.Number("0.9999"), "tracked": false, "points": []any{}},
		getJSON(t, h, "/v1/history?dest=nosuch"))
}

func TestHistoryRingAndCap(t *testing.T) {
	clk := &testClock{now: epochStart(e0)}
	n := newAlone(t, clk, nil)
	for i := range maxTrackedDests + 20 {
		n.Record(fmt.Sprintf("d%03d", i), time.Millisecond)
	}
	start := clk.Now()
	for s := range historyPoints + 5 {
		clk.Set(start.Add(time.Duration(s) * time.Second))
		n.Record("d000", time.Millisecond) // keep d000 in the window
		n.step(clk.Now())
	}
	require.Len(t, n.hist.tracked(), 1) // the others left the 60 s window
	pts, ok := n.hist.get("d000")
	require.True(t, ok)
	require.Len(t, pts, historyPoints)
	require.Equal(t, start.Add(5*time.Second).UnixMilli(), pts[0].TMs) // oldest overwritten first
	require.Equal(t, start.Add((historyPoints+4)*time.Second).UnixMilli(), pts[len(pts)-1].TMs)

	clk.Set(start)
	n2 := newAlone(t, clk, nil)
	for i := range maxTrackedDests + 20 {
		n2.Record(fmt.Sprintf("d%03d", i), time.Millisecond)
	}
	n2.step(clk.Now())
	require.Len(t, n2.hist.tracked(), maxTrackedDests)
	st := getJSON(t, n2.Handler(), "/v1/status").(map[string]any)
	require.Len(t, st["destinations"], maxTrackedDests+20)
	// Untracked but known: 200 with no points.
	var untracked string
	for i := range maxTrackedDests + 20 {
		if d := fmt.Sprintf("d%03d", i); !contains(n2.hist.tracked(), d) {
			untracked = d
			break
		}
	}
	hu := getJSON(t, n2.Handler(), "/v1/history?dest="+untracked).(map[string]any)
	require.Equal(t, []any{}, hu["points"])
	require.Equal(t, false, hu["tracked"], "beyond the cap, and said so")
	require.Equal(t, true, getJSON(t, n2.Handler(), "/v1/history?dest="+n2.hist.tracked()[0]).(map[string]any)["tracked"])
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestHealthzAndDashboard(t *testing.T) {
	n := newAlone(t, nil, nil)
	h := n.Handler()
	code, body := do(t, h, "GET", "/healthz", "")
	requireError(t, code, body, 503, "not serving")
	require.NoError(t, n.Start(t.Context()))
	require.Equal(t, map[string]any{"status": "ok"}, getJSON(t, h, "/healthz"))
	code, body = do(t, h, "GET", "/", "")
	require.Equal(t, 200, code)
	require.Contains(t, string(body), "<html")
	code, _ = do(t, h, "HEAD", "/v1/status", "")
	require.Equal(t, 200, code)
	// Close holds the lifecycle lock while requests in flight finish: no
	// handler may wait for it.
	n.life.Lock()
	for _, p := range []string{"/v1/status", "/v1/members", "/healthz", "/metrics"} {
		code, _ = do(t, h, "GET", p, "")
		require.Equal(t, 200, code, p)
	}
	n.life.Unlock()
	require.NoError(t, n.Close())
	require.NoError(t, n.Close()) // idempotent
	code, body = do(t, h, "GET", "/healthz", "")
	requireError(t, code, body, 503, "not serving")
	require.ErrorIs(t, n.Start(t.Context()), ErrClosed)
}

func TestMetrics(t *testing.T) {
	n, _ := handDataset(t)
	n.Record("", time.Millisecond) // rejected
	n.Record(strings.Repeat("x", 300), time.Millisecond)
	_, err := n.Timeout([]string{"db"}, 1)
	require.NoError(t, err)
	_, err = n.Timeout([]string{"cache"}, 1)
	require.NoError(t, err)
	n.step(n.clock())

	text := requireMetrics(t, n,
		`atnode_records_total 125`,
		`atnode_records_rejected_total 2`,
		`atnode_destination_fleet_quantile_seconds{dest="db"} 0.1`,
		`atnode_destination_local_quantile_seconds{dest="db"} 0.2`,
		`atnode_destination_timeout_seconds{dest="db"} 0.4`,
		`atnode_destination_samples{dest="db"} 100`,
		`atnode_destination_local_samples{dest="db"} 103`,
		`atnode_destination_peers{dest="db"} 1`,
		`atnode_destination_effective_peers{dest="db"} 1`,
		`atnode_destinations 4`,
		// db is guarded: its source is still its estimate's, fleet, as in
		// GET /v1/timeout (issue 25); the guard is counted apart.
		`atnode_timeout_chosen_seconds_count{source="fleet"} 1`,
		`atnode_timeout_chosen_seconds_count{source="local"} 0`,
		`atnode_timeout_chosen_seconds_count{source="none"} 1`,
		`atnode_timeout_fallbacks_total 1`,
		`atnode_timeout_guarded_total 1`,
		`atnode_http_connections 0`,
		`atnode_http_connections_refused_total 0`,
		`atnode_fleet_inserts_total{outcome="new"} 1`,
		`atnode_fleet_batches 1`,
		`atnode_fleet_exclusions 0`,
		`atnode_fleet_refused_destinations_total 0`,
		`atnode_fleet_evicted_exclusions_total 0`,
		`atnode_cluster_members{state="alive"} 1`,
		`atnode_gossip_queue_discards_total 0`,
		`atnode_gossip_backed_off_members 0`,
		`atnode_warnings{kind="config_mismatch"} 0`,
		`atnode_warnings{kind="name_conflict"} 0`,
		`atnode_warnings{kind="clock_skew"} 0`,
		`atnode_warnings_raised_total{kind="clock_skew"} 0`,
		`atnode_destinations_dropped_total{where="tracker"} 0`,
		`atnode_destinations_dropped_total{where="seal"} 0`,
		`atnode_destinations_dropped_total{where="fleet"} 0`,
	)
	require.NotContains(t, text, `atnode_destination_fleet_quantile_seconds{dest="new"}`) // no fleet samples

	t.Run("registerer", func(t *testing.T) {
		reg := newPromRegistry()
		cfg := DefaultConfig()
		cfg.DisableGossip, cfg.HTTP = true, ""
		a, err := New(cfg, nil, reg)
		require.NoError(t, err)
		defer a.Close()
		_, err = New(cfg, nil, reg) // same names twice on one registry
		require.ErrorContains(t, err, "registering metrics")
		code, body := do(t, a.Handler(), "GET", "/metrics", "")
		require.Equal(t, 200, code)
		require.Contains(t, string(body), "atnode_records_total 0\n")
		require.Contains(t, string(body), "extra_metric 1\n") // served from the given registry

		// A clash in the middle of registration leaves reg as it was:
		// the collectors registered before it are unregistered again.
		reg = newPromRegistry()
		reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "atnode_do_calls_total", Help: "The embedder's, by chance."}))
		before := gatheredNames(t, reg)
		require.Equal(t, []string{"atnode_do_calls_total", "extra_metric"}, before)
		for _, gossip := range []bool{false, true} {
			cfg := DefaultConfig()
			cfg.DisableGossip, cfg.HTTP, cfg.Cluster.Bind = !gossip, "", "127.0.0.1:0"
			_, err := New(cfg, nil, reg)
			require.ErrorContains(t, err, "registering metrics")
			require.ErrorContains(t, err, "atnode_do_calls_total")
			require.Equal(t, before, gatheredNames(t, reg), "gossip %v", gossip)
		}
	})
}
