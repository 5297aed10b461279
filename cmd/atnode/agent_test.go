package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
	"github.com/adaptivetimeout/adaptivetimeout/node"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// writeFile writes content to a new file in t's temp dir and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func TestParseAgentConfigPrecedence(t *testing.T) {
	def := node.DefaultConfig()
	cases := []struct {
		name string
		yaml string // "" = no -config
		args []string
		want func(c *node.Config)
	}{
		{name: "defaults", want: func(*node.Config) {}},
		{name: "flags only", args: []string{"-name", "a", "-window", "30s", "-sub-window", "3s", "-min-samples", "7", "-join", "127.0.0.1:1, 127.0.0.1:2",
			"-max-destinations", "99", "-hedge-budget", "0.1"},
			want: func(c *node.Config) {
				c.Name, c.Tracker.Window, c.SubWindow, c.Tracker.MinSamples = "a", 30*time.Second, 3*time.Second, 7
				c.Cluster.Seeds = cluster.AddrList{"127.0.0.1:1", "127.0.0.1:2"}
				c.Tracker.MaxDestinations, c.HedgeBudget = 99, 0.1
			}},
		{name: "file only", yaml: "name: from-file\nwindow: 20s\nsub_window: 2s\nmin_peers: 2\nmax_origin_share: 0.5\nbackoff: 100ms..10s\nquantile: 0.999\nsafety_factor: 3\nlabel: blue\nlog_level: debug\njoin: [127.0.0.1:5, 127.0.0.1:6]\nmax_destinations: 10\nhedge_budget: 0.25\n",
			want: func(c *node.Config) {
				c.Name, c.Tracker.Window, c.SubWindow, c.Fleet.MinPeers, c.Fleet.MaxOriginShare = "from-file", 20*time.Second, 2*time.Second, 2, 0.5
				c.Timeout.Backoff = timeout.BackoffInterval{Min: 100 * time.Millisecond, Max: 10 * time.Second}
				c.Timeout.Quantile, c.Timeout.SafetyFactor, c.Cluster.Label, c.LogLevel, c.Tracker.MaxDestinations = 0.999, 3, "blue", "debug", 10
				c.Cluster.Seeds = cluster.AddrList{"127.0.0.1:5", "127.0.0.1:6"}
				c.HedgeBudget = 0.25
			}},
		{name: "flag wins over file", yaml: "name: from-file\nwindow: 20s\nsub_window: 2s\nmin_samples: 9\njoin: 127.0.0.1:5\n",
			args: []string{"-name", "from-flag", "-min-samples", "4", "-join", "127.0.0.1:7"},
			want: func(c *node.Config) {
				c.Name, c.Tracker.Window, c.SubWindow, c.Tracker.MinSamples = "from-flag", 20*time.Second, 2*time.Second, 4
				c.Cluster.Seeds = cluster.AddrList{"127.0.0.1:7"}
			}},
		{name: "flag set to its default still wins", yaml: "http: 127.0.0.1:9999\nlog_level: error\ninsecure: true\n",
			args: []string{"-http", "127.0.0.1:8080", "-insecure=false"},
			want: func(c *node.Config) { c.LogLevel = "error" }},
		{name: "config flag after others", yaml: "label: file\n", args: []string{"-label", "flag"},
			want: func(c *node.Config) { c.Cluster.Label = "flag" }},
		{name: "empty file", yaml: "\n", want: func(*node.Config) {}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.yaml != "" {
				args = append([]string{"-config", writeFile(t, "atnode.yaml", tc.yaml)}, args...)
			}
			var stderr bytes.Buffer
			got, err := parseAgentConfig(args, &stderr)
			require.NoError(t, err, stderr.String())
			want := def
			tc.want(&want)
			require.Equal(t, want, got)
		})
	}
}

// errStop is returned by stopNode so that a test sees the agent got past
// its checks without starting anything.
var errStop = errors.New("test: stop before starting")

func stopNode(node.Config, *slog.Logger, prometheus.Registerer) (runtime, error) {
	return nil, errStop
}

