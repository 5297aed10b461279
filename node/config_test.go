package node

import (
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/internal/smallfile"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

func TestConfigHTTPAndExposure(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		err    string // from Validate
	}{
		{name: "defaults"},
		{name: "no HTTP listener", mutate: func(c *Config) { c.HTTP = "" }},
		{name: "bad HTTP", mutate: func(c *Config) { c.HTTP = "nope" }, err: `-http: want host:port, got "nope"`},
		{name: "exposed HTTP without token", mutate: func(c *Config) { c.HTTP = "0.0.0.0:8080" }, err: "add -http-token-file"},
		{name: "exposed HTTP with token", mutate: func(c *Config) { c.HTTP = "0.0.0.0:8080"; c.HTTPTokenFile = "t" }},
		{name: "exposed gossip without key", mutate: func(c *Config) { c.Cluster.Bind = "0.0.0.0:7946" }, err: "add -secret-key-file (make a key with 'atnode keygen -o FILE')"},
		{name: "exposed advertise without key", mutate: func(c *Config) { c.Cluster.Advertise = "10.1.2.3:7946" }, err: "gossip address 10.1.2.3:7946 is not loopback"},
		{name: "exposed gossip with key", mutate: func(c *Config) { c.Cluster.Bind = "0.0.0.0:7946"; c.Cluster.KeyFile = "k" }},
		{name: "exposed gossip, gossip disabled", mutate: func(c *Config) { c.Cluster.Bind = "0.0.0.0:7946"; c.DisableGossip = true }},
		{name: "insecure", mutate: func(c *Config) { c.Cluster.Bind, c.HTTP, c.Insecure = "0.0.0.0:7946", "0.0.0.0:1", true }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			if tc.mutate != nil {
				tc.mutate(&c)
			}
			err := c.Validate()
			if tc.err == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tc.err)
			}
		})
	}
}

// TestNewAppliesExposure: an embedder gets the agent's rule from New, with
// Insecure as the explicit opt-out.
func TestNewAppliesExposure(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Name, cfg.DisableGossip, cfg.HTTP = "e", true, "0.0.0.0:0"
	_, err := New(cfg, nil, nil)
	require.ErrorContains(t, err, "HTTP address 0.0.0.0:0 is not loopback and has no token: add -http-token-file, or -insecure")
	cfg.Insecure = true
	n, err := New(cfg, nil, nil)
	require.NoError(t, err)
	require.NoError(t, n.Close())
}

