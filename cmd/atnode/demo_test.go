package main

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// TestDemoRuns runs the demo in process for a few seconds: it prints the
// dashboard URL, serves / and /v1/status while it runs, prints the table
// (with fleet estimates once gossip carries a sealed sub-window) and exits
// 0 when -duration ends.
func TestDemoRuns(t *testing.T) {
	var stdout, stderr testutil.SyncBuffer
	a := app{stdout: &stdout, stderr: &stderr, newNode: newRuntime}
	exit := make(chan int, 1)
	go func() {
		exit <- a.run(t.Context(), []string{"demo", "-nodes", "3", "-http", "127.0.0.1:0", "-duration", "6s", "-refresh", "500ms"})
	}()

	urlRE := regexp.MustCompile(`dashboard: (http://127\.0\.0\.1:\d+/)\n`)
	var url string
	require.Eventually(t, func() bool {
		m := urlRE.FindStringSubmatch(stdout.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, 20*time.Second, 10*time.Millisecond, "no dashboard URL; stderr: %s", stderr.String())

	client := &http.Client{Timeout: 5 * time.Second}
	bodies := map[string][]byte{}
	for _, path := range []string{"", "v1/status"} {
		resp, err := client.Get(url + path)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode, "GET /%s: %s", path, body)
		require.NotEmpty(t, body)
		bodies[path] = body
	}
	client.CloseIdleConnections()
	// Node 0 owns the listener: its status reports the address bound (the
	// dashboard's header shows it), not "".
	var status struct {
		Node     string `json:"node"`
		HTTPAddr string `json:"http_addr"`
	}
	require.NoError(t, json.Unmarshal(bodies["v1/status"], &status))
	require.Equal(t, "node-0", status.Node)
	require.Equal(t, "http://"+status.HTTPAddr+"/", url)

	select {
	case code := <-exit:
		require.Equal(t, 0, code, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatal("demo did not stop after -duration")
	}
	out := stdout.String()
	t.Log(out)
	require.Contains(t, out, "DEST")
	require.Contains(t, out, "LOCAL P99.99")
	require.Contains(t, out, "FLEET P99.99")
	for _, d := range demoDestinations(3) {
		require.Contains(t, out, d.name)
	}
	require.Contains(t, out, "atnode demo: 3 nodes gossiping on loopback")
	require.Contains(t, out, "DEGRADED since 3s", "payments degrades at half the duration")
	require.Contains(t, out, "node-0 sees 3/3 members alive")
	// Within the run a sealed sub-window reaches node 0 from all 3 nodes
	// and node 0 trusts the fleet view of a destination every node calls.
	require.Regexp(t, `(?m)^\s*db\s+\S+\s+\S+\s+3\s+\d+\s+fleet\s`, out)
	require.Contains(t, out, "nodes leave the cluster")
}

func TestDemoPortBusy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var stdout, stderr bytes.Buffer
	a := app{stdout: &stdout, stderr: &stderr, newNode: newRuntime}
	code := a.run(t.Context(), []string{"demo", "-http", ln.Addr().String(), "-duration", "1s"})
	require.Equal(t, 1, code, "a runtime failure, not bad usage")
	require.Contains(t, stderr.String(), ln.Addr().String()+" is already in use")
	require.Contains(t, stderr.String(), "-http 127.0.0.1:0")
	require.Empty(t, stdout.String())
}

func TestDemoFlagErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		msg  string
	}{
		{"nodes zero", []string{"-nodes", "0"}, "-nodes: must be in 1..50"},
		{"nodes many", []string{"-nodes", "51"}, "-nodes: must be in 1..50"},
		{"negative duration", []string{"-duration", "-1s"}, "-duration:"},
		{"refresh", []string{"-refresh", "1ms"}, "-refresh:"},
		{"rate", []string{"-rate", "0"}, "-rate:"},
		{"window", []string{"-window", "7s", "-sub-window", "2s"}, "-window:"},
		{"http not loopback", []string{"-http", "0.0.0.0:8080"},
			"atnode demo: -http: the demo serves its API without a token, so on loopback only: 0.0.0.0:8080 is not a loopback address (try -http 127.0.0.1:8080)\n" +
				"atnode demo: run 'atnode demo -h' for usage\n"},
		{"http empty", []string{"-http", ""}, "atnode demo: -http: the demo serves its dashboard there: give a loopback host:port (try -http 127.0.0.1:0)\n"},
		{"http syntax", []string{"-http", "8080"}, "atnode demo: -http: want host:port, got \"8080\"\natnode demo: run 'atnode demo -h' for usage\n"},
		{"http bogus", []string{"-http", "bogus"}, "atnode demo: -http: want host:port, got \"bogus\"\natnode demo: run 'atnode demo -h' for usage\n"},
		{"unknown flag", []string{"-peers", "3"}, "atnode demo: flag provided but not defined: -peers\natnode demo: run 'atnode demo -h' for usage\n"},
		{"demo has no -backoff", []string{"-backoff", "1s..2s"}, "flag provided but not defined: -backoff"},
		{"positional", []string{"now"}, "unexpected arguments"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			a := app{stdout: &stdout, stderr: &stderr, newNode: stopNode}
			require.Equal(t, 2, a.run(t.Context(), append([]string{"demo"}, tc.args...)))
			require.Contains(t, stderr.String(), tc.msg)
			require.Empty(t, stdout.String())
			require.NotContains(t, stderr.String(), "-insecure", "not a flag of the demo")
			require.NotContains(t, stderr.String(), "-http-token-file", "not a flag of the demo")
			require.NotContains(t, stderr.String(), "Usage:")
		})
	}
}

