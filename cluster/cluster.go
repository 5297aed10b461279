package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Errors returned by Cluster methods.
var (
	ErrNotStarted     = errors.New("cluster: not started")
	ErrAlreadyStarted = errors.New("cluster: already started")
	ErrClosed         = errors.New("cluster: closed")
	ErrUnknownMember  = errors.New("cluster: unknown member")
	ErrMemberDown     = errors.New("cluster: member is dead or left")
	ErrNoKeyFile      = errors.New("cluster: no key file configured")
)

// Stats counts what the cluster dropped or refused. All counts are
// cumulative.
type Stats struct {
	MessagesReceived  uint64 // user messages queued for OnMessage
	MessagesDropped   uint64 // user messages dropped: queue full, or no OnMessage
	MessagesDiscarded uint64 // user messages queued but never delivered: still waiting at Close, or arrived after it
	MessagesTooLarge  uint64 // user messages over Limits.MaxMessageBytes
	EventsDropped     uint64 // events dropped because Limits.EventQueue were waiting
	BadMetadata       uint64 // members whose metadata was malformed or did not match their name
	JoinAttempts      uint64 // seed joins tried, at Start and re-joins
	JoinFailures      uint64 // seed joins that failed
}

// Cluster is this process's membership in the gossip cluster. Create it
// with New, then Start; Close leaves. Safe for concurrent use.
type Cluster struct {
	cfg     Config
	log     *slog.Logger
	boot    uint64
	self    string      // member name
	meta    [2][]byte   // metadata: [0] normal, [1] with the leaving flag
	leaving atomic.Bool // set by Close before the leave: NodeMeta returns meta[1]
	keyMu   sync.Mutex  // serializes ReloadKeys
	keys    *memberlist.Keyring
	events  chan Event
	msgs    chan []byte
	msgMu   sync.Mutex // orders queueing into msgs with the end of delivery
	msgsEnd bool       // guarded by msgMu: delivery ended, msgs is no longer read

	onMessage func([]byte) // gossip.receive with a Store, else Config.OnMessage
	gossip    *gossiper    // nil without a Store

	life    sync.RWMutex // guards ml, closed, addresses; never held while sending
	ml      *memberlist.Memberlist
	closed  bool
	bound   netip.AddrPort
	adv     netip.AddrPort
	stop    chan struct{} // closed by Close: ends the re-join loop and message delivery
	drained chan struct{} // closed by Close after memberlist's shutdown: event delivery drains and ends
	joining sync.WaitGroup
	wg      sync.WaitGroup // delivery and re-join goroutines
	close   sync.Once

	mu      sync.Mutex // guards members; taken inside memberlist's callbacks, so never held while calling memberlist
	members map[string]*entry

	stats struct {
		msgsIn, msgsDropped, msgsDiscarded, msgsTooLarge, eventsDropped, badMeta, joins, joinFails atomic.Uint64
	}
}

// New validates cfg, loads the key file if one is set, and returns a
// Cluster that is not yet started.
func New(cfg Config) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Seeds = slices.Clone(cfg.Seeds)
	l := cfg.Logger
	if l == nil {
		l = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	boot := cfg.BootID
	if boot == 0 {
		var err error
		if boot, err = NewBootID(); err != nil {
			return nil, err
		}
	}
	cfg.BootID = boot
	c := &Cluster{
		cfg:     cfg,
		boot:    boot,
		self:    MemberName(cfg.Name, boot),
		meta:    [2][]byte{encodeMeta(cfg.Name, boot, false), encodeMeta(cfg.Name, boot, true)},
		events:  make(chan Event, cfg.Limits.EventQueue),
		msgs:    make(chan []byte, cfg.Limits.MessageQueue),
		stop:    make(chan struct{}),
		drained: make(chan struct{}),
		members: make(map[string]*entry),
	}
	c.log = l.With("member", c.self)
	c.onMessage = cfg.OnMessage
	if cfg.Store != nil {
		g, err := newGossiper(c)
		if err != nil {
			return nil, err
		}
		c.gossip, c.onMessage = g, g.receive
	}
	if cfg.KeyFile != "" {
		keys, err := LoadKeyFile(cfg.KeyFile)
		if err != nil {
			return nil, err
		}
		warnKeyFileMode(c.log, cfg.KeyFile)
		if c.keys, err = newKeyring(keys); err != nil {
			return nil, fmt.Errorf("cluster: keyring: %w", err)
		}
	}
	return c, nil
}

