package cluster

import (
	"context"
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/internal/memtransport"
)

// within runs f and fails t unless it returns within limit; it returns
// what f returned.
func within[T any](t *testing.T, limit time.Duration, what string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(limit):
		t.Fatalf("%s did not return within %v", what, limit)
		panic("unreachable")
	}
}

// TestCloseDuringSendToStalledPeer sends to a peer that accepts the stream
// and never reads it. While the send is in flight, Addr and Close return
// promptly (far within the stream timeout), and the send fails once Close
// shut the transport down.
func TestCloseDuringSendToStalledPeer(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 30)
	cfg := memConfig(t, "sender", 1, nw.NewTransport())
	cfg.Timing.StreamTimeout = time.Minute
	send := startNode(t, cfg)
	stalled := startNode(t, memConfig(t, "stalled", 2, nw.NewTransport(), send.tr.Addr()))
	nodes := []*node{send, stalled}
	eventually(t, "join", func() bool { return sees(nodes, names(nodes)...) })

	nw.Stall(stalled.tr.Addr(), true)
	sent := make(chan error, 1)
	go func() { sent <- send.SendReliable(stalled.MemberName(), make([]byte, 64<<10)) }()
	eventually(t, "the send is in flight", func() bool { return nw.Stats().StreamsStalled == 1 })

	const limit = 10 * time.Second // LeaveTimeout is 1 s; the send would wait a minute
	require.Equal(t, send.tr.Addr(), within(t, limit, "Addr", send.Addr).String())
	start := time.Now()
	require.NoError(t, within(t, limit, "Close", send.Close))
	t.Logf("Close returned in %v with a send to a stalled peer in flight", time.Since(start))
	select {
	case err := <-sent:
		require.Error(t, err, "the send in flight failed when the transport shut down")
	case <-time.After(limit):
		t.Fatal("the send in flight outlived Close")
	}
	require.ErrorIs(t, send.SendReliable(stalled.MemberName(), nil), ErrClosed)
}

// TestClosingTransportShutdownBreaksStreams checks the transport wrapper on
// real sockets: memberlist's NetTransport leaves a dialled stream open on
// Shutdown, the wrapper closes it, so a write blocked on a peer that never
// reads fails at once; later dials are refused.
func TestClosingTransportShutdownBreaksStreams(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var accepted []net.Conn
	var mu sync.Mutex
	acceptDone := make(chan struct{})
	go func() { // accept and never read
		defer close(acceptDone)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted = append(accepted, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-acceptDone
		mu.Lock()
		defer mu.Unlock()
		for _, c := range accepted {
			_ = c.Close()
		}
	})

	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}})
	require.NoError(t, err)
	tr := newClosingTransport(nt)
	c, err := tr.DialTimeout(ln.Addr().String(), time.Second)
	require.NoError(t, err)
	require.NoError(t, c.SetWriteDeadline(time.Now().Add(time.Minute)))
	wrote := make(chan error, 1)
	go func() {
		buf := make([]byte, 1<<20)
		for {
			if _, err := c.Write(buf); err != nil { // fills the socket buffers, then blocks
				wrote <- err
				return
			}
		}
	}()
	time.Sleep(100 * time.Millisecond) // let the writer block (it fails the same way if it has not)
	require.NoError(t, tr.Shutdown())
	select {
	case err := <-wrote:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a write on a dialled stream survived Shutdown")
	}
	_, err = tr.DialTimeout(ln.Addr().String(), time.Second)
	require.ErrorIs(t, err, ErrClosed)
}

// TestCloseDiscardsQueuedMessages holds the message handler while more
// messages wait in the queue, then closes: the handler gets no more, and
// the messages left in the queue are counted as discarded.
func TestCloseDiscardsQueuedMessages(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 31)
	release := make(chan struct{})
	var handled sync.WaitGroup
	handled.Add(1)
	var mu sync.Mutex
	var got []string
	cfg := memConfig(t, "recv", 1, nw.NewTransport())
	recvC, err := New(func() Config {
		cfg.OnMessage = func(b []byte) {
			mu.Lock()
			got = append(got, string(b))
			first := len(got) == 1
			mu.Unlock()
			if first {
				handled.Done()
				<-release
			}
		}
		return cfg
	}())
	require.NoError(t, err)
	require.NoError(t, recvC.Start(t.Context()))
	t.Cleanup(func() { _ = recvC.Close() })
	recv := &node{Cluster: recvC, rec: &recorder{}, tr: cfg.Transport.(*memtransport.Transport)}
	send := startNode(t, memConfig(t, "send", 2, nw.NewTransport(), recv.tr.Addr()))
	eventually(t, "join", func() bool { return sees([]*node{recv, send}, recv.MemberName(), send.MemberName()) })

	for _, m := range []string{"first", "a", "b", "c"} {
		require.NoError(t, send.SendReliable(recv.MemberName(), []byte(m)))
		if m == "first" {
			handled.Wait() // the handler holds "first"; the rest wait in the queue
		}
	}
	eventually(t, "all four queued", func() bool { return recv.Stats().MessagesReceived == 4 })
	closed := make(chan error, 1)
	go func() { closed <- recv.Close() }()
	<-recv.stop // Close has begun: delivery ends after the handler returns
	close(release)
	require.NoError(t, <-closed)
	st := recv.Stats()
	require.Equal(t, uint64(4), st.MessagesReceived)
	require.Equal(t, uint64(3), st.MessagesDiscarded, "a, b and c were queued at Close")
	require.Zero(t, st.MessagesDropped)
	mu.Lock()
	require.Equal(t, []string{"first"}, got)
	mu.Unlock()

	// A message arriving after delivery ended is counted the same way.
	delegate{recv.Cluster}.NotifyMsg([]byte("late"))
	st = recv.Stats()
	require.Equal(t, uint64(5), st.MessagesReceived)
	require.Equal(t, uint64(4), st.MessagesDiscarded)
	require.Equal(t, uint64(4), recv.GossipStats().QueueDiscards)
}