func TestConfigValidateNamesTheFlag(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		err    string
	}{
		{"empty name", func(c *Config) { c.Name = "" }, "-name: cluster: name is empty"},
		{"bind without port", func(c *Config) { c.Cluster.Bind = "127.0.0.1" }, `-bind: cluster: bind: want host:port, got "127.0.0.1"`},
		{"bind by name", func(c *Config) { c.Cluster.Bind = "localhost:7946" }, `-bind: cluster: bind: host of "localhost:7946" must be an IP address`},
		{"bind port range", func(c *Config) { c.Cluster.Bind = "127.0.0.1:70000" }, "-bind: cluster: bind: port of"},
		{"advertise by name", func(c *Config) { c.Cluster.Advertise = "node-1:7946" }, "-advertise: cluster: advertise: host of"},
		{"join by name is fine, without port is not", func(c *Config) { c.Cluster.Seeds = cluster.AddrList{"node-1:7946", "node-2"} }, `-join: cluster: seed: want host:port, got "node-2"`},
		{"join without host", func(c *Config) { c.Cluster.Seeds = cluster.AddrList{":7946"} }, `-join: cluster: seed: host of ":7946" must not be empty`},
		{"zero window", func(c *Config) { c.Tracker.Window = 0 }, "-window: tracker: Window must be > 0, got 0s"},
		{"sub-window not whole ms", func(c *Config) { c.SubWindow = 1500 * time.Microsecond }, "-sub-window: must be a positive whole number of milliseconds, got 1.5ms"},
		{"negative sub-window", func(c *Config) { c.SubWindow = -time.Second }, "-sub-window: must be a positive whole number of milliseconds"},
		{"window not a multiple", func(c *Config) { c.SubWindow = 7 * time.Second }, "-sub-window: -window 1m0s is not a whole number of sub-windows of 7s"},
		{"sub-window above the window", func(c *Config) { c.Tracker.Window = 3 * time.Second }, "-sub-window: -window 3s is not a whole number of sub-windows of 6s"},
		{"too many sub-windows", func(c *Config) { c.Tracker.Window, c.SubWindow = 256*time.Second, time.Second },
			"-sub-window: tracker: SubWindows must be in 1..255, got 256 (-window 4m16s / -sub-window 1s)"},
		{"both sub-window forms", func(c *Config) { c.Tracker.SubWindows = 10 }, "-sub-window: give SubWindow (6s) or Tracker.SubWindows (10), not both"},
		{"neither sub-window form", func(c *Config) { c.SubWindow = 0 }, "-sub-window: must be a positive whole number of milliseconds, got 0s (or set Tracker.SubWindows)"},
		{"negative max destinations", func(c *Config) { c.Tracker.MaxDestinations = -1 }, "-max-destinations: tracker: MaxDestinations must be >= 0, got -1"},
		{"negative min peers", func(c *Config) { c.Fleet.MinPeers = -1 }, "-min-peers: tracker: MinPeers must be >= 0"},
		{"share above 1", func(c *Config) { c.Fleet.MaxOriginShare = 1.5 }, "-max-origin-share: tracker: MaxOriginShare must be in [0, 1]"},
		{"share NaN", func(c *Config) { c.Fleet.MaxOriginShare = math.NaN() }, "-max-origin-share:"},
		{"fleet bound without a flag", func(c *Config) { c.Fleet.MaxOrigins = 0 }, "tracker: MaxOrigins must be in 1..4096, got 0"},
		{"backoff", func(c *Config) { c.Timeout.Backoff = timeout.BackoffInterval{Min: time.Second, Max: time.Millisecond} }, `-backoff: timeout: backoff "1s..1ms"`},
		{"quantile 0", func(c *Config) { c.Timeout.Quantile = 0 }, "-quantile: timeout: quantile must be in (0, 1], got 0"},
		{"safety infinite", func(c *Config) { c.Timeout.SafetyFactor = math.Inf(1) }, "-safety-factor: timeout: safety factor must be finite and > 0"},
		{"log level", func(c *Config) { c.LogLevel = "loud" }, "-log-level: must be debug, info, warn or error"},
		{"hedge budget above 0.5", func(c *Config) { c.HedgeBudget = 0.6 }, "-hedge-budget: must be in [0, 0.5], got 0.6"},
		{"hedge budget NaN", func(c *Config) { c.HedgeBudget = math.NaN() }, "-hedge-budget: must be in [0, 0.5], got NaN"},
		{"long name", func(c *Config) { c.Name = strings.Repeat("n", 248) }, "-name: cluster: name is 248 bytes, at most 247"},
		{"name with a tab", func(c *Config) { c.Name = "a\tb" }, `-name: cluster: name "a\tb" holds the unprintable U+0009`},
		{"name not UTF-8", func(c *Config) { c.Name = "a\xffb" }, `-name: cluster: name "a\xffb" is not valid UTF-8`},
		{"long label", func(c *Config) { c.Cluster.Label = strings.Repeat("l", 300) }, "-label: cluster: label is 300 bytes, at most 255"},
		{"zoned bind", func(c *Config) { c.Cluster.Bind = "[fe80::1%eth0]:7946" }, `-bind: cluster: bind: host of "[fe80::1%eth0]:7946": zoned addresses are not supported`},
		{"zoned advertise", func(c *Config) { c.Cluster.Advertise = "[fe80::1%eth0]:7946" }, "-advertise: cluster: advertise: host of"},
		{"timing without a flag", func(c *Config) { c.Cluster.Timing.ProbeInterval = 0 }, "cluster: probe interval must be > 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mutate(&c)
			err := c.Validate()
			require.ErrorContains(t, err, tc.err)
			require.Len(t, strings.Split(err.Error(), "\n"), 1, "one problem, said once: %v", err)
		})
	}

	t.Run("every problem at once", func(t *testing.T) {
		c := DefaultConfig()
		c.Name, c.Timeout.Quantile, c.LogLevel, c.Tracker.Window = "", 2, "x", 0
		err := c.Validate()
		for _, flag := range []string{"-name:", "-quantile:", "-log-level:", "-window:"} {
			require.ErrorContains(t, err, flag)
		}
		require.Len(t, strings.Split(err.Error(), "\n"), 4, "%v", err)
	})
}

