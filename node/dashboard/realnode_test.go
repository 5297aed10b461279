package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
	"github.com/adaptivetimeout/adaptivetimeout/node"
	"github.com/adaptivetimeout/adaptivetimeout/node/dashboard"
)

// realDests are the destinations the real nodes record, sorted: n1 alone
// calls ledger-eu, so n0 knows it from the fleet view only.
var realDests = []string{"cache eu/west#1", "db-1", "ledger-eu"}

// startRealNodes starts two gossiping nodes on loopback (a 10 s window of
// 1 s sub-windows, fast memberlist timing); n0 serves its HTTP API on a
// free port. Until the test ends both record latencies every 50 ms. It
// returns once n0's history of every destination has 3 points, the last
// with a fleet value.
func startRealNodes(t *testing.T) (n0 *node.Node, url string) {
	t.Helper()
	var nodes []*node.Node
	for i := range 2 {
		cfg := node.DefaultConfig()
		cfg.Name = fmt.Sprintf("n%d", i)
		cfg.Cluster.Bind, cfg.HTTP = "127.0.0.1:0", ""
		if i == 0 {
			cfg.HTTP = "127.0.0.1:0"
		} else {
			cfg.Cluster.Seeds = cluster.AddrList{nodes[0].GossipAddr()}
		}
		cfg.Tracker.Window, cfg.SubWindow = 10*time.Second, time.Second
		cfg.Cluster.Timing = cluster.FastTiming()
		n, err := node.New(cfg, testutil.Logger(t).With("node", cfg.Name), nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, n.Close()) })
		require.NoError(t, n.Start(t.Context()))
		nodes = append(nodes, n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() }) // before the nodes close
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for k := 0; ; k++ {
			for i, n := range nodes {
				n.Record("db-1", time.Duration(150+10*i+k%40)*time.Millisecond)
				n.Record("cache eu/west#1", time.Duration(2+k%5)*time.Millisecond)
				if i == 1 {
					n.Record("ledger-eu", time.Duration(300+k%100)*time.Millisecond)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	n0 = nodes[0]
	testutil.Eventually(t, "n0 has 3 points of every destination, with fleet values", func() bool {
		for _, d := range realDests {
			var h struct {
				Points []struct {
					FleetMs *uint64 `json:"fleet_ms"`
				} `json:"points"`
			}
			if get(t, n0.Handler(), "/v1/history?dest="+strings.ReplaceAll(d, " ", "%20"), &h) != http.StatusOK ||
				len(h.Points) < 3 || h.Points[len(h.Points)-1].FleetMs == nil {
				return false
			}
		}
		return true
	})
	return n0, "http://" + n0.HTTPAddr() + "/"
}

// get serves a GET of target by h in memory, decoding a 200 answer into v.
func get(t *testing.T, h http.Handler, target string, v any) int {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	if rec.Code == http.StatusOK {
		dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
		dec.UseNumber()
		require.NoError(t, dec.Decode(v), "%s", rec.Body.Bytes())
	}
	return rec.Code
}

// TestBrowserRealNode runs the dashboard against a real node's handler and
// listener, with recorded data gossiped between two nodes: every
// destination gets a card with a drawn chart, the members table lists
// both nodes, and the page reports no error.
func TestBrowserRealNode(t *testing.T) {
	browserCtx := dashboard.NewBrowser(t) // skips without ATNODE_BROWSER
	n0, url := startRealNodes(t)

	first, last, problems := dashboard.OpenPage(t, browserCtx, url+"?interval=300", 1280, 900, func(first, last dashboard.PageState) bool {
		if last.Updates < first.Updates+3 || len(last.Charts) != len(realDests) || len(last.MemberRows) != 2 || !dashboard.Drawn(last) {
			return false
		}
		for _, c := range last.Charts {
			if c.Points < 3 {
				return false
			}
		}
		return true
	})
	require.Equal(t, "live", last.Conn)
	require.Zero(t, last.Errors, "page recorded request errors: %v", last.LastError)
	require.Nil(t, last.LastError)
	require.Empty(t, problems(), "console errors, warnings or exceptions")

	require.Equal(t, "n0", last.Node)
	require.Equal(t, n0.HTTPAddr(), last.HTTPAddr)
	require.Equal(t, realDests, last.Cards, "one card per destination, sorted")
	for i, c := range last.Charts {
		require.Equal(t, realDests[i], c.Dest)
		require.Equal(t, 5, c.Series, "%s: time, local, fleet, peers, timeout", c.Dest)
		require.Positive(t, c.Width, c.Dest)
		require.Greater(t, c.Inked, 1000, "%s: canvas has lines on it", c.Dest)
		require.GreaterOrEqual(t, c.LastT, first.Charts[i].LastT, c.Dest)
	}
	require.Len(t, last.MemberRows, 2)
	for i, row := range last.MemberRows {
		require.Equal(t, fmt.Sprintf("n%d", i), row[0])
		require.Equal(t, "alive", row[3])
		require.Regexp(t, `^[0-9a-f]{16}$`, row[4], "boot id")
		require.Equal(t, row[0]+"-"+row[4][8:], row[1], "member name: name and the boot id's low 32 bits")
	}
	require.Equal(t, n0.MemberName(), last.SelfMember)
	require.Equal(t, fmt.Sprintf("%016x", n0.BootID()), last.MemberRows[0][4])
	require.Contains(t, last.GossipIn, "batches")
	require.LessOrEqual(t, last.ScrollWidth, last.ViewWidth, "no horizontal page scroll")
	dashboard.CheckCharts(t, last) // axis titles, ticks with units, legend without hover
}

// TestBrowserRealNodeWarnings: a real node's warnings reach the page. A
// clone of n1 (a third process with its name) joins; n0 reports the name
// conflict in /v1/status, and the page shows it in the banner above the
// members table, with the count in the header.
func TestBrowserRealNodeWarnings(t *testing.T) {
	browserCtx := dashboard.NewBrowser(t) // skips without ATNODE_BROWSER
	n0, url := startRealNodes(t)
	cfg := node.DefaultConfig()
	cfg.Name, cfg.HTTP = "n1", ""
	cfg.Cluster.Bind, cfg.Cluster.Seeds = "127.0.0.1:0", cluster.AddrList{n0.GossipAddr()}
	cfg.Tracker.Window, cfg.SubWindow = 10*time.Second, time.Second
	cfg.Cluster.Timing = cluster.FastTiming()
	clone, err := node.New(cfg, testutil.Logger(t).With("node", "n1-clone"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, clone.Close()) })
	require.NoError(t, clone.Start(t.Context()))
	testutil.Eventually(t, "n0 reports the clone", func() bool { return len(n0.Warnings()) == 1 })
	w := n0.Warnings()[0]
	require.Equal(t, cluster.WarnNameConflict, w.Kind)

	_, last, problems := dashboard.OpenPage(t, browserCtx, url+"?interval=300", 1280, 900, func(_, last dashboard.PageState) bool {
		return len(last.Warnings) == 1 && len(last.MemberRows) == 3
	})
	require.Equal(t, []string{"name_conflict: " + w.Message}, last.Warnings)
	require.True(t, last.WarningsAboveMembers, "the banner sits above the members table")
	require.Equal(t, "1 warning", last.WarningsLink)
	require.Empty(t, problems(), "console errors, warnings or exceptions")
}

// TestFakeAPIShapes compares the fake API the browser test uses with a real
// node's answers: the same fields, each of the same JSON kind (null
// matches anything: the real node writes null for a missing quantile),
// boot IDs of 16 hex digits ending the member name, whole milliseconds and
// the real estimate sources in the history.
func TestFakeAPIShapes(t *testing.T) {
	n0, _ := startRealNodes(t)
	real, fake := n0.Handler(), dashboard.FakeAPI("busy")
	paths := []string{"/v1/status", "/v1/members", "/v1/history?dest=db-1"}
	for _, p := range paths {
		t.Run(p, func(t *testing.T) {
			var r, f any
			require.Equal(t, http.StatusOK, get(t, real, p, &r))
			require.Equal(t, http.StatusOK, get(t, fake, p, &f))
			sameShape(t, p, r, f)
			if p == "/v1/members" {
				for _, v := range append(r.([]any), f.([]any)...) {
					m := v.(map[string]any)
					boot := m["boot_id"].(string)
					require.Regexp(t, `^[0-9a-f]{16}$`, boot)
					require.Equal(t, m["name"].(string)+"-"+boot[8:], m["member"])
				}
			}
			if strings.HasPrefix(p, "/v1/history") {
				for _, v := range append(r.(map[string]any)["points"].([]any), f.(map[string]any)["points"].([]any)...) {
					pt := v.(map[string]any)
					require.Contains(t, []string{"fleet", "local", "none"}, pt["source"], "tracker.Source's names")
					for k, x := range pt {
						if n, ok := x.(json.Number); ok {
							require.Regexp(t, `^[0-9]+$`, n.String(), "%s is whole", k)
						}
					}
				}
			}
		})
	}
	// /v1/timeout: the page reads only its failing field. Every field the
	// fake serves, the real node serves with the same kind, and the fake
	// serves every field the real node does.
	t.Run("/v1/timeout", func(t *testing.T) {
		const p = "/v1/timeout?dest=db-1&dest=cache+eu%2Fwest%231"
		var r, f map[string]any
		require.Equal(t, http.StatusOK, get(t, real, p, &r))
		require.Equal(t, http.StatusOK, get(t, fake, p, &f))
		shared := make(map[string]any, len(f))
		for k := range f {
			require.Contains(t, r, k, "the real node has the fake's field %s", k)
			shared[k] = r[k]
		}
		sameShape(t, p, shared, f)
		require.Len(t, f, len(r), "the real node's fields: timeout_ms, attempt, need, decided_by, source, guarded, fallback, reason, failing, probe_ms")
		require.Len(t, r, 10)
	})
	// Unknown destinations have a history without points in both.
	for _, h := range []http.Handler{real, fake} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/history?dest=nope", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		require.JSONEq(t, `{"dest":"nope","quantile":0.9999,"tracked":false,"points":[]}`, rec.Body.String())
	}
}

