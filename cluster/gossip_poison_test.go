package cluster

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// TestGossipPoisonedPeerRefused has a plain member (memberlist only, no
// Store) send hostile bytes with SendReliable to a gossiping member: each
// is refused with its reason counted, and the victim's view is unchanged.
func TestGossipPoisonedPeerRefused(t *testing.T) {
	t.Parallel()
	// The batches of epoch e (the epoch at the start) must stay accepted
	// and in view to the end: 9.4 s under -race at load 20 on 2 cores,
	// past the 8 s window, and the first copy's view was gone.
	o := longLived(defaultGossipOpts())
	nw, nodes := gossipCluster(t, 16, 2, o)
	victim := nodes[0]
	evil := startNode(t, memConfig(t, "evil", 0xe411, nw.NewTransport(), nodes[0].tr.Addr()))
	eventually(t, "the victim knows the evil member", func() bool {
		return slices.ContainsFunc(victim.Members(), func(m Member) bool { return m.Name == "evil" && m.BootID == 0xe411 })
	})

	cfg := o.tracker
	layout := cfg.Layout()
	e := cfg.Epoch(time.Now())
	batch := func(origin string, boot uint64, epoch int64, l tracker.Layout, dest string, count uint32) []byte {
		b, err := codec.AppendBatch(nil, tracker.Batch{
			Key:    tracker.BatchKey{Origin: origin, Boot: boot, Epoch: epoch},
			Layout: l,
			Dests:  []tracker.DestCounts{{Dest: dest, Total: uint64(count), Buckets: []tracker.Bucket{{Index: 7, Count: count}}}},
		})
		require.NoError(t, err)
		return b
	}
	// A valid batch header with no destinations, then a declared 2^32−1 of them.
	empty, err := codec.AppendBatch(nil, tracker.Batch{Key: tracker.BatchKey{Origin: "evil", Boot: 0xe411, Epoch: e - 1}, Layout: layout})
	require.NoError(t, err)
	require.Equal(t, byte(0x90), empty[len(empty)-1])
	bomb := append(empty[:len(empty)-1:len(empty)-1], 0xdd, 0xff, 0xff, 0xff, 0xff)
	digest, err := codec.AppendDigest(nil, codec.Digest{Sender: "ghost-00000001", Keys: []tracker.BatchKey{{Origin: "g1", Boot: 1, Epoch: e}}})
	require.NoError(t, err)
	pull, err := codec.AppendPull(nil, codec.Pull{Sender: "ghost-00000001", Keys: []tracker.BatchKey{{Origin: "g1", Boot: 1, Epoch: e}}})
	require.NoError(t, err)

	cases := []struct {
		name   string
		msg    []byte
		reason string
	}{
		{"garbage", []byte("hello, world"), RejectDecodeMalformed},
		{"truncated", batch("evil", 0xe411, e-1, layout, "poison-trunc", 3)[:20], RejectDecodeMalformed},
		{"decode bomb", bomb, RejectDecodeTooLarge},
		{"other version", []byte{0x92, 0x02, 0x01}, RejectDecodeVersion},
		{"unknown type", []byte{0x92, 0x01, 0x0b}, RejectDecodeType}, // 4–10 are protocol v2's
		{"wrong layout", batch("evil", 0xe411, e-1, tracker.Layout{Lowest: 1, Highest: 1000, SignificantDigits: 2}, "poison-layout", 3), RejectDecodeLayout},
		{"forged unknown origin", batch("ghost", 1, e-1, layout, "poison-ghost", 3), RejectUnknownOrigin},
		{"forged own origin", batch(victim.Name(), victim.BootID(), e-1, layout, "poison-own", 3), RejectOwnOrigin},
		{"stale epoch", batch("evil", 0xe411, e-int64(cfg.SubWindows)-5, layout, "poison-old", 3), RejectStaleEpoch},
		{"future epoch", batch("evil", 0xe411, e+50, layout, "poison-new", 3), RejectFutureEpoch},
		{"digest from unknown sender", digest, RejectUnknownSender},
		{"pull from unknown sender", pull, RejectUnknownSender},
		{"over the message limit", bytes.Repeat([]byte{0xc0}, DefaultLimits().MaxMessageBytes+1), RejectDecodeTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := victim.GossipStats().Rejected[tc.reason]
			require.NoError(t, evil.SendReliable(victim.MemberName(), tc.msg))
			eventually(t, "refusal counted as "+tc.reason, func() bool {
				return victim.GossipStats().Rejected[tc.reason] == before+1
			})
		})
	}

	// A conflicting copy of a known member's batch: the first copy stays.
	first := batch("evil", 0xe411, e, layout, "evil-dest", 3)
	require.NoError(t, evil.SendReliable(victim.MemberName(), first))
	// memberlist handles each stream on its own goroutine: wait for the
	// first copy to be stored before sending the second, or it may arrive
	// first.
	eventually(t, "first copy stored", func() bool { return victim.GossipStats().Outcomes["new"] == 1 })
	require.NoError(t, evil.SendReliable(victim.MemberName(), batch("evil", 0xe411, e, layout, "evil-dest", 9)))
	eventually(t, "conflict counted", func() bool { return victim.GossipStats().Rejected[RejectConflict] == 1 })

	s := victim.GossipStats()
	require.Equal(t, uint64(1), s.Outcomes["new"], "only the first evil-dest batch was stored")
	require.Zero(t, s.Rejected["store_malformed"])
	for _, d := range victim.fleet.Destinations(time.Now()) {
		require.NotContains(t, d, "poison", "a refused batch reached the view")
	}
	got := victim.fleet.ViewCounts("evil-dest", cfg.EpochStart(e+1))
	require.NotNil(t, got)
	require.Equal(t, uint64(3), got[7], "the first copy counts, the conflicting one does not")

	// Bad censored counts for a destination in the view, in epochs the
	// victim has no batch of: each refused as malformed and counted, and
	// the estimate does not move.
	at := cfg.EpochStart(e + 1)
	before, err := victim.fleet.Estimate("evil-dest", 0.99, at)
	require.NoError(t, err)
	for i, tc := range badCensored(t, "evil", 0xe411, e-1, layout, "evil-dest") {
		n := victim.GossipStats().Rejected[RejectDecodeMalformed]
		require.NoError(t, evil.SendReliable(victim.MemberName(), tc.msg))
		eventually(t, fmt.Sprintf("%s (%d) refused as %s", tc.name, i, RejectDecodeMalformed), func() bool {
			return victim.GossipStats().Rejected[RejectDecodeMalformed] == n+1
		})
	}
	after, err := victim.fleet.Estimate("evil-dest", 0.99, at)
	require.NoError(t, err)
	require.Equal(t, before, after)
	require.Equal(t, s.Outcomes, victim.GossipStats().Outcomes, "nothing more reached the Store")

	// The same batch without the flaw is taken, timed-out counts and all.
	require.NoError(t, evil.SendReliable(victim.MemberName(), validCensored(t, "evil", 0xe411, e-1, layout, "evil-dest")))
	eventually(t, "the valid batch stored", func() bool { return victim.GossipStats().Outcomes["new"] == 2 })
	after, err = victim.fleet.Estimate("evil-dest", 0.99, at)
	require.NoError(t, err)
	require.Equal(t, before.Samples+6, after.Samples)
	require.Equal(t, before.Censored+2, after.Censored)
}