func warnKeyFileMode(l *slog.Logger, path string) {
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		l.Warn("cluster: key file is readable by group or others", "path", path, "mode", fi.Mode().Perm())
	}
}

// Name returns the peer name.
func (c *Cluster) Name() string { return c.cfg.Name }

// BootID returns this process start's boot ID.
func (c *Cluster) BootID() uint64 { return c.boot }

// MemberName returns this member's memberlist name.
func (c *Cluster) MemberName() string { return c.self }

// Addr returns the gossip address actually bound (with the port picked
// when Bind's port is 0); the zero AddrPort before Start. With a custom
// Transport it is the transport's own address.
func (c *Cluster) Addr() netip.AddrPort {
	c.life.RLock()
	defer c.life.RUnlock()
	return c.bound
}

// AdvertiseAddr returns the address other members use; the zero AddrPort
// before Start.
func (c *Cluster) AdvertiseAddr() netip.AddrPort {
	c.life.RLock()
	defer c.life.RUnlock()
	return c.adv
}

// Start binds the gossip port (or takes over Config.Transport), creates the
// memberlist member, joins every seed, and starts re-joining them every
// Timing.RejoinInterval. A seed that cannot be reached is logged and
// retried by the re-joins, not an error; Start fails only if the member
// cannot be created. ctx bounds the initial joins: when it ends, the
// remaining seeds are left to the re-joins. Start may be called once.
func (c *Cluster) Start(ctx context.Context) error {
	c.life.Lock()
	switch {
	case c.closed:
		c.life.Unlock()
		return ErrClosed
	case c.ml != nil:
		c.life.Unlock()
		return ErrAlreadyStarted
	}
	ml, err := c.create()
	if err != nil {
		c.life.Unlock()
		return err
	}
	c.ml = ml
	c.joining.Add(1)
	c.wg.Add(3)
	go c.deliverEvents()
	go c.deliverMessages()
	go c.rejoinLoop()
	if c.gossip != nil {
		c.gossip.start(&c.wg, c.stop)
	}
	c.life.Unlock()

	defer c.joining.Done()
	c.log.Info("cluster: started", "addr", c.bound, "advertise", c.adv,
		"encrypted", c.keys != nil, "label", c.cfg.Label)
	for _, s := range c.seeds() {
		if ctx.Err() != nil {
			c.log.Warn("cluster: initial join cut short", "err", ctx.Err())
			break
		}
		c.joinSeed(ml, s, true)
	}
	return nil
}

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
	mc.Transport = newClosingTransport(tr)
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
	mc.Delegate = delegate{c}
	mc.Events = eventDelegate{c}
	mc.Logger = mlog
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

// seeds returns the configured seeds other than this member's own address.
func (c *Cluster) seeds() []string {
	var out []string
	for _, s := range c.cfg.Seeds {
		if ap, err := netip.ParseAddrPort(s); err == nil && (ap == c.adv || ap == c.bound) {
			continue
		}
		out = append(out, s)
	}
	return out
}

func (c *Cluster) joinSeed(ml *memberlist.Memberlist, seed string, initial bool) {
	c.stats.joins.Add(1)
	start := time.Now()
	_, err := ml.Join([]string{seed})
	if err != nil {
		c.stats.joinFails.Add(1)
		level := slog.LevelDebug
		if initial {
			level = slog.LevelWarn
		}
		c.log.Log(context.Background(), level, "cluster: seed join failed; will retry",
			"seed", seed, "err", errText(err), "retry_every", c.cfg.Timing.RejoinInterval)
		return
	}
	c.log.Debug("cluster: joined seed", "seed", seed, "took", time.Since(start))
}

