package node

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/internal/fielderr"
	"github.com/adaptivetimeout/adaptivetimeout/internal/smallfile"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// Config is everything a node is configured with. It is composed of the
// configurations of the packages the node is built from (Tracker, Fleet,
// Timeout, Cluster), each with its own defaults, Validate and flags, plus
// the node's own settings. Start from DefaultConfig.
//
// The user-facing settings are the `atnode agent` flags (RegisterFlags).
// In YAML (LoadYAML) the keys are flat and equal to the flag names with '_'
// for '-', whichever sub-configuration holds the field: `window: 30s`,
// `quantile: 0.999`, `join: [10.0.0.1:7946]`. Fields without a flag have no
// YAML key either: they are set in code.
type Config struct {
	// Name is this peer's name (-name), stable across restarts: 1..247
	// bytes of printable UTF-8 (cluster.MaxNameLen). The cluster member and
	// the fleet view take it from here. Default: the hostname.
	Name string `yaml:"name"`

	// HTTP is the HTTP API's host:port (-http); port 0 picks a free port;
	// empty binds nothing (Node.Handler can still be served by the
	// embedder). Default 127.0.0.1:8080: Start opens a listener there, so an
	// embedder that serves Handler on its own server sets HTTP to "". A
	// non-loopback address needs HTTPTokenFile, or Insecure.
	HTTP string `yaml:"http"`
	// HTTPTokenFile holds a bearer token (-http-token-file) that POST
	// endpoints and /debug/pprof/ then require: a regular file of at most
	// 64 KiB, read once by New. Default "".
	HTTPTokenFile string `yaml:"http_token_file"`
	// Insecure (-insecure) lets New accept a non-loopback gossip address
	// without Cluster.KeyFile and a non-loopback HTTP address without
	// HTTPTokenFile. Default false: such a configuration is refused, with a
	// message that says which flag to add.
	Insecure bool `yaml:"insecure"`
	// LogLevel (-log-level) is debug, info, warn or error. The node logs to
	// the logger it is given; atnode sets that logger's level from this.
	// Default info.
	LogLevel string `yaml:"log_level"`
	// HedgeBudget (-hedge-budget) is the share of DoHedged calls that may
	// start a hedged attempt, in [0, 0.5]: the hedge delay is the fleet's
	// estimate at quantile 1 − HedgeBudget, and a token bucket keeps hedges
	// within it (plus a burst of 10) over any minute. 0 disables hedging
	// but keeps DoHedged's replica ordering and failover. Used by DoHedged
	// and by the transport adapters that hedge through the node
	// (timeout.Hedger).
	// Default 0.05.
	HedgeBudget float64 `yaml:"hedge_budget"`

	// SubWindow (-sub-window) is the length of one sub-window: the window
	// slides, and each node gossips its sealed counts, once per SubWindow.
	// The tracker's ring then holds Tracker.Window/SubWindow sub-windows,
	// which must be a whole number in 1..255, and SubWindow a whole number
	// of milliseconds. Set it to 0 to give Tracker.SubWindows as a count
	// instead (setting both is an error). Default 6s.
	SubWindow time.Duration `yaml:"sub_window"`

	// Tracker is the local tracker's window (-window), trust threshold
	// (-min-samples) and destination bound (-max-destinations, which also
	// bounds the fleet view's destinations). Its SubWindows comes from
	// SubWindow unless that is 0. Default tracker.DefaultConfig() with
	// MaxDestinations 10000 (about 32 KiB each) and SubWindows 0.
	Tracker tracker.Config `yaml:",inline"`
	// Fleet is the fleet view's trust and share settings (-min-peers,
	// -max-origin-share) and its memory bounds. Its Tracker and Self are
	// set by the node from Tracker, SubWindow and Name. Default
	// tracker.DefaultFleetConfig().
	Fleet tracker.FleetConfig `yaml:",inline"`
	// Timeout is how timeouts are chosen (-backoff, -quantile,
	// -safety-factor). Default timeout.DefaultConfig().
	Timeout timeout.Config `yaml:",inline"`
	// HTTPServer bounds the HTTP server on HTTP: deadlines and the
	// connection cap (flags -http-read-timeout etc.). Default
	// DefaultHTTPServerConfig.
	HTTPServer HTTPServerConfig `yaml:",inline"`
	// Cluster is gossip membership (-bind, -advertise, -join,
	// -secret-key-file, -label). The node sets its Name, Logger, OnEvent,
	// Store, Seal, Tracker and Clock, and its BootID when it is 0 (the boot
	// ID of the node's own batches, with or without gossip, is this one
	// BootID); tests and embedders may set
	// Transport (internal/memtransport) and Timing, Limits and Gossip
	// directly. A non-loopback Bind or Advertise needs KeyFile, or
	// Insecure. Default cluster.DefaultConfig().
	Cluster cluster.Config `yaml:",inline"`

	// The fields below are for embedding and tests; they have no flag and
	// no YAML key.

	// DisableGossip runs the node alone: no cluster is created, Cluster is
	// not used (it is still validated), and the fleet view holds only this
	// node's own sealed sub-windows. Default false.
	DisableGossip bool `yaml:"-"`
	// Clock is the wall clock every time the node records or queries comes
	// from (the epoch grid is read from it). nil means time.Now. Default nil.
	Clock func() time.Time `yaml:"-"`
	// Classify tells Do and DoHedged what an error fn returned of its own
	// (before the adaptive timeout and before the caller's context ended)
	// says about the attempt: timeout.Completed (the destination answered,
	// with an error of the application's), timeout.Failed (the transport
	// failed fast: refused, reset; no latency sample, and it counts for the
	// failure detector; DoHedged fails over), or timeout.Canceled (nothing
	// to learn; for DoHedged the replica answered). nil means ClassifyError:
	// the network's own errors of a failed connection are timeout.Failed,
	// every other error a completion at the time fn took. Default nil.
	Classify func(err error) timeout.Outcome `yaml:"-"`
}

