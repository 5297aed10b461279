package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
)

// agentProc is an atnode agent running as a subprocess.
type agentProc struct {
	cmd            *exec.Cmd
	stdout, stderr *testutil.SyncBuffer
	gossip, http   string // the addresses it printed
	exited         chan struct{}
	err            error // cmd.Wait's result, once exited is closed
}

var listenerLine = regexp.MustCompile(`(?m)^(gossip|http) (127\.0\.0\.1:\d+)$`)

// startAgent runs "atnode agent args..." and waits for its two listener
// lines. The process is killed at the end of the test if still running.
func startAgent(t *testing.T, args ...string) *agentProc {
	t.Helper()
	p := &agentProc{stdout: &testutil.SyncBuffer{}, stderr: &testutil.SyncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(atnodeBin, append([]string{"agent"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	require.NoError(t, p.cmd.Start())
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("agent %v stderr:\n%s", args, p.stderr.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := listenerLine.FindAllStringSubmatch(p.stdout.String(), -1)
		if len(m) == 2 {
			require.Equal(t, "gossip", m[0][1], "the gossip line comes first")
			require.Equal(t, "http", m[1][1])
			p.gossip, p.http = m[0][2], m[1][2]
			require.Equal(t, p.stdout.String(), fmt.Sprintf("gossip %s\nhttp %s\n", p.gossip, p.http), "exactly one line per listener")
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("agent exited before listening: %v\nstderr:\n%s", p.err, p.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "agent did not print its listeners; stdout %q", p.stdout.String())
	}
}

// stop sends sig and waits for the exit; it returns the exit code.
func (p *agentProc) stop(t *testing.T, sig os.Signal) int {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
	return p.wait(t)
}

// wait waits for the process to exit and returns its exit code.
func (p *agentProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not exit")
	}
	return p.cmd.ProcessState.ExitCode()
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// getJSON GETs url into v and returns the status code.
func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := httpClient.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.Unmarshal(body, v), "%s", body)
	}
	return resp.StatusCode
}

// metrics returns p's /metrics, requiring status 200.
func (p *agentProc) metrics(t *testing.T) string {
	t.Helper()
	resp, err := httpClient.Get("http://" + p.http + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	return string(body)
}

// states returns the state of each peer name in p's /v1/members.
func (p *agentProc) states(t *testing.T) map[string]string {
	var ms []testutil.Member
	require.Equal(t, http.StatusOK, getJSON(t, "http://"+p.http+"/v1/members", &ms))
	out := map[string]string{}
	for _, m := range ms {
		out[m.Name] = m.State
	}
	return out
}

// keygen runs the binary's keygen and returns a key file holding its key.
func keygen(t *testing.T) (path, key string) {
	t.Helper()
	out, err := exec.Command(atnodeBin, "keygen").Output()
	require.NoError(t, err)
	path = writeFile(t, "cluster.key", string(out))
	_, err = cluster.LoadKeyFile(path)
	require.NoError(t, err, "keygen output is a key file")
	return path, strings.TrimSpace(string(out))
}

// poll calls cond every 100ms until it holds (true) or within passes (false).
func poll(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond) // polling interval, not an assertion
	}
	return true
}

// waitFor polls cond every 100ms until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "timed out waiting for %s", what)
		time.Sleep(100 * time.Millisecond) // polling interval, not an assertion
	}
}