// TestConfigValidateCoversCluster checks that every configuration the
// cluster would refuse (with the node's Store and tracker) is already
// refused by Validate, which names the flag (atnode exits 2 for it), and
// that the limits themselves are accepted.
func TestConfigValidateCoversCluster(t *testing.T) {
	tests := []struct {
		name    string
		refused bool
		mutate  func(*Config)
	}{
		{"defaults", false, func(*Config) {}},
		{"247-byte name", false, func(c *Config) { c.Name = strings.Repeat("n", 247) }},
		{"248-byte name", true, func(c *Config) { c.Name = strings.Repeat("n", 248) }},
		{"300-byte name", true, func(c *Config) { c.Name = strings.Repeat("n", 300) }},
		{"unicode name", false, func(c *Config) { c.Name = "nœud-é" }},
		{"name with a tab", true, func(c *Config) { c.Name = "a\tb" }},
		{"name with a newline", true, func(c *Config) { c.Name = "a\n" }},
		{"name with NUL", true, func(c *Config) { c.Name = "a\x00" }},
		{"name with U+2028", true, func(c *Config) { c.Name = "a\u2028b" }},
		{"name not UTF-8", true, func(c *Config) { c.Name = "a\xff" }},
		{"255-byte label", false, func(c *Config) { c.Cluster.Label = strings.Repeat("l", 255) }},
		{"256-byte label", true, func(c *Config) { c.Cluster.Label = strings.Repeat("l", 256) }},
		{"zoned bind", true, func(c *Config) { c.Cluster.Bind = "[fe80::1%eth0]:7946" }},
		{"zoned advertise", true, func(c *Config) { c.Cluster.Advertise = "[fe80::1%eth0]:0" }},
		{"IPv6 bind", false, func(c *Config) { c.Cluster.Bind = "[::1]:0" }},
		{"join by name", false, func(c *Config) { c.Cluster.Seeds = cluster.AddrList{"node-1:7946"} }},
		{"join without port", true, func(c *Config) { c.Cluster.Seeds = cluster.AddrList{"node-1"} }},
		{"one sub-window", false, func(c *Config) { c.Tracker.Window, c.SubWindow = time.Second, time.Second }},
		{"255 sub-windows", false, func(c *Config) { c.Tracker.Window, c.SubWindow = 255*time.Millisecond, time.Millisecond }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mutate(&c)
			err := c.Validate()
			n := &Node{cfg: c, tcfg: c.TrackerConfig()}
			fleet, ferr := tracker.NewFleet(tracker.DefaultFleetConfig(), nil)
			require.NoError(t, ferr)
			cc := n.clusterConfig()
			cc.Store, cc.Tracker = fleet, fleet.Config().Tracker // as the node's own Store would
			clusterErr := cc.Validate()
			if tc.refused {
				require.Error(t, clusterErr)
				require.Error(t, err, "the cluster refuses it (%v), so must Validate", clusterErr)
			} else {
				require.NoError(t, clusterErr)
				require.NoError(t, err)
			}
		})
	}
}

