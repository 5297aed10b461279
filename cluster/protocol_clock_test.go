package cluster

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// digestFrom is a digest of no keys from member, sent at its clock.
func digestFrom(t *testing.T, member string, sentAt time.Time) []byte {
	t.Helper()
	msg, err := codec.AppendDigest(nil, codec.Digest{Sender: member, SentAtMillis: clockMillis(sentAt)})
	require.NoError(t, err)
	return msg
}

// TestClockWarnings drives one node's clock estimate with digests whose
// sent_at is set by hand: the threshold is a quarter sub-window (125 ms on
// the gossip tests' 500 ms grid), a peer needs three recent samples, the
// median shrugs off a delayed message, two nodes report the difference on
// themselves, and samples age out.
func TestClockWarnings(t *testing.T) {
	t.Parallel()
	g := DefaultGossip()
	g.BulkSyncPeers = 0
	peers := []string{MemberName("b", 2), MemberName("c", 3), MemberName("d", 4)}
	known := map[string]bool{MemberName("a", 1): true}
	for _, p := range peers {
		known[p] = true
	}
	now := time.UnixMilli(1_700_000_000_000)
	feed := func(a protoNode, offsets map[string][]time.Duration) {
		for m, offs := range offsets {
			for _, off := range offs {
				r, _ := a.Receive(digestFrom(t, m, now.Add(off)), now)
				require.Empty(t, r.Reject)
			}
		}
	}

	t.Run("within a quarter sub-window", func(t *testing.T) {
		a := newProtoNode(t, "a", 1, g, known)
		feed(a, map[string][]time.Duration{
			peers[0]: {100 * time.Millisecond, 120 * time.Millisecond, 110 * time.Millisecond},
			peers[1]: {-100 * time.Millisecond, -120 * time.Millisecond, -110 * time.Millisecond},
			peers[2]: {0, 0, 0},
		})
		require.Empty(t, a.clockWarnings(now))
	})

	t.Run("one peer off, one message delayed", func(t *testing.T) {
		a := newProtoNode(t, "a", 1, g, known)
		feed(a, map[string][]time.Duration{peers[0]: {-20 * time.Second, -20 * time.Second, -20*time.Second + 5*time.Millisecond}})
		require.Empty(t, a.clockWarnings(now), "one peer's clock of three is no verdict")
		feed(a, map[string][]time.Duration{peers[1]: {0, -3 * time.Second /* waited in a queue */, 2 * time.Millisecond}})
		want := map[string]Warning{
			"peer/b-00000002": {WarnClockSkew, "the clock of peer b (member b-00000002) is ~20s behind its peers' median"},
		}
		require.Equal(t, want, a.clockWarnings(now), "d has too few samples: a and c agree, b is 20 s off")
		feed(a, map[string][]time.Duration{peers[2]: {time.Millisecond, 0, 0}})
		require.Equal(t, want, a.clockWarnings(now))
		require.Empty(t, a.clockWarnings(now.Add(clockSampleAge+time.Millisecond)), "samples age out")
	})

	t.Run("this node off", func(t *testing.T) {
		a := newProtoNode(t, "a", 1, g, known)
		ahead := map[string][]time.Duration{}
		for _, p := range peers {
			ahead[p] = []time.Duration{2 * time.Second, 2 * time.Second, 2100 * time.Millisecond}
		}
		feed(a, ahead)
		require.Equal(t, map[string]Warning{
			"self": {WarnClockSkew, "this node's clock is ~2s behind its peers' median (3 peers)"},
		}, a.clockWarnings(now))
	})

	t.Run("two nodes", func(t *testing.T) {
		a := newProtoNode(t, "a", 1, g, map[string]bool{MemberName("a", 1): true, peers[0]: true})
		feed(a, map[string][]time.Duration{peers[0]: {-time.Second, -time.Second, -time.Second}})
		require.Equal(t, map[string]Warning{
			"self": {WarnClockSkew, "this node's clock is ~1s ahead of that of its only peer, b (member b-00000002) (with two nodes either may be wrong)"},
		}, a.clockWarnings(now))
	})

	t.Run("only members up have clocks", func(t *testing.T) {
		a := newProtoNode(t, "a", 1, g, known)
		feed(a, map[string][]time.Duration{peers[0]: {time.Hour, time.Hour, time.Hour}})
		require.Len(t, a.clocks, 1)
		r, _ := a.Receive(digestFrom(t, MemberName("ghost", 9), now), now)
		require.Equal(t, RejectUnknownSender, r.Reject)
		a.SetMembers(aliveMembers(MemberName("a", 1), peers[1]), now)
		require.Empty(t, a.clocks, "b is gone: its clock is forgotten")
		require.Empty(t, a.clockWarnings(now))
	})

	t.Run("no sent_at, no sample", func(t *testing.T) {
		a := newProtoNode(t, "a", 1, g, known)
		for range 3 {
			_, _ = a.Receive(digestFrom(t, peers[0], time.Time{}), now)
		}
		require.Empty(t, a.clocks)
	})
}

