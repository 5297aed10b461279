package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
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
	cfg  Config
	log  *slog.Logger
	boot uint64
	self string // member name
	// level is the protocol level this member advertises (CurrentLevel).
	level uint8
	// meta is this member's metadata by version (meta[0] version 1,
	// meta[1] version 2) and leaving flag (meta[v][1] has it).
	meta [2][2][]byte
	// settings are what this member advertises and judges others by (see
	// judge); nil without a Store: a member that disseminates nothing
	// judges nobody and advertises none (version 1 metadata).
	settings *settings
	warn     *warnings
	leaving  atomic.Bool // set by Close before the leave: NodeMeta adds the leaving flag

	// The metadata version negotiation (see negotiate.go).
	metaVersion atomic.Uint32 // the version NodeMeta returns: 1 until metaLoop switches
	metaMu      sync.Mutex    // serializes re-advertising (metaLoop) with Close's leaving flag
	metaKick    chan struct{} // wakes metaLoop: the member table changed
	joined      chan struct{} // closed when Start's initial joins succeeded: metaLoop starts then
	joinMu      sync.Mutex    // guards dialing, dialRefusals and dialJudged
	dialing     netip.AddrPort
	// dialRefusals are the refusals of the seed being dialled that its
	// push/pull state showed, dialJudged whether it showed settings (see
	// judgeState).
	dialRefusals []string
	dialJudged   bool
	// configure, if set, edits memberlist's config before Create (tests).
	configure func(*memberlist.Config)
	keyMu     sync.Mutex // serializes ReloadKeys
	keys      *memberlist.Keyring
	events    chan Event
	msgs      chan []byte
	msgMu     sync.Mutex // orders queueing into msgs with the end of delivery
	msgsEnd   bool       // guarded by msgMu: delivery ended, msgs is no longer read

	onMessage func([]byte) // gossip.receive with a Store, else Config.OnMessage
	gossip    *gossiper    // nil without a Store

	life      sync.RWMutex // guards ml, transport, closed, addresses; never held while sending
	ml        *memberlist.Memberlist
	transport *closingTransport // ml's, set with it
	closed    bool
	bound     netip.AddrPort
	adv       netip.AddrPort
	stop      chan struct{} // closed by Close: ends the re-join loop and message delivery
	drained   chan struct{} // closed by Close after memberlist's shutdown: event delivery drains and ends
	joining   sync.WaitGroup
	wg        sync.WaitGroup // delivery and re-join goroutines
	close     sync.Once

	mu      sync.Mutex // guards members; taken inside memberlist's callbacks, so never held while calling memberlist
	members map[string]*entry
	// memberVersion counts the changes to members (written under mu), so
	// the gossip shell can tell when to give the protocol a new copy.
	memberVersion atomic.Uint64

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
	var st *settings
	if cfg.Store != nil {
		s := newSettings(cfg.Tracker)
		st = &s
	}
	c := &Cluster{
		cfg:      cfg,
		boot:     boot,
		self:     MemberName(cfg.Name, boot),
		level:    advertisedLevel(cfg),
		settings: st,
		events:   make(chan Event, cfg.Limits.EventQueue),
		msgs:     make(chan []byte, cfg.Limits.MessageQueue),
		metaKick: make(chan struct{}, 1),
		joined:   make(chan struct{}),
		stop:     make(chan struct{}),
		drained:  make(chan struct{}),
		members:  make(map[string]*entry),
	}
	for leaving := range 2 {
		c.meta[0][leaving] = encodeMeta(cfg.Name, boot, leaving == 1, nil)
		if st != nil {
			c.meta[1][leaving] = encodeMeta(cfg.Name, boot, leaving == 1, st)
		}
	}
	c.metaVersion.Store(metaVersion1)
	c.log = l.With("member", c.self)
	c.warn = newWarnings(c.log)
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

