package node

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

func TestConfigHTTPAndExposure(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		err    string // from Validate, then CheckExposure
	}{
		{name: "defaults"},
		{name: "no HTTP listener", mutate: func(c *Config) { c.HTTP = "" }},
		{name: "bad HTTP", mutate: func(c *Config) { c.HTTP = "nope" }, err: "-http: want host:port"},
		{name: "exposed HTTP without token", mutate: func(c *Config) { c.HTTP = "0.0.0.0:8080" }, err: "add -http-token-file"},
		{name: "exposed HTTP with token", mutate: func(c *Config) { c.HTTP = "0.0.0.0:8080"; c.HTTPTokenFile = "t" }},
		{name: "exposed gossip without key", mutate: func(c *Config) { c.Bind = "0.0.0.0:7946" }, err: "add -secret-key-file"},
		{name: "exposed gossip, gossip disabled", mutate: func(c *Config) { c.Bind = "0.0.0.0:7946"; c.DisableGossip = true }},
		{name: "insecure", mutate: func(c *Config) { c.Bind, c.HTTP, c.Insecure = "0.0.0.0:7946", "0.0.0.0:1", true }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			if tc.mutate != nil {
				tc.mutate(&c)
			}
			err := c.Validate()
			if err == nil {
				err = c.CheckExposure()
			}
			if tc.err == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tc.err)
			}
		})
	}
}

func TestConfigValidateNamesTheFlag(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		err    string
	}{
		{"empty name", func(c *Config) { c.Name = "" }, "-name: must not be empty"},
		{"bind without port", func(c *Config) { c.Bind = "127.0.0.1" }, "-bind: want host:port"},
		{"bind by name", func(c *Config) { c.Bind = "localhost:7946" }, "-bind: host of \"localhost:7946\" must be an IP address"},
		{"bind port range", func(c *Config) { c.Bind = "127.0.0.1:70000" }, "-bind: port of"},
		{"advertise by name", func(c *Config) { c.Advertise = "node-1:7946" }, "-advertise: host of"},
		{"join by name is fine, without port is not", func(c *Config) { c.Join = List{"node-1:7946", "node-2"} }, "-join: want host:port, got \"node-2\""},
		{"zero window", func(c *Config) { c.Window = 0 }, "-window: must be > 0"},
		{"sub-window not whole ms", func(c *Config) { c.SubWindow = 1500 * time.Microsecond }, "-sub-window: must be a whole number of milliseconds"},
		{"window not a multiple", func(c *Config) { c.SubWindow = 7 * time.Second }, "-window: window/sub-window must be a whole number in 1..255"},
		{"too many sub-windows", func(c *Config) { c.Window, c.SubWindow = 256*time.Second, time.Second }, "in 1..255"},
		{"negative min peers", func(c *Config) { c.MinPeers = -1 }, "-min-peers: must be >= 0"},
		{"share above 1", func(c *Config) { c.MaxOriginShare = 1.5 }, "-max-origin-share: must be in [0, 1]"},
		{"share NaN", func(c *Config) { c.MaxOriginShare = math.NaN() }, "-max-origin-share"},
		{"backoff", func(c *Config) { c.Backoff = timeout.BackoffInterval{Min: time.Second, Max: time.Millisecond} }, "-backoff:"},
		{"quantile 0", func(c *Config) { c.Quantile = 0 }, "-quantile: must be in (0, 1]"},
		{"safety infinite", func(c *Config) { c.SafetyFactor = math.Inf(1) }, "-safety-factor: must be finite and > 0"},
		{"log level", func(c *Config) { c.LogLevel = "loud" }, "-log-level: must be debug, info, warn or error"},
		{"long name", func(c *Config) { c.Name = strings.Repeat("n", 129) }, "-name: is 129 bytes, more than 128"},
		{"name with a tab", func(c *Config) { c.Name = "a\tb" }, "-name: \"a\\tb\" holds the unprintable U+0009"},
		{"name not UTF-8", func(c *Config) { c.Name = "a\xffb" }, "-name: \"a\\xffb\" is not valid UTF-8"},
		{"long label", func(c *Config) { c.Label = strings.Repeat("l", 300) }, "-label: is 300 bytes, at most 255"},
		{"zoned bind", func(c *Config) { c.Bind = "[fe80::1%eth0]:7946" }, "-bind: host of \"[fe80::1%eth0]:7946\": zoned addresses are not supported"},
		{"zoned advertise", func(c *Config) { c.Advertise = "[fe80::1%eth0]:7946" }, "-advertise: host of"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mutate(&c)
			require.ErrorContains(t, c.Validate(), tc.err)
		})
	}

	t.Run("every problem at once", func(t *testing.T) {
		c := DefaultConfig()
		c.Name, c.Quantile, c.LogLevel = "", 2, "x"
		err := c.Validate()
		for _, flag := range []string{"-name:", "-quantile:", "-log-level:"} {
			require.ErrorContains(t, err, flag)
		}
	})
}