// TestThreeAgents runs three agents on loopback with a shared key file: they
// join through -join, agree on the fleet estimate of samples POSTed to each,
// and one stopped with SIGTERM exits 0 and is seen as left by the others.
func TestThreeAgents(t *testing.T) {
	keyFile, _ := keygen(t)
	common := []string{"-bind", "127.0.0.1:0", "-http", "127.0.0.1:0", "-secret-key-file", keyFile,
		"-label", "atnode-test", "-window", "60s", "-sub-window", "1s"}
	a := startAgent(t, append([]string{"-name", "a"}, common...)...)
	b := startAgent(t, append([]string{"-name", "b", "-join", a.gossip}, common...)...)
	c := startAgent(t, append([]string{"-name", "c", "-join", a.gossip}, common...)...)
	agents := []*agentProc{a, b, c}

	for _, p := range agents {
		waitFor(t, 30*time.Second, p.http+" to see 3 alive members", func() bool {
			s := p.states(t)
			return s["a"] == "alive" && s["b"] == "alive" && s["c"] == "alive"
		})
	}

	// Each agent records 100 samples: a 1..100 ms, b 101..200, c 201..300.
	for i, p := range agents {
		var body bytes.Buffer
		body.WriteString(`{"samples":[`)
		for j := 1; j <= 100; j++ {
			if j > 1 {
				body.WriteByte(',')
			}
			fmt.Fprintf(&body, `{"dest":"db-1","latency_ms":%d}`, 100*i+j)
		}
		body.WriteString(`]}`)
		resp, err := httpClient.Post("http://"+p.http+"/v1/record", "application/json", &body)
		require.NoError(t, err)
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", got)
		require.JSONEq(t, `{"recorded":100}`, string(got))
	}

	// Once the sub-window seals (1s) and gossip carries it (about 1s more:
	// the 60s window keeps the samples well past the 30s deadline), every agent's fleet
	// view holds all 300 samples from 3 peers, and they agree on the P99.99.
	ests := make([]testutil.Estimate, len(agents))
	agreed := poll(30*time.Second, func() bool {
		for i, p := range agents {
			ests[i] = testutil.Estimate{}
			if getJSON(t, "http://"+p.http+"/v1/estimate?dest=db-1", &ests[i]) != http.StatusOK {
				return false
			}
			if ests[i].Source != "fleet" || ests[i].Samples != 300 || ests[i].Peers != 3 {
				return false
			}
		}
		return true
	})
	if !agreed {
		got, _ := json.Marshal(ests)
		t.Fatalf("the fleet views of db-1 did not agree within 30s: want source fleet, 300 samples from 3 peers on agents a, b, c; their last /v1/estimate answers: %s", got)
	}
	for i, e := range ests {
		require.NotNil(t, e.FleetValueMs)
		require.Equal(t, *ests[0].FleetValueMs, *e.FleetValueMs, "agent %d", i)
		require.Equal(t, *e.FleetValueMs, *e.ValueMs)
		require.GreaterOrEqual(t, *e.FleetValueMs, uint64(300), "P99.99 of 1..300 is in 300's bucket")
		require.Equal(t, uint64(100), e.LocalSamples)
	}
	require.Less(t, *ests[0].LocalValueMs, *ests[0].FleetValueMs, "a's own samples are the fastest")

	// SIGTERM: c leaves the cluster and exits 0; a and b see it left.
	require.Equal(t, 0, c.stop(t, syscall.SIGTERM), c.stderr.String())
	for _, p := range agents[:2] {
		waitFor(t, 30*time.Second, p.http+" to see c left", func() bool { return p.states(t)["c"] == "left" })
	}
	// a and b stop at once: neither can confirm its leave, both exit 0.
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, 0, b.stop(t, syscall.SIGTERM), b.stderr.String())
	require.Equal(t, 0, a.wait(t), a.stderr.String())
}