// TestConfigDerivedOnce: the tracker configuration is derived once and is
// the same for the tracker, the fleet view and the cluster; the fleet's
// self is the name; the destination bound applies to both views.
func TestConfigDerivedOnce(t *testing.T) {
	c := DefaultConfig()
	c.Name = "d"
	c.Tracker.Window, c.SubWindow = 30*time.Second, 3*time.Second
	c.Tracker.MaxDestinations = 100
	require.NoError(t, c.Validate())
	tc := c.TrackerConfig()
	require.Equal(t, 10, tc.SubWindows)
	require.Equal(t, 3*time.Second, tc.SubWindow())
	fc := c.FleetConfig()
	require.Equal(t, tc, fc.Tracker)
	require.Equal(t, "d", fc.Self)
	require.Equal(t, 100, fc.MaxDestinations)
	c.Tracker.MaxDestinations = 0 // unlimited locally: the fleet keeps its own bound
	require.Equal(t, tracker.DefaultFleetConfig().MaxDestinations, c.FleetConfig().MaxDestinations)

	// A count instead of a duration.
	c = DefaultConfig()
	c.SubWindow, c.Tracker.SubWindows = 0, 20
	require.NoError(t, c.Validate())
	require.Equal(t, 3*time.Second, c.TrackerConfig().SubWindow())

	// The node's three users of it get that one value.
	c = DefaultConfig()
	c.Name, c.HTTP = "d", ""
	c.Tracker.Window, c.SubWindow = 20*time.Second, 2*time.Second
	n, err := New(c, nil, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	require.Equal(t, c.TrackerConfig(), n.local.Config())
	require.Equal(t, c.TrackerConfig(), n.fleet.Config().Tracker)
	require.Equal(t, c.TrackerConfig(), n.clusterConfig().Tracker)
	require.Equal(t, n.boot, n.Cluster().BootID(), "one boot ID")
	require.NotZero(t, n.boot)
}

// TestConfigFlagsAndYAMLKeys: every YAML key of Config (through the inlined
// sub-configurations) is a flag with '_' for '-', and every flag a key; the
// documented flags are all there.
func TestConfigFlagsAndYAMLKeys(t *testing.T) {
	var keys []string
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for f := range t.Fields() {
			tag := f.Tag.Get("yaml")
			key, opts, _ := strings.Cut(tag, ",")
			switch {
			case opts == "inline":
				walk(f.Type)
			case key == "-" || !f.IsExported():
			case key == "":
				panic("untagged field " + t.String() + "." + f.Name)
			default:
				keys = append(keys, strings.ReplaceAll(key, "_", "-"))
			}
		}
	}
	walk(reflect.TypeFor[Config]())
	slices.Sort(keys)

	c := DefaultConfig()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.RegisterFlags(fs)
	var flags []string
	fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f.Name) })
	require.Equal(t, keys, flags)
	require.Equal(t, []string{
		"advertise", "backoff", "bind", "hedge-budget", "http", "http-idle-timeout", "http-max-connections",
		"http-read-header-timeout", "http-read-timeout", "http-token-file", "http-write-timeout", "insecure", "join", "label",
		"log-level", "max-destinations", "max-origin-share", "min-peers", "min-samples", "name", "quantile",
		"safety-factor", "secret-key-file", "sub-window", "window",
	}, flags)
	require.Equal(t, c, DefaultConfig(), "registering changes nothing")
	for name, def := range map[string]string{"window": "1m0s", "sub-window": "6s", "min-samples": "3", "max-destinations": "10000",
		"min-peers": "0", "max-origin-share": "0.25", "backoff": "250ms..1m", "quantile": "0.9999", "safety-factor": "2",
		"hedge-budget": "0.05", "bind": "127.0.0.1:7946", "http": "127.0.0.1:8080", "log-level": "info", "join": ""} {
		require.Equal(t, def, fs.Lookup(name).DefValue, name)
	}
}

