package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// hasWarning reports whether c's warnings hold one of kind whose message
// contains every part.
// warningsButClock returns c's warnings other than clock_skew, for tests
// not about clocks: between members of one process, a loaded machine's
// queueing alone can exceed the skew threshold of the tests' 500 ms
// sub-windows (a quarter of one, 125 ms; 130-140 ms was seen under -race
// at load 18 on 2 cores). The clock tests check clock_skew.
func warningsButClock(c *Cluster) []Warning {
	return slices.DeleteFunc(c.Warnings(), func(w Warning) bool { return w.Kind == WarnClockSkew })
}

func hasWarning(c *Cluster, kind string, parts ...string) bool {
	return slices.ContainsFunc(c.Warnings(), func(w Warning) bool {
		if w.Kind != kind {
			return false
		}
		for _, p := range parts {
			if !strings.Contains(w.Message, p) {
				return false
			}
		}
		return true
	})
}

// TestJoinRefusedForOtherSettings: a member whose window, sub-window or
// histogram layout differs from the cluster's is refused at join: Start
// fails naming the setting, the seed reports config_mismatch naming the
// member and does not list it, and nobody does once it left.
func TestJoinRefusedForOtherSettings(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		name string
		edit func(*tracker.Config)
		want string
	}{
		{"sub-window", func(c *tracker.Config) { c.SubWindows = 8 }, "-sub-window 1s differs from the cluster's 500ms"},
		{"window", func(c *tracker.Config) { c.Window, c.SubWindows = 4*time.Second, 8 }, "-window 4s differs from the cluster's 8s"},
		{"layout", func(c *tracker.Config) { c.MaxTrackableLatency = 30 * time.Second },
			"histogram layout 1..30000 ms at 2 significant digits differs from the cluster's 1..60000 ms at 2 significant digits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nw, nodes := gossipCluster(t, uint64(40+i), 2, defaultGossipOpts())
			o := defaultGossipOpts()
			tc.edit(&o.tracker)
			j := newGossipNode(t, nw, "odd", 0x0dd, o, nodes[0].tr.Addr())
			err := j.Start(context.Background())
			require.ErrorIs(t, err, ErrJoinRefused)
			t.Logf("Start: %v", err)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "seed "+nodes[0].tr.Addr())
			require.ErrorIs(t, j.Start(context.Background()), ErrClosed, "a refused Start closed the cluster")

			eventually(t, "the seed reports the refused member", func() bool {
				return hasWarning(nodes[0].Cluster, WarnConfigMismatch, "member "+j.MemberName(), "refused at join")
			})
			t.Logf("seed: %v", nodes[0].Warnings())
			require.NotContains(t, upMembers(nodes[0].Cluster), j.MemberName(), "the seed refused it")
			// The joiner advertised version 1 metadata (it knew nobody), so
			// the seed merged it before its push/pull state refused it, and
			// the others may list it until its leave arrives.
			eventually(t, "nobody lists it once it left", func() bool {
				return !slices.Contains(upMembers(nodes[1].Cluster), j.MemberName())
			})
			require.Equal(t, uint64(1), nodes[0].WarningsRaised()[WarnConfigMismatch])
			require.Empty(t, warningsButClock(nodes[1].Cluster), "only the seed saw the joiner")
		})
	}
}

// TestJoinWithoutSettings: a member that advertises no settings (one
// without dissemination: version 1 metadata) is not judged and joins a
// cluster that disseminates, as before; nobody warns.
func TestJoinWithoutSettings(t *testing.T) {
	t.Parallel()
	nw, nodes := gossipCluster(t, 44, 2, defaultGossipOpts())
	plain := startNode(t, memConfig(t, "plain", 0x91a1, nw.NewTransport(), nodes[0].tr.Addr()))
	want := append(names(nodes), plain.MemberName())
	eventually(t, "every member lists the plain one", func() bool {
		return sees([]*node{plain}, want...) && sees(nodes, want...)
	})
	for _, n := range nodes {
		require.Empty(t, warningsButClock(n.Cluster))
	}
	require.Empty(t, plain.Warnings())
}

