package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/internal/memtransport"
)

func TestJoin(t *testing.T) {
	t.Parallel()
	_, nodes := memCluster(t, 1, 5)
	took := eventually(t, "all 5 see each other", func() bool { return sees(nodes, names(nodes)...) })
	t.Logf("join: 5 members converged in %v", took)
	// Events reach the handler on the cluster's goroutine, after the member
	// table has changed: wait for them rather than race them.
	eventually(t, "every node got a join event of every node", func() bool {
		return allHave(nodes, EventJoin, names(nodes)...)
	})

	for _, n := range nodes {
		require.Equal(t, 5, n.NumAlive())
		ms := n.Members()
		require.Len(t, ms, 5)
		for j, m := range ms { // sorted by name: n0..n4
			require.Equal(t, nodes[j].Name(), m.Name)
			require.Equal(t, nodes[j].MemberName(), m.Member)
			require.Equal(t, nodes[j].BootID(), m.BootID)
			require.Equal(t, nodes[j].AdvertiseAddr().String(), m.Addr)
			require.Equal(t, StateAlive, m.State)
		}
		require.Zero(t, n.Stats().BadMetadata)
	}
	require.Equal(t, "n0-b0070000", nodes[0].MemberName())
}

func TestCrashDetectedAsDead(t *testing.T) {
	t.Parallel()
	nw, nodes := memCluster(t, 2, 5)
	eventually(t, "join", func() bool { return sees(nodes, names(nodes)...) })

	victim, rest := nodes[4], nodes[:4]
	require.True(t, nw.Crash(victim.tr.Addr()))
	took := eventually(t, "the crashed member is declared dead everywhere", func() bool {
		return allHave(rest, EventDead, victim.MemberName())
	})
	t.Logf("failure detection: crashed member dead on all 4 others in %v", took)
	for _, n := range rest {
		require.True(t, sees([]*node{n}, names(rest)...))
		require.Equal(t, 4, n.NumAlive())
		i := slices.IndexFunc(n.Members(), func(m Member) bool { return m.Member == victim.MemberName() })
		require.GreaterOrEqual(t, i, 0, "a dead member stays listed for DeadRetention")
		require.Equal(t, StateDead, n.Members()[i].State)
		require.False(t, n.rec.has(EventLeft, victim.MemberName()))
		err := n.SendReliable(victim.MemberName(), []byte("x"))
		require.ErrorIs(t, err, ErrMemberDown)
	}
}

func TestGracefulLeave(t *testing.T) {
	t.Parallel()
	_, nodes := memCluster(t, 3, 4)
	eventually(t, "join", func() bool { return sees(nodes, names(nodes)...) })

	leaver, rest := nodes[3], nodes[:3]
	require.NoError(t, leaver.Close())
	require.NoError(t, leaver.Close(), "Close is idempotent")
	require.True(t, leaver.rec.has(EventLeft, leaver.MemberName()), "own left event delivered before Close returns")
	took := eventually(t, "the member is seen as left", func() bool {
		return allHave(rest, EventLeft, leaver.MemberName())
	})
	t.Logf("graceful leave: seen as left by all 3 others in %v", took)
	for _, n := range rest {
		require.False(t, n.rec.has(EventDead, leaver.MemberName()))
		require.Equal(t, 3, n.NumAlive())
		ms := n.Members()
		i := slices.IndexFunc(ms, func(m Member) bool { return m.Member == leaver.MemberName() })
		require.Equal(t, StateLeft, ms[i].State)
	}
	require.ErrorIs(t, leaver.Start(context.Background()), ErrClosed)
	require.ErrorIs(t, leaver.SendReliable(nodes[0].MemberName(), nil), ErrClosed)
}

