package memtransport

import (
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Transport is one node's end of a [Network]. It implements
// [memberlist.NodeAwareTransport]; node names are ignored, addresses route.
type Transport struct {
	net      *Network
	addr     string
	ip       net.IP
	port     int
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	done     chan struct{} // closed by Shutdown; ends waits in dial delays

	// Guarded by net.mu.
	closed  bool
	crashed bool
	conns   map[*conn]struct{}
}

var _ memberlist.NodeAwareTransport = (*Transport)(nil)

// Addr returns the transport's address, "ip:port".
func (t *Transport) Addr() string { return t.addr }

// FinalAdvertiseAddr returns the transport's own address; the arguments
// are ignored, as no other address reaches it.
func (t *Transport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return append(net.IP(nil), t.ip...), t.port, nil
}

// WriteTo sends a packet to addr. Like UDP it reports success whether or not
// the packet arrives; it fails only after Shutdown.
func (t *Transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress is WriteTo for a [memberlist.Address].
func (t *Transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if t.closed {
		return time.Time{}, ErrClosed
	}
	n.sendLocked(t, b, a.Addr)
	return time.Now(), nil
}

// PacketCh returns the channel of received packets. It is never closed.
func (t *Transport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// StreamCh returns the channel of accepted streams. It is never closed.
func (t *Transport) StreamCh() <-chan net.Conn { return t.streamCh }

// DialTimeout opens a stream to addr.
func (t *Transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout opens a stream to a.Addr. It fails at once with
// ErrRefused when no live transport has the address, and with ErrUnreachable
// across a cut or a crash (a real dial into a black hole would wait for the
// timeout; failing early keeps tests fast and changes nothing memberlist
// decides). The network's Delay and Jitter delay the dial, up to timeout.
func (t *Transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	n := t.net
	n.mu.Lock()
	if t.closed {
		n.mu.Unlock()
		return nil, ErrClosed
	}
	d := n.delayLocked()
	n.mu.Unlock()

	if d > 0 {
		if timeout > 0 && d > timeout {
			d = timeout
		}
		tm := time.NewTimer(d)
		select {
		case <-tm.C:
		case <-t.done:
			tm.Stop()
			return nil, ErrClosed
		}
		if timeout > 0 && d == timeout {
			n.mu.Lock()
			n.stats.StreamsFailed++
			n.mu.Unlock()
			return nil, fmt.Errorf("%w: dial %s: timeout after %v", ErrUnreachable, a.Addr, timeout)
		}
	}

	n.mu.Lock()
	defer n.mu.Unlock()
	to := n.nodes[a.Addr]
	switch {
	case t.closed:
		return nil, ErrClosed
	case to == nil:
		n.stats.StreamsFailed++
		return nil, fmt.Errorf("%w: dial %s", ErrRefused, a.Addr)
	case !n.linkLocked(t, to):
		n.stats.StreamsFailed++
		return nil, fmt.Errorf("%w: dial %s", ErrUnreachable, a.Addr)
	}
	if n.faults.StreamDrop > 0 && n.rng.Float64() < n.faults.StreamDrop {
		n.stats.StreamsOpened++
		n.stats.StreamsDropped++
		return &blackHole{la: tcpAddr(t), ra: tcpAddr(to)}, nil
	}
	if _, stalled := n.stalled[to.addr]; stalled {
		n.stats.StreamsOpened++
		n.stats.StreamsStalled++
		return n.stallLocked(t, to), nil
	}
	dup := n.faults.StreamDuplicate > 0 && n.rng.Float64() < n.faults.StreamDuplicate
	local, ok := n.connectLocked(t, to)
	if !ok {
		n.stats.StreamsFailed++
		return nil, fmt.Errorf("%w: dial %s: accept queue full", ErrUnreachable, a.Addr)
	}
	local.dup = dup
	n.stats.StreamsOpened++
	return local, nil
}

func tcpAddr(t *Transport) *net.TCPAddr { return &net.TCPAddr{IP: t.ip, Port: t.port} }

// connectLocked opens a stream from t to to: it hands the accepting end to
// to's stream channel and returns the dialling end; false when to's accept
// queue is full.
func (n *Network) connectLocked(t, to *Transport) (*conn, bool) {
	p1, p2 := net.Pipe()
	local := &conn{Conn: p1, net: n, local: t, remote: to, la: tcpAddr(t), ra: tcpAddr(to)}
	accepted := &conn{Conn: p2, net: n, local: to, remote: t, la: tcpAddr(to), ra: tcpAddr(t)}
	select {
	case to.streamCh <- accepted:
	default:
		_ = p1.Close()
		_ = p2.Close()
		return nil, false
	}
	t.conns[local] = struct{}{}
	to.conns[accepted] = struct{}{}
	return local, true
}

// stallLocked opens a stream from t to to whose accepting end is never
// handed to to (Network.Stall): nobody reads it. Both ends are tracked, so
// a shutdown of either transport, a cut or a crash closes them.
func (n *Network) stallLocked(t, to *Transport) *conn {
	p1, p2 := net.Pipe()
	local := &conn{Conn: p1, net: n, local: t, remote: to, la: tcpAddr(t), ra: tcpAddr(to), stalled: true}
	accepted := &conn{Conn: p2, net: n, local: to, remote: t, la: tcpAddr(to), ra: tcpAddr(t), stalled: true}
	t.conns[local] = struct{}{}
	to.conns[accepted] = struct{}{}
	return local
}

// replay delivers b to to again, in a new stream from t (StreamDuplicate),
// and waits until to has read it, closed the stream, or replayTimeout
// passed. Nothing happens when the link is down or to's accept queue is
// full.
func (n *Network) replay(t, to *Transport, b []byte) {
	n.mu.Lock()
	if !n.linkLocked(t, to) {
		n.mu.Unlock()
		return
	}
	c, ok := n.connectLocked(t, to)
	if ok {
		n.stats.StreamsDuplicated++
	}
	n.mu.Unlock()
	if !ok {
		return
	}
	_ = c.SetWriteDeadline(time.Now().Add(replayTimeout))
	_, _ = c.Write(b)
	_ = c.Close()
}

// Shutdown stops the transport: it no longer sends or receives, its
// streams are closed, its pending delayed packets are discarded, and its
// address becomes free. Calling it again does nothing.
func (t *Transport) Shutdown() error {
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	close(t.done)
	if n.nodes[t.addr] == t {
		delete(n.nodes, t.addr)
	}
	for c := range t.conns {
		c.closeLocked()
	}
	n.breakConnsLocked() // the other ends of this transport's streams
	n.stopPendingLocked(t.addr)
	return nil
}

// conn is one end of a stream. Closing either end closes the pipe, so the
// other end sees EOF.
type conn struct {
	net.Conn
	net           *Network
	local, remote *Transport
	la, ra        net.Addr
	stalled       bool // opened to a stalled address (Network.Stall)

	mu      sync.Mutex
	dup     bool   // replay written on Close (Faults.StreamDuplicate)
	written []byte // what was written, when dup
}

func (c *conn) LocalAddr() net.Addr  { return c.la }
func (c *conn) RemoteAddr() net.Addr { return c.ra }

func (c *conn) Read(p []byte) (int, error) {
	if !c.up() {
		return 0, ErrUnreachable
	}
	return c.Conn.Read(p)
}

func (c *conn) Write(p []byte) (int, error) {
	if !c.up() {
		return 0, ErrUnreachable
	}
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	if c.dup {
		c.written = append(c.written, p[:n]...)
	}
	c.mu.Unlock()
	return n, err
}

// Close closes both ends of the stream; a stream chosen for duplication is
// then replayed (see Faults.StreamDuplicate), once.
func (c *conn) Close() error {
	c.net.mu.Lock()
	c.closeLocked()
	c.net.mu.Unlock()
	c.mu.Lock()
	dup, b := c.dup, c.written
	c.dup, c.written = false, nil
	c.mu.Unlock()
	if dup {
		c.net.replay(c.local, c.remote, b)
	}
	return nil
}

func (c *conn) up() bool {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	return c.net.linkLocked(c.local, c.remote)
}

func (c *conn) closeLocked() {
	delete(c.local.conns, c)
	_ = c.Conn.Close()
}

// blackHole is the dialling end of a stream lost by Faults.StreamDrop:
// writes vanish, reads see EOF.
type blackHole struct{ la, ra net.Addr }

func (b *blackHole) Read([]byte) (int, error)         { return 0, io.EOF }
func (b *blackHole) Write(p []byte) (int, error)      { return len(p), nil }
func (b *blackHole) Close() error                     { return nil }
func (b *blackHole) LocalAddr() net.Addr              { return b.la }
func (b *blackHole) RemoteAddr() net.Addr             { return b.ra }
func (b *blackHole) SetDeadline(time.Time) error      { return nil }
func (b *blackHole) SetReadDeadline(time.Time) error  { return nil }
func (b *blackHole) SetWriteDeadline(time.Time) error { return nil }