func TestAgentRefusals(t *testing.T) {
	key, err := cluster.GenerateKey()
	require.NoError(t, err)
	keyFile := writeFile(t, "cluster.key", key+"\n")
	tokenFile := writeFile(t, "token", "s3cret\n")
	bigKey := writeFile(t, "big.key", key+"\n"+strings.Repeat("#", 64<<10)+"\n")
	fifo := filepath.Join(t.TempDir(), "fifo.yaml")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600)) // nobody ever writes to it
	cases := []struct {
		name string
		args []string
		code int
		msgs []string // each must appear in stderr
	}{
		{"gossip exposed without key", []string{"-bind", "0.0.0.0:7946"}, 2, []string{"add -secret-key-file", "'atnode keygen -o FILE'", "-insecure"}},
		{"advertise exposed without key", []string{"-advertise", "10.1.2.3:7946"}, 2, []string{"10.1.2.3:7946", "add -secret-key-file"}},
		{"http exposed without token", []string{"-http", "0.0.0.0:8080"}, 2, []string{"add -http-token-file"}},
		{"both exposed", []string{"-bind", "0.0.0.0:0", "-http", "0.0.0.0:0"}, 2, []string{"add -secret-key-file", "add -http-token-file"}},
		{"exposed from the file", []string{"-config", writeFile(t, "c.yaml", "bind: 0.0.0.0:7946\n")}, 2, []string{"add -secret-key-file"}},
		{"exposed with -insecure starts", []string{"-bind", "0.0.0.0:0", "-http", "0.0.0.0:0", "-insecure"}, 1, []string{errStop.Error()}},
		{"exposed with key and token starts", []string{"-bind", "0.0.0.0:0", "-http", "0.0.0.0:0", "-secret-key-file", keyFile, "-http-token-file", tokenFile}, 1, []string{errStop.Error()}},
		{"window not a multiple", []string{"-window", "7s", "-sub-window", "2s"}, 2, []string{"-sub-window: -window 7s is not a whole number of sub-windows of 2s"}},
		{"too many sub-windows", []string{"-window", "60s", "-sub-window", "100ms"}, 2, []string{"-sub-window: tracker: SubWindows must be in 1..255, got 600"}},
		{"quantile", []string{"-quantile", "1.5"}, 2, []string{"-quantile: timeout: quantile must be in (0, 1]"}},
		{"safety factor", []string{"-safety-factor", "0"}, 2, []string{"-safety-factor:"}},
		{"min peers", []string{"-min-peers", "-1"}, 2, []string{"-min-peers:"}},
		{"max origin share", []string{"-max-origin-share", "2"}, 2, []string{"-max-origin-share:"}},
		{"max destinations", []string{"-max-destinations", "-5"}, 2, []string{"-max-destinations: tracker: MaxDestinations must be >= 0, got -5"}},
		{"hedge budget", []string{"-hedge-budget", "0.9"}, 2, []string{"-hedge-budget: must be in [0, 0.5], got 0.9"}},
		{"log level", []string{"-log-level", "loud"}, 2, []string{"-log-level:"}},
		{"bind", []string{"-bind", "nowhere"}, 2, []string{"-bind:"}},
		{"join", []string{"-join", "127.0.0.1"}, 2, []string{"-join:"}},
		{"empty name", []string{"-name", ""}, 2, []string{"-name: cluster: name is empty"}},
		{"name with a tab", []string{"-name", "a\tb"}, 2, []string{`-name: cluster: name "a\tb" holds the unprintable U+0009`}},
		{"long name", []string{"-name", strings.Repeat("n", 300)}, 2, []string{"-name: cluster: name is 300 bytes, at most 247"}},
		{"long label", []string{"-label", strings.Repeat("l", 300)}, 2, []string{"-label: cluster: label is 300 bytes, at most 255"}},
		{"long label from the file", []string{"-config", writeFile(t, "c.yaml", "label: "+strings.Repeat("l", 256)+"\n")}, 2, []string{"-label: cluster: label is 256 bytes"}},
		{"zoned bind", []string{"-bind", "[fe80::1%lo]:0"}, 2, []string{"-bind:", "zoned addresses are not supported"}},
		{"several problems at once", []string{"-quantile", "2", "-log-level", "x"}, 2, []string{"-quantile:", "-log-level:"}},
		{"backoff syntax", []string{"-backoff", "5s"}, 2, []string{"invalid value \"5s\" for flag -backoff", "missing '..' range separator"}},
		{"min samples syntax", []string{"-min-samples", "-3"}, 2, []string{"-min-samples"}},
		{"unknown flag", []string{"-nope"}, 2, []string{"atnode agent: flag provided but not defined: -nope\natnode agent: run 'atnode agent -h' for usage\n"}},
		{"positional argument", []string{"extra"}, 2, []string{"unexpected arguments"}},
		{"config file missing", []string{"-config", filepath.Join(t.TempDir(), "none.yaml")}, 2, []string{"-config:", "no such file"}},
		{"config unknown key", []string{"-config", writeFile(t, "c.yaml", "windw: 10s\n")}, 2, []string{"-config:", `unknown key "windw"`}},
		{"config key without a flag", []string{"-config", writeFile(t, "c.yaml", "timing: {probe_interval: 1s}\n")}, 2, []string{"-config:", `unknown key "timing"`}},
		{"config bad value", []string{"-config", writeFile(t, "c.yaml", "window: soon\n")}, 2, []string{"-config:", ": line 1: cannot unmarshal !!str `soon` into time.Duration\n"}},
		{"config file a FIFO", []string{"-config", fifo}, 2, []string{"-config:", "not a regular file (a FIFO)"}},
		{"config invalid setting", []string{"-config", writeFile(t, "c.yaml", "quantile: 0\n")}, 2, []string{"-quantile:"}},
		{"key file missing: unreadable, a runtime failure", []string{"-secret-key-file", filepath.Join(t.TempDir(), "none")}, 1, []string{"-secret-key-file:", "no such file"}},
		{"key file bad", []string{"-secret-key-file", writeFile(t, "bad.key", "not a key\n")}, 2, []string{"-secret-key-file:", "line 1"}},
		{"key file short key", []string{"-secret-key-file", writeFile(t, "short.key", "AAAA\n")}, 2, []string{"-secret-key-file:", "want 32"}},
		{"key file a directory", []string{"-secret-key-file", t.TempDir()}, 2, []string{"-secret-key-file:", "not a regular file (a directory)"}},
		{"key file over 64 KiB", []string{"-secret-key-file", bigKey}, 2, []string{"-secret-key-file:", "at most 65536"}},
		{"token file empty", []string{"-http-token-file", writeFile(t, "empty", " \n")}, 2, []string{"-http-token-file:", "is empty"}},
		{"token file a directory", []string{"-http-token-file", t.TempDir()}, 2, []string{"-http-token-file:", "not a regular file"}},
		{"token file missing", []string{"-http-token-file", filepath.Join(t.TempDir(), "none")}, 1, []string{"-http-token-file:", "no such file"}},
		{"keygen key accepted", []string{"-secret-key-file", keyFile}, 1, []string{errStop.Error()}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			a := app{stdout: &stdout, stderr: &stderr, newNode: stopNode}
			code := a.run(t.Context(), append([]string{"agent"}, tc.args...))
			require.Equal(t, tc.code, code, stderr.String())
			for _, m := range tc.msgs {
				require.Contains(t, stderr.String(), m)
			}
			require.Empty(t, stdout.String(), "nothing is printed to stdout before the listeners are bound")
			require.NotContains(t, stderr.String(), "Usage:", "errors are short: the usage is one -h away")
			if tc.code == 2 {
				require.True(t, strings.HasSuffix(stderr.String(), "atnode agent: run 'atnode agent -h' for usage\n"), stderr.String())
			}
		})
	}
}