// silentHost returns a loopback address whose accept queue is full, so a
// TCP dial to it hangs (its SYNs are dropped) until the dial's timeout:
// a host gone silent (powered off, or behind a firewall that drops).
func silentHost(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	require.NoError(t, syscall.Listen(fd, 0))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	c, err := net.DialTimeout("tcp", addr, time.Second) // fills the queue
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	// Confirm: a second dial hangs.
	_, err = net.DialTimeout("tcp", addr, 100*time.Millisecond)
	require.Error(t, err, "the accept queue should be full")
	return addr
}

// TestClosingTransportCutsDials: a dial to a silent host under way ends
// with ErrClosed when the transport shuts down or is interrupted, not at
// its timeout; after an interrupt, dials work again.
func TestClosingTransportCutsDials(t *testing.T) {
	t.Parallel()
	hole := silentHost(t)
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}})
	require.NoError(t, err)
	tr := newClosingTransport(nt)
	dial := func() chan error {
		done := make(chan error, 1)
		go func() {
			c, err := tr.DialTimeout(hole, time.Minute)
			if c != nil {
				_ = c.Close()
			}
			done <- err
		}()
		return done
	}
	waitDial := func(done chan error) error {
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the dial was not cut")
			return nil
		}
	}
	first := dial()
	time.Sleep(50 * time.Millisecond) // let it start (it is cut the same way if it has not)
	tr.interrupt()
	require.ErrorIs(t, waitDial(first), ErrClosed)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	c, err := tr.DialTimeout(ln.Addr().String(), time.Second)
	require.NoError(t, err, "an interrupt refuses no later dial")
	require.NoError(t, c.Close())

	second := dial()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, tr.Shutdown())
	require.ErrorIs(t, waitDial(second), ErrClosed)
}

// TestCloseDuringStalledInitialJoin: Close while Start is joining seeds
// that accept the stream and never answer ends the join under way at once
// (not at its stream timeout), tries no further seed, and Start says the
// cluster was closed.
func TestCloseDuringStalledInitialJoin(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 901)
	seedA, seedB := nw.NewTransport(), nw.NewTransport()
	nw.Stall(seedA.Addr(), true)
	nw.Stall(seedB.Addr(), true)
	t.Cleanup(func() { _ = seedA.Shutdown(); _ = seedB.Shutdown() })
	cfg := memConfig(t, "joiner", 1, nw.NewTransport(), seedA.Addr(), seedB.Addr())
	cfg.Timing.StreamTimeout = time.Minute
	c, err := New(cfg)
	require.NoError(t, err)
	started := make(chan error, 1)
	go func() { started <- c.Start(t.Context()) }()
	eventually(t, "the first join is in flight", func() bool { return nw.Stats().StreamsStalled >= 1 })

	within(t, 10*time.Second, "Close", c.Close)
	require.ErrorIs(t, within(t, 10*time.Second, "Start", func() error { return <-started }), ErrClosed)
	require.Equal(t, 1, int(nw.Stats().StreamsStalled), "the second seed was never tried")
}

// TestCloseDuringRejoinToSilentSeed: a re-join dialling a seed whose host
// went silent does not hold Close for the dial's timeout.
func TestCloseDuringRejoinToSilentSeed(t *testing.T) {
	t.Parallel()
	hole := silentHost(t)
	cfg := DefaultConfig()
	cfg.Name, cfg.BootID, cfg.Bind = "lonely", 3, "127.0.0.1:0"
	cfg.Seeds = AddrList{hole}
	cfg.Timing = FastTiming()
	cfg.Timing.StreamTimeout = time.Minute // a dial to the silent seed waits a minute unless cut
	cfg.Logger = testLogger(t)
	c, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // no initial join: the re-join loop dials the seed
	require.NoError(t, c.Start(ctx))
	attempts := c.Stats().JoinAttempts
	eventually(t, "a re-join is under way", func() bool { return c.Stats().JoinAttempts > attempts })
	start := time.Now()
	within(t, 10*time.Second, "Close", c.Close)
	t.Logf("Close took %v during a re-join to a silent seed", time.Since(start))
}

// TestStartCutByContext: ctx ending while Start joins a seed that accepts
// and never answers cuts the join under way (not at its stream timeout);
// Start returns, the seeds left to the re-joins.
func TestStartCutByContext(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 902)
	seed := nw.NewTransport()
	nw.Stall(seed.Addr(), true)
	t.Cleanup(func() { _ = seed.Shutdown() })
	cfg := memConfig(t, "joiner", 1, nw.NewTransport(), seed.Addr())
	cfg.Timing.StreamTimeout = time.Minute
	c, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan error, 1)
	go func() { started <- c.Start(ctx) }()
	eventually(t, "the join is in flight", func() bool { return nw.Stats().StreamsStalled >= 1 })
	cancel()
	require.NoError(t, within(t, 10*time.Second, "Start", func() error { return <-started }))
	require.Equal(t, uint64(1), c.Stats().JoinFailures)
}
