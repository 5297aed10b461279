package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/memberlist"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// MaxNameLen is the longest peer name, in bytes.
const MaxNameLen = 256

// MaxLabelLen is the longest Label, in bytes (memberlist's limit).
const MaxLabelLen = memberlist.LabelMaxSize

// maxGossipNameLen is the longest peer name with a Store: the member name
// (name, "-", 8 hex digits) is the sender of digests and pulls, at most
// codec.MaxNameBytes.
const maxGossipNameLen = 256 - 9

// Config configures a [Cluster]. Start from [DefaultConfig]; a field's
// comment gives its unit and default.
type Config struct {
	// Name is the peer name (atnode's -name): the same across restarts.
	// 1..MaxNameLen bytes of printable UTF-8. No default.
	Name string `yaml:"name"`

	// BootID identifies this process start; 0 (the default) picks a random
	// non-zero one in New. The member name is MemberName(Name, BootID).
	BootID uint64 `yaml:"-"`

	// Bind is the gossip "ip:port" (UDP and TCP, same port); port 0 picks a
	// free port, reported by Cluster.Addr. The host must be an IP literal.
	// Default "127.0.0.1:7946". Ignored when Transport is set.
	Bind string `yaml:"bind"`

	// Advertise is the "ip:port" other members should use to reach this one;
	// empty (the default) means the bound address, port 0 the bound port.
	Advertise string `yaml:"advertise"`

	// Seeds are "host:port" addresses joined at Start and re-joined every
	// Timing.RejoinInterval, so a healed partition merges back. Addresses
	// equal to this member's own are skipped. Default none.
	Seeds []string `yaml:"join"`

	// KeyFile is the path of the key file (see ParseKeys). Set, it turns on
	// AES-256-GCM encryption of all gossip with both verify flags; empty
	// (the default) leaves gossip in plaintext.
	KeyFile string `yaml:"secret_key_file"`

	// Label is the cluster label, at most 255 bytes, sent in front of every
	// packet and stream (and authenticated when encrypted); members with
	// another label are ignored. Default "".
	Label string `yaml:"label"`

	// Timing holds memberlist's intervals. Default DefaultTiming().
	Timing Timing `yaml:"timing"`

	// Limits bounds the queues between memberlist and the handlers.
	Limits Limits `yaml:"limits"`

	// Logger receives this package's logs and memberlist's, at their own
	// levels. nil discards them.
	Logger *slog.Logger `yaml:"-"`

	// Transport replaces memberlist's UDP/TCP transport (tests use
	// internal/memtransport). The cluster owns it from Start on: memberlist
	// shuts it down. nil (the default) binds Bind.
	Transport memberlist.Transport `yaml:"-"`

	// OnEvent, if set, receives membership events in order, one at a time,
	// on a goroutine of the cluster. It may call any method of the Cluster
	// except Close. A slow handler delays later events; when
	// Limits.EventQueue events wait, new ones are dropped and counted
	// (Members stays exact either way).
	OnEvent func(Event) `yaml:"-"`

	// OnMessage, if set, receives each user message sent to this member
	// with SendReliable, one at a time on a goroutine of the cluster. The
	// slice is the handler's to keep. The sender is not known (memberlist
	// does not tell): put it in the payload. Messages arriving while
	// Limits.MessageQueue wait are dropped and counted; those still waiting
	// when Close ends delivery are discarded and counted.
	OnMessage func([]byte) `yaml:"-"`

	// Store receives peers' batches and this node's own, and serves them to
	// peers' pulls; nil (the default) means membership only, no
	// dissemination. With a Store, every user message is a gossip message
	// consumed by the cluster, so OnMessage must be nil.
	Store Store `yaml:"-"`

	// Seal returns this node's sealed sub-window of epoch (for example
	// tracker.SealedSubWindow(local, epoch, now)), destinations sorted by
	// name. The protocol calls it once per epoch, at the epoch boundary
	// plus this node's jitter, for the epoch that just ended, on a goroutine
	// of the cluster (or of a caller of SyncProtocol.Poll), and it must not
	// block.
	// nil means this node has no latencies of its own to share.
	Seal func(epoch int64, now time.Time) []tracker.DestCounts `yaml:"-"`

	// SealLimits caps this node's sealed batch per epoch: set it to the
	// Store's per-member caps (tracker.FleetConfig.MaxDestinations and
	// MaxEpochBuckets). The destinations with the fewest samples are left
	// out and counted (ProtocolStats.DestinationsDropped). Zero means no cap.
	SealLimits SealLimits `yaml:"-"`

	// Tracker is the epoch grid and histogram layout shared by the fleet
	// (Window, SubWindows, MaxTrackableLatency): it must equal the Store's.
	// Default tracker.DefaultConfig(). Used only with a Store.
	Tracker tracker.Config `yaml:"-"`

	// Clock is the wall clock of dissemination (epochs, seal times); nil
	// means time.Now. memberlist's own timers always use the real clock.
	Clock func() time.Time `yaml:"-"`

	// Gossip tunes dissemination. Default DefaultGossip().
	Gossip Gossip `yaml:"gossip"`
}

