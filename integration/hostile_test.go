package integration

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// hostileMeta is the hostile member's memberlist metadata: the cluster's
// format (version 1, boot ID, flags, peer name), so that agents treat it as
// the known member "evil" and its batches get past the origin check to the
// decoder's and the fleet's.
type hostileMeta struct{ meta []byte }

func (h hostileMeta) NodeMeta(int) []byte               { return h.meta }
func (hostileMeta) NotifyMsg([]byte)                    {}
func (hostileMeta) GetBroadcasts(int, int) [][]byte     { return nil }
func (hostileMeta) LocalState(bool) []byte              { return nil }
func (hostileMeta) MergeRemoteState(buf []byte, _ bool) {}

const (
	evilName = "evil"
	evilBoot = uint64(0xe411e411)
)

// startHostile starts a raw memberlist member on loopback with the
// cluster's key and label, joined to seed.
func startHostile(t *testing.T, keyFile, label, seed string) *memberlist.Memberlist {
	t.Helper()
	keys, err := cluster.LoadKeyFile(keyFile)
	require.NoError(t, err)
	ring, err := memberlist.NewKeyring(nil, keys[0])
	require.NoError(t, err)
	meta := make([]byte, 10, 10+len(evilName))
	meta[0] = 1
	binary.BigEndian.PutUint64(meta[1:9], evilBoot)
	meta = append(meta, evilName...)

	c := memberlist.DefaultLANConfig()
	c.Name = cluster.MemberName(evilName, evilBoot)
	c.BindAddr, c.BindPort = "127.0.0.1", 0
	c.AdvertiseAddr = "127.0.0.1"
	c.Label = label
	c.Keyring = ring
	c.GossipVerifyIncoming, c.GossipVerifyOutgoing = true, true
	c.Delegate = hostileMeta{meta: meta}
	// It answers probes but makes none, and no push/pull of its own: a probe
	// or a push/pull in flight outlives memberlist's Shutdown by up to a
	// second (goleak would report it).
	c.ProbeInterval, c.PushPullInterval = time.Hour, 0
	c.LogOutput = io.Discard
	ml, err := memberlist.Create(c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ml.Shutdown() })
	_, err = ml.Join([]string{seed})
	require.NoError(t, err)
	return ml
}

// hostileMsg is one message the hostile member sends, and the rejection
// reason the receiver must count for it.
type hostileMsg struct {
	name   string
	msg    []byte
	reason string
}

// reasonOf is the cluster's mapping of a decode error to its rejection
// reason (cluster.decodeReason), to check that each crafted message fails
// where it is meant to.
func reasonOf(err error) string {
	switch {
	case errors.Is(err, codec.ErrVersion):
		return cluster.RejectDecodeVersion
	case errors.Is(err, codec.ErrType):
		return cluster.RejectDecodeType
	case errors.Is(err, codec.ErrLayout):
		return cluster.RejectDecodeLayout
	case errors.Is(err, codec.ErrTooLarge):
		return cluster.RejectDecodeTooLarge
	default:
		return cluster.RejectDecodeMalformed
	}
}