// rejoinLoop re-joins the seeds with jitter until Close. A push/pull with a
// seed that is already a member costs one stream; after a partition heals,
// it is what merges the two sides again (memberlist gossips only to members
// it believes alive and stops gossiping to dead ones after DeadRetention).
func (c *Cluster) rejoinLoop() {
	defer c.wg.Done()
	rng := mrand.New(mrand.NewPCG(c.boot, 0x5eed))
	seeds := c.seeds()
	if len(seeds) == 0 {
		<-c.stop
		return
	}
	for {
		t := time.NewTimer(c.cfg.Timing.rejoinWait(rng.Float64()))
		select {
		case <-c.stop:
			t.Stop()
			return
		case <-t.C:
		}
		c.life.RLock()
		ml, closed := c.ml, c.closed
		c.life.RUnlock()
		if closed {
			return
		}
		for _, s := range seeds {
			select {
			case <-c.stop:
				return
			default:
			}
			c.joinSeed(ml, s, false)
		}
	}
}

// Close leaves the cluster (waiting at most Timing.LeaveTimeout for the
// leave to be gossiped), shuts memberlist and its transport down, delivers
// the events already queued (this member's own "left" among them), and
// waits for every goroutine it started. It returns the leave's error, if
// any. Calling it again, or before Start, does nothing. Close must not be
// called from OnEvent or OnMessage.
func (c *Cluster) Close() error {
	var err error
	c.close.Do(func() {
		c.life.Lock()
		c.closed = true
		ml := c.ml
		c.life.Unlock()
		close(c.stop)
		c.joining.Wait()
		if ml != nil {
			// Announce the leave in the metadata first, so that others
			// report this member as left rather than dead (see encodeMeta).
			c.leaving.Store(true)
			start := time.Now()
			if uerr := ml.UpdateNode(c.cfg.Timing.LeaveTimeout / 2); uerr != nil {
				c.log.Warn("cluster: leaving flag not confirmed", "err", uerr)
			}
			rest := max(c.cfg.Timing.LeaveTimeout-time.Since(start), c.cfg.Timing.LeaveTimeout/2)
			if lerr := ml.Leave(rest); lerr != nil {
				err = fmt.Errorf("cluster: leave: %w", lerr)
				c.log.Warn("cluster: leave not confirmed", "err", lerr)
			}
			if serr := ml.Shutdown(); serr != nil {
				err = errors.Join(err, fmt.Errorf("cluster: shutdown: %w", serr))
			}
		}
		close(c.drained)
		c.wg.Wait()
		c.log.Info("cluster: closed")
	})
	return err
}

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

// Members returns every member this node knows, itself included: alive
// and suspect ones, and dead or left ones for Timing.DeadRetention after
// they went. Sorted by peer name, then member name.
func (c *Cluster) Members() []Member {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pruneLocked(now)
	out := make([]Member, 0, len(c.members))
	for _, e := range c.members {
		out = append(out, e.Member)
	}
	slices.SortFunc(out, func(a, b Member) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Member, b.Member))
	})
	return out
}

// pruneLocked forgets members dead or left for longer than DeadRetention
// (memberlist forgets them then too); self is kept.
func (c *Cluster) pruneLocked(now time.Time) {
	for k, e := range c.members {
		if !e.State.Up() && k != c.self && now.Sub(e.Since) > c.cfg.Timing.DeadRetention {
			delete(c.members, k)
		}
	}
}

// NumAlive returns the number of members alive or suspect, itself included
// (0 before Start): the input of the fleet's MinPeers auto.
func (c *Cluster) NumAlive() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.members {
		if e.State.Up() {
			n++
		}
	}
	return n
}

// Stats returns the counts so far.
func (c *Cluster) Stats() Stats {
	return Stats{
		MessagesReceived:  c.stats.msgsIn.Load(),
		MessagesDropped:   c.stats.msgsDropped.Load(),
		MessagesDiscarded: c.stats.msgsDiscarded.Load(),
		MessagesTooLarge:  c.stats.msgsTooLarge.Load(),
		EventsDropped:     c.stats.eventsDropped.Load(),
		BadMetadata:       c.stats.badMeta.Load(),
		JoinAttempts:      c.stats.joins.Load(),
		JoinFailures:      c.stats.joinFails.Load(),
	}
}