// DefaultConfig returns the defaults of the `atnode agent` flags. Name is
// the hostname, or "atnode" when it cannot be read. Note for embedders: HTTP
// defaults to 127.0.0.1:8080, so Start opens that listener unless HTTP is
// set to "" (Handler can then be mounted on the embedder's own server).
func DefaultConfig() Config {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "atnode"
	}
	tr := tracker.DefaultConfig()
	tr.SubWindows = 0 // from SubWindow
	tr.MaxDestinations = 10_000
	fl := tracker.DefaultFleetConfig()
	fl.Tracker = tracker.Config{} // set by the node
	cl := cluster.DefaultConfig()
	cl.Tracker = tracker.Config{} // set by the node
	return Config{
		Name:        name,
		HTTP:        "127.0.0.1:8080",
		LogLevel:    "info",
		HedgeBudget: 0.05,
		SubWindow:   6 * time.Second,
		Tracker:     tr,
		Fleet:       fl,
		Timeout:     timeout.DefaultConfig(),
		Cluster:     cl,
		HTTPServer:  DefaultHTTPServerConfig(),
	}
}

// RegisterFlags registers the `atnode agent` flags on fs, with c's current
// values as defaults: the node's own, then those of each sub-configuration
// (tracker.Config, tracker.FleetConfig, timeout.Config, cluster.Config).
// Each flag's name is its YAML key with '-' for '_'.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Name, "name", c.Name, "peer name, stable across restarts")
	fs.StringVar(&c.HTTP, "http", c.HTTP, "HTTP API `host:port`; port 0 picks a free port")
	fs.StringVar(&c.HTTPTokenFile, "http-token-file", c.HTTPTokenFile,
		"`file` holding the bearer token POST endpoints and /debug/pprof/ require; a regular file of at most 64 KiB")
	fs.BoolVar(&c.Insecure, "insecure", c.Insecure, "allow non-loopback addresses without a key or token")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.Float64Var(&c.HedgeBudget, "hedge-budget", c.HedgeBudget, "share of DoHedged calls that may start a hedge, in [0, 0.5]; 0 disables hedging")
	fs.DurationVar(&c.SubWindow, "sub-window", c.SubWindow, "sub-window: the window slides and gossips by this much; -window must be a whole number (1..255) of it")
	c.Tracker.RegisterFlags(fs)
	c.Fleet.RegisterFlags(fs)
	c.Timeout.RegisterFlags(fs)
	c.Cluster.RegisterFlags(fs)
	c.HTTPServer.RegisterFlags(fs)
}

// Limits of a YAML configuration file, as of the key and token files: a
// regular file of at most maxConfigFileBytes, read within
// configFileTimeout, so that a FIFO or a hung mount cannot hold the start
// (or a stop signalled meanwhile).
const (
	maxConfigFileBytes = 1 << 20
	configFileTimeout  = 5 * time.Second
)

