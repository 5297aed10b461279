package cluster

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/memberlist"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/internal/fielderr"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// MaxNameLen is the longest peer name, in bytes: the member name (the name,
// "-" and 8 hex digits, MemberName) names the sender of digests and pulls
// and must fit codec.MaxNameBytes. It is the one limit on -name, with or
// without gossip.
const MaxNameLen = codec.MaxNameBytes - 9

// MaxLabelLen is the longest Label, in bytes (memberlist's limit).
const MaxLabelLen = memberlist.LabelMaxSize

// Config configures a [Cluster]. Start from [DefaultConfig]; a field's
// comment gives its unit and default.
//
// The user-facing fields have atnode's YAML keys and flags
// (RegisterFlags): `bind` (-bind), `advertise` (-advertise), `join` (-join),
// `secret_key_file` (-secret-key-file) and `label` (-label). The rest are
// set in code: a node sets Name, BootID, Logger, OnEvent, Store, Seal,
// SealLimits, Tracker and Clock from its own settings; tests and embedders
// may set Transport, Timing, Limits and Gossip.
type Config struct {
	// Name is the peer name (atnode's -name): the same across restarts.
	// 1..MaxNameLen bytes of printable UTF-8. No default.
	Name string `yaml:"-"`

	// BootID identifies this process start; 0 (the default) picks one with
	// NewBootID in New. The member name is MemberName(Name, BootID).
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
	Seeds AddrList `yaml:"join"`

	// KeyFile is the path of the key file (see ParseKeys). Set, it turns on
	// AES-256-GCM encryption of all gossip with both verify flags; empty
	// (the default) leaves gossip in plaintext.
	KeyFile string `yaml:"secret_key_file"`

	// Label is the cluster label, at most 255 bytes, sent in front of every
	// packet and stream (and authenticated when encrypted); members with
	// another label are ignored. Default "".
	Label string `yaml:"label"`

	// Timing holds memberlist's intervals. Default DefaultTiming().
	Timing Timing `yaml:"-"`

	// Limits bounds the queues between memberlist and the handlers.
	Limits Limits `yaml:"-"`

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

	// Owned keeps the records of the destinations this node owns under
	// protocol v2 (a *tracker.Owned made from the Store's configuration).
	// With it, a Store that is also an AggregateStore (*tracker.Fleet) and
	// Gossip.Protocol 2, this member advertises CurrentLevel and runs v2
	// once every member up advertises Level3 or later; nil (the default) advertises Level2 and runs v1 only.
	Owned OwnedStore `yaml:"-"`

	// SealLimits caps this node's sealed batch per epoch: set it to the
	// Store's per-member caps (tracker.FleetConfig.MaxDestinations and
	// MaxEpochBuckets). The destinations with the fewest samples are left
	// out and counted (ProtocolStats.DestinationsDropped). Zero means no cap.
	SealLimits SealLimits `yaml:"-"`

	// Tracker is the epoch grid and histogram layout shared by the fleet
	// (Window, SubWindows, MaxTrackableLatency): it must equal the Store's
	// (checked by Validate when the Store reports its configuration, as
	// *tracker.Fleet does). Default tracker.DefaultConfig(). Used only
	// with a Store.
	Tracker tracker.Config `yaml:"-"`

	// Clock is the wall clock of dissemination (epochs, seal times); nil
	// means time.Now. memberlist's own timers always use the real clock.
	Clock func() time.Time `yaml:"-"`

	// Gossip tunes dissemination. Default DefaultGossip().
	Gossip Gossip `yaml:"-"`
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

// RegisterFlags registers -bind, -advertise, -join, -secret-key-file and
// -label on fs, with c's current values as defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Bind, "bind", c.Bind, "gossip `ip:port`; port 0 picks a free port")
	fs.StringVar(&c.Advertise, "advertise", c.Advertise, "gossip `ip:port` peers should use (default the bound one)")
	fs.Var(&c.Seeds, "join", "comma-separated seed peers (`host:port,...`), joined at start and re-joined periodically")
	fs.StringVar(&c.KeyFile, "secret-key-file", c.KeyFile,
		"`file` of base64 32-byte gossip keys, one per line: the first encrypts, all decrypt (SIGHUP re-reads it); a regular file of at most 64 KiB")
	fs.StringVar(&c.Label, "label", c.Label, "cluster label: members with another label are ignored")
}