func TestConfigFlags(t *testing.T) {
	c := DefaultConfig()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	require.NoError(t, fs.Parse([]string{"-window", "30s", "-sub-window", "3s", "-min-samples", "7", "-max-destinations", "50",
		"-min-peers", "2", "-max-origin-share", "0.5", "-backoff", "10ms..5s", "-quantile", "0.999", "-safety-factor", "3",
		"-join", "127.0.0.1:1, 127.0.0.1:2", "-secret-key-file", "k", "-label", "blue", "-hedge-budget", "0.1"}))
	want := DefaultConfig()
	want.Tracker.Window, want.SubWindow, want.Tracker.MinSamples, want.Tracker.MaxDestinations = 30*time.Second, 3*time.Second, 7, 50
	want.Fleet.MinPeers, want.Fleet.MaxOriginShare = 2, 0.5
	want.Timeout = timeout.Config{Backoff: timeout.BackoffInterval{Min: 10 * time.Millisecond, Max: 5 * time.Second}, Quantile: 0.999, SafetyFactor: 3}
	want.Cluster.Seeds, want.Cluster.KeyFile, want.Cluster.Label = cluster.AddrList{"127.0.0.1:1", "127.0.0.1:2"}, "k", "blue"
	want.HedgeBudget = 0.1
	require.Equal(t, want, c)
	require.Error(t, fs.Parse([]string{"-min-samples", "-3"}))
}

func TestAddrListFromFlagAndYAML(t *testing.T) {
	var l cluster.AddrList
	require.NoError(t, l.Set(" a:1, ,b:2 "))
	require.Equal(t, cluster.AddrList{"a:1", "b:2"}, l)
	require.Equal(t, "a:1,b:2", l.String())

	for _, doc := range []string{"join: [a:1, b:2]\n", "join: a:1,b:2\n", "join:\n  - a:1\n  - b:2\n"} {
		c := DefaultConfig()
		require.NoError(t, yaml.Unmarshal([]byte(doc), &c), doc)
		require.Equal(t, cluster.AddrList{"a:1", "b:2"}, c.Cluster.Seeds, doc)
	}
	c := DefaultConfig()
	require.Error(t, yaml.Unmarshal([]byte("join: {a: 1}\n"), &c))
}

