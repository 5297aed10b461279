package node

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/internal/memtransport"
)

// memNodes starts k nodes on an in-memory network, n0 the seed of all,
// with a 10 s window of 1 s sub-windows; n0 also serves HTTP on a free
// loopback port.
func memNodes(t *testing.T, k int) []*Node {
	t.Helper()
	nw := memtransport.New(1)
	t.Cleanup(nw.Close)
	return memNodesOn(t, nw, k)
}

// memNodesOn is memNodes on the network nw.
func memNodesOn(t *testing.T, nw *memtransport.Network, k int) []*Node {
	t.Helper()
	var nodes []*Node
	trs := nw.NewTransports(k)
	for i, tr := range trs {
		cfg := DefaultConfig()
		cfg.Name = fmt.Sprintf("n%d", i)
		cfg.Cluster.Seeds = cluster.AddrList{trs[0].Addr()}
		cfg.HTTP = ""
		if i == 0 {
			cfg.HTTP = "127.0.0.1:0"
		}
		cfg.Tracker.Window, cfg.SubWindow = 10*time.Second, time.Second
		cfg.Cluster.Transport = tr
		cfg.Cluster.Timing = cluster.FastTiming()
		cfg.Cluster.BootID = uint64(0xb0070000 + i)
		n, err := New(cfg, testLogger(t).With("node", cfg.Name), nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = n.Close() })
		require.NoError(t, n.Start(t.Context()))
		nodes = append(nodes, n)
	}
	return nodes
}

// upMembers returns the member names n's /v1/members lists as alive, sorted.
func upMembers(t *testing.T, n *Node) []string {
	var out []string
	for _, m := range getJSON(t, n.Handler(), "/v1/members").([]any) {
		if m := m.(map[string]any); m["state"] == "alive" {
			out = append(out, m["member"].(string))
		}
	}
	slices.Sort(out)
	return out
}

func TestThreeNodes(t *testing.T) {
	nodes := memNodes(t, 3)
	want := []string{nodes[0].MemberName(), nodes[1].MemberName(), nodes[2].MemberName()}
	require.Equal(t, []string{"n0-b0070000", "n1-b0070001", "n2-b0070002"}, want)
	took := eventually(t, "every node lists the three members alive", func() bool {
		for _, n := range nodes {
			if !slices.Equal(upMembers(t, n), want) || n.Fleet().MinPeers() != 3 {
				return false
			}
		}
		return true
	})
	t.Logf("membership agreed after %v", took)
	st := getJSON(t, nodes[1].Handler(), "/v1/status").(map[string]any)
	require.Equal(t, json.Number("3"), st["members_alive"])
	require.Equal(t, "10.0.0.2:7946", st["gossip_addr"])

	// Each node records 100 samples of db: 10+i ms from node i.
	for i, n := range nodes {
		for range 100 {
			n.Record("db", time.Duration(10+i)*time.Millisecond)
		}
	}
	requireFleetViews(t, nodes)

	// Gossip counters: bytes and messages by direction and type in /metrics
	// (protocol v2: records to owners, aggregates from them).
	code, metrics := do(t, nodes[1].Handler(), "GET", "/metrics", "")
	require.Equal(t, 200, code)
	require.Regexp(t, `atnode_gossip_bytes_total\{direction="in",type="records"\} [1-9]`, string(metrics))
	require.Regexp(t, `atnode_gossip_bytes_total\{direction="out",type="records"\} [1-9]`, string(metrics))
	require.Regexp(t, `atnode_gossip_messages_total\{direction="in",type="packed_aggregates"\} [1-9]`, string(metrics)) // Level4: packed
	// The fleet view is aggregates on v2, and its gauges say so.
	require.Equal(t, 2.0, metricValue(t, nodes[1], "atnode_gossip_protocol"))
	require.Equal(t, 1.0, metricValue(t, nodes[1], "atnode_fleet_destinations"), "db")
	require.Equal(t, 1.0, metricValue(t, nodes[1], "atnode_fleet_aggregate_destinations"))
	require.GreaterOrEqual(t, metricValue(t, nodes[1], "atnode_fleet_aggregates"), 1.0)
	require.Zero(t, metricValue(t, nodes[1], "atnode_fleet_batches"))
	var published, records float64
	for _, n := range nodes {
		published += metricValue(t, n, "atnode_gossip_aggregates_published_total")
		records += metricValue(t, n, "atnode_gossip_records_sent_total")
	}
	require.GreaterOrEqual(t, published, 1.0, "db's first owner published")
	require.GreaterOrEqual(t, records, 2.0, "db's records went to its owners")

	// The real HTTP listener of n0.
	addr := nodes[0].HTTPAddr()
	require.Regexp(t, `^127\.0\.0\.1:[1-9][0-9]*$`, addr)
	resp, err := http.Get("http://" + addr + "/healthz")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode, "%s", body)

	// n2 leaves: the others list it as left and count two alive.
	require.NoError(t, nodes[2].Close())
	eventually(t, "n2 is listed as left", func() bool {
		for _, n := range nodes[:2] {
			left := false
			for _, m := range getJSON(t, n.Handler(), "/v1/members").([]any) {
				m := m.(map[string]any)
				left = left || m["member"] == want[2] && m["state"] == "left" && m["boot_id"] == "00000000b0070002"
			}
			if !left || n.Fleet().MinPeers() != 2 {
				return false
			}
		}
		return true
	})
	require.NoError(t, nodes[0].Close())
	_, err = http.Get("http://" + addr + "/healthz")
	require.Error(t, err) // no longer served
}

