package cluster_test

import (
	"context"
	"fmt"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/internal/memtransport"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
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

// ExampleProtocol drives two nodes' dissemination logic without memberlist:
// node a seals an epoch whose batch is lost, and one digest exchange
// repairs it.
func ExampleProtocol() {
	cfg := tracker.DefaultConfig() // 60 s window, 6 s sub-windows
	members := map[string]bool{cluster.MemberName("a", 1): true, cluster.MemberName("b", 2): true}
	newNode := func(name string, boot uint64) (*cluster.Protocol, *tracker.Fleet) {
		fc := tracker.DefaultFleetConfig()
		fc.Self = name
		fleet, err := tracker.NewFleet(fc, nil)
		if err != nil {
			panic(err)
		}
		p, err := cluster.NewProtocol(cluster.ProtocolConfig{
			Name: name, BootID: boot, Tracker: cfg, Gossip: cluster.DefaultGossip(), Store: fleet,
			KnownOrigin: func(n string, b uint64) bool { return members[cluster.MemberName(n, b)] },
			Up:          func(m string) bool { return members[m] },
		})
		if err != nil {
			panic(err)
		}
		return p, fleet
	}
	a, _ := newNode("a", 1)
	b, bFleet := newNode("b", 2)
	nodes := map[string]*cluster.Protocol{a.MemberName(): a, b.MemberName(): b}

	now := time.UnixMilli(1_700_000_000_000)
	e := cfg.Epoch(now) - 1
	sealed := []tracker.DestCounts{{Dest: "db-1", Total: 3, Buckets: []tracker.Bucket{{Index: 10, Count: 3}}}}
	lost, _ := a.Seal(e, sealed, []string{b.MemberName()}, now)
	fmt.Println("sealed:", len(lost), "message to", lost[0].To, "(lost)")

	queue := a.Digests(b.MemberName(), now)
	for len(queue) > 0 {
		m := queue[0]
		r, out := nodes[m.To].Receive(m.Payload, now)
		fmt.Println(m.To, "got a", r.Type, "repair:", r.Repair)
		queue = append(queue[1:], out...)
	}
	fmt.Println("b's view of db-1:", bFleet.ViewCounts("db-1", now)[10], "samples at index 10")
	// Output:
	// sealed: 1 message to b-00000002 (lost)
	// b-00000002 got a digest repair: false
	// a-00000001 got a pull repair: false
	// b-00000002 got a batch repair: true
	// b's view of db-1: 3 samples at index 10
}