func TestCommands(t *testing.T) {
	cases := []struct {
		name       string
		args       []string
		code       int
		stdout     string // substring; "" = must be empty
		stderr     string // substring; "" = must be empty
		fullUsage  bool
		checkStdio func(t *testing.T, stdout string)
	}{
		{name: "no arguments: a missing command", code: 2, stderr: "atnode agent", fullUsage: true},
		{name: "help", args: []string{"help"}, code: 0, stdout: "Secure defaults", fullUsage: true},
		{name: "-h", args: []string{"-h"}, code: 0, stdout: "3-node cluster", fullUsage: true},
		{name: "unknown", args: []string{"serve"}, code: 2, stderr: "atnode: unknown command \"serve\"\natnode: run 'atnode help' for usage\n"},
		{name: "agent -h", args: []string{"agent", "-h"}, code: 0, stderr: "-secret-key-file"},
		{name: "demo -h", args: []string{"demo", "-h"}, code: 0, stderr: "-nodes"},
		{name: "keygen -h", args: []string{"keygen", "-h"}, code: 0, stderr: "mode 0600"},
		{name: "keygen extra", args: []string{"keygen", "x"}, code: 2, stderr: "takes no arguments"},
		{name: "keygen unknown flag", args: []string{"keygen", "-x"}, code: 2, stderr: "run 'atnode keygen -h' for usage"},
		{name: "version extra", args: []string{"version", "x"}, code: 2, stderr: "takes no arguments"},
		{name: "keygen", args: []string{"keygen"}, code: 0, checkStdio: func(t *testing.T, out string) {
			require.True(t, strings.HasSuffix(out, "\n"))
			keys, err := cluster.LoadKeyFile(writeFile(t, "k", out))
			require.NoError(t, err)
			require.Len(t, keys, 1)
			require.Len(t, keys[0], cluster.KeySize)
		}},
		{name: "version", args: []string{"version"}, code: 0, checkStdio: func(t *testing.T, out string) {
			require.Regexp(t, `^atnode \S+.* go1\.\S+\n$`, out)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			a := app{stdout: &stdout, stderr: &stderr, newNode: stopNode}
			require.Equal(t, tc.code, a.run(t.Context(), tc.args), stderr.String())
			if tc.checkStdio != nil {
				tc.checkStdio(t, stdout.String())
				require.Empty(t, stderr.String())
				return
			}
			if tc.stdout == "" {
				require.Empty(t, stdout.String())
			} else {
				require.Contains(t, stdout.String(), tc.stdout)
			}
			if tc.stderr == "" {
				require.Empty(t, stderr.String())
			} else {
				require.Contains(t, stderr.String(), tc.stderr)
			}
			if tc.fullUsage {
				require.Equal(t, usage, stdout.String()+stderr.String(), "the usage, on one of the two")
			}
		})
	}
}

