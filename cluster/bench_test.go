package cluster

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// BenchmarkSendReliable20KB sends one 20 KiB payload to each of 4 peers over
// real loopback sockets with encryption and a label: the cost of pushing a
// sealed batch to a small fleet. The naive alternative, UDP best-effort,
// cannot carry it at all (1.36 KB limit), so there is no baseline.
func BenchmarkSendReliable20KB(b *testing.B) {
	key, err := GenerateKey()
	if err != nil {
		b.Fatal(err)
	}
	var peers []*Cluster
	for i := range 5 {
		cfg := DefaultConfig()
		cfg.Name = fmt.Sprintf("bench%d", i)
		cfg.Bind = "127.0.0.1:0"
		cfg.Label = "bench"
		cfg.Timing = FastTiming()
		cfg.KeyFile = b.TempDir() + "/keys"
		if err := writeFile(cfg.KeyFile, key); err != nil {
			b.Fatal(err)
		}
		if i > 0 {
			cfg.Seeds = []string{peers[0].Addr().String()}
		}
		cfg.OnMessage = func([]byte) {}
		c, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Start(b.Context()); err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		peers = append(peers, c)
	}
	for deadline := time.Now().Add(testutil.WaitWide); peers[0].NumAlive() < 5; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("peers did not join")
		}
	}
	payload := make([]byte, 20<<10)
	b.SetBytes(4 * int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		for _, p := range peers[1:] {
			if err := peers[0].SendReliable(p.MemberName(), payload); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func writeFile(path, key string) error { return os.WriteFile(path, []byte(key+"\n"), 0o600) }

// BenchmarkSyncProtocolPoll is the lazy path a node's every query takes
// between epoch boundaries, when nothing is due: SyncProtocol.Poll (one
// atomic load and a comparison, inlined), against the naive alternative of
// taking the protocol's lock to ask it (Protocol.Tick under the mutex,
// which also finds nothing due).
func BenchmarkSyncProtocolPoll(b *testing.B) {
	fc := tracker.DefaultFleetConfig()
	fc.Self = "a"
	fleet, err := tracker.NewFleet(fc, nil)
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewSyncProtocol(ProtocolConfig{
		Name: "a", BootID: 1, Tracker: fc.Tracker, Gossip: DefaultGossip(), Store: fleet,
		Seal: func(int64, time.Time) []tracker.DestCounts { return nil },
	})
	if err != nil {
		b.Fatal(err)
	}
	now := fc.Tracker.EpochStart(fc.Tracker.Epoch(time.UnixMilli(1_700_000_000_000))).Add(10 * time.Millisecond)
	s.Poll(now) // starts the schedule: nothing is due for the rest of the epoch
	now = now.Add(time.Millisecond)
	b.Run("poll", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.Poll(now)
		}
	})
	b.Run("locked tick", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.mu.Lock()
			_ = s.p.Tick(now)
			s.mu.Unlock()
		}
	})
}
