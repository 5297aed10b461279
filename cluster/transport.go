package cluster

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// closingTransport wraps the transport memberlist uses so that Shutdown
// also closes the streams this member dialled, cuts the dials under way
// and refuses later ones: memberlist's own transport leaves an outgoing
// stream open until its deadline, and a dial to a host that went silent
// (its SYNs unanswered) waits out its timeout, so a SendReliable or a
// re-join would hold Close for up to Timing.StreamTimeout.
type closingTransport struct {
	memberlist.NodeAwareTransport
	// tcp is set when the wrapped transport is memberlist's own, whose
	// dial is net.Dialer's: then this transport dials the same way under
	// shut, which Shutdown cancels. Other transports (an in-memory one)
	// dial as they do.
	tcp  bool
	shut context.Context
	stop context.CancelFunc

	mu     sync.Mutex
	closed bool
	conns  map[*trackedConn]struct{}
}

func newClosingTransport(tr memberlist.Transport) *closingTransport {
	nat, ok := tr.(memberlist.NodeAwareTransport)
	if !ok {
		nat = nodeAwareShim{tr}
	}
	_, tcp := tr.(*memberlist.NetTransport)
	shut, stop := context.WithCancel(context.Background())
	return &closingTransport{NodeAwareTransport: nat, tcp: tcp, shut: shut, stop: stop, conns: make(map[*trackedConn]struct{})}
}

// DialTimeout is DialAddressTimeout without a node name.
func (t *closingTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout dials with the wrapped transport and tracks the
// stream until it is closed.
func (t *closingTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	t.mu.Lock()
	closed, shut := t.closed, t.shut
	t.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	var conn net.Conn
	var err error
	if t.tcp {
		// memberlist.NetTransport's dial (net.Dialer with the timeout),
		// cut short by Shutdown or interrupt.
		d := net.Dialer{Timeout: timeout}
		conn, err = d.DialContext(shut, "tcp", a.Addr)
		if err != nil && shut.Err() != nil {
			return nil, ErrClosed
		}
	} else {
		conn, err = t.NodeAwareTransport.DialAddressTimeout(a, timeout)
	}
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

// interrupt cuts the dials under way and closes the streams open now,
// without refusing later ones: what Close does first when a Start is
// still joining, so that a seed that accepts and never answers (or a host
// gone silent) does not hold it for a stream timeout.
func (t *closingTransport) interrupt() {
	t.mu.Lock()
	t.stop()
	t.shut, t.stop = context.WithCancel(context.Background())
	conns := t.conns
	t.conns = make(map[*trackedConn]struct{})
	t.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
}

// Shutdown closes every stream still open, then shuts the wrapped
// transport down.
func (t *closingTransport) Shutdown() error {
	t.mu.Lock()
	t.closed = true
	t.stop() // dials under way end now
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