// LoadYAML reads the YAML file at path over c: keys in the file replace
// c's values, the others are kept. Unknown keys are errors, so a misspelt
// setting does not pass unnoticed; an empty file sets nothing. The file
// must be a regular file of at most 1 MiB (a FIFO is refused at once, a
// read stuck on a hung mount is abandoned after 5 s). Errors are one line.
func (c *Config) LoadYAML(path string) error {
	data, err := smallfile.Read(path, maxConfigFileBytes, configFileTimeout)
	if err != nil {
		return fmt.Errorf("node: config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("node: config %s: %w", path, yamlError(err))
	}
	return nil
}

// yamlError is err on one line: the decoder's list of problems (one per
// line after a heading) joined with "; ", an unknown key said as such
// rather than as a field missing from a Go type.
func yamlError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		line, rest, ok := strings.Cut(m, ": field ")
		if key, _, found := strings.Cut(rest, " not found in type "); ok && found {
			m = fmt.Sprintf("%s: unknown key %q", line, key)
		}
		msgs[i] = m
	}
	return errors.New(strings.Join(msgs, "; "))
}

// TrackerConfig is the local tracker's configuration: Tracker, with
// SubWindows = Tracker.Window/SubWindow unless SubWindow is 0. The fleet
// view and the cluster get the same (FleetConfig, and the node's cluster
// configuration). It is meaningful only for a valid Config.
func (c Config) TrackerConfig() tracker.Config {
	tc := c.Tracker
	if c.SubWindow > 0 && tc.SubWindows == 0 {
		tc.SubWindows = int(tc.Window / c.SubWindow)
	}
	return tc
}

// FleetConfig is the fleet view's configuration: Fleet with the tracker's
// configuration (TrackerConfig), Self = Name, and MaxDestinations no more
// than Tracker.MaxDestinations when that is set.
func (c Config) FleetConfig() tracker.FleetConfig {
	fc := c.Fleet
	fc.Tracker = c.TrackerConfig()
	fc.Self = c.Name
	if c.Tracker.MaxDestinations > 0 {
		fc.MaxDestinations = min(c.Tracker.MaxDestinations, fc.MaxDestinations)
	}
	return fc
}

// Validate reports every problem of c, joined with errors.Join. Each rule
// is stated once, by the configuration that owns the field (the node's own
// settings here, the rest in tracker, timeout and cluster); a problem with
// a field that has a flag is prefixed with the flag ("-quantile: ...").
// Validate also applies the exposure rule: a non-loopback gossip address
// without a key file, or a non-loopback HTTP address without a token file,
// is refused unless Insecure.
func (c Config) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("-%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	if c.HTTP != "" { // empty: no HTTP listener (embedders serve Node.Handler themselves)
		if err := cluster.CheckHostPort(c.HTTP); err != nil {
			bad("http", "%v", err)
		}
	}
	if _, ok := logLevels[c.LogLevel]; !ok {
		bad("log-level", "must be debug, info, warn or error, got %q", c.LogLevel)
	}
	if !(c.HedgeBudget >= 0 && c.HedgeBudget <= 0.5) { // a NaN fails it too
		bad("hedge-budget", "must be in [0, 0.5], got %v", c.HedgeBudget)
	}
	if c.HTTP != "" {
		if err := c.HTTPServer.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	subWindowBad := false
	if c.SubWindow != 0 {
		subWindowBad = true
		switch w := c.Tracker.Window; {
		case c.Tracker.SubWindows != 0:
			bad("sub-window", "give SubWindow (%v) or Tracker.SubWindows (%d), not both", c.SubWindow, c.Tracker.SubWindows)
		case c.SubWindow < 0 || c.SubWindow%time.Millisecond != 0:
			bad("sub-window", "must be a positive whole number of milliseconds, got %v", c.SubWindow)
		case w <= 0: // the tracker says so, as -window's
		case w%c.SubWindow != 0:
			bad("sub-window", "-window %v is not a whole number of sub-windows of %v", w, c.SubWindow)
		default:
			subWindowBad = false
		}
	}

	// The tracker's rules, on the configuration the node will build.
	for _, e := range fielderr.Leaves(c.TrackerConfig().Validate()) {
		if fielderr.Field(e) == "SubWindows" && c.SubWindow != 0 {
			if !subWindowBad { // else already said, as -sub-window's
				bad("sub-window", "%v (-window %v / -sub-window %v)", e, c.Tracker.Window, c.SubWindow)
			}
			continue
		}
		if fielderr.Field(e) == "SubWindows" && c.Tracker.SubWindows == 0 {
			// Neither is set: -sub-window 0s, the one a flag sets.
			bad("sub-window", "must be a positive whole number of milliseconds, got 0s (or set Tracker.SubWindows)")
			continue
		}
		errs = append(errs, flagged(reflect.TypeFor[tracker.Config](), e))
	}
	// The fleet's own fields (its Tracker is the one just checked).
	fc := c.Fleet
	fc.Tracker, fc.Self = tracker.DefaultConfig(), c.Name
	for _, e := range fielderr.Leaves(fc.Validate()) {
		errs = append(errs, flagged(reflect.TypeFor[tracker.FleetConfig](), e))
	}
	for _, e := range fielderr.Leaves(c.Timeout.Validate()) {
		errs = append(errs, flagged(reflect.TypeFor[timeout.Config](), e))
	}
	// The cluster's rules, also with gossip disabled: the name is the
	// fleet's too, and a configuration should not turn invalid by enabling
	// gossip.
	cc := c.Cluster
	cc.Name = c.Name
	for _, e := range fielderr.Leaves(cc.Validate()) {
		if fielderr.Field(e) == "Name" {
			errs = append(errs, fmt.Errorf("-name: %w", e))
			continue
		}
		errs = append(errs, flagged(reflect.TypeFor[cluster.Config](), e))
	}
	errs = append(errs, c.exposure()...)
	return errors.Join(errs...)
}