// Timing holds the memberlist intervals this package exposes. The defaults
// ([DefaultTiming]) are memberlist's DefaultLANConfig; [FastTiming] suits
// in-process tests and loopback demos.
type Timing struct {
	// ProbeInterval is the time between failure-detector probes of one
	// random member. Lower detects failures sooner at the cost of more
	// packets (one probe per member per interval). Default 1s.
	ProbeInterval time.Duration `yaml:"probe_interval"`
	// ProbeTimeout is how long a probe waits for an ack before indirect
	// probes; about the network's P99 RTT. Default 500ms.
	ProbeTimeout time.Duration `yaml:"probe_timeout"`
	// GossipInterval is the time between gossip rounds to GossipNodes (3)
	// random members. Default 200ms.
	GossipInterval time.Duration `yaml:"gossip_interval"`
	// SuspicionMult scales how long a suspect member has to refute before
	// it is declared dead: SuspicionMult × max(1, log10(N)) × ProbeInterval,
	// up to 6× that without confirmations from other members. Default 4.
	SuspicionMult int `yaml:"suspicion_mult"`
	// PushPullInterval is the time between full membership syncs with one
	// random member over a stream; 0 disables them. Default 30s.
	PushPullInterval time.Duration `yaml:"push_pull_interval"`
	// StreamTimeout bounds dialling, reading and writing one stream (joins,
	// push/pull, SendReliable); Close closes the streams this member dialled.
	// Default 10s.
	StreamTimeout time.Duration `yaml:"stream_timeout"`
	// DeadRetention is how long a dead member is still gossiped to (so it
	// can refute) and how long dead and left members stay in Members.
	// Default 30s.
	DeadRetention time.Duration `yaml:"dead_retention"`
	// LeaveTimeout bounds the wait for the leave broadcast in Close.
	// Default 5s.
	LeaveTimeout time.Duration `yaml:"leave_timeout"`
	// RejoinInterval is the mean time between re-joins of the seeds (one
	// push/pull per seed). Default 30s.
	RejoinInterval time.Duration `yaml:"rejoin_interval"`
	// RejoinJitter spreads re-joins: each wait is drawn uniformly from
	// RejoinInterval × [1−RejoinJitter, 1+RejoinJitter]. In [0, 1); default 0.2.
	RejoinJitter float64 `yaml:"rejoin_jitter"`
}

// Limits bounds memory between memberlist's callbacks and the handlers.
type Limits struct {
	// EventQueue is how many membership events may wait for OnEvent.
	// Default 1024.
	EventQueue int `yaml:"event_queue"`
	// MessageQueue is how many user messages may wait for OnMessage.
	// Default 1024.
	MessageQueue int `yaml:"message_queue"`
	// MaxMessageBytes is the largest user message accepted; larger ones are
	// dropped and counted. Default 1 MiB.
	MaxMessageBytes int `yaml:"max_message_bytes"`
}

// DefaultTiming returns memberlist's DefaultLANConfig intervals, a leave
// timeout of 5 s and a re-join every 30 s ± 20 %.
func DefaultTiming() Timing {
	lan := memberlist.DefaultLANConfig()
	return Timing{
		ProbeInterval:    lan.ProbeInterval,
		ProbeTimeout:     lan.ProbeTimeout,
		GossipInterval:   lan.GossipInterval,
		SuspicionMult:    lan.SuspicionMult,
		PushPullInterval: lan.PushPullInterval,
		StreamTimeout:    lan.TCPTimeout,
		DeadRetention:    lan.GossipToTheDeadTime,
		LeaveTimeout:     5 * time.Second,
		RejoinInterval:   30 * time.Second,
		RejoinJitter:     0.2,
	}
}

// FastTiming returns intervals for clusters inside one process or on
// loopback: failures are detected in about a second and partitions heal
// within about a second, at roughly 10× the packet rate of DefaultTiming.
// Not for real networks.
func FastTiming() Timing {
	return Timing{
		ProbeInterval:    200 * time.Millisecond,
		ProbeTimeout:     100 * time.Millisecond,
		GossipInterval:   50 * time.Millisecond,
		SuspicionMult:    3,
		PushPullInterval: 2 * time.Second,
		StreamTimeout:    2 * time.Second,
		DeadRetention:    30 * time.Second,
		LeaveTimeout:     time.Second,
		RejoinInterval:   500 * time.Millisecond,
		RejoinJitter:     0.2,
	}
}

// DefaultLimits returns the default Limits.
func DefaultLimits() Limits {
	return Limits{EventQueue: 1024, MessageQueue: 1024, MaxMessageBytes: 1 << 20}
}

