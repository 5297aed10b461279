package memtransport

import (
	"io"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// twoHosts returns a network of the given seed, closed when t ends, and two
// transports on it.
func twoHosts(t *testing.T, seed uint64) (n *Network, a, b *Transport) {
	n = New(seed)
	t.Cleanup(n.Close)
	return n, n.NewTransport(), n.NewTransport()
}

// recv returns the next packet or fails after a wide deadline.
func recv(t *testing.T, tr *Transport) *memberlist.Packet {
	t.Helper()
	select {
	case p := <-tr.PacketCh():
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("no packet")
		return nil
	}
}

func pending(tr *Transport) int { return len(tr.packetCh) }

func TestNewTransports(t *testing.T) {
	n := New(1)
	t.Cleanup(n.Close)
	trs := n.NewTransports(3)
	require.Len(t, trs, 3)
	seen := map[string]bool{}
	for _, tr := range trs {
		require.False(t, seen[tr.Addr()], "fresh addresses")
		seen[tr.Addr()] = true
	}
	require.NotContains(t, seen, n.NewTransport().Addr())
}

func TestPackets(t *testing.T) {
	t.Parallel()
	n, a, b := twoHosts(t, 1)
	require.NotEqual(t, a.Addr(), b.Addr())
	ip, port, err := a.FinalAdvertiseAddr("1.2.3.4", 1)
	require.NoError(t, err)
	require.Equal(t, a.Addr(), (&memberlist.Node{Addr: ip, Port: uint16(port)}).Address())

	buf := []byte("hello")
	_, err = a.WriteTo(buf, b.Addr())
	require.NoError(t, err)
	buf[0] = 'j' // the network copied it
	p := recv(t, b)
	require.Equal(t, "hello", string(p.Buf))
	require.Equal(t, a.Addr(), p.From.String())

	_, err = a.WriteTo([]byte("x"), "10.9.9.9:7946") // nobody there: lost like UDP
	require.NoError(t, err)
	require.Equal(t, Stats{PacketsSent: 2, PacketsDelivered: 1, PacketsDropped: 1}, n.Stats())
}

func TestFaultsAreSeededAndCounted(t *testing.T) {
	t.Parallel()
	run := func(seed uint64) Stats {
		n := New(seed)
		defer n.Close()
		a, b := n.NewTransport(), n.NewTransport()
		n.SetFaults(Faults{Drop: 0.3, Duplicate: 0.2})
		for range 1000 {
			_, _ = a.WriteTo([]byte{1}, b.Addr())
		}
		require.Equal(t, int(n.Stats().PacketsDelivered), pending(b))
		return n.Stats()
	}
	s := run(7)
	require.Equal(t, s, run(7), "same seed, same faults")
	require.NotEqual(t, s, run(8))
	require.InDelta(t, 300, s.PacketsDropped, 60)
	require.InDelta(t, 140, s.PacketsDuplicated, 40) // 0.2 of the ~700 kept
	require.Equal(t, s.PacketsSent-s.PacketsDropped+s.PacketsDuplicated, s.PacketsDelivered)
}

func TestDelay(t *testing.T) {
	t.Parallel()
	n, a, b := twoHosts(t, 2)
	n.SetFaults(Faults{Delay: 20 * time.Millisecond})
	before := time.Now()
	_, err := a.WriteTo([]byte("late"), b.Addr())
	require.NoError(t, err)
	p := recv(t, b)
	// A timer never fires early, and the timestamp is taken at delivery.
	require.GreaterOrEqual(t, p.Timestamp.Sub(before), 20*time.Millisecond)

	n.SetFaults(Faults{Delay: time.Hour})
	_, _ = a.WriteTo([]byte("held"), b.Addr())
	require.Zero(t, pending(b))
	require.Equal(t, uint64(1), n.Stats().PacketsDelivered)

	// A delayed packet to a transport that shuts down is discarded and its
	// timer stopped: nothing is left running (goleak checks).
	_, _ = a.WriteTo([]byte("never"), b.Addr())
	require.NoError(t, b.Shutdown())
	require.Zero(t, pending(b))
}

func TestPartitionAndHeal(t *testing.T) {
	t.Parallel()
	n := New(3)
	defer n.Close()
	a, b, c := n.NewTransport(), n.NewTransport(), n.NewTransport()
	conn, err := a.DialTimeout(b.Addr(), time.Second)
	require.NoError(t, err)
	n.Partition([]string{a.Addr()}, []string{b.Addr()})

	_, _ = a.WriteTo([]byte("x"), b.Addr())
	_, _ = b.WriteTo([]byte("x"), a.Addr())
	_, _ = a.WriteTo([]byte("to c"), c.Addr())
	require.Equal(t, "to c", string(recv(t, c).Buf), "c is in no group: its links stay")
	require.Zero(t, pending(a)+pending(b))
	_, err = a.DialTimeout(b.Addr(), time.Second)
	require.ErrorIs(t, err, ErrUnreachable)
	_, err = conn.Write([]byte("x"))
	require.Error(t, err, "an open stream across the cut broke")

	n.Heal()
	_, _ = a.WriteTo([]byte("back"), b.Addr())
	require.Equal(t, "back", string(recv(t, b).Buf))
	_, err = b.DialTimeout(a.Addr(), time.Second)
	require.NoError(t, err)
}

func TestStreams(t *testing.T) {
	t.Parallel()
	n, a, b := twoHosts(t, 4)
	conn, err := a.DialAddressTimeout(memberlist.Address{Addr: b.Addr(), Name: "ignored"}, time.Second)
	require.NoError(t, err)
	var acc interface {
		io.ReadWriteCloser
	}
	select {
	case c := <-b.StreamCh():
		require.Equal(t, a.Addr(), c.RemoteAddr().String())
		require.Equal(t, b.Addr(), conn.RemoteAddr().String())
		acc = c
	case <-time.After(5 * time.Second):
		t.Fatal("no stream")
	}
	go func() { _, _ = conn.Write([]byte("ping")); _ = conn.Close() }()
	got, err := io.ReadAll(acc)
	require.NoError(t, err)
	require.Equal(t, "ping", string(got))

	_, err = a.DialTimeout("10.9.9.9:7946", time.Second)
	require.ErrorIs(t, err, ErrRefused)
	require.Equal(t, uint64(1), n.Stats().StreamsOpened)
}

func TestCrashAndShutdown(t *testing.T) {
	t.Parallel()
	n, a, b := twoHosts(t, 5)
	conn, err := b.DialTimeout(a.Addr(), time.Second)
	require.NoError(t, err)
	require.True(t, n.Crash(a.Addr()))
	require.False(t, n.Crash("10.9.9.9:7946"))

	_, err = b.WriteTo([]byte("x"), a.Addr())
	require.NoError(t, err, "writes to a crashed host look sent")
	_, err = a.WriteTo([]byte("x"), b.Addr())
	require.NoError(t, err)
	require.Zero(t, pending(a)+pending(b))
	_, err = b.DialTimeout(a.Addr(), time.Second)
	require.ErrorIs(t, err, ErrUnreachable)
	_, err = conn.Read(make([]byte, 1))
	require.Error(t, err)

	_, err = n.NewTransportAt(a.Addr())
	require.ErrorIs(t, err, ErrAddrInUse)
	require.NoError(t, a.Shutdown())
	require.NoError(t, a.Shutdown())
	_, err = a.WriteTo([]byte("x"), b.Addr())
	require.ErrorIs(t, err, ErrClosed)
	again, err := n.NewTransportAt(a.Addr())
	require.NoError(t, err, "a shut-down transport frees its address")
	_, _ = b.WriteTo([]byte("hi"), again.Addr())
	require.Equal(t, "hi", string(recv(t, again).Buf))
}