// GossipStats returns a snapshot of the dissemination counters; without a
// Store they stay zero. Safe for concurrent use.
func (c *Cluster) GossipStats() GossipStats {
	var s GossipStats
	if c.gossip != nil {
		s = c.gossip.stats.snapshot()
	} else {
		s = newGossipCounters().snapshot()
	}
	s.QueueDrops = c.stats.msgsDropped.Load()
	s.QueueDiscards = c.stats.msgsDiscarded.Load()
	if s.QueueDrops > 0 {
		s.Rejected[RejectQueueFull] += s.QueueDrops
	}
	if n := c.stats.msgsTooLarge.Load(); n > 0 {
		s.Rejected[RejectDecodeTooLarge] += n
	}
	return s
}

// knownOrigin reports whether (name, boot) is a member this node knows:
// alive, suspect, or dead or left within Timing.DeadRetention.
func (c *Cluster) knownOrigin(name string, boot uint64) bool {
	member := MemberName(name, boot)
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.members[member]
	return e != nil && e.Name == name && e.BootID == boot
}

// up reports whether the member named member is alive or suspect.
func (c *Cluster) up(member string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.members[member]
	return e != nil && e.State.Up()
}

// Encrypted reports whether gossip is encrypted (a key file is set).
func (c *Cluster) Encrypted() bool { return c.keys != nil }

// ReloadKeys re-reads the key file and applies it to the live keyring:
// keys new in the file are added, the file's first key becomes the one
// that encrypts, and keys no longer in the file are removed. On any error
// the keyring is left as it was. For rotation without losing messages,
// change the file in three steps, reloading every member after each:
// add the new key second; move it first; remove the old one.
func (c *Cluster) ReloadKeys() error {
	if c.cfg.KeyFile == "" || c.keys == nil {
		return ErrNoKeyFile
	}
	keys, err := LoadKeyFile(c.cfg.KeyFile)
	if err != nil {
		return err
	}
	c.keyMu.Lock()
	defer c.keyMu.Unlock()
	ch, err := applyKeys(c.keys, keys)
	if err != nil {
		return fmt.Errorf("cluster: apply keys: %w", err)
	}
	c.log.Info(ch.message(), ch.logArgs(len(keys))...)
	return nil
}

// entry is a member plus what this node knows about it beyond Member.
type entry struct {
	Member
	leaving bool // its last metadata announced a leave
}

// observe records a change reported by memberlist and queues its event;
// left is true for NotifyLeave. It runs inside memberlist's callbacks,
// under memberlist's node lock: it copies what it needs, takes only c.mu,
// and never blocks.
func (c *Cluster) observe(n *memberlist.Node, typ EventType, left bool) {
	m := Member{
		Member: n.Name,
		Addr:   net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))),
		State:  StateAlive,
		Since:  time.Now(),
	}
	name, boot, leaving, err := decodeMeta(n.Name, n.Meta)
	if err != nil {
		c.stats.badMeta.Add(1)
		name, boot = nameFromMember(n.Name), 0
	}
	m.Name, m.BootID = name, boot

	c.mu.Lock()
	c.pruneLocked(m.Since)
	prev := c.members[m.Member]
	leaving = leaving || (prev != nil && prev.leaving) || (n.Name == c.self && c.leaving.Load())
	if left {
		typ, m.State = EventDead, StateDead
		if leaving {
			typ, m.State = EventLeft, StateLeft
		}
	}
	c.members[m.Member] = &entry{Member: m, leaving: leaving && !(typ == EventJoin)}
	c.mu.Unlock()
	if typ == EventUpdate && leaving {
		return // the leaving flag itself is not news; the left event follows
	}
	select {
	case c.events <- Event{Type: typ, Member: m}:
	default:
		c.stats.eventsDropped.Add(1)
	}
}

