package node

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// Config is everything a node is configured with: the settings of the
// `atnode agent` flags (DESIGN.md section 7), with YAML keys equal to the flag
// names with '_' for '-'. Start from DefaultConfig.
type Config struct {
	// Name is this peer's name, stable across restarts: 1..128 bytes of
	// printable UTF-8. Default: the hostname.
	Name string `yaml:"name"`
	// Bind is the gossip host:port; port 0 picks a free port.
	// Default 127.0.0.1:7946.
	Bind string `yaml:"bind"`
	// Advertise is the host:port peers should use. Default: the bound one.
	Advertise string `yaml:"advertise"`
	// Join lists seed peers (host:port), joined at start and re-joined
	// periodically so that a healed partition merges back.
	Join List `yaml:"join"`
	// HTTP is the HTTP API's host:port; port 0 picks a free port; empty
	// binds nothing (Node.Handler can still be served by the embedder).
	// Default 127.0.0.1:8080.
	HTTP string `yaml:"http"`
	// Window is the sliding window. Default 60s.
	Window time.Duration `yaml:"window"`
	// SubWindow is the unit the window slides by, and the unit of gossip:
	// each node sends its sealed sub-window once per SubWindow.
	// Window/SubWindow must be a whole number in 1..255. Default 6s.
	SubWindow time.Duration `yaml:"sub_window"`
	// MinSamples is how many samples a view needs before it is trusted.
	// Default 3.
	MinSamples uint32 `yaml:"min_samples"`
	// MinPeers is how many distinct peers the fleet view needs before it is
	// trusted; 0 means min(3, members alive or suspect, self included).
	// Default 0.
	MinPeers int `yaml:"min_peers"`
	// MaxOriginShare caps one peer's share of a destination's fleet samples
	// once 4 or more peers contribute; 0 disables the cap. Default 0.25.
	MaxOriginShare float64 `yaml:"max_origin_share"`
	// Backoff is the floor and ceiling of every timeout. Default 250ms..1m.
	Backoff timeout.BackoffInterval `yaml:"backoff"`
	// Quantile is the latency quantile timeouts are based on. Default 0.9999.
	Quantile float64 `yaml:"quantile"`
	// SafetyFactor multiplies the quantile. Default 2.0.
	SafetyFactor float64 `yaml:"safety_factor"`
	// SecretKeyFile holds base64 32-byte gossip keys, one per line: the first
	// encrypts, all decrypt. Empty: gossip is plaintext.
	SecretKeyFile string `yaml:"secret_key_file"`
	// Label is the cluster label, at most 255 bytes; nodes with other
	// labels cannot join. Default "".
	Label string `yaml:"label"`
	// HTTPTokenFile holds a bearer token that POST endpoints and
	// /debug/pprof/ then require.
	HTTPTokenFile string `yaml:"http_token_file"`
	// Insecure allows a non-loopback gossip address without a key and a
	// non-loopback HTTP address without a token.
	Insecure bool `yaml:"insecure"`
	// LogLevel is debug, info, warn or error. Default info.
	LogLevel string `yaml:"log_level"`
	// MaxDestinations bounds the destinations tracked, locally and in the
	// fleet view; the least recently recorded is evicted. 0 = unlimited.
	// Default 10000, about 32 KiB each locally.
	MaxDestinations int `yaml:"max_destinations"`
	// HTTPServer bounds the HTTP server on HTTP: deadlines and the
	// connection cap (flags -http-read-timeout etc.). Default
	// DefaultHTTPServerConfig.
	HTTPServer HTTPServerConfig `yaml:",inline"`

	// The fields below are for embedding and tests; they have no flag and
	// no YAML key.

	// DisableGossip runs the node alone: no cluster is created, Bind,
	// Advertise, Join, SecretKeyFile and Label are ignored, and the fleet
	// view holds only this node's own sealed sub-windows. Default false.
	DisableGossip bool `yaml:"-"`
	// Clock is the wall clock every time the node records or queries comes
	// from (the epoch grid is read from it). nil means time.Now. Default nil.
	Clock func() time.Time `yaml:"-"`
	// TuneCluster, if set, is called with the cluster configuration the
	// node built from the fields above, just before the cluster is created:
	// tests set Transport (internal/memtransport) and Timing through it.
	// Default nil.
	TuneCluster func(*cluster.Config) `yaml:"-"`
}

// DefaultConfig returns the defaults of DESIGN.md section 7. Name is the
// hostname, or "atnode" when it cannot be read.
func DefaultConfig() Config {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "atnode"
	}
	tc := timeout.DefaultConfig()
	return Config{
		Name:            name,
		Bind:            "127.0.0.1:7946",
		HTTP:            "127.0.0.1:8080",
		Window:          60 * time.Second,
		SubWindow:       6 * time.Second,
		MinSamples:      3,
		MaxOriginShare:  0.25,
		Backoff:         tc.Backoff,
		Quantile:        tc.Quantile,
		SafetyFactor:    tc.SafetyFactor,
		LogLevel:        "info",
		MaxDestinations: 10_000,
		HTTPServer:      DefaultHTTPServerConfig(),
	}
}