// Validate reports every problem with c, joined; each is marked with the
// field it is about (internal/fielderr).
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fielderr.Errorf(field, "cluster: "+format, args...))
	}
	if err := CheckName(c.Name); err != nil {
		bad("Name", "name %v", err)
	}
	if c.Transport == nil {
		if err := CheckIPPort(c.Bind); err != nil {
			bad("Bind", "bind: %v", err)
		}
	}
	if c.Advertise != "" {
		if err := CheckIPPort(c.Advertise); err != nil {
			bad("Advertise", "advertise: %v", err)
		}
	}
	for _, s := range c.Seeds {
		if err := CheckHostPort(s); err != nil {
			bad("Seeds", "seed: %v", err)
		}
	}
	if len(c.Label) > MaxLabelLen {
		bad("Label", "label is %d bytes, at most %d", len(c.Label), MaxLabelLen)
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
			bad("Timing", "%s must be > 0, got %v", d.name, d.v)
		}
	}
	if t.ProbeTimeout > t.ProbeInterval && t.ProbeInterval > 0 {
		bad("Timing", "probe timeout %v exceeds probe interval %v", t.ProbeTimeout, t.ProbeInterval)
	}
	if t.SuspicionMult < 1 {
		bad("Timing", "suspicion mult must be >= 1, got %d", t.SuspicionMult)
	}
	if t.PushPullInterval < 0 {
		bad("Timing", "push/pull interval must be >= 0, got %v", t.PushPullInterval)
	}
	if !(t.RejoinJitter >= 0 && t.RejoinJitter < 1) {
		bad("Timing", "rejoin jitter must be in [0, 1), got %v", t.RejoinJitter)
	}
	l := c.Limits
	if l.EventQueue < 1 {
		bad("Limits", "event queue must be >= 1, got %d", l.EventQueue)
	}
	if l.MessageQueue < 1 {
		bad("Limits", "message queue must be >= 1, got %d", l.MessageQueue)
	}
	if l.MaxMessageBytes < 1 {
		bad("Limits", "max message bytes must be >= 1, got %d", l.MaxMessageBytes)
	}
	if c.Store != nil {
		if c.OnMessage != nil {
			bad("OnMessage", "OnMessage must be nil with a Store: gossip consumes every user message")
		}
		if err := c.Tracker.Validate(); err != nil {
			bad("Tracker", "tracker: %w", err)
		}
		if s, ok := c.Store.(interface{ Config() tracker.FleetConfig }); ok && s.Config().Tracker != c.Tracker {
			bad("Tracker", "Tracker %+v differs from the Store's %+v: the epoch grid and layout must be the fleet view's", c.Tracker, s.Config().Tracker)
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
// ("is empty", "is 300 bytes, at most 247", …) for the caller to prefix.
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

// CheckHostPort reports what is wrong with a "host:port" address, if
// anything: the host must not be empty (a name or an IP) and the port must
// be a number in 0..65535. The error quotes the address.
func CheckHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("want host:port, got %q", s)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port of %q must be 0..65535", s)
	}
	if host == "" {
		return fmt.Errorf("host of %q must not be empty", s)
	}
	return nil
}

// CheckIPPort is CheckHostPort for the gossip addresses (Bind, Advertise),
// whose host must be an IP address without a zone: memberlist binds and
// advertises IPs, not names.
func CheckIPPort(s string) error {
	_, err := parseIPPort(s)
	return err
}

// parseIPPort parses "ip:port" with an IP literal host; port 0 is allowed.
func parseIPPort(s string) (netip.AddrPort, error) {
	if err := CheckHostPort(s); err != nil {
		return netip.AddrPort{}, err
	}
	host, port, _ := net.SplitHostPort(s)
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("host of %q must be an IP address, e.g. 127.0.0.1", s)
	}
	if ip.Zone() != "" {
		return netip.AddrPort{}, fmt.Errorf("host of %q: zoned addresses are not supported", s)
	}
	p, _ := strconv.ParseUint(port, 10, 16)
	return netip.AddrPortFrom(ip.Unmap(), uint16(p)), nil
}

// NewBootID returns a random non-zero boot ID: the one generator of boot
// IDs (New uses it when Config.BootID is 0; a node without gossip uses it
// for its own batches).
func NewBootID() (uint64, error) {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("cluster: boot id: %w", err)
		}
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v, nil
		}
	}
}

// AddrList is a list of addresses that reads from a comma-separated flag
// value, or from YAML as either a sequence or one comma-separated string.
type AddrList []string

// String joins the list with commas.
func (l *AddrList) String() string { return strings.Join(*l, ",") }

// Set replaces the list with the comma-separated items of s, trimmed, with
// empty items dropped (flag.Value).
func (l *AddrList) Set(s string) error {
	*l = splitList(s)
	return nil
}

// UnmarshalText is Set, for a YAML (or JSON) string.
func (l *AddrList) UnmarshalText(p []byte) error { return l.Set(string(p)) }

func splitList(s string) AddrList {
	var out AddrList
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// rejoinWait draws one wait between re-joins from u in [0, 1).
func (t Timing) rejoinWait(u float64) time.Duration {
	f := 1 + t.RejoinJitter*(2*u-1)
	return time.Duration(math.Max(1, f*float64(t.RejoinInterval)))
}