func (c *Cluster) deliverEvents() {
	defer c.wg.Done()
	for {
		select {
		case ev := <-c.events:
			c.deliver(ev)
		case <-c.drained:
			// memberlist may still call back from a goroutine that outlives
			// its Shutdown; those late events fill the queue and are dropped.
			for {
				select {
				case ev := <-c.events:
					c.deliver(ev)
				default:
					return
				}
			}
		}
	}
}

func (c *Cluster) deliver(ev Event) {
	c.log.Debug("cluster: member "+ev.Type.String(), "peer", ev.Member.Member, "addr", ev.Member.Addr)
	if c.gossip != nil {
		c.gossip.onEvent(ev)
	}
	if c.cfg.OnEvent != nil {
		c.cfg.OnEvent(ev)
	}
}

// deliverMessages hands queued messages to onMessage until Close; then it
// discards and counts what is still queued. A message that arrives once
// Close began is delivered only if delivery has not ended yet.
func (c *Cluster) deliverMessages() {
	defer c.wg.Done()
	for {
		select { // Close first: a ready message must not win the race against it
		case <-c.stop:
			c.endDelivery()
			return
		default:
		}
		select {
		case <-c.stop:
			c.endDelivery()
			return
		case msg := <-c.msgs:
			c.onMessage(msg)
		}
	}
}

// endDelivery discards the queued messages and counts them; NotifyMsg
// counts later ones the same way.
func (c *Cluster) endDelivery() {
	c.msgMu.Lock()
	defer c.msgMu.Unlock()
	c.msgsEnd = true
	for {
		select {
		case <-c.msgs:
			c.stats.msgsDiscarded.Add(1)
		default:
			return
		}
	}
}

// eventDelegate is memberlist's EventDelegate. memberlist calls it with its
// node lock held: calling memberlist from here would deadlock.
type eventDelegate struct{ c *Cluster }

func (e eventDelegate) NotifyJoin(n *memberlist.Node)   { e.c.observe(n, EventJoin, false) }
func (e eventDelegate) NotifyUpdate(n *memberlist.Node) { e.c.observe(n, EventUpdate, false) }

// NotifyLeave reports a member that is dead or left. Node.State cannot tell
// which (memberlist v0.7.0 never sets it), so observe uses the leaving flag.
func (e eventDelegate) NotifyLeave(n *memberlist.Node) { e.c.observe(n, EventDead, true) }

// delegate is memberlist's Delegate: small metadata, user messages into a
// bounded queue, and nothing in broadcasts or push/pull state (histogram
// payloads travel by SendReliable only).
type delegate struct{ c *Cluster }

func (d delegate) NodeMeta(limit int) []byte {
	meta := d.c.meta[0]
	if d.c.leaving.Load() {
		meta = d.c.meta[1]
	}
	if len(meta) > limit {
		return nil // cannot happen: 10 + MaxNameLen < memberlist.MetaMaxSize
	}
	return meta
}

// NotifyMsg copies buf (memberlist reuses it) and queues it; it never
// blocks (msgMu is held only around non-blocking queue operations).
func (d delegate) NotifyMsg(buf []byte) {
	c := d.c
	switch {
	case len(buf) > c.cfg.Limits.MaxMessageBytes:
		c.stats.msgsTooLarge.Add(1)
		return
	case c.onMessage == nil:
		c.stats.msgsDropped.Add(1)
		return
	}
	c.msgMu.Lock()
	defer c.msgMu.Unlock()
	if c.msgsEnd {
		// Queued and discarded at once, as if it had arrived just before:
		// MessagesReceived stays the delivered plus the discarded.
		c.stats.msgsIn.Add(1)
		c.stats.msgsDiscarded.Add(1)
		return
	}
	select {
	case c.msgs <- append([]byte(nil), buf...):
		c.stats.msgsIn.Add(1)
	default:
		c.stats.msgsDropped.Add(1)
	}
}

func (delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (delegate) LocalState(join bool) []byte                { return nil }
func (delegate) MergeRemoteState(buf []byte, join bool)     {}
