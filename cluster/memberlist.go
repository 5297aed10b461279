package cluster

import (
	"fmt"
	"log"
	"net/netip"

	"github.com/hashicorp/memberlist"
)

// create builds the transport and the memberlist; called with life held.
func (c *Cluster) create() (*memberlist.Memberlist, error) {
	mlog := memberlistLog(c.log, &c.leaving)
	tr := c.cfg.Transport
	if tr == nil {
		bind, _ := parseIPPort(c.cfg.Bind)
		nt, err := bindNet(bind, mlog)
		if err != nil {
			return nil, err
		}
		tr = nt
		c.bound = netip.AddrPortFrom(bind.Addr(), uint16(nt.GetAutoBindPort()))
	}
	ip, port, err := tr.FinalAdvertiseAddr("", 0)
	if err != nil {
		_ = tr.Shutdown()
		return nil, fmt.Errorf("cluster: advertise address: %w", err)
	}
	ownIP, _ := netip.AddrFromSlice(ip)
	own := netip.AddrPortFrom(ownIP.Unmap(), uint16(port))
	if !c.bound.IsValid() {
		c.bound = own
	}
	c.adv = own
	if c.cfg.Advertise != "" {
		a, _ := parseIPPort(c.cfg.Advertise)
		if a.Port() == 0 {
			a = netip.AddrPortFrom(a.Addr(), c.bound.Port())
		}
		c.adv = a
	}

	mc := memberlist.DefaultLANConfig()
	mc.Name = c.self
	c.transport = newClosingTransport(tr)
	mc.Transport = c.transport
	mc.BindAddr, mc.BindPort = c.bound.Addr().String(), int(c.bound.Port())
	mc.AdvertiseAddr, mc.AdvertisePort = c.adv.Addr().String(), int(c.adv.Port())
	mc.Label = c.cfg.Label
	mc.Keyring = c.keys
	mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	t := c.cfg.Timing
	mc.ProbeInterval, mc.ProbeTimeout = t.ProbeInterval, t.ProbeTimeout
	mc.GossipInterval, mc.SuspicionMult = t.GossipInterval, t.SuspicionMult
	mc.PushPullInterval, mc.TCPTimeout = t.PushPullInterval, t.StreamTimeout
	mc.GossipToTheDeadTime = t.DeadRetention
	// This release's level rides memberlist's delegate protocol maximum;
	// the minimum and the current version stay 0, as older releases
	// advertise them (see CurrentLevel).
	mc.DelegateProtocolMin, mc.DelegateProtocolVersion, mc.DelegateProtocolMax = 0, 0, c.level
	mc.Delegate = delegate{c}
	mc.Events = eventDelegate{c}
	mc.Alive = aliveDelegate{c}
	mc.Merge = mergeDelegate{c}
	mc.Logger = mlog
	if c.configure != nil {
		c.configure(mc)
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = tr.Shutdown() // memberlist does not on every error path; a second call is harmless
		return nil, fmt.Errorf("cluster: create member: %w", err)
	}
	return ml, nil
}

// bindNet binds memberlist's UDP+TCP transport. With port 0 the kernel
// picks the TCP port and UDP may find it taken, so it retries like
// memberlist itself does.
func bindNet(bind netip.AddrPort, l *log.Logger) (*memberlist.NetTransport, error) {
	tries := 1
	if bind.Port() == 0 {
		tries = 10
	}
	var err error
	for range tries {
		var nt *memberlist.NetTransport
		nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{bind.Addr().String()},
			BindPort:  int(bind.Port()),
			Logger:    l,
		})
		if err == nil {
			return nt, nil
		}
	}
	return nil, fmt.Errorf("cluster: bind %s: %w", bind, err)
}