// flagged prefixes e with the flag of the field of t it is about (its YAML
// key with '-' for '_'), when that field has one.
func flagged(t reflect.Type, e error) error {
	f, ok := t.FieldByName(fielderr.Field(e))
	if !ok {
		return e
	}
	key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if key == "" || key == "-" {
		return e
	}
	return fmt.Errorf("-%s: %w", strings.ReplaceAll(key, "_", "-"), e)
}

// exposure refuses what must not run without Insecure: a non-loopback
// gossip address without a key file, or a non-loopback HTTP address
// without a token file. Each error says which flag to add.
func (c Config) exposure() []error {
	if c.Insecure {
		return nil
	}
	var errs []error
	bind, adv := c.Cluster.Bind, c.Cluster.Advertise
	// A malformed address is reported as such, not also as exposed.
	gossipOK := cluster.CheckIPPort(bind) == nil && (adv == "" || cluster.CheckIPPort(adv) == nil)
	httpOK := c.HTTP != "" && cluster.CheckHostPort(c.HTTP) == nil
	gossip := bind
	if adv != "" && IsLoopback(bind) {
		gossip = adv
	}
	if gossipOK && !c.DisableGossip && c.Cluster.KeyFile == "" && (!IsLoopback(bind) || !IsLoopback(gossip)) {
		errs = append(errs, fmt.Errorf("gossip address %s is not loopback and gossip would be unencrypted: add -secret-key-file (make a key with 'atnode keygen -o FILE'), or -insecure", gossip))
	}
	if httpOK && c.HTTPTokenFile == "" && !IsLoopback(c.HTTP) {
		errs = append(errs, fmt.Errorf("HTTP address %s is not loopback and has no token: add -http-token-file, or -insecure", c.HTTP))
	}
	return errs
}

// IsLoopback reports whether host:port names a loopback address: an IP in
// 127.0.0.0/8 or ::1, or "localhost". Any other name counts as exposed.
// It is the exposure rule's test (Validate).
func IsLoopback(hostport string) bool {
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

// ErrTokenFile is matched (errors.Is) by every error about a token file that
// was read but refused: empty, not a regular file, or over 64 KiB. An error
// that does not match it means the file could not be read at all.
var ErrTokenFile = errors.New("node: bad token file")

// Limits of the token file (as of the gossip key file): a regular file of at
// most maxTokenFileBytes, read within tokenFileTimeout.
const (
	maxTokenFileBytes = 64 << 10
	tokenFileTimeout  = 5 * time.Second
)

// ReadTokenFile reads the bearer token in the file at path: its contents
// with surrounding white space removed. The file must be a regular file of
// at most 64 KiB (a FIFO is refused at once, a read stuck on a hung mount is
// abandoned after 5 s) and must not be empty. Errors name the path, never
// the token.
func ReadTokenFile(path string) (string, error) {
	b, err := smallfile.Read(path, maxTokenFileBytes, tokenFileTimeout)
	switch {
	case smallfile.Refused(err):
		return "", fmt.Errorf("%w: %w", ErrTokenFile, err)
	case err != nil:
		return "", fmt.Errorf("node: token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%w: %s is empty", ErrTokenFile, path)
	}
	return tok, nil
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
