package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
)

// TestAgentStartFailureExitsOne pins exit code 1 for a failure while
// starting (here the HTTP address is in use): a runtime failure, said in
// one line without the usage hint of bad usage.
func TestAgentStartFailureExitsOne(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	var stdout, stderr bytes.Buffer
	a := app{stdout: &stdout, stderr: &stderr, newNode: newFakeNode}
	code := a.run(t.Context(), []string{"agent", "-bind", "127.0.0.1:0", "-http", busy.Addr().String()})
	require.Equal(t, 1, code, stderr.String())
	require.True(t, strings.HasPrefix(stderr.String(), "atnode agent: listen tcp "+busy.Addr().String()+": "), stderr.String())
	require.NotContains(t, stderr.String(), "for usage")
	require.Empty(t, stdout.String(), "no listener line for a start that failed")
}

// TestAgentRuntimeFailureHasNoUsageHint: an error of exit code 1 found
// while reading the configuration (a key file that cannot be read) is not
// bad usage, so the agent does not point at -h.
func TestAgentRuntimeFailureHasNoUsageHint(t *testing.T) {
	var stdout, stderr bytes.Buffer
	a := app{stdout: &stdout, stderr: &stderr, newNode: stopNode}
	code := a.run(t.Context(), []string{"agent", "-secret-key-file", filepath.Join(t.TempDir(), "none")})
	require.Equal(t, 1, code, stderr.String())
	require.True(t, strings.HasPrefix(stderr.String(), "atnode agent: -secret-key-file: "), stderr.String())
	require.NotContains(t, stderr.String(), "for usage")
}

// TestAgentWithoutHTTPPrintsGossipOnly: with -http "" the agent serves no
// HTTP and prints one line, for its one listener.
func TestAgentWithoutHTTPPrintsGossipOnly(t *testing.T) {
	var stdout, stderr testutil.SyncBuffer
	a := app{stdout: &stdout, stderr: &stderr, newNode: newFakeNode, hangup: make(chan os.Signal)}
	ctx, cancel := context.WithCancel(t.Context())
	exit := make(chan int, 1)
	go func() { exit <- a.run(ctx, []string{"agent", "-bind", "127.0.0.1:0", "-http", ""}) }()
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "agent started") }, 10*time.Second, 5*time.Millisecond)
	cancel()
	select {
	case code := <-exit:
		require.Equal(t, 0, code, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not stop")
	}
	require.Equal(t, "gossip 127.0.0.1:0\n", stdout.String())
}

// TestVersionLineFormat pins "atnode VERSION (revision REV, TIME,
// modified) GOVERSION": the revision first whatever the settings' order,
// "modified" only for vcs.modified=true, "(devel)" for a build without a
// module version.
func TestVersionLineFormat(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"},
		{Key: "vcs.revision", Value: "abc123"},
		{Key: "vcs.modified", Value: "true"},
	}}
	require.Equal(t, "atnode v1.2.3 (revision abc123, 2026-01-02T03:04:05Z, modified) go1.26.0", versionLine(bi, true))
	bi.Settings[2].Value = "false"
	require.Equal(t, "atnode v1.2.3 (revision abc123, 2026-01-02T03:04:05Z) go1.26.0", versionLine(bi, true))
	require.Equal(t, "atnode (devel) go1.26.0", versionLine(&debug.BuildInfo{GoVersion: "go1.26.0"}, true))
}

// TestDemoDefaults pins the demo's documented defaults: 5 nodes on
// 127.0.0.1:8080, until interrupted.
func TestDemoDefaults(t *testing.T) {
	c, err := parseDemoConfig(nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 5, c.nodes)
	require.Equal(t, "127.0.0.1:8080", c.http)
	require.Zero(t, c.duration)
	require.Equal(t, "warn", c.logLevel)
	// The edges of the ranges are in them.
	for _, args := range [][]string{{"-nodes", "1"}, {"-nodes", "50"}, {"-refresh", "100ms"}, {"-rate", "100000"}, {"-duration", "0s"}} {
		_, err := parseDemoConfig(args, io.Discard)
		require.NoError(t, err, "%v", args)
	}
	for _, args := range [][]string{{"-refresh", "99ms"}, {"-rate", "100000.5"}, {"-duration", "-1ns"}} {
		_, err := parseDemoConfig(args, io.Discard)
		require.Error(t, err, "%v", args)
	}
}