// TestAliveDelegateJudges: the alive delegate refuses a member whose
// metadata advertises other settings and reports it; it lets through this
// node itself, members with the same settings, with none, and with
// unreadable metadata; a member without a Store judges nobody.
func TestAliveDelegateJudges(t *testing.T) {
	t.Parallel()
	nw, g, same := newJudge(t, 45, 0x1d6e)
	other := same
	other.subWindow = time.Second
	node := func(name string, boot uint64, st *settings) *memberlist.Node {
		return &memberlist.Node{Name: MemberName(name, boot), Addr: net.IPv4(127, 0, 0, 9), Port: 7946, Meta: encodeMeta(name, boot, false, st)}
	}
	a := aliveDelegate{g.Cluster}
	require.NoError(t, a.NotifyAlive(node("judge", 0x1d6e, &other)), "itself")
	require.NoError(t, a.NotifyAlive(node("same", 1, &same)))
	require.NoError(t, a.NotifyAlive(node("none", 2, nil)))
	require.NoError(t, a.NotifyAlive(&memberlist.Node{Name: "junk-00000003", Meta: []byte{9, 9}}))
	require.Empty(t, g.Warnings())

	err := a.NotifyAlive(node("odd", 4, &other))
	require.ErrorIs(t, err, ErrJoinRefused)
	require.ErrorContains(t, err, "-sub-window 500ms differs from the cluster's 1s (member odd-00000004 at 127.0.0.9:7946)")
	require.Equal(t, []Warning{{WarnConfigMismatch,
		"member odd-00000004 (127.0.0.9:7946) advertises -sub-window 1s (this node's is 500ms): refused as a member"}}, g.Warnings())
	require.Error(t, a.NotifyAlive(node("odd", 4, &other)))
	require.Equal(t, uint64(1), g.WarningsRaised()[WarnConfigMismatch], "one warning, refreshed")

	err = mergeDelegate{g.Cluster}.NotifyMerge([]*memberlist.Node{node("same", 1, &same), node("odd", 5, &other)})
	require.ErrorIs(t, err, ErrJoinRefused)
	require.True(t, hasWarning(g.Cluster, WarnConfigMismatch, "member odd-00000005", "refused at join"))

	plain, err := New(memConfig(t, "plain", 6, nw.NewTransport()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = plain.Close() })
	require.NoError(t, aliveDelegate{plain}.NotifyAlive(node("odd", 4, &other)), "no Store, no settings to judge by")
}

// TestRefusalText: Start tells a refusal from an unreachable seed by the
// refusal's text inside memberlist's Join error (which formats our error
// with %v, so errors.Is cannot see it).
func TestRefusalText(t *testing.T) {
	t.Parallel()
	detail := "-sub-window 3s differs from the cluster's 6s and -window 30s differs from the cluster's 60s (member a-00000001 at 127.0.0.1:7946)"
	ours := fmt.Errorf("%w: %s", ErrJoinRefused, detail)
	for _, tc := range []struct {
		err  error
		want string
	}{
		{errors.Join(fmt.Errorf("Failed to join 127.0.0.1:7946: %v", ours)), detail},
		{errors.New("1 error occurred:\n\t* Failed to join 127.0.0.1:7946: " + ours.Error() + "\n\n"), detail},
		{errors.Join(errors.New("Failed to join 127.0.0.1:7947: dial tcp: connection refused"), fmt.Errorf("Failed to join 127.0.0.1:7946: %v", ours)), detail},
		{errors.New("1 error occurred:\n\t* Failed to join 127.0.0.1:7946: dial tcp: connection refused\n\n"), ""},
	} {
		require.Equal(t, tc.want, refusal(tc.err), "%v", tc.err)
	}
}

// TestRefusedJoinerGoesAsDead: the seed merges a joiner with other
// settings (its join delivered) before the joiner's push/pull state has it
// refused; OnEvent then gets it as dead, so a consumer does not keep a
// member that Members no longer lists (no event of a refused member
// follows).
func TestRefusedJoinerGoesAsDead(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	o := defaultGossipOpts()
	o.tune = func(c *Config) { c.OnEvent = rec.onEvent }
	nw := newNetwork(t, 902)
	seed := startGossipNode(t, nw, "seed", 0x5eed, o)

	odd := defaultGossipOpts()
	odd.tracker.SubWindows = 8
	j := newGossipNode(t, nw, "odd", 0x0dd, odd, seed.tr.Addr())
	require.ErrorIs(t, j.Start(t.Context()), ErrJoinRefused)
	eventually(t, "the seed delivers the refused joiner as dead", func() bool { return rec.has(EventDead, j.MemberName()) })
	require.NotContains(t, upMembers(seed.Cluster), j.MemberName())
	// Nothing of it follows: a later member's join is delivered after any
	// event queued for the joiner, and no second event for it comes.
	third := startGossipNode(t, nw, "third", 0x7777, defaultGossipOpts(), seed.tr.Addr())
	eventually(t, "third's join delivered", func() bool { return rec.has(EventJoin, third.MemberName()) })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var of []EventType
	for _, e := range rec.events {
		if e.Member.Member == j.MemberName() {
			of = append(of, e.Type)
		}
	}
	require.Equal(t, EventDead, of[len(of)-1], "its last event: %v", of)
	dead := 0
	for _, ty := range of {
		if ty == EventDead {
			dead++
		}
	}
	require.Equal(t, 1, dead, "one dead event: %v", of)
}