// hostileMessages returns the messages for target: garbage, decode bombs,
// an oversized message, wrong versions, types and layouts, forged origins
// (unknown, the target itself, and a conflicting copy of a batch every
// agent holds, conflictKey), epochs out of range, and digests and pulls
// from a sender that is no member.
func hostileMessages(t *testing.T, cfg tracker.Config, target testutil.Member, conflictKey tracker.BatchKey) []hostileMsg {
	t.Helper()
	layout := cfg.Layout()
	e := cfg.Epoch(time.Now())
	batch := func(k tracker.BatchKey, l tracker.Layout, dest string, count uint32) []byte {
		b, err := codec.AppendBatch(nil, tracker.Batch{Key: k, Layout: l,
			Dests: []tracker.DestCounts{{Dest: dest, Total: uint64(count), Buckets: []tracker.Bucket{{Index: 7, Count: count}}}}})
		require.NoError(t, err)
		return b
	}
	evil := func(epoch int64) tracker.BatchKey {
		return tracker.BatchKey{Origin: evilName, Boot: evilBoot, Epoch: epoch}
	}

	// A valid batch header whose destination array declares 2^32−1
	// entries, and one whose single destination name declares 4 GiB.
	empty, err := codec.AppendBatch(nil, tracker.Batch{Key: evil(e - 1), Layout: layout})
	require.NoError(t, err)
	require.Equal(t, byte(0x90), empty[len(empty)-1])
	arrayBomb := append(empty[:len(empty)-1:len(empty)-1], 0xdd, 0xff, 0xff, 0xff, 0xff)
	named := batch(evil(e-1), layout, "AAAA", 1)
	i := bytes.Index(named, []byte("\xa4AAAA"))
	require.Positive(t, i)
	stringBomb := append(append(named[:i:i], 0xdb, 0xff, 0xff, 0xff, 0xff), named[i+1:]...)

	boot, err := strconv.ParseUint(target.BootID, 16, 64)
	require.NoError(t, err)
	own := tracker.BatchKey{Origin: target.Name, Boot: boot, Epoch: e - 1}
	digest, err := codec.AppendDigest(nil, codec.Digest{Sender: "ghost-00000001", Keys: []tracker.BatchKey{conflictKey}})
	require.NoError(t, err)
	pull, err := codec.AppendPull(nil, codec.Pull{Sender: "ghost-00000001", Keys: []tracker.BatchKey{conflictKey}})
	require.NoError(t, err)

	msgs := []hostileMsg{
		{"garbage", []byte("hello, world"), cluster.RejectDecodeMalformed},
		{"truncated batch", batch(evil(e-1), layout, "poison-truncated", 3)[:20], cluster.RejectDecodeMalformed},
		{"array bomb", arrayBomb, ""},
		{"string bomb", stringBomb, ""},
		{"over 1 MiB", bytes.Repeat([]byte{0xc0}, 1<<20+1), cluster.RejectDecodeTooLarge},
		{"other version", []byte{0x92, 0x02, 0x01}, cluster.RejectDecodeVersion},
		{"unknown type", []byte{0x92, 0x01, 0x0b}, cluster.RejectDecodeType}, // 4–10 are protocol v2's
		{"other layout", batch(evil(e-1), tracker.Layout{Lowest: 1, Highest: 1000, SignificantDigits: 2}, "poison-layout", 3), cluster.RejectDecodeLayout},
		{"unknown origin", batch(tracker.BatchKey{Origin: "ghost", Boot: 1, Epoch: e - 1}, layout, "poison-ghost", 3), cluster.RejectUnknownOrigin},
		{"forged own origin", batch(own, layout, "poison-own", 3), cluster.RejectOwnOrigin},
		{"conflicting copy", batch(conflictKey, layout, testDests[0], 1000), cluster.RejectConflict},
		{"stale epoch", batch(evil(e-int64(cfg.SubWindows)-10), layout, "poison-old", 3), cluster.RejectStaleEpoch},
		{"future epoch", batch(evil(e+50), layout, "poison-new", 3), cluster.RejectFutureEpoch},
		{"digest from no member", digest, cluster.RejectUnknownSender},
		{"pull from no member", pull, cluster.RejectUnknownSender},
	}
	dec, err := codec.NewDecoder(layout)
	require.NoError(t, err)
	for k, m := range msgs {
		if m.reason != "" {
			continue
		}
		_, err := dec.DecodeBatch(m.msg)
		require.Error(t, err, m.name)
		msgs[k].reason = reasonOf(err)
		require.Contains(t, []string{cluster.RejectDecodeTooLarge, cluster.RejectDecodeMalformed}, msgs[k].reason, m.name)
	}
	return msgs
}