func TestKeygenKeysDiffer(t *testing.T) {
	seen := map[string]bool{}
	for range 5 {
		var out bytes.Buffer
		require.Equal(t, 0, app{stdout: &out, stderr: &out}.run(t.Context(), []string{"keygen"}))
		require.False(t, seen[out.String()], "keygen repeated a key")
		seen[out.String()] = true
	}
}

func TestVersionLine(t *testing.T) {
	require.Contains(t, versionLine(nil, false), "unknown version")
}

// TestAgentLifecycle runs the agent in process: it prints one line per
// listener, reloads keys on a hangup, and exits 0 when its context ends.
func TestAgentLifecycle(t *testing.T) {
	key, err := cluster.GenerateKey()
	require.NoError(t, err)
	keyFile := writeFile(t, "cluster.key", key+"\n")

	var made []*fakeNode
	var mu sync.Mutex
	newNode := func(cfg node.Config, l *slog.Logger, r prometheus.Registerer) (runtime, error) {
		n, err := newFakeNode(cfg, l, r)
		if err == nil {
			mu.Lock()
			made = append(made, n.(*fakeNode))
			mu.Unlock()
		}
		return n, err
	}
	var stdout, stderr testutil.SyncBuffer
	hangup := make(chan os.Signal, 1)
	a := app{stdout: &stdout, stderr: &stderr, newNode: newNode, hangup: hangup}
	ctx, cancel := context.WithCancel(t.Context())
	exit := make(chan int, 1)
	go func() {
		exit <- a.run(ctx, []string{"agent", "-name", "t1", "-bind", "127.0.0.1:0", "-http", "127.0.0.1:0", "-secret-key-file", keyFile})
	}()
	require.Eventually(t, func() bool { return strings.Count(stdout.String(), "\n") == 2 }, 10*time.Second, 5*time.Millisecond)
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	require.Equal(t, "gossip 127.0.0.1:0", lines[0]) // the fake binds no gossip port
	require.Regexp(t, `^http 127\.0\.0\.1:[1-9][0-9]*$`, lines[1])

	hangup <- os.Interrupt // any value: the agent only counts arrivals
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "keys reloaded") }, 10*time.Second, 5*time.Millisecond)
	cancel()
	select {
	case code := <-exit:
		require.Equal(t, 0, code, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not stop")
	}
	require.Len(t, made, 1)
	require.Equal(t, int32(1), made[0].reloads.Load())
	require.Equal(t, int32(1), made[0].closed.Load())
	require.Contains(t, stderr.String(), "leaving the cluster")
}

// TestKeygenFile: keygen -o writes a key file only its owner can read,
// which an agent then loads without a warning, and never replaces a file.
func TestKeygenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.key")
	var stdout, stderr bytes.Buffer
	a := app{stdout: &stdout, stderr: &stderr}
	require.Equal(t, 0, a.run(t.Context(), []string{"keygen", "-o", path}), stderr.String())
	require.Empty(t, stdout.String(), "the key goes to the file only")
	require.Equal(t, "atnode keygen: wrote a new key to "+path+" (mode 0600)\n", stderr.String())
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	keys, err := cluster.LoadKeyFile(path)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	// No warning about the file's mode when a cluster loads it.
	var logs bytes.Buffer
	cfg := cluster.DefaultConfig()
	cfg.Name, cfg.Bind, cfg.KeyFile = "k", "127.0.0.1:0", path
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c, err := cluster.New(cfg)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.NotContains(t, logs.String(), "readable by group or others")

	stderr.Reset()
	require.Equal(t, 1, a.run(t.Context(), []string{"keygen", "-o", path}))
	require.Contains(t, stderr.String(), "file exists")
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after, "an existing file is never replaced")
}