// TestCloseLeavesBeforeHTTPStops checks Close's order: the node leaves the
// cluster first and only then stops serving HTTP. A request in flight
// (a 3 s CPU profile) holds the HTTP shutdown open; the other node must see
// n0 left while that request still runs.
func TestCloseLeavesBeforeHTTPStops(t *testing.T) {
	nodes := memNodes(t, 2)
	eventually(t, "both nodes see two alive", func() bool {
		return len(upMembers(t, nodes[0])) == 2 && len(upMembers(t, nodes[1])) == 2
	})
	addr := nodes[0].HTTPAddr()
	inFlight := make(chan struct{})
	go func() {
		defer close(inFlight)
		resp, err := http.Get("http://" + addr + "/debug/pprof/profile?seconds=3")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	eventually(t, "the profile request is in flight", func() bool {
		_, stacks := do(t, nodes[0].Handler(), http.MethodGet, "/debug/pprof/goroutine?debug=1", "")
		return strings.Contains(string(stacks), "net/http/pprof.Profile")
	})
	closed := make(chan error, 1)
	go func() { closed <- nodes[0].Close() }()
	left := func() bool {
		for _, m := range getJSON(t, nodes[1].Handler(), "/v1/members").([]any) {
			if m := m.(map[string]any); m["name"] == "n0" && m["state"] == "left" {
				return true
			}
		}
		return false
	}
	eventually(t, "n1 sees n0 left", left)
	select {
	case <-inFlight:
		t.Fatal("the request in flight finished before n0 was seen to leave: Close stopped HTTP first")
	default:
	}
	require.NoError(t, <-closed)
	<-inFlight
	_, err := http.Get("http://" + addr + "/healthz")
	require.Error(t, err, "no longer served")
}

// requireFleetViews checks the fleet views once the epoch of the samples
// has sealed: every node's view of db holds the three peers' samples, bucket
// for bucket the same on every node, and is trusted.
func requireFleetViews(t *testing.T, nodes []*Node) {
	t.Helper()
	took := eventually(t, "the fleet views of db agree", func() bool {
		first := nodes[0].Fleet().ViewCounts("db", time.Now())
		for _, n := range nodes {
			e, err := n.Estimate("db", 0)
			if err != nil || e.Peers != 3 || e.Samples != 300 || e.Source.String() != "fleet" {
				return false
			}
			if !slices.Equal(n.Fleet().ViewCounts("db", time.Now()), first) {
				return false
			}
		}
		return true
	})
	t.Logf("fleet views agreed after %v", took)
}

func TestLoopbackGossipAndHTTP(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Name = "solo"
	cfg.Cluster.Bind, cfg.HTTP = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Cluster.Timing = cluster.FastTiming()
	n, err := New(cfg, testLogger(t), nil)
	require.NoError(t, err)
	require.Empty(t, n.GossipAddr())
	require.Empty(t, n.HTTPAddr())
	require.NoError(t, n.Start(t.Context()))
	require.ErrorIs(t, n.Start(t.Context()), ErrAlreadyStarted)
	require.Regexp(t, `^127\.0\.0\.1:[1-9][0-9]*$`, n.GossipAddr())
	require.Regexp(t, `^127\.0\.0\.1:[1-9][0-9]*$`, n.HTTPAddr())
	require.ErrorIs(t, n.ReloadKeys(), cluster.ErrNoKeyFile)
	members := getJSON(t, n.Handler(), "/v1/members").([]any)
	require.Len(t, members, 1)
	require.Equal(t, n.GossipAddr(), members[0].(map[string]any)["addr"])
	require.NoError(t, n.Close())
	require.NoError(t, n.Close())

	alone := newAlone(t, nil, nil)
	require.ErrorIs(t, alone.ReloadKeys(), ErrGossipDisabled)
}

// TestHTTPAnswersWhileJoining: the API is bound before the initial joins,
// so a seed that accepts and never answers (a join that waits for
// memberlist's TCP timeout) does not keep the sidecar's application from
// its estimates; /healthz says 503 until Start has returned.
func TestHTTPAnswersWhileJoining(t *testing.T) {
	hole, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer hole.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := hole.Accept(); err == nil {
			accepted <- c
		}
	}()

	cfg := DefaultConfig()
	cfg.Name = "joiner"
	cfg.Cluster.Bind, cfg.HTTP = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Cluster.Seeds = cluster.AddrList{hole.Addr().String()}
	cfg.Cluster.Timing = cluster.FastTiming()
	cfg.Cluster.Timing.StreamTimeout = time.Minute // the join waits until the seed's connection closes
	n, err := New(cfg, testLogger(t), nil)
	require.NoError(t, err)
	defer n.Close()
	started := make(chan error, 1)
	go func() { started <- n.Start(t.Context()) }()

	var conn net.Conn
	select {
	case conn = <-accepted: // the initial join is under way
	case <-time.After(10 * time.Second):
		t.Fatal("the node never dialled its seed")
	}
	get := func(path string) int {
		resp, err := http.Get("http://" + n.HTTPAddr() + path)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, 200, get("/v1/timeout?dest=db"), "the API answers during the join")
	require.Equal(t, 503, get("/healthz"), "not started yet")
	select {
	case err := <-started:
		t.Fatalf("Start returned during the join: %v", err)
	default:
	}

	require.NoError(t, conn.Close()) // the join fails now, and Start goes on
	select {
	case err := <-started:
		require.NoError(t, err, "a seed that cannot be joined is retried, not an error")
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return after the join failed")
	}
	require.Equal(t, 200, get("/healthz"))
}

