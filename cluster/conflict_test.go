package cluster

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNameConflictReported: a second live process with a live node's name
// (a cloned VM, a copied config) is reported as name_conflict by both
// processes and by every other node within 10 s; once it leaves the
// warnings go.
func TestNameConflictReported(t *testing.T) {
	t.Parallel()
	nw, nodes := gossipCluster(t, 46, 3, defaultGossipOpts())
	start := time.Now()
	clone := startGossipNode(t, nw, "g1", 0xc10e, defaultGossipOpts(), nodes[0].tr.Addr())
	live, other := nodes[1], []*gnode{nodes[0], nodes[2]}
	took := eventually(t, "both processes and the others report the conflict", func() bool {
		if !hasWarning(live.Cluster, WarnNameConflict, `another live process uses this node's name "g1": `+clone.MemberName()) ||
			!hasWarning(clone.Cluster, WarnNameConflict, `another live process uses this node's name "g1": `+live.MemberName()) {
			return false
		}
		for _, n := range other {
			if !hasWarning(n.Cluster, WarnNameConflict, `2 live processes use the name "g1"`, live.MemberName(), clone.MemberName()) {
				return false
			}
		}
		return true
	})
	t.Logf("name conflict reported by all 4 nodes %v after the clone started (%v after its Start returned)", time.Since(start), took)
	require.Less(t, time.Since(start), 10*time.Second)
	for _, n := range append(other, live, clone) {
		t.Logf("%s: %v", n.MemberName(), n.Warnings())
		require.Len(t, warningsButClock(n.Cluster), 1)
		require.Equal(t, uint64(1), n.WarningsRaised()[WarnNameConflict])
	}
	// The others count one of the two, the one they saw join last.
	for _, n := range other {
		require.True(t, hasWarning(n.Cluster, WarnNameConflict, fmt.Sprintf("this node counts only %s's data", clone.MemberName())))
	}

	require.NoError(t, clone.Close())
	eventually(t, "the warnings go once the clone left", func() bool {
		for _, n := range append(other, live) {
			if len(warningsButClock(n.Cluster)) > 0 {
				return false
			}
		}
		return true
	})
}

// TestClockSkewReported: a member whose clock runs 20 s behind (on the
// gossip tests' 500 ms grid: 40 epochs) is reported by itself and by every
// peer; nobody blames the others.
func TestClockSkewReported(t *testing.T) {
	t.Parallel()
	// 8 s sub-windows: a clock is skewed beyond a quarter sub-window, 2 s,
	// far above what queueing adds to the one-way samples on a loaded
	// machine (with the 500 ms ones, 125 ms: under -race at several times
	// the cores' load the healthy members warned of each other too). The
	// late node's 20 s stay within the accepted epochs.
	base := defaultGossipOpts()
	base.tracker.Window, base.tracker.SubWindows = 64*time.Second, 8
	nw, nodes := gossipCluster(t, 47, 3, base)
	o := base
	o.tune = func(c *Config) { c.Clock = func() time.Time { return time.Now().Add(-20 * time.Second) } }
	start := time.Now()
	late := startGossipNode(t, nw, "late", 0x1a7e, o, nodes[0].tr.Addr())
	// A sample is the sender's clock minus the receipt time, so a message's
	// delay makes the late node look further behind to its peers, and them
	// less ahead to it: on a loaded machine "~21s" or "~19s".
	about20s := regexp.MustCompile(`~(19|20|21|22)s behind`)
	warns := func(c *Cluster, prefix string) bool {
		return slices.ContainsFunc(c.Warnings(), func(w Warning) bool {
			return w.Kind == WarnClockSkew && strings.HasPrefix(w.Message, prefix) && about20s.MatchString(w.Message)
		})
	}
	took := eventually(t, "the late node and its peers report its clock", func() bool {
		if !warns(late.Cluster, "this node's clock is ~") || !hasWarning(late.Cluster, WarnClockSkew, "behind its peers' median (3 peers)") {
			return false
		}
		for _, n := range nodes {
			if !warns(n.Cluster, "the clock of peer late (member "+late.MemberName()+") is ~") {
				return false
			}
		}
		return true
	})
	t.Logf("clock skew reported by all 4 nodes %v after the late node started (%v after its Start returned)", time.Since(start), took)
	for _, n := range append(nodes, late) {
		t.Logf("%s: %v", n.MemberName(), n.Warnings())
		require.Len(t, n.Warnings(), 1, "%s", n.MemberName())
		require.Equal(t, uint64(1), n.WarningsRaised()[WarnClockSkew])
	}
}