// TestPartitionHealsByRejoin cuts six members into two sides of three and
// heals the cut once each side has forgotten the other: memberlist gossips
// to a dead member for DeadRetention only (GossipToTheDeadTime), so after
// that no packet crosses by itself. With periodic re-joins the sides merge
// again; without them (the control) they stay apart, which shows it is the
// re-join that merges them.
func TestPartitionHealsByRejoin(t *testing.T) {
	t.Parallel()
	const control = 2 * time.Second // how long the control must stay split
	for _, tc := range []struct {
		name   string
		rejoin time.Duration
	}{
		{"rejoin", FastTiming().RejoinInterval},
		{"no rejoin", time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nw := newNetwork(t, 4)
			var nodes []*node
			trs := nw.NewTransports(6)
			for i, tr := range trs {
				cfg := memConfig(t, fmt.Sprintf("n%d", i), uint64(0xb0070000+i), tr, trs[0].Addr())
				cfg.Timing.DeadRetention = time.Second
				cfg.Timing.RejoinInterval = tc.rejoin
				nodes = append(nodes, startNode(t, cfg))
			}
			eventually(t, "join", func() bool { return sees(nodes, names(nodes)...) })

			a, b := nodes[:3], nodes[3:]
			partition(nw, a, b)
			took := eventually(t, "each side sees only itself", func() bool {
				return sees(a, names(a)...) && sees(b, names(b)...)
			})
			// Members forgets a dead member after DeadRetention, when
			// memberlist stops gossiping to it (its StateChange is no later
			// than the Since recorded by the callback).
			took += eventually(t, "each side has forgotten the other", func() bool {
				return lists(a, names(a)) && lists(b, names(b))
			})
			t.Logf("partition: sides split and forgot each other in %v", took)

			nw.Heal()
			if tc.rejoin == time.Hour {
				start := time.Now()
				for time.Since(start) < control {
					require.True(t, lists(a, names(a)) && lists(b, names(b)),
						"the sides merged without a re-join %v after the heal", time.Since(start))
					time.Sleep(20 * time.Millisecond)
				}
				return
			}
			took = eventually(t, "the sides merge again", func() bool { return sees(nodes, names(nodes)...) })
			t.Logf("heal: 6 members merged in %v after the partition healed (rejoin every %v ± %v%%)",
				took, tc.rejoin, 100*FastTiming().RejoinJitter)
			for _, n := range b {
				require.True(t, n.rec.has(EventJoin, nodes[0].MemberName()))
			}
			require.Positive(t, nodes[5].Stats().JoinFailures, "re-joins failed during the cut")
		})
	}
}

func TestRestartWithNewBootID(t *testing.T) {
	t.Parallel()
	nw, nodes := memCluster(t, 5, 3)
	eventually(t, "join", func() bool { return sees(nodes, names(nodes)...) })

	old := nodes[2]
	addr := old.tr.Addr()
	require.True(t, nw.Crash(addr))
	require.NoError(t, old.tr.Shutdown()) // the process is gone; its address is free
	tr, err := nw.NewTransportAt(addr)
	require.NoError(t, err)
	restarted := startNode(t, memConfig(t, "n2", 0xb007beef, tr, nodes[0].tr.Addr()))
	require.NotEqual(t, old.MemberName(), restarted.MemberName())

	live := []*node{nodes[0], nodes[1], restarted}
	took := eventually(t, "new boot alive and old boot dead everywhere", func() bool {
		for _, n := range live {
			// While both boots are up somewhere, the old one is silent:
			// a restart is no name conflict.
			require.Empty(t, warningsButClock(n.Cluster), "%s", n.MemberName())
		}
		return allHave(live[:2], EventDead, old.MemberName()) && sees(live, names(live)...)
	})
	t.Logf("restart: new boot joined and old boot declared dead in %v", took)
	for _, n := range live[:2] {
		var n2 []Member
		for _, m := range n.Members() {
			if m.Name == "n2" {
				n2 = append(n2, m)
			}
		}
		require.Len(t, n2, 2, "both boots of peer n2 are listed")
		byBoot := map[uint64]State{n2[0].BootID: n2[0].State, n2[1].BootID: n2[1].State}
		require.Equal(t, map[uint64]State{old.BootID(): StateDead, 0xb007beef: StateAlive}, byBoot)
	}
}