// RegisterFlags registers one flag per field on fs, with c's current values
// as defaults. Flag names are the YAML keys with '-' for '_'.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Name, "name", c.Name, "peer name, stable across restarts")
	fs.StringVar(&c.Bind, "bind", c.Bind, "gossip `host:port`; port 0 picks a free port")
	fs.StringVar(&c.Advertise, "advertise", c.Advertise, "gossip `host:port` peers should use (default the bound one)")
	fs.Var(&c.Join, "join", "comma-separated seed peers (`host:port,...`), joined at start and periodically")
	fs.StringVar(&c.HTTP, "http", c.HTTP, "HTTP API `host:port`; port 0 picks a free port")
	fs.DurationVar(&c.Window, "window", c.Window, "sliding window")
	fs.DurationVar(&c.SubWindow, "sub-window", c.SubWindow, "sub-window: the window slides and gossips by this much")
	fs.Func("min-samples", fmt.Sprintf("samples a view needs to be trusted (default %d)", c.MinSamples), func(s string) error {
		v, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return errors.New("want a whole number")
		}
		c.MinSamples = uint32(v)
		return nil
	})
	fs.IntVar(&c.MinPeers, "min-peers", c.MinPeers, "peers the fleet view needs to be trusted; 0 = min(3, live members)")
	fs.Float64Var(&c.MaxOriginShare, "max-origin-share", c.MaxOriginShare, "largest share of a destination's fleet samples one peer may hold; 0 disables")
	fs.TextVar(&c.Backoff, "backoff", c.Backoff, "timeout floor..ceiling, e.g. 250ms..1m")
	fs.Float64Var(&c.Quantile, "quantile", c.Quantile, "latency quantile timeouts are based on, in (0, 1]")
	fs.Float64Var(&c.SafetyFactor, "safety-factor", c.SafetyFactor, "multiplier applied to the quantile")
	fs.StringVar(&c.SecretKeyFile, "secret-key-file", c.SecretKeyFile, "`file` of base64 32-byte gossip keys, one per line; first encrypts (SIGHUP re-reads)")
	fs.StringVar(&c.Label, "label", c.Label, "cluster label")
	fs.StringVar(&c.HTTPTokenFile, "http-token-file", c.HTTPTokenFile, "`file` holding the bearer token POST endpoints and /debug/pprof/ require")
	fs.BoolVar(&c.Insecure, "insecure", c.Insecure, "allow non-loopback addresses without a key or token")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	c.HTTPServer.RegisterFlags(fs)
}

// LoadYAML reads the YAML file at path over c. Unknown keys are errors, so a
// misspelt setting does not pass unnoticed.
func (c *Config) LoadYAML(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("node: config: %w", err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) { // an empty file sets nothing
		return fmt.Errorf("node: config %s: %w", path, err)
	}
	return nil
}

// Validate reports every problem of c, each naming its flag, joined with
// errors.Join.
func (c Config) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("-%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	if err := checkName(c.Name); err != nil {
		bad("name", "%v", err)
	}
	if len(c.Label) > cluster.MaxLabelLen {
		bad("label", "is %d bytes, at most %d", len(c.Label), cluster.MaxLabelLen)
	}
	if err := checkIPPort(c.Bind); err != nil {
		bad("bind", "%v", err)
	}
	if c.HTTP != "" { // empty: no HTTP listener (embedders serve Node.Handler themselves)
		if err := checkHostPort(c.HTTP); err != nil {
			bad("http", "%v", err)
		}
	}
	if c.Advertise != "" {
		if err := checkIPPort(c.Advertise); err != nil {
			bad("advertise", "%v", err)
		}
	}
	for _, j := range c.Join {
		if err := checkHostPort(j); err != nil {
			bad("join", "%v", err)
		}
	}
	switch {
	case c.Window <= 0:
		bad("window", "must be > 0, got %v", c.Window)
	case c.SubWindow < time.Millisecond || c.SubWindow%time.Millisecond != 0:
		bad("sub-window", "must be a whole number of milliseconds >= 1ms, got %v", c.SubWindow)
	case c.Window%c.SubWindow != 0 || c.Window/c.SubWindow > 255:
		bad("window", "window/sub-window must be a whole number in 1..255, got %v/%v", c.Window, c.SubWindow)
	}
	if c.MinPeers < 0 {
		bad("min-peers", "must be >= 0, got %d", c.MinPeers)
	}
	if math.IsNaN(c.MaxOriginShare) || c.MaxOriginShare < 0 || c.MaxOriginShare > 1 {
		bad("max-origin-share", "must be in [0, 1], got %v", c.MaxOriginShare)
	}
	if err := c.Backoff.Validate(); err != nil {
		bad("backoff", "%v", err)
	}
	if !(c.Quantile > 0 && c.Quantile <= 1) {
		bad("quantile", "must be in (0, 1], got %v", c.Quantile)
	}
	if !(c.SafetyFactor > 0) || math.IsInf(c.SafetyFactor, 1) {
		bad("safety-factor", "must be finite and > 0, got %v", c.SafetyFactor)
	}
	if _, ok := logLevels[c.LogLevel]; !ok {
		bad("log-level", "must be debug, info, warn or error, got %q", c.LogLevel)
	}
	if c.HTTP != "" {
		if err := c.HTTPServer.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.MaxDestinations < 0 {
		errs = append(errs, fmt.Errorf("max_destinations: must be >= 0, got %d", c.MaxDestinations))
	}
	return errors.Join(errs...)
}