func TestLoadYAML(t *testing.T) {
	dir := t.TempDir()
	c := DefaultConfig()
	require.NoError(t, c.LoadYAML(writeFile(t, dir, "ok.yaml", "name: n7\nsub_window: 2s\nbackoff: 10ms..5s\nmin_samples: 9\n"+
		"window: 20s\nmin_peers: 2\nmax_origin_share: 0.5\nquantile: 0.999\nsafety_factor: 3\nlabel: blue\n"+
		"max_destinations: 10\nhedge_budget: 0.2\nsecret_key_file: k\nhttp_token_file: tok\ninsecure: true\nadvertise: 10.0.0.1:7946\n")))
	require.Equal(t, "n7", c.Name)
	require.Equal(t, 2*time.Second, c.SubWindow)
	require.Equal(t, 20*time.Second, c.Tracker.Window)
	require.Equal(t, timeout.BackoffInterval{Min: 10 * time.Millisecond, Max: 5 * time.Second}, c.Timeout.Backoff)
	require.Equal(t, uint32(9), c.Tracker.MinSamples)
	require.Equal(t, 10, c.Tracker.MaxDestinations)
	require.Equal(t, 2, c.Fleet.MinPeers)
	require.Equal(t, 0.5, c.Fleet.MaxOriginShare)
	require.Equal(t, 0.999, c.Timeout.Quantile)
	require.Equal(t, 3.0, c.Timeout.SafetyFactor)
	require.Equal(t, "blue", c.Cluster.Label)
	require.Equal(t, 0.2, c.HedgeBudget)
	require.Equal(t, "k", c.Cluster.KeyFile)
	require.Equal(t, "tok", c.HTTPTokenFile)
	require.True(t, c.Insecure)
	require.Equal(t, "10.0.0.1:7946", c.Cluster.Advertise)
	require.Equal(t, "127.0.0.1:7946", c.Cluster.Bind, "keys not in the file keep their value")
	require.Equal(t, 10, c.TrackerConfig().SubWindows)

	require.NoError(t, c.LoadYAML(writeFile(t, dir, "empty.yaml", "")))
	require.ErrorContains(t, c.LoadYAML(writeFile(t, dir, "typo.yaml", "nmae: x\n")), `line 1: unknown key "nmae"`)
	for _, hidden := range []string{"timing: {probe_interval: 1s}\n", "sub_windows: 3\n", "self: x\n", "max_origins: 5\n", "boot_id: 1\n"} {
		require.ErrorContains(t, c.LoadYAML(writeFile(t, dir, "hidden.yaml", hidden)), "unknown key", "no YAML key without a flag: %q", hidden)
	}
	// Several problems, one line.
	err := c.LoadYAML(writeFile(t, dir, "two.yaml", "nmae: x\nwindow: soon\n"))
	require.EqualError(t, err, "node: config "+filepath.Join(dir, "two.yaml")+
		`: line 1: unknown key "nmae"; line 2: cannot unmarshal !!str `+"`soon`"+` into time.Duration`)
	require.ErrorContains(t, c.LoadYAML(writeFile(t, dir, "bad.yaml", "backoff: 5s..1s\n")), "min timeout (5000ms) exceeds max timeout (1000ms)")
	require.Error(t, c.LoadYAML(filepath.Join(dir, "missing.yaml")))
	require.ErrorIs(t, c.LoadYAML(dir), smallfile.ErrNotRegular)
	require.ErrorIs(t, c.LoadYAML(writeFile(t, dir, "big.yaml", "# "+strings.Repeat("x", maxConfigFileBytes)+"\n")), smallfile.ErrTooLarge)
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	tok, err := ReadTokenFile(writeFile(t, dir, "tok", "  s3cret\n"))
	require.NoError(t, err)
	require.Equal(t, "s3cret", tok)

	for name, path := range map[string]string{
		"empty":     writeFile(t, dir, "empty", " \n"),
		"directory": dir,
		"too large": writeFile(t, dir, "big", strings.Repeat("t", 64<<10+1)),
	} {
		_, err := ReadTokenFile(path)
		require.ErrorIs(t, err, ErrTokenFile, name)
	}
	_, err = ReadTokenFile(filepath.Join(dir, "none"))
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrTokenFile, "unreadable, not refused")
}

// TestReloadKeysCounted: every reload of the key file is counted by
// result, and a refused file (here a directory) leaves the keyring as it
// was.
func TestReloadKeysCounted(t *testing.T) {
	key, err := cluster.GenerateKey()
	require.NoError(t, err)
	keyFile := writeFile(t, t.TempDir(), "cluster.key", key+"\n")
	cfg := DefaultConfig()
	cfg.Name, cfg.HTTP = "k", ""
	cfg.Cluster.Bind, cfg.Cluster.KeyFile = "127.0.0.1:0", keyFile
	n, err := New(cfg, nil, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })

	require.NoError(t, n.ReloadKeys())
	require.NoError(t, os.Remove(keyFile))
	require.NoError(t, os.Mkdir(keyFile, 0o700))
	err = n.ReloadKeys()
	require.ErrorIs(t, err, cluster.ErrKeyFile)
	require.ErrorContains(t, err, "not a regular file (a directory)")

	_, b := do(t, n.Handler(), "GET", "/metrics", "")
	body := string(b)
	require.True(t, strings.Contains(body, `atnode_key_reloads_total{result="ok"} 1`), "ok counted")
	require.True(t, strings.Contains(body, `atnode_key_reloads_total{result="error"} 1`), "error counted")
}