// Name returns the peer name.
func (c *Cluster) Name() string { return c.cfg.Name }

// BootID returns this process start's boot ID.
func (c *Cluster) BootID() uint64 { return c.boot }

// MemberName returns this member's memberlist name.
func (c *Cluster) MemberName() string { return c.self }

// Protocol returns the dissemination protocol this cluster's shell drives,
// or nil without a Store. Its Poll does nothing while the cluster runs
// (from Start until Close); before Start and after Close, polling it seals
// this node's sub-windows into the Store on time.
func (c *Cluster) Protocol() *SyncProtocol {
	if c.gossip == nil {
		return nil
	}
	return c.gossip.proto
}

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
// retried by the re-joins, not an error. Start fails if the member cannot
// be created, or with ErrJoinRefused when a seed refused the join because
// this member's settings (window, sub-window, histogram layout) differ
// from its cluster's: the error names each setting, and the cluster has
// then been closed. When no seed showed its settings (the seeds are of an
// older release, or named by host name), Start compares them with one
// member of this release it learned (see checkSettings). ctx bounds the
// initial joins: when it ends, the join under way is cut and the remaining
// seeds are left to the re-joins. Start may be called once.
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
	c.wg.Add(5)
	go c.deliverEvents()
	go c.deliverMessages()
	go c.rejoinLoop()
	go c.conflictLoop()
	go c.metaLoop()
	if c.gossip != nil {
		c.gossip.start(&c.wg, c.stop)
	}
	c.life.Unlock()

	c.log.Info("cluster: started", "addr", c.bound, "advertise", c.adv,
		"encrypted", c.keys != nil, "label", c.cfg.Label)
	var refused []string
	judged := false
	// ctx ending cuts the join under way, as Close does.
	uncut := context.AfterFunc(ctx, c.transport.interrupt)
	for _, s := range c.seeds() {
		if ctx.Err() != nil {
			c.log.Warn("cluster: initial join cut short", "err", ctx.Err())
			break
		}
		if c.isClosing() {
			break // Close cut the join under way; the rest are not tried
		}
		r, j := c.joinSeed(ml, s, true)
		if r != "" {
			refused = append(refused, r)
		}
		judged = judged || j
	}
	if len(refused) == 0 && !judged && ctx.Err() == nil && !c.isClosing() {
		if r := c.checkSettings(ml); r != "" {
			refused = append(refused, r)
		}
	}
	uncut()
	c.joining.Done()
	switch {
	case len(refused) > 0:
		_ = c.Close()
		return fmt.Errorf("%w: %s", ErrJoinRefused, strings.Join(refused, "; "))
	case c.isClosing():
		return ErrClosed // Close ran during the joins
	}
	close(c.joined)
	return nil
}

// isClosing reports whether Close has begun.
func (c *Cluster) isClosing() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
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
		ml, tr := c.ml, c.transport
		c.life.Unlock()
		close(c.stop)
		select {
		case <-c.joined: // Start's joins are over: the streams are the leave's to end
		default:
			if tr != nil {
				// A Start still joining: cut its join under way (a seed
				// that accepts and never answers, a host gone silent) so
				// that it ends now rather than at its stream timeout; it
				// tries no further seed.
				tr.interrupt()
			}
		}
		c.joining.Wait()
		if ml != nil {
			// Announce the leave in the metadata first, so that others
			// report this member as left rather than dead (see encodeMeta).
			// metaMu: a re-advertisement under way ends first, and none
			// follows (it would drop the flag).
			c.metaMu.Lock()
			c.leaving.Store(true)
			start := time.Now()
			uerr := ml.UpdateNode(c.cfg.Timing.LeaveTimeout / 2)
			c.metaMu.Unlock()
			if uerr != nil {
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
		ps := c.gossip.proto.Stats()
		s.Seals, s.SealErrors = ps.Seals, ps.SealErrors
		s.BackedOff = c.gossip.q.backedOff()
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
