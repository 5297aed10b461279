package cluster

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
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
