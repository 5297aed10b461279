package memtransport_test

import (
	"fmt"

	"github.com/adaptivetimeout/adaptivetimeout/internal/memtransport"
)

func Example() {
	n := memtransport.New(42)
	defer n.Close()
	a, b := n.NewTransport(), n.NewTransport()

	_, _ = a.WriteTo([]byte("ping"), b.Addr())
	p := <-b.PacketCh()
	fmt.Println(string(p.Buf), "from", p.From)

	n.Partition([]string{a.Addr()}, []string{b.Addr()})
	_, _ = a.WriteTo([]byte("lost"), b.Addr())
	_, err := a.DialTimeout(b.Addr(), 0)
	fmt.Println(err)
	n.Heal()
	fmt.Printf("%+v\n", n.Stats())
	// Output:
	// ping from 10.0.0.1:7946
	// memtransport: host unreachable: dial 10.0.0.2:7946
	// {PacketsSent:2 PacketsDelivered:1 PacketsDropped:1 PacketsDuplicated:0 StreamsOpened:0 StreamsFailed:1 StreamsDropped:0 StreamsDuplicated:0 StreamsStalled:0}
}