// TestAgentKeyRotation rotates an agent's key file with SIGHUP: a good file
// is loaded (the log says the primary key changed, by fingerprint), a
// broken one is refused and the agent keeps running; a FIFO put in place of
// the file is refused at once and blocks neither the reload nor SIGTERM.
// Every reload is counted in /metrics.
func TestAgentKeyRotation(t *testing.T) {
	keyFile, oldKey := keygen(t)
	a := startAgent(t, "-name", "r", "-bind", "127.0.0.1:0", "-http", "127.0.0.1:0", "-secret-key-file", keyFile)
	newKey, err := cluster.GenerateKey()
	require.NoError(t, err)
	fingerprint := func(k string) string {
		b, err := base64.StdEncoding.DecodeString(k)
		require.NoError(t, err)
		return cluster.KeyFingerprint(b)
	}

	require.NoError(t, os.WriteFile(keyFile, []byte(newKey+"\n"+oldKey+"\n"), 0o600))
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, 10*time.Second, "keys reloaded", func() bool { return strings.Contains(a.stderr.String(), "SIGHUP: keys reloaded") })
	require.Regexp(t, fmt.Sprintf(`msg="cluster: keys reloaded: the primary key changed" member=\S+ keys=2 added=1 removed=0 primary=%s previous_primary=%s\n`,
		fingerprint(newKey), fingerprint(oldKey)), a.stderr.String())
	require.NotContains(t, a.stderr.String(), newKey, "never a key in the logs")

	require.NoError(t, os.WriteFile(keyFile, []byte("garbage\n"), 0o600))
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, 10*time.Second, "reload refused", func() bool { return strings.Count(a.stderr.String(), "not reloaded") == 1 })

	var ok any
	require.Equal(t, http.StatusOK, getJSON(t, "http://"+a.http+"/v1/members", &ok), "still serving")

	require.NoError(t, os.Remove(keyFile))
	require.NoError(t, syscall.Mkfifo(keyFile, 0o600)) // nobody ever writes to it
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, 10*time.Second, "FIFO refused", func() bool { return strings.Count(a.stderr.String(), "not reloaded") == 2 })
	require.Contains(t, a.stderr.String(), "not a regular file (a FIFO)")

	metrics := a.metrics(t)
	require.Contains(t, metrics, `atnode_key_reloads_total{result="ok"} 1`)
	require.Contains(t, metrics, `atnode_key_reloads_total{result="error"} 2`)

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGHUP)) // one more read of the FIFO, then at once:
	require.Equal(t, 0, a.stop(t, syscall.SIGTERM), "SIGTERM is not held up by the key file")
}

// TestAgentConfigFileProcess checks precedence in the real binary: the
// file's settings apply, a flag given on the command line wins.
func TestAgentConfigFileProcess(t *testing.T) {
	cfg := writeFile(t, "atnode.yaml", "name: from-file\nbind: 127.0.0.1:0\nhttp: 127.0.0.1:0\nlabel: from-file\n")
	a := startAgent(t, "-config", cfg, "-name", "from-flag")
	s := a.states(t)
	require.Equal(t, map[string]string{"from-flag": "alive"}, s)
	require.Equal(t, 0, a.stop(t, syscall.SIGTERM))
}

// TestBinaryRefusalsAndCommands runs the binary for what exits at once.
func TestBinaryRefusalsAndCommands(t *testing.T) {
	cases := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"gossip exposed", []string{"agent", "-bind", "0.0.0.0:0", "-http", "127.0.0.1:0"}, 2, "", "add -secret-key-file"},
		{"http exposed", []string{"agent", "-bind", "127.0.0.1:0", "-http", "0.0.0.0:0"}, 2, "", "add -http-token-file"},
		{"bad flag value", []string{"agent", "-quantile", "7"}, 2, "", "-quantile:"},
		{"long label", []string{"agent", "-bind", "127.0.0.1:0", "-http", "127.0.0.1:0", "-label", strings.Repeat("l", 300)}, 2, "", "-label: cluster: label is 300 bytes, at most 255"},
		{"name with a tab", []string{"agent", "-bind", "127.0.0.1:0", "-http", "127.0.0.1:0", "-name", "a\tb"}, 2, "", `-name: cluster: name "a\tb" holds the unprintable U+0009`},
		{"unknown command", []string{"frobnicate"}, 2, "", "unknown command"},
		{"no command", nil, 2, "", "Usage:"},
		{"key file missing", []string{"agent", "-secret-key-file", "/nonexistent/cluster.key"}, 1, "", "-secret-key-file: cluster: key file: open /nonexistent/cluster.key"},
		{"key file a directory", []string{"agent", "-secret-key-file", os.TempDir()}, 2, "", "not a regular file (a directory)"},
		{"help", []string{"help"}, 0, "atnode keygen -o cluster.key", ""},
		{"version", []string{"version"}, 0, goruntime.Version(), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(atnodeBin, tc.args...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if tc.code == 0 {
				require.NoError(t, err, stderr.String())
			}
			require.Equal(t, tc.code, cmd.ProcessState.ExitCode())
			require.Contains(t, stdout.String()+stderr.String(), tc.stdout+tc.stderr)
			if tc.stdout == "" {
				require.Empty(t, stdout.String())
			}
		})
	}
}

