package cluster_test

import (
	"context"
	"fmt"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/codec"
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

// ExampleProtocol drives two nodes' dissemination logic without memberlist
// or a clock: each Tick at the time Next asks for. Node a seals epoch e at
// its boundary plus a's jitter; the batch is lost on its way to b, and a's
// next anti-entropy digest repairs it.
func ExampleProtocol() {
	cfg := tracker.DefaultConfig() // 60 s window, 6 s sub-windows
	g := cluster.DefaultGossip()
	g.BulkSyncPeers = 0 // both start together: nothing to catch up on
	members := []cluster.Member{
		{Name: "a", Member: cluster.MemberName("a", 1), BootID: 1, State: cluster.StateAlive},
		{Name: "b", Member: cluster.MemberName("b", 2), BootID: 2, State: cluster.StateAlive},
	}
	start := time.UnixMilli(1_700_000_004_000) // the start of an epoch
	e := cfg.Epoch(start)
	newNode := func(name string, boot uint64, sealed []tracker.DestCounts) (*cluster.Protocol, *tracker.Fleet) {
		fc := tracker.DefaultFleetConfig()
		fc.Self = name
		fleet, err := tracker.NewFleet(fc, nil)
		if err != nil {
			panic(err)
		}
		p, err := cluster.NewProtocol(cluster.ProtocolConfig{
			Name: name, BootID: boot, Tracker: cfg, Gossip: g, Store: fleet,
			Seal: func(epoch int64, _ time.Time) []tracker.DestCounts {
				if epoch == e {
					return sealed
				}
				return nil
			},
		})
		if err != nil {
			panic(err)
		}
		p.SetMembers(members, start)
		return p, fleet
	}
	a, _ := newNode("a", 1, []tracker.DestCounts{{Dest: "db-1", Total: 3, Buckets: []tracker.Bucket{{Index: 10, Count: 3}}}})
	b, bFleet := newNode("b", 2, nil)
	nodes := map[string]*cluster.Protocol{a.MemberName(): a, b.MemberName(): b}
	a.Tick(start) // starts a's schedule
	b.Tick(start)

	var now time.Time
	for sealed, repaired := false, false; !repaired; {
		now = a.Next() // b's own ticks are left out
		queue := a.Tick(now)
		if len(queue) > 0 && queue[0].Type == codec.TypeBatch {
			fmt.Printf("+%v a seals epoch e: batch → b, lost\n", now.Sub(start).Round(time.Millisecond))
			sealed = true
			continue
		}
		for len(queue) > 0 {
			m := queue[0]
			r, out := nodes[m.To].Receive(m.Payload, now)
			if sealed { // the anti-entropy rounds before the seal find nothing to repair
				fmt.Printf("+%v %s → %s, repair: %v\n", now.Sub(start).Round(time.Millisecond), m.Type, m.To, r.Repair)
			}
			repaired = repaired || r.Repair
			queue = append(queue[1:], out...)
		}
	}
	fmt.Println("b's view of db-1:", bFleet.ViewCounts("db-1", cfg.EpochStart(e+1).Add(time.Minute/2))[10], "samples at index 10")
	// Output:
	// +6.026s a seals epoch e: batch → b, lost
	// +7.52s digest → b-00000002, repair: false
	// +7.52s pull → a-00000001, repair: false
	// +7.52s batch → b-00000002, repair: true
	// b's view of db-1: 3 samples at index 10
}