// validCensored is a batch of one destination with buckets 7:3 and 9:3, of
// which 7:1 and 9:1 timed out.
func validCensored(t *testing.T, origin string, boot uint64, epoch int64, l tracker.Layout, dest string) []byte {
	t.Helper()
	msg, err := codec.AppendBatch(nil, tracker.Batch{
		Key:    tracker.BatchKey{Origin: origin, Boot: boot, Epoch: epoch},
		Layout: l,
		Dests: []tracker.DestCounts{{Dest: dest, Total: 6,
			Buckets:  []tracker.Bucket{{Index: 7, Count: 3}, {Index: 9, Count: 3}},
			TimedOut: []tracker.Bucket{{Index: 7, Count: 1}, {Index: 9, Count: 1}}}},
	})
	require.NoError(t, err)
	return msg
}

// badCensored returns batches of one destination whose timed-out counts
// contradict its buckets, each as the codec would write it but for the
// flaw: the bytes of a sender that bypasses the encoder's checks.
func badCensored(t *testing.T, origin string, boot uint64, epoch int64, l tracker.Layout, dest string) []struct {
	name string
	msg  []byte
} {
	t.Helper()
	// validCensored's message ends with the timed-out pairs [7, 1, Δ2, 1].
	valid := validCensored(t, origin, boot, epoch, l, dest)
	tail := len(valid) - 5
	require.Equal(t, []byte{0x94, 7, 1, 2, 1}, valid[tail:])
	patch := func(off int, b byte) []byte {
		out := slices.Clone(valid)
		out[tail+off] = b
		return out
	}
	return []struct {
		name string
		msg  []byte
	}{
		{"timed out in no bucket", patch(3, 3)},      // 7, 10
		{"timed out above the bucket", patch(4, 4)},  // 9: 4 > 3
		{"timed-out count 0", patch(2, 0)},           // 7: 0
		{"timed out twice in a bucket", patch(3, 0)}, // 7, 7
		{"timed out descending", patch(3, 0xff)},     // 7, 6 (Δ −1)
	}
}