// CheckExposure refuses what an agent must not do without -insecure: a
// non-loopback gossip address without a key file, or a non-loopback HTTP
// address without a token file. The error says which flag to add.
func (c Config) CheckExposure() error {
	if c.Insecure {
		return nil
	}
	var errs []error
	gossip := c.Bind
	if c.Advertise != "" && isLoopback(c.Bind) {
		gossip = c.Advertise
	}
	if !c.DisableGossip && c.SecretKeyFile == "" && (!isLoopback(c.Bind) || !isLoopback(gossip)) {
		errs = append(errs, fmt.Errorf("gossip address %s is not loopback and gossip would be unencrypted: add -secret-key-file (make a key with 'atnode keygen'), or -insecure", gossip))
	}
	if c.HTTPTokenFile == "" && c.HTTP != "" && !isLoopback(c.HTTP) {
		errs = append(errs, fmt.Errorf("HTTP address %s is not loopback and has no token: add -http-token-file, or -insecure", c.HTTP))
	}
	return errors.Join(errs...)
}

// TrackerConfig is the local tracker's configuration derived from c.
func (c Config) TrackerConfig() tracker.Config {
	tc := tracker.DefaultConfig()
	tc.Window = c.Window
	if c.SubWindow > 0 {
		tc.SubWindows = int(c.Window / c.SubWindow)
	}
	tc.MinSamples = c.MinSamples
	tc.MaxDestinations = c.MaxDestinations
	return tc
}

// TimeoutConfig is the timeout selection configuration derived from c.
func (c Config) TimeoutConfig() timeout.Config {
	return timeout.Config{Backoff: c.Backoff, Quantile: c.Quantile, SafetyFactor: c.SafetyFactor}
}

// maxNameLen is the longest -name, in bytes: well inside what the cluster
// accepts (cluster.MaxNameLen, less the member-name suffix with gossip).
const maxNameLen = 128

// checkName applies the cluster's rules for peer names (cluster.CheckName)
// with this package's length limit, so that a name the cluster would refuse
// is a configuration error naming -name rather than a failure of New.
func checkName(name string) error {
	if name == "" {
		return errors.New("must not be empty")
	}
	if len(name) > maxNameLen {
		return fmt.Errorf("is %d bytes, more than %d", len(name), maxNameLen)
	}
	return cluster.CheckName(name)
}

// checkIPPort is checkHostPort for the gossip addresses, whose host must be
// an IP address without a zone: memberlist binds and advertises IPs, not
// names, and the cluster refuses zoned addresses.
func checkIPPort(s string) error {
	if err := checkHostPort(s); err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(s)
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("host of %q must be an IP address, e.g. 127.0.0.1", s)
	}
	if ip.Zone() != "" {
		return fmt.Errorf("host of %q: zoned addresses are not supported", s)
	}
	return nil
}

func checkHostPort(s string) error {
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

// isLoopback reports whether host:port names a loopback address: an IP in
// 127.0.0.0/8 or ::1, or "localhost". Any other name counts as exposed.
func isLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// List is a list of strings that reads from a comma-separated flag value or
// from YAML as either a sequence or a comma-separated string.
type List []string

// String joins the list with commas.
func (l *List) String() string { return strings.Join(*l, ",") }

// Set replaces the list with the comma-separated items of s, trimmed, with
// empty items dropped.
func (l *List) Set(s string) error {
	*l = splitList(s)
	return nil
}

// UnmarshalYAML accepts a sequence of strings or one comma-separated string.
func (l *List) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*l = splitList(n.Value)
		return nil
	case yaml.SequenceNode:
		var items []string
		if err := n.Decode(&items); err != nil {
			return err
		}
		*l = splitList(strings.Join(items, ","))
		return nil
	default:
		return fmt.Errorf("line %d: want a list or a comma-separated string", n.Line)
	}
}

func splitList(s string) List {
	var out List
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// logLevels maps -log-level values to slog levels.
var logLevels = map[string]slog.Level{
	"debug": slog.LevelDebug,
	"info":  slog.LevelInfo,
	"warn":  slog.LevelWarn,
	"error": slog.LevelError,
}

// SlogLevel returns the slog level of c.LogLevel (info when unknown).
func (c Config) SlogLevel() slog.Level {
	return logLevels[c.LogLevel]
}
