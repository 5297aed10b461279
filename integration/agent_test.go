package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
)

// The process tests' grid: 1 s sub-windows seal once a second, and a 120 s
// window keeps the samples of the whole scenario (kill, detection, restart,
// even with memberlist's slowest paths) in view.
const (
	agentWindow    = "120s"
	agentSubWindow = "1s"
)

// agent is an `atnode agent` process.
type agent struct {
	name           string
	args           []string
	cmd            *exec.Cmd
	stdout, stderr *testutil.SyncBuffer
	gossip, http   string // the addresses it printed
	exited         chan struct{}
	client         *http.Client
}

var listenerLine = regexp.MustCompile(`(?m)^(gossip|http) (127\.0\.0\.1:\d+)$`)

// startAgent runs `atnode agent -name name` on loopback ports picked by the
// kernel, with the fleet's grid and the given flags, and waits for its two
// listener lines and /healthz. It is killed at the end of the test if it
// still runs.
func startAgent(t *testing.T, name string, flags ...string) *agent {
	t.Helper()
	require.NoError(t, buildErr, "the atnode binary")
	a := &agent{
		name:   name,
		stdout: &testutil.SyncBuffer{}, stderr: &testutil.SyncBuffer{},
		exited: make(chan struct{}),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
	}
	a.args = append([]string{"agent", "-name", name, "-bind", "127.0.0.1:0", "-http", "127.0.0.1:0",
		"-window", agentWindow, "-sub-window", agentSubWindow}, flags...)
	a.cmd = exec.Command(atnodeBin, a.args...)
	a.cmd.Stdout, a.cmd.Stderr = a.stdout, a.stderr
	require.NoError(t, a.cmd.Start())
	go func() { _ = a.cmd.Wait(); close(a.exited) }()
	t.Cleanup(func() {
		a.kill()
		if t.Failed() {
			out := a.stderr.String()
			if len(out) > 32<<10 {
				out = "…" + out[len(out)-32<<10:]
			}
			t.Logf("agent %s (%s) stderr:\n%s", name, a.args, out)
		}
	})
	eventually(t, name+" prints its listeners", func() (bool, string) {
		select {
		case <-a.exited:
			t.Fatalf("agent %s exited at start: %s", name, a.stderr.String())
		default:
		}
		m := listenerLine.FindAllStringSubmatch(a.stdout.String(), -1)
		if len(m) < 2 {
			return false, fmt.Sprintf("stdout %q", a.stdout.String())
		}
		require.Equal(t, "gossip", m[0][1])
		require.Equal(t, "http", m[1][1])
		a.gossip, a.http = m[0][2], m[1][2]
		return true, ""
	})
	eventually(t, name+" serves /healthz", func() (bool, string) {
		code, body, err := a.do(http.MethodGet, "/healthz", nil)
		return err == nil && code == http.StatusOK, fmt.Sprintf("%d %s %v", code, body, err)
	})
	return a
}

// kill sends SIGKILL (kill -9) and waits for the process to end.
func (a *agent) kill() {
	select {
	case <-a.exited:
		return
	default:
	}
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
}

// alive reports whether the process still runs.
func (a *agent) alive() bool {
	select {
	case <-a.exited:
		return false
	default:
		return true
	}
}

func (a *agent) do(method, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, "http://"+a.http+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// getJSON GETs path into v, failing the test on any error.
func (a *agent) getJSON(t testing.TB, path string, v any) {
	t.Helper()
	code, body, err := a.do(http.MethodGet, path, nil)
	require.NoError(t, err, "%s GET %s", a.name, path)
	require.Equal(t, http.StatusOK, code, "%s GET %s: %s", a.name, path, body)
	require.NoError(t, json.Unmarshal(body, v), "%s GET %s: %s", a.name, path, body)
}

// sample is one POST /v1/record sample.
type sample struct {
	Dest      string  `json:"dest"`
	LatencyMs float64 `json:"latency_ms"`
}

// record POSTs samples to /v1/record in one request.
func (a *agent) record(t testing.TB, samples []sample) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"samples": samples})
	require.NoError(t, err)
	code, resp, err := a.do(http.MethodPost, "/v1/record", body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "%s", resp)
	require.JSONEq(t, fmt.Sprintf(`{"recorded":%d}`, len(samples)), string(resp))
}

func (a *agent) estimate(t testing.TB, dest string, q float64) testutil.Estimate {
	t.Helper()
	var e testutil.Estimate
	a.getJSON(t, "/v1/estimate?dest="+url.QueryEscape(dest)+"&q="+strconv.FormatFloat(q, 'g', -1, 64), &e)
	return e
}

func (a *agent) members(t testing.TB) []testutil.Member {
	t.Helper()
	var ms []testutil.Member
	a.getJSON(t, "/v1/members", &ms)
	return ms
}

// self returns the agent's own entry of /v1/members.
func (a *agent) self(t testing.TB) testutil.Member {
	t.Helper()
	var st struct {
		Member string `json:"member"`
	}
	a.getJSON(t, "/v1/status", &st)
	for _, m := range a.members(t) {
		if m.Member == st.Member {
			return m
		}
	}
	t.Fatalf("%s does not list itself (%s)", a.name, st.Member)
	return testutil.Member{}
}

// gossipStats returns the "gossip" of the agent's GET /v1/status.
func (a *agent) gossipStats(t testing.TB) cluster.GossipStats {
	t.Helper()
	var st struct {
		Gossip cluster.GossipStats `json:"gossip"`
	}
	a.getJSON(t, "/v1/status", &st)
	return st.Gossip
}

// memStats returns the agent's memory figures: Sys, the bytes its Go
// runtime obtained from the OS (from /debug/pprof/heap?debug=1), and its
// peak resident set: VmHWM from /proc on Linux. Elsewhere the runtime's
// MaxRSS is used, which Linux would not do: getrusage's maximum survives
// exec, so a child reports its parent's (the test's) peak when larger.
func (a *agent) memStats(t testing.TB) (sys, peakRSS uint64) {
	t.Helper()
	code, body, err := a.do(http.MethodGet, "/debug/pprof/heap?debug=1", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	var maxRSS uint64
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<22)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "# Sys = "); ok {
			sys, err = strconv.ParseUint(v, 10, 64)
			require.NoError(t, err)
		}
		if v, ok := strings.CutPrefix(line, "# MaxRSS = "); ok {
			maxRSS, err = strconv.ParseUint(v, 10, 64)
			require.NoError(t, err)
		}
	}
	require.Positive(t, sys, "no Sys line in the heap profile")
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.cmd.Process.Pid))
	if err != nil {
		require.Positive(t, maxRSS, "no /proc and no MaxRSS line in the heap profile")
		return sys, maxRSS
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(t, err)
			return sys, kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", a.cmd.Process.Pid)
	return 0, 0
}

// keygen runs `atnode keygen` into a key file in dir and returns its path.
func keygen(t *testing.T, dir, name string) string {
	t.Helper()
	require.NoError(t, buildErr, "the atnode binary")
	out, err := exec.Command(atnodeBin, "keygen").Output()
	require.NoError(t, err)
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, out, 0o600))
	return path
}