// TestAgentJoinRefusedForSubWindow: an agent with -sub-window 3s joining a
// 6 s cluster exits 1 naming the setting, before it prints a listener; the
// agent it tried to join reports config_mismatch in /v1/status and
// /metrics, and lists only itself.
func TestAgentJoinRefusedForSubWindow(t *testing.T) {
	a := startAgent(t, "-name", "a", "-bind", "127.0.0.1:0", "-http", "127.0.0.1:0")
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(atnodeBin, "agent", "-name", "b", "-bind", "127.0.0.1:0", "-http", "127.0.0.1:0",
		"-sub-window", "3s", "-join", a.gossip)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the refused agent did not exit; stderr:\n%s", stderr.String())
	}
	t.Logf("refused agent's stderr:\n%s", stderr.String())
	require.Equal(t, 1, cmd.ProcessState.ExitCode())
	require.Empty(t, stdout.String(), "no listener line: it never served")
	require.Contains(t, stderr.String(), "atnode agent: node: cluster: join refused: seed "+a.gossip+": -sub-window 3s differs from the cluster's 6s")

	var st struct {
		Warnings []struct{ Kind, Message string } `json:"warnings"`
	}
	waitFor(t, 10*time.Second, "a reports the refused member", func() bool {
		require.Equal(t, http.StatusOK, getJSON(t, "http://"+a.http+"/v1/status", &st))
		return len(st.Warnings) == 1
	})
	require.Equal(t, "config_mismatch", st.Warnings[0].Kind)
	require.Regexp(t, `^member b-[0-9a-f]{8} \(127\.0\.0\.1:\d+\) advertises -sub-window 3s \(this node's is 6s\): refused at join$`, st.Warnings[0].Message)
	require.Equal(t, map[string]string{"a": "alive"}, a.states(t))
	metrics := a.metrics(t)
	require.Contains(t, metrics, `atnode_warnings{kind="config_mismatch"} 1`)
	require.Contains(t, metrics, `atnode_warnings_raised_total{kind="config_mismatch"} 1`)
	require.Equal(t, 0, a.stop(t, syscall.SIGTERM))
}

// TestSecondSIGTERMStillCleanStop: a SIGTERM repeated while the agent
// leaves (a supervisor repeating itself) does not cut the leave short: the
// agent still exits 0, where it died of the second signal (143) before.
// The peer is paused, so that the leave waits for it.
func TestSecondSIGTERMStillCleanStop(t *testing.T) {
	common := []string{"-bind", "127.0.0.1:0", "-http", "127.0.0.1:0"}
	a := startAgent(t, append([]string{"-name", "a"}, common...)...)
	b := startAgent(t, append([]string{"-name", "b", "-join", a.gossip}, common...)...)
	waitFor(t, 30*time.Second, "b to see a alive", func() bool { return b.states(t)["a"] == "alive" })
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGSTOP))
	defer func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) }()

	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	waitFor(t, 10*time.Second, "b to start leaving", func() bool { return strings.Contains(b.stderr.String(), "leaving the cluster") })
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, b.wait(t), "stderr:\n%s", b.stderr.String())

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGCONT))
	require.Equal(t, 0, a.stop(t, syscall.SIGTERM))
}