func TestNewErrors(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Name = ""
	_, err := New(cfg, nil, nil)
	require.ErrorContains(t, err, "-name: cluster: name is empty")
	cfg = DefaultConfig()
	cfg.Cluster.Bind = "localhost:0" // the cluster wants an IP literal: Validate says so
	_, err = New(cfg, nil, nil)
	require.ErrorContains(t, err, `-bind: cluster: bind: host of "localhost:0" must be an IP address`)
	cfg = DefaultConfig()
	cfg.Cluster.KeyFile = filepath.Join(t.TempDir(), "none.key")
	_, err = New(cfg, nil, nil)
	require.Error(t, err)
}

// TestBackedOffMembersGauge stalls n1's streams (it accepts them and never
// reads): n0's sends to it run past the probe timeout, so n0 backs it off,
// and atnode_gossip_backed_off_members and /v1/status's gossip.backed_off
// say 1 while the stall lasts; once it ends a send succeeds and they say 0.
func TestBackedOffMembersGauge(t *testing.T) {
	nw := memtransport.New(1)
	t.Cleanup(nw.Close)
	nodes := memNodesOn(t, nw, 2)
	eventually(t, "both members alive", func() bool {
		return len(upMembers(t, nodes[0])) == 2 && len(upMembers(t, nodes[1])) == 2
	})
	require.Zero(t, metricValue(t, nodes[0], "atnode_gossip_backed_off_members"))
	addr := getJSON(t, nodes[1].Handler(), "/v1/status").(map[string]any)["gossip_addr"].(string)
	nw.Stall(addr, true)
	eventually(t, "n1 backed off at n0", func() bool {
		return metricValue(t, nodes[0], "atnode_gossip_backed_off_members") == 1
	})
	gossip := getJSON(t, nodes[0].Handler(), "/v1/status").(map[string]any)["gossip"].(map[string]any)
	require.Equal(t, json.Number("1"), gossip["backed_off"])
	require.Equal(t, 1, nodes[0].cl.GossipStats().BackedOff)
	nw.Stall(addr, false)
	eventually(t, "n1 normal again at n0", func() bool {
		return metricValue(t, nodes[0], "atnode_gossip_backed_off_members") == 0
	})
}
