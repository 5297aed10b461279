package cluster

import (
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// closingTransport wraps the transport memberlist uses so that Shutdown
// also closes the streams this member dialled and refuses later dials:
// memberlist's own transport leaves an outgoing stream open until its
// deadline, so a SendReliable to a stalled peer would hold Close for up to
// Timing.StreamTimeout.
type closingTransport struct {
	memberlist.NodeAwareTransport

	mu     sync.Mutex
	closed bool
	conns  map[*trackedConn]struct{}
}

func newClosingTransport(tr memberlist.Transport) *closingTransport {
	nat, ok := tr.(memberlist.NodeAwareTransport)
	if !ok {
		nat = nodeAwareShim{tr}
	}
	return &closingTransport{NodeAwareTransport: nat, conns: make(map[*trackedConn]struct{})}
}

// DialTimeout is DialAddressTimeout without a node name.
func (t *closingTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout dials with the wrapped transport and tracks the
// stream until it is closed.
func (t *closingTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	conn, err := t.NodeAwareTransport.DialAddressTimeout(a, timeout)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed { // shut down while dialling
		_ = conn.Close()
		return nil, ErrClosed
	}
	tc := &trackedConn{Conn: conn, t: t}
	t.conns[tc] = struct{}{}
	return tc, nil
}

// Shutdown closes every stream still open, then shuts the wrapped
// transport down.
func (t *closingTransport) Shutdown() error {
	t.mu.Lock()
	t.closed = true
	conns := t.conns
	t.conns = make(map[*trackedConn]struct{})
	t.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
	return t.NodeAwareTransport.Shutdown()
}

// trackedConn is a stream dialled through a closingTransport.
type trackedConn struct {
	net.Conn
	t *closingTransport
}

func (c *trackedConn) Close() error {
	c.t.mu.Lock()
	delete(c.t.conns, c)
	c.t.mu.Unlock()
	return c.Conn.Close()
}

// nodeAwareShim adapts a transport that does not know node names, as
// memberlist itself does.
type nodeAwareShim struct{ memberlist.Transport }

func (s nodeAwareShim) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return s.WriteTo(b, a.Addr)
}

func (s nodeAwareShim) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return s.DialTimeout(a.Addr, timeout)
}
