package cluster

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/hashicorp/memberlist"
)

// SendReliable sends payload to the member named member (a memberlist
// member name, see MemberName) over a stream: delivered to its OnMessage
// if no error is returned. It fails if the member is unknown, dead or
// left. It blocks for up to Timing.StreamTimeout, or until Close shuts
// the transport down (the send then fails); it holds no lock meanwhile,
// so Close and the other methods never wait for it.
func (c *Cluster) SendReliable(member string, payload []byte) error {
	c.life.RLock()
	ml, closed := c.ml, c.closed
	c.life.RUnlock()
	switch {
	case closed:
		return ErrClosed
	case ml == nil:
		return ErrNotStarted
	}
	c.mu.Lock()
	e, ok := c.members[member]
	var addr string
	var up bool
	if ok {
		addr, up = e.Addr, e.State.Up()
	}
	c.mu.Unlock()
	switch {
	case !ok:
		return fmt.Errorf("%w: %q", ErrUnknownMember, member)
	case !up:
		return fmt.Errorf("%w: %q", ErrMemberDown, member)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return fmt.Errorf("cluster: member %q address %q: %w", member, addr, err)
	}
	node := &memberlist.Node{Name: member, Addr: net.IP(ap.Addr().AsSlice()), Port: ap.Port()}
	// memberlist's SendReliable does not check for a shutdown; a send that
	// races Close fails on the closed transport (closingTransport).
	if err := ml.SendReliable(node, payload); err != nil {
		return fmt.Errorf("cluster: send to %s: %w", member, err)
	}
	return nil
}
