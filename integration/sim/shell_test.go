package sim

import (
	"testing"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/stretchr/testify/require"
)

// TestShellDropsExpiredMessages checks that the shell's send queue, as
// cluster's, drops a message whose expiry has passed while it waited when
// its turn comes, counted in SendDrops and never sent, and sends the next
// one, not expired. Node 0 is cut off from the others (sends fail at
// once), so what it sends counts at the sender and goes nowhere.
func TestShellDropsExpiredMessages(t *testing.T) {
	s := churnSim(t, 4, cluster.ProtocolV2, nil)
	s.Partition(Cut{Groups: [][]int{{0}}})
	to := s.nodes[1].member
	s.enqueue(0, []cluster.Message{
		{To: to, Type: codec.TypeDigest, Payload: []byte{1}, Expires: s.Now()},
		{To: to, Type: codec.TypeDigest, Payload: []byte{2}, Expires: s.Now().Add(time.Hour)},
		{To: to, Type: codec.TypeDigest, Payload: []byte{3}},
	}, false)
	st := s.NodeStats(0)
	require.Equal(t, uint64(1), st.SendDrops, "the expired message dropped")
	require.Equal(t, uint64(1), st.Messages[MsgDigest], "the next one sent")
	require.Equal(t, 1, s.nodes[0].sh.queued, "the last waits for the send in flight")
	require.NoError(t, s.Run(time.Second))
	require.Equal(t, uint64(1), s.NodeStats(0).SendDrops)
	require.GreaterOrEqual(t, s.NodeStats(0).Messages[MsgDigest], uint64(2), "the one without expiry sent")
}

// TestShellDropsDeadMembersMessages checks that a node's send queue loses
// what waits for a member once its member list shows the member dead, as
// cluster's gossiper does on a dead event: a cut whose sends stall leaves
// messages waiting for the members across it, and when each side lists
// the other dead they go, counted in SendDrops.
func TestShellDropsDeadMembersMessages(t *testing.T) {
	s := churnSim(t, 4, cluster.ProtocolV2, nil)
	require.NoError(t, s.Run(10*time.Second))
	s.Partition(Cut{Groups: [][]int{{0, 1}, {2, 3}}, Detect: 8 * time.Second, Stall: 10 * time.Second})
	waiting := func(i, j int32) int {
		if p := s.nodes[i].sh.peers[j]; p != nil {
			return len(p.msgs)
		}
		return 0
	}
	across := func() int {
		n := 0
		for _, i := range []int32{0, 1} {
			for _, j := range []int32{2, 3} {
				n += waiting(i, j) + waiting(j, i)
			}
		}
		return n
	}
	require.NoError(t, s.Run(18*time.Second-time.Millisecond))
	var drops uint64
	for i := range 4 {
		drops += s.NodeStats(i).SendDrops
	}
	before := across()
	require.Positive(t, before, "messages wait across the stalled cut")
	require.NoError(t, s.Run(18*time.Second+time.Millisecond)) // listed dead at 18 s
	require.Zero(t, across(), "nothing waits for a member listed dead")
	var after uint64
	for i := range 4 {
		after += s.NodeStats(i).SendDrops
	}
	require.GreaterOrEqual(t, after-drops, uint64(before), "what waited dropped and counted")
	require.NoError(t, s.Run(30*time.Second))
	require.Zero(t, across(), "and nothing is queued for them while they are dead")
}

// TestShellBackedOffMemberBackPromptly checks the shell's set-aside, as
// cluster's TestSendQueueBackedOffMemberBackPromptly does the queue's: a
// cut never noticed whose sends stall for the stream timeout leaves the
// members across it backed off, with messages waiting for them behind
// stalled probes; a setAsideAfter after the heal (plus a connect), every
// message that waited has left, and never more than backoffSends sends
// are in flight to one member.
func TestShellBackedOffMemberBackPromptly(t *testing.T) {
	s := churnSim(t, 4, cluster.ProtocolV2, nil)
	require.NoError(t, s.Run(10*time.Second))
	s.Partition(Cut{Groups: [][]int{{0, 1}, {2, 3}}, Stall: 10 * time.Second})
	type pair struct{ from, to int32 }
	var pairs []pair
	for _, i := range []int32{0, 1} {
		for _, j := range []int32{2, 3} {
			pairs = append(pairs, pair{i, j}, pair{j, i})
		}
	}
	heal := 10*time.Second + 23700*time.Millisecond
	for at := 10 * time.Second; at < heal; at += 100 * time.Millisecond {
		require.NoError(t, s.Run(at))
		for _, pr := range pairs {
			if p := s.nodes[pr.from].sh.peers[pr.to]; p != nil {
				inFlight := p.setAside
				if p.busy {
					inFlight++
				}
				require.LessOrEqual(t, inFlight, backoffSends, "%v: sends in flight from %d to %d", at, pr.from, pr.to)
			}
		}
	}
	require.NoError(t, s.Run(heal))
	s.Heal(time.Second)
	waited := map[pair][]*byte{} // the payloads waiting at the heal, by pair
	for _, pr := range pairs {
		if p := s.nodes[pr.from].sh.peers[pr.to]; p != nil && p.backedOff {
			for _, m := range p.msgs {
				waited[pr] = append(waited[pr], &m.payload[0])
			}
		}
	}
	require.NotEmpty(t, waited, "messages wait for members backed off at the heal")
	require.NoError(t, s.Run(heal+setAsideAfter+100*time.Millisecond))
	for pr, payloads := range waited {
		p := s.nodes[pr.from].sh.peers[pr.to]
		if p == nil {
			continue // every send done, none waiting: normal again
		}
		require.False(t, p.backedOff, "%d to %d: normal again", pr.from, pr.to)
		for _, m := range p.msgs {
			require.NotContains(t, payloads, &m.payload[0], "%d to %d: a message waiting at the heal still waits", pr.from, pr.to)
		}
	}
}