// attackAgents has a hostile member with the cluster's key send every
// hostileMessages message rounds times to each agent over a stream
// (SendReliable), and the garbage and the array bomb rounds times over UDP
// (SendBestEffort). Every agent must stay up with the same estimates (the
// exact union u, 5 peers), with a peak RSS under a bound, and its
// rejection counters must grow by exactly what was sent over streams, plus
// at most what was sent over UDP.
func attackAgents(t *testing.T, keyFile, label string, fleet []*agent, u *union, epochs map[string]int64) {
	t.Helper()
	const rounds = 10
	const rssBound = 64 << 20
	cfg := agentTracker(t)
	hostile := startHostile(t, keyFile, label, fleet[0].gossip)
	evilMember := cluster.MemberName(evilName, evilBoot)
	eventuallyWithin(t, membershipWait, "every agent knows the hostile member", func() (bool, string) {
		for _, a := range fleet {
			if st := membersByState(t, a)[evilMember]; st != "alive" {
				return false, fmt.Sprintf("%s lists it as %q", a.name, st)
			}
		}
		return len(hostile.Members()) == len(fleet)+1, fmt.Sprintf("the hostile member sees %d", len(hostile.Members()))
	})
	known := map[string]bool{}
	for _, n := range hostile.Members() {
		known[n.Name] = true // only the name: memberlist rewrites a node's fields on every alive message
	}

	type before struct {
		rejected map[string]uint64
		sys, rss uint64
	}
	selves := make([]testutil.Member, len(fleet))
	prior := make([]before, len(fleet))
	for j, a := range fleet {
		selves[j] = a.self(t)
		sys, rss := a.memStats(t)
		prior[j] = before{rejected: a.gossipStats(t).Rejected, sys: sys, rss: rss}
	}
	attackStart := time.Now()
	want := make([]map[string]uint64, len(fleet))
	udp := make([]map[string]uint64, len(fleet))
	for j, a := range fleet {
		require.True(t, known[selves[j].Member], "the hostile member knows %s", a.name)
		ap, err := netip.ParseAddrPort(selves[j].Addr)
		require.NoError(t, err)
		// A node of our own, not memberlist's: the agents re-advertise
		// their metadata (the hostile member looks like an older release,
		// so they fall back to version 1 metadata) while this test sends.
		target := &memberlist.Node{Name: selves[j].Member, Addr: ap.Addr().AsSlice(), Port: ap.Port()}
		o := selves[(j+1)%len(fleet)]
		oBoot, err := strconv.ParseUint(o.BootID, 16, 64)
		require.NoError(t, err)
		conflict := tracker.BatchKey{Origin: o.Name, Boot: oBoot, Epoch: epochs[o.Name]}
		msgs := hostileMessages(t, cfg, selves[j], conflict)
		want[j], udp[j] = map[string]uint64{}, map[string]uint64{}
		for range rounds {
			for _, m := range msgs {
				require.NoError(t, hostile.SendReliable(target, m.msg), "%s to %s", m.name, a.name)
				want[j][m.reason]++
			}
			for _, m := range msgs[:3] { // garbage, truncated, array bomb: each fits a packet
				require.NoError(t, hostile.SendBestEffort(target, m.msg))
				udp[j][m.reason]++
			}
		}
	}
	t.Logf("attack: %d messages sent to each of %d agents in %v", rounds*(len(want[0])+3), len(fleet), time.Since(attackStart))

	took := eventually(t, "every refusal is counted", func() (bool, string) {
		for j, a := range fleet {
			got := a.gossipStats(t).Rejected
			for reason, n := range want[j] {
				d := got[reason] - prior[j].rejected[reason]
				if d < n || d > n+udp[j][reason] {
					return false, fmt.Sprintf("%s: %s grew by %d, want %d (+ up to %d over UDP)", a.name, reason, d, n, udp[j][reason])
				}
			}
			for reason, n := range got {
				if _, sent := want[j][reason]; !sent && n != prior[j].rejected[reason] {
					return false, fmt.Sprintf("%s: %s grew, and nothing was sent for it", a.name, reason)
				}
			}
		}
		return true, ""
	})
	t.Logf("attack: every refusal counted %v after the last send", took)
	for j, a := range fleet {
		require.True(t, a.alive(), "%s is up", a.name)
		sys, rss := a.memStats(t)
		t.Logf("attack: %s Sys %.1f → %.1f MiB, peak RSS %.1f → %.1f MiB; rejected %v",
			a.name, mib(prior[j].sys), mib(sys), mib(prior[j].rss), mib(rss), a.gossipStats(t).Rejected)
		require.Less(t, rss, uint64(rssBound), "%s: peak RSS under attack", a.name)
	}
	ok, why := agentsMatch(t, fleet, u, 5)
	require.True(t, ok, "estimates after the attack: %s", why)
	require.NoError(t, hostile.Leave(time.Second))
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
