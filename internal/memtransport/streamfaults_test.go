package memtransport

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"
)

// acceptAll reads every stream b accepts until done closes, and returns
// what each carried, in order of acceptance.
func acceptAll(b *Transport, done <-chan struct{}) func() []string {
	var (
		mu  sync.Mutex
		got []string
		wg  sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case c := <-b.StreamCh():
				p, _ := io.ReadAll(c)
				_ = c.Close()
				mu.Lock()
				got = append(got, string(p))
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return got
	}
}

func TestStreamDrop(t *testing.T) {
	t.Parallel()
	n, a, b := twoHosts(t, 9)
	n.SetFaults(Faults{StreamDrop: 1})
	c, err := a.DialTimeout(b.Addr(), time.Second)
	require.NoError(t, err, "a lost stream dials fine")
	require.Equal(t, b.Addr(), c.RemoteAddr().String())
	require.Equal(t, a.Addr(), c.LocalAddr().String())
	require.NoError(t, c.SetDeadline(time.Now().Add(time.Second)))
	k, err := c.Write([]byte("into the void"))
	require.NoError(t, err)
	require.Equal(t, 13, k)
	_, err = c.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
	require.NoError(t, c.Close())
	require.Empty(t, b.StreamCh(), "the destination never sees the stream")
	s := n.Stats()
	require.Equal(t, uint64(1), s.StreamsOpened)
	require.Equal(t, uint64(1), s.StreamsDropped)
}

func TestStreamDuplicate(t *testing.T) {
	t.Parallel()
	n, a, b := twoHosts(t, 10)
	n.SetFaults(Faults{StreamDuplicate: 1})
	done := make(chan struct{})
	results := acceptAll(b, done)
	for _, msg := range []string{"first", "second"} {
		c, err := a.DialTimeout(b.Addr(), time.Second)
		require.NoError(t, err)
		_, err = c.Write([]byte(msg))
		require.NoError(t, err)
		require.NoError(t, c.Close()) // returns once the replay was read
		require.NoError(t, c.Close(), "a second Close replays nothing")
	}
	close(done)
	require.Equal(t, []string{"first", "first", "second", "second"}, results())
	s := n.Stats()
	require.Equal(t, uint64(2), s.StreamsOpened)
	require.Equal(t, uint64(2), s.StreamsDuplicated)

	// No replay across a cut made after the dial.
	n.SetFaults(Faults{StreamDuplicate: 1})
	c, err := a.DialTimeout(b.Addr(), time.Second)
	require.NoError(t, err)
	go func() { p, _ := io.ReadAll(<-b.StreamCh()); _ = p }()
	_, err = c.Write([]byte("x"))
	require.NoError(t, err)
	n.Partition([]string{a.Addr()}, []string{b.Addr()})
	require.NoError(t, c.Close())
	require.Equal(t, uint64(2), n.Stats().StreamsDuplicated)
}

// msgDelegate counts user messages.
type msgDelegate struct {
	mu   sync.Mutex
	msgs []string
}

func (d *msgDelegate) NotifyMsg(b []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.msgs = append(d.msgs, string(b))
}

func (d *msgDelegate) got() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.msgs...)
}

func (*msgDelegate) NodeMeta(int) []byte                 { return nil }
func (*msgDelegate) GetBroadcasts(int, int) [][]byte     { return nil }
func (*msgDelegate) LocalState(bool) []byte              { return nil }
func (*msgDelegate) MergeRemoteState(buf []byte, _ bool) {}

// TestStreamFaultsWithMemberlist checks what memberlist's SendReliable
// makes of the stream faults: a lost stream is a message that never
// arrives though the send reported success, a duplicated one arrives twice.
func TestStreamFaultsWithMemberlist(t *testing.T) {
	t.Parallel()
	n := New(11)
	defer n.Close()
	start := func(name string, d *msgDelegate) *memberlist.Memberlist {
		c := memberlist.DefaultLocalConfig()
		c.Name = name
		c.Transport = n.NewTransport()
		c.Delegate = d
		c.LogOutput = io.Discard
		m, err := memberlist.Create(c)
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Shutdown() })
		return m
	}
	da, db := &msgDelegate{}, &msgDelegate{}
	ma, mb := start("a", da), start("b", db)
	_, err := ma.Join([]string{mb.LocalNode().Address()})
	require.NoError(t, err)
	to := mb.LocalNode()

	n.SetFaults(Faults{StreamDrop: 1})
	require.NoError(t, ma.SendReliable(to, []byte("lost")), "the sender cannot tell")
	n.SetFaults(Faults{StreamDuplicate: 1})
	require.NoError(t, ma.SendReliable(to, []byte("twice")))
	n.SetFaults(Faults{})
	require.NoError(t, ma.SendReliable(to, []byte("once")))

	deadline := time.Now().Add(5 * time.Second)
	for len(db.got()) < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	// Stream handlers run concurrently: the two copies of "twice" may
	// arrive in either order with respect to "once".
	require.ElementsMatch(t, []string{"twice", "twice", "once"}, db.got())
	s := n.Stats()
	require.Equal(t, uint64(1), s.StreamsDropped)
	require.Equal(t, uint64(1), s.StreamsDuplicated)
}

var _ net.Conn = (*blackHole)(nil)

// TestStall checks a stalled address: dials succeed, the destination never
// sees the stream, writes block until their deadline, the address's own
// dials and packets still work, and un-stalling or a shutdown breaks the
// stalled streams.
func TestStall(t *testing.T) {
	t.Parallel()
	n := New(12)
	defer n.Close()
	a, b, c := n.NewTransport(), n.NewTransport(), n.NewTransport()
	n.Stall(b.Addr(), true)

	s, err := a.DialTimeout(b.Addr(), time.Second)
	require.NoError(t, err, "a stalled peer accepts the dial")
	require.Empty(t, b.StreamCh(), "but never reads the stream")
	require.NoError(t, s.SetWriteDeadline(time.Now().Add(50*time.Millisecond)))
	_, err = s.Write([]byte("x"))
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "a write blocks until its deadline: %v", err)
	require.Equal(t, uint64(1), n.Stats().StreamsStalled)

	// The stalled peer's own dials and packets are unaffected.
	out, err := b.DialTimeout(c.Addr(), time.Second)
	require.NoError(t, err)
	require.NoError(t, out.Close())
	<-c.StreamCh()
	_, err = b.WriteTo([]byte("ping"), a.Addr())
	require.NoError(t, err)
	require.Equal(t, "ping", string((<-a.PacketCh()).Buf))

	// Un-stalling breaks the stalled stream; later dials reach b.
	blocked := make(chan error, 1)
	require.NoError(t, s.SetWriteDeadline(time.Time{}))
	go func() { _, err := s.Write([]byte("y")); blocked <- err }()
	n.Stall(b.Addr(), false)
	require.Error(t, <-blocked)
	s2, err := a.DialTimeout(b.Addr(), time.Second)
	require.NoError(t, err)
	require.NoError(t, s2.Close())
	<-b.StreamCh()

	// A shutdown of the dialler breaks a stalled stream too.
	n.Stall(b.Addr(), true)
	s3, err := a.DialTimeout(b.Addr(), time.Second)
	require.NoError(t, err)
	go func() { _, err := s3.Write([]byte("z")); blocked <- err }()
	require.NoError(t, a.Shutdown())
	require.Error(t, <-blocked)
	require.Equal(t, uint64(2), n.Stats().StreamsStalled)
}