// DefaultConfig returns the defaults: bind 127.0.0.1:7946, no seeds, no
// key, no label, DefaultTiming, DefaultLimits, tracker.DefaultConfig(),
// DefaultGossip(), no Store. Name must still be set.
func DefaultConfig() Config {
	return Config{
		Bind:    "127.0.0.1:7946",
		Timing:  DefaultTiming(),
		Limits:  DefaultLimits(),
		Tracker: tracker.DefaultConfig(),
		Gossip:  DefaultGossip(),
	}
}

// Validate reports every problem with c, joined.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("cluster: "+format, args...))
	}
	if err := validName(c.Name); err != nil {
		errs = append(errs, err)
	}
	if c.Transport == nil {
		if _, err := parseIPPort(c.Bind); err != nil {
			bad("bind %q: %v", c.Bind, err)
		}
	}
	if c.Advertise != "" {
		if _, err := parseIPPort(c.Advertise); err != nil {
			bad("advertise %q: %v", c.Advertise, err)
		}
	}
	for _, s := range c.Seeds {
		if _, _, err := net.SplitHostPort(s); err != nil {
			bad("seed %q: want host:port: %v", s, err)
		}
	}
	if len(c.Label) > MaxLabelLen {
		bad("label is %d bytes, at most %d", len(c.Label), MaxLabelLen)
	}
	t := c.Timing
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"probe interval", t.ProbeInterval}, {"probe timeout", t.ProbeTimeout},
		{"gossip interval", t.GossipInterval}, {"stream timeout", t.StreamTimeout},
		{"dead retention", t.DeadRetention}, {"leave timeout", t.LeaveTimeout},
		{"rejoin interval", t.RejoinInterval},
	} {
		if d.v <= 0 {
			bad("%s must be > 0, got %v", d.name, d.v)
		}
	}
	if t.ProbeTimeout > t.ProbeInterval && t.ProbeInterval > 0 {
		bad("probe timeout %v exceeds probe interval %v", t.ProbeTimeout, t.ProbeInterval)
	}
	if t.SuspicionMult < 1 {
		bad("suspicion mult must be >= 1, got %d", t.SuspicionMult)
	}
	if t.PushPullInterval < 0 {
		bad("push/pull interval must be >= 0, got %v", t.PushPullInterval)
	}
	if !(t.RejoinJitter >= 0 && t.RejoinJitter < 1) {
		bad("rejoin jitter must be in [0, 1), got %v", t.RejoinJitter)
	}
	l := c.Limits
	if l.EventQueue < 1 {
		bad("event queue must be >= 1, got %d", l.EventQueue)
	}
	if l.MessageQueue < 1 {
		bad("message queue must be >= 1, got %d", l.MessageQueue)
	}
	if l.MaxMessageBytes < 1 {
		bad("max message bytes must be >= 1, got %d", l.MaxMessageBytes)
	}
	if c.Store != nil {
		if c.OnMessage != nil {
			bad("OnMessage must be nil with a Store: gossip consumes every user message")
		}
		if err := c.Tracker.Validate(); err != nil {
			bad("tracker: %v", err)
		}
		if len(c.Name) > maxGossipNameLen {
			bad("name is %d bytes, at most %d with a Store (the member name must fit a gossip message)", len(c.Name), maxGossipNameLen)
		}
		errs = append(errs, c.Gossip.validate(l.MaxMessageBytes)...)
	}
	return errors.Join(errs...)
}

func validName(name string) error {
	if err := CheckName(name); err != nil {
		return fmt.Errorf("cluster: name %w", err)
	}
	return nil
}

// CheckName reports what is wrong with a peer name, if anything: it must be
// 1..MaxNameLen bytes of printable UTF-8. The error reads as a predicate
// ("is empty", "is 300 bytes, at most 256", …) for the caller to prefix.
func CheckName(name string) error {
	switch {
	case name == "":
		return errors.New("is empty")
	case len(name) > MaxNameLen:
		return fmt.Errorf("is %d bytes, at most %d", len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%q is not valid UTF-8", name)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%q holds the unprintable %U", name, r)
		}
	}
	return nil
}

// parseIPPort parses "ip:port" with an IP literal host; port 0 is allowed.
func parseIPPort(s string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return netip.AddrPort{}, err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("host must be an IP address: %v", err)
	}
	if ip.Zone() != "" {
		return netip.AddrPort{}, errors.New("zoned addresses are not supported")
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port: %v", err)
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(p)), nil
}

// rejoinWait draws one wait between re-joins from u in [0, 1).
func (t Timing) rejoinWait(u float64) time.Duration {
	f := 1 + t.RejoinJitter*(2*u-1)
	return time.Duration(math.Max(1, f*float64(t.RejoinInterval)))
}
