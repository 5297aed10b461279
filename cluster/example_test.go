package cluster_test

import (
	"context"
	"fmt"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/internal/memtransport"
)

// Two members on an in-memory network: b joins a through its seed, then
// sends it a message.
func Example() {
	network := memtransport.New(1)
	defer network.Close()

	got := make(chan string, 1)
	start := func(name string, boot uint64, seeds ...string) *cluster.Cluster {
		cfg := cluster.DefaultConfig()
		cfg.Name, cfg.BootID = name, boot
		cfg.Transport = network.NewTransport()
		cfg.Seeds = seeds
		cfg.Timing = cluster.FastTiming()
		cfg.OnMessage = func(b []byte) { got <- string(b) }
		c, err := cluster.New(cfg)
		if err != nil {
			panic(err)
		}
		if err := c.Start(context.Background()); err != nil {
			panic(err)
		}
		return c
	}
	a := start("a", 0xdeadbeef)
	b := start("b", 0x1234, a.Addr().String())
	defer a.Close()
	defer b.Close()

	for deadline := time.Now().Add(10 * time.Second); a.NumAlive() < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	for _, m := range a.Members() {
		fmt.Println(m.Name, m.Member, m.State, m.Addr)
	}
	if err := b.SendReliable(a.MemberName(), []byte("hello from b")); err != nil {
		panic(err)
	}
	fmt.Println(<-got)
	// Output:
	// a a-deadbeef alive 10.0.0.1:7946
	// b b-00001234 alive 10.0.0.2:7946
	// hello from b
}

func ExampleMemberName() {
	fmt.Println(cluster.MemberName("db-1", 0x0123456789abcdef))
	// Output: db-1-89abcdef
}

func ExampleParseKeys() {
	keys, err := cluster.ParseKeys([]byte(`
# first line encrypts, every line decrypts
AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=
AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=
`))
	fmt.Println(len(keys), len(keys[0]), keys[0][0], err)
	_, err = cluster.ParseKeys([]byte("AQID\n"))
	fmt.Println(err)
	// Output:
	// 2 32 1 <nil>
	// cluster: bad key file: line 1: key is 3 bytes, want 32
}