// TestConfigValidateCoversCluster checks that every configuration the
// cluster would refuse is already refused by Validate, which names the flag
// (atnode exits 2 for it), and that the limits themselves are accepted.
func TestConfigValidateCoversCluster(t *testing.T) {
	tests := []struct {
		name           string
		clusterRefuses bool // cluster.Config.Validate's verdict
		mutate         func(*Config)
	}{
		{"defaults", false, func(*Config) {}},
		{"128-byte name", false, func(c *Config) { c.Name = strings.Repeat("n", 128) }},
		{"129-byte name", false, func(c *Config) { c.Name = strings.Repeat("n", 129) }},
		{"256-byte name", true, func(c *Config) { c.Name = strings.Repeat("n", 256) }},
		{"300-byte name", true, func(c *Config) { c.Name = strings.Repeat("n", 300) }},
		{"unicode name", false, func(c *Config) { c.Name = "nœud-é" }},
		{"name with a tab", true, func(c *Config) { c.Name = "a\tb" }},
		{"name with a newline", true, func(c *Config) { c.Name = "a\n" }},
		{"name with NUL", true, func(c *Config) { c.Name = "a\x00" }},
		{"name with U+2028", true, func(c *Config) { c.Name = "a\u2028b" }},
		{"name not UTF-8", true, func(c *Config) { c.Name = "a\xff" }},
		{"255-byte label", false, func(c *Config) { c.Label = strings.Repeat("l", 255) }},
		{"256-byte label", true, func(c *Config) { c.Label = strings.Repeat("l", 256) }},
		{"300-byte label", true, func(c *Config) { c.Label = strings.Repeat("l", 300) }},
		{"zoned bind", true, func(c *Config) { c.Bind = "[fe80::1%eth0]:7946" }},
		{"zoned advertise", true, func(c *Config) { c.Advertise = "[fe80::1%eth0]:0" }},
		{"IPv6 bind", false, func(c *Config) { c.Bind = "[::1]:0" }},
		{"join by name", false, func(c *Config) { c.Join = List{"node-1:7946"} }},
		{"join without port", true, func(c *Config) { c.Join = List{"node-1"} }},
		{"one sub-window", false, func(c *Config) { c.Window, c.SubWindow = time.Second, time.Second }},
		{"255 sub-windows", false, func(c *Config) { c.Window, c.SubWindow = 255*time.Millisecond, time.Millisecond }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mutate(&c)
			n := &Node{cfg: c, tcfg: c.TrackerConfig()} // enough for clusterConfig, with a (nil) Store
			clusterErr := n.clusterConfig().Validate()
			require.Equal(t, tc.clusterRefuses, clusterErr != nil, "cluster: %v", clusterErr)
			if clusterErr != nil {
				require.Error(t, c.Validate(), "the cluster refuses it (%v), so must Validate", clusterErr)
			}
		})
	}
}

func TestListFromFlagAndYAML(t *testing.T) {
	var l List
	require.NoError(t, l.Set(" a:1, ,b:2 "))
	require.Equal(t, List{"a:1", "b:2"}, l)
	require.Equal(t, "a:1,b:2", l.String())

	for _, doc := range []string{"join: [a:1, b:2]\n", "join: a:1,b:2\n", "join:\n  - a:1\n  - b:2\n"} {
		var c struct {
			Join List `yaml:"join"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &c), doc)
		require.Equal(t, List{"a:1", "b:2"}, c.Join, doc)
	}
	var c struct {
		Join List `yaml:"join"`
	}
	require.Error(t, yaml.Unmarshal([]byte("join: {a: 1}\n"), &c))
}

func TestLoadYAML(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	c := DefaultConfig()
	require.NoError(t, c.LoadYAML(write("ok.yaml", "name: n7\nsub_window: 2s\nbackoff: 10ms..5s\nmin_samples: 9\n")))
	require.Equal(t, "n7", c.Name)
	require.Equal(t, 2*time.Second, c.SubWindow)
	require.Equal(t, timeout.BackoffInterval{Min: 10 * time.Millisecond, Max: 5 * time.Second}, c.Backoff)
	require.Equal(t, uint32(9), c.MinSamples)
	require.Equal(t, "127.0.0.1:7946", c.Bind, "keys not in the file keep their value")

	require.NoError(t, c.LoadYAML(write("empty.yaml", "")))
	require.ErrorContains(t, c.LoadYAML(write("typo.yaml", "nmae: x\n")), "field nmae not found")
	require.ErrorContains(t, c.LoadYAML(write("bad.yaml", "backoff: 5s..1s\n")), "min timeout (5000ms) exceeds max timeout (1000ms)")
	require.Error(t, c.LoadYAML(filepath.Join(dir, "missing.yaml")))
}