func TestLossyNetworkStillConverges(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 6)
	nw.SetFaults(memtransport.Faults{Drop: 0.05, Duplicate: 0.05, Delay: 2e6, Jitter: 3e6})
	var nodes []*node
	trs := nw.NewTransports(7)
	for i, tr := range trs {
		nodes = append(nodes, startNode(t, memConfig(t, "lossy"+string(rune('a'+i)), uint64(100+i), tr, trs[0].Addr())))
	}
	took := eventually(t, "7 members converge despite loss", func() bool { return sees(nodes, names(nodes)...) })
	t.Logf("lossy join: 7 members converged in %v; network %+v", took, nw.Stats())
	// The faults were really injected (gossip goes on, so they show up).
	eventually(t, "packets dropped and duplicated", func() bool {
		st := nw.Stats()
		return st.PacketsDropped > 0 && st.PacketsDuplicated > 0
	})
}

func TestSendReliable(t *testing.T) {
	t.Parallel()
	_, nodes := memCluster(t, 7, 3)
	eventually(t, "join", func() bool { return sees(nodes, names(nodes)...) })

	payload := make([]byte, 20<<10) // larger than any UDP packet
	for i := range payload {
		payload[i] = byte(i)
	}
	require.NoError(t, nodes[0].SendReliable(nodes[1].MemberName(), payload))
	require.NoError(t, nodes[0].SendReliable(nodes[0].MemberName(), []byte("self")))
	eventually(t, "message delivered", func() bool { return len(nodes[1].rec.messages()) == 1 })
	require.Equal(t, payload, nodes[1].rec.messages()[0])
	eventually(t, "message to self delivered", func() bool { return len(nodes[0].rec.messages()) == 1 })
	require.Equal(t, uint64(1), nodes[1].Stats().MessagesReceived)

	err := nodes[0].SendReliable("nobody-00000000", []byte("x"))
	require.True(t, errors.Is(err, ErrUnknownMember), "%v", err)
}

func TestMessageLimits(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 8)
	cfg := memConfig(t, "small", 1, nw.NewTransport())
	cfg.Limits.MaxMessageBytes = 100
	cfg.Limits.MessageQueue = 1
	recv := startNode(t, cfg)
	send := startNode(t, memConfig(t, "sender", 2, nw.NewTransport(), recv.tr.Addr()))
	nodes := []*node{recv, send}
	eventually(t, "join", func() bool { return sees(nodes, names(nodes)...) })

	require.NoError(t, send.SendReliable(recv.MemberName(), make([]byte, 101)))
	eventually(t, "too large counted", func() bool { return recv.Stats().MessagesTooLarge == 1 })
	require.Empty(t, recv.rec.messages())
}

func TestNotStarted(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 9)
	c, err := New(memConfig(t, "idle", 0, nw.NewTransport()))
	require.NoError(t, err)
	require.NotZero(t, c.BootID(), "a zero BootID is replaced by a random one")
	require.Equal(t, MemberName("idle", c.BootID()), c.MemberName())
	require.ErrorIs(t, c.SendReliable("x", nil), ErrNotStarted)
	require.Zero(t, c.NumAlive())
	require.False(t, c.Addr().IsValid())
	require.NoError(t, c.Close())
	require.NoError(t, c.Close())
}

func TestStartTwice(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 10)
	n := startNode(t, memConfig(t, "once", 1, nw.NewTransport()))
	require.ErrorIs(t, n.Start(context.Background()), ErrAlreadyStarted)
	require.Equal(t, 1, n.NumAlive())
	require.Equal(t, n.tr.Addr(), n.Addr().String())
}