// TestClockFromBatches: a batch's sent_at is a sample of its origin's
// clock; seals carry the sealer's clock, pull answers only for the
// answerer's own batches.
func TestClockFromBatches(t *testing.T) {
	t.Parallel()
	g := DefaultGossip()
	g.BulkSyncPeers = 0
	known := map[string]bool{MemberName("a", 1): true, MemberName("b", 2): true, MemberName("c", 3): true}
	cfg := gossipTracker()
	now := time.UnixMilli(1_700_000_000_000)
	e := cfg.Epoch(now)
	b := newProtoNode(t, "b", 2, g, known)
	b.Tick(now)
	b.sealed[e] = destCounts(1, 1)
	sealAt := cfg.EpochStart(e + 1).Add(b.Jitter())
	msgs := b.Tick(sealAt)
	require.Len(t, msgs, 2)
	dec, err := codec.NewDecoder(cfg.Layout())
	require.NoError(t, err)
	_, err = dec.DecodeBatch(msgs[0].Payload)
	require.NoError(t, err)
	require.Equal(t, sealAt.UnixMilli(), dec.SentAtMillis(), "a seal carries the sealer's clock")

	// b holds its own batch and one of c's; a pull of both is answered
	// with b's clock on b's batch only.
	cb := tracker.Batch{Key: tracker.BatchKey{Origin: "c", Boot: 3, Epoch: e}, Layout: cfg.Layout(), Dests: destCounts(1, 1)}
	require.Equal(t, tracker.InsertNew, b.fleet.Insert(cb, sealAt))
	pull, err := codec.AppendPull(nil, codec.Pull{Sender: MemberName("a", 1), SentAtMillis: 1,
		Keys: codec.SortKeys([]tracker.BatchKey{{Origin: "b", Boot: 2, Epoch: e}, cb.Key})})
	require.NoError(t, err)
	answerAt := sealAt.Add(time.Second)
	_, answers := b.Receive(pull, answerAt)
	require.Len(t, answers, 2)
	for _, m := range answers {
		got, err := dec.DecodeBatch(m.Payload)
		require.NoError(t, err)
		if got.Key.Origin == "b" {
			require.Equal(t, answerAt.UnixMilli(), dec.SentAtMillis())
		} else {
			require.Zero(t, dec.SentAtMillis(), "another origin's batch: whose clock would it be?")
		}
	}

	a := newProtoNode(t, "a", 1, g, known)
	for range 3 {
		r, _ := a.Receive(msgs[0].Payload, sealAt.Add(-10*time.Second))
		require.True(t, r.Inserted)
	}
	require.Contains(t, a.clocks, MemberName("b", 2))
	require.Equal(t, int64(10_000), a.clocks[MemberName("b", 2)].samples[0].offset, "b's clock is 10 s ahead of a's")
}

func TestClockHelpers(t *testing.T) {
	t.Parallel()
	require.Equal(t, int64(2), median([]int64{3, 1, 2}))
	require.Equal(t, int64(2), median([]int64{4, 1, 3, 0}))
	require.Equal(t, int64(math.MaxInt64-1), median([]int64{math.MaxInt64, math.MaxInt64 - 2}))
	require.Equal(t, int64(math.MinInt64+1), median([]int64{math.MinInt64, math.MinInt64 + 2}))
	require.Equal(t, int64(math.MaxInt64), abs64(math.MinInt64))
	for ms, want := range map[int64]string{
		-848: "~850ms", 2149: "~2.1s", -20_400: "~20s", 3_600_400: "~1h0m0s", math.MinInt64: "~876000h0m0s",
	} {
		require.Equal(t, want, approx(ms), "%d", ms)
	}
	require.Zero(t, clockMillis(time.Time{}), "before 1970: no clock")
}