// TestDemoHelp: demo -h lists the demo's flags and mentions no flag the
// demo lacks.
func TestDemoHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	a := app{stdout: &stdout, stderr: &stderr, newNode: stopNode}
	require.Equal(t, 0, a.run(t.Context(), []string{"demo", "-h"}))
	help := stderr.String()
	for _, f := range []string{"-nodes", "-duration", "-http", "-window", "-sub-window", "-refresh", "-rate", "-seed", "-log-level"} {
		require.Contains(t, help, "  "+f+" ")
	}
	for _, f := range regexp.MustCompile(`(?:^|\s)(-[a-z][a-z-]*)`).FindAllStringSubmatch(help, -1) {
		require.Contains(t, []string{"-nodes", "-duration", "-http", "-window", "-sub-window", "-refresh", "-rate", "-seed", "-log-level", "-h"}, f[1], "demo -h mentions %s", f[1])
	}
}

// TestDemoOneNode: with -nodes 1 the text says "1 node", and ledger-eu,
// which node 0 calls when it is alone, is not said to be uncalled.
func TestDemoOneNode(t *testing.T) {
	require.Equal(t, "1 node alone", nodesText(1))
	require.Equal(t, "5 nodes gossiping", nodesText(5))
	for _, n := range []int{1, 5} {
		for _, d := range demoDestinations(n) {
			if d.name != "ledger-eu" {
				continue
			}
			require.Equal(t, n > 1, strings.Contains(d.note, "not called by node 0"), "nodes %d: %q", n, d.note)
			require.Equal(t, n == 1, d.calledBy(0, n))
		}
	}
}

// TestDemoTraffic checks the simulated latency mixes: each destination's
// median and tail are where the demo's text says, with a fixed seed.
func TestDemoTraffic(t *testing.T) {
	for _, d := range demoDestinations(5) {
		t.Run(d.name, func(t *testing.T) {
			for _, p := range []*profile{&d.normal, d.degraded} {
				if p == nil {
					continue
				}
				r := newDemoRand(1, 0)
				const n = 200_000
				var stalls, below, negative int
				for range n {
					v := p.draw(r)
					if v < 0 { // counted, not asserted per draw: testify costs ~30 µs a call under -race
						negative++
					}
					if v >= p.stallMin {
						stalls++
					}
					if v <= p.median {
						below++
					}
				}
				require.Zero(t, negative, "negative latencies")
				require.InDelta(t, 0.5, float64(below)/n, 0.02, "median")
				// At or above stallMin: every stall plus the lognormal body's tail.
				bodyTail := 0.5 * math.Erfc(math.Log(float64(p.stallMin)/float64(p.median))/(p.sigma*math.Sqrt2))
				mean := (p.stallP + (1-p.stallP)*bodyTail) * n // Poisson: allow 5 standard deviations
				require.InDelta(t, mean, float64(stalls), 5*math.Sqrt(mean)+1, "stalls")
			}
		})
	}
	require.True(t, strings.HasPrefix(demoDestinations(5)[4].note, "not called by node 0"))
	require.False(t, allButNodeZero(0, 5))
	require.True(t, allButNodeZero(1, 5))
	require.True(t, allButNodeZero(4, 5))
	require.True(t, allButNodeZero(0, 1))
}

// tableNode is a runtime whose estimates and decisions are given: what
// printTable reads of a node.
type tableNode struct {
	runtime // nil: printTable calls nothing else
	est     map[string]tracker.Estimate
	dec     map[string]decision
}

func (n tableNode) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `[{"state":"alive"},{"state":"alive"},{"state":"dead"}]`)
	})
}

func (n tableNode) Estimate(dest string, _ float64) (tracker.Estimate, error) {
	return n.est[dest], nil
}

func (n tableNode) Timeout(dests []string, _ int) (decision, error) { return n.dec[dests[0]], nil }

// TestPrintTable: each row's TIMEOUT says what decided it beside the
// trusted estimate: "(backoff)" for the floor or the fallback, "(local
// guard)" for this node's own quantile above the fleet's.
func TestPrintTable(t *testing.T) {
	est := func(local, fleet uint64) tracker.Estimate {
		return tracker.Estimate{LocalValueMillis: local, HasLocalValue: true, FleetValueMillis: fleet, HasFleetValue: true,
			Peers: 3, Samples: 900, Source: tracker.SourceFleet}
	}
	n := tableNode{
		est: map[string]tracker.Estimate{"cache": est(6, 9), "db": est(176, 127), "search": est(3759, 3615)},
		dec: map[string]decision{
			"cache":  {Timeout: 250 * time.Millisecond, Fallback: true},
			"db":     {Timeout: 352 * time.Millisecond, DecidedBy: "db", Source: "fleet", Guarded: true},
			"search": {Timeout: 7230 * time.Millisecond, DecidedBy: "search", Source: "fleet"},
		},
	}
	dests := []destination{{name: "cache", note: "fast"}, {name: "db", note: "stalls"}, {name: "search", note: "slow"}}
	var out bytes.Buffer
	printTable(&out, n, dests, 12*time.Second, time.Minute)
	require.Equal(t, `
12s  node-0 sees 2/3 members alive
  DEST        LOCAL P99.99  FLEET P99.99  PEERS  FLEET SAMPLES  SOURCE              TIMEOUT  NOTE
  cache                6ms           9ms      3            900   fleet      250ms (backoff)  fast
  db                 176ms         127ms      3            900   fleet  352ms (local guard)  stalls
  search            3.759s        3.615s      3            900   fleet                7.23s  slow
`, out.String())
}