// mapFields are JSON objects keyed by data (reasons, message types), whose
// keys differ with what happened; their values are compared by kind only.
var mapFields = regexp.MustCompile(`\.gossip\.(messages_in|messages_out|bytes_in_by_type|bytes_out_by_type|outcomes|rejected)$`)

// sameShape requires real and fake to have the same JSON structure at path.
func sameShape(t *testing.T, path string, real, fake any) {
	t.Helper()
	if real == nil || fake == nil {
		return // a nullable field
	}
	require.Equal(t, fmt.Sprintf("%T", real), fmt.Sprintf("%T", fake), "%s: real %v, fake %v", path, real, fake)
	switch r := real.(type) {
	case map[string]any:
		f := fake.(map[string]any)
		if mapFields.MatchString(path) {
			for k, v := range f {
				require.IsType(t, json.Number(""), v, "%s.%s", path, k)
			}
			return
		}
		rk, fk := slices.Sorted(maps.Keys(r)), slices.Sorted(maps.Keys(f))
		require.Equal(t, rk, fk, "%s: fields", path)
		for _, k := range rk {
			sameShape(t, path+"."+k, r[k], f[k])
		}
	case []any:
		f := fake.([]any)
		for i := range min(len(r), len(f)) {
			sameShape(t, fmt.Sprintf("%s[%d]", path, i), r[i], f[i])
		}
	}
}
