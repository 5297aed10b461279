package node

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testClock is a settable clock.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Default grid: 60 s window, 6 s sub-windows (N = 10). epochStart(e) is the
// start of epoch e.
const subMs = 6000

func epochStart(e int64) time.Time { return time.UnixMilli(e * subMs) }

// e0 is the epoch the hand-computed datasets are recorded in.
const e0 = 300_000_000

// testLogger is testutil.Logger.
func testLogger(t *testing.T) *slog.Logger { return testutil.Logger(t) }

// newAlone returns a node with gossip disabled, no HTTP listener and the
// test clock, not started. mutate may change the config first.
func newAlone(t *testing.T, clk *testClock, mutate func(*Config)) *Node {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Name = "n0"
	cfg.DisableGossip = true
	cfg.HTTP = ""
	if clk != nil {
		cfg.Clock = clk.Now
	}
	if mutate != nil {
		mutate(&cfg)
	}
	n, err := New(cfg, testLogger(t), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, n.Close()) })
	return n
}

// do sends a request to h and returns the status and body. A POST is sent
// as application/json unless hdr sets a Content-Type.
func do(t *testing.T, h http.Handler, method, target string, body string, hdr ...string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, target, rd)
	if method == http.MethodPost {
		r.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.Bytes()
}

// writeFile writes body to the file name in dir, readable by its owner
// only, and returns its path.
func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// requireMetrics requires n's metric families to pass promlint and GET
// /metrics to answer 200 with every one of lines as a whole line, and
// returns the text.
func requireMetrics(t *testing.T, n *Node, lines ...string) string {
	t.Helper()
	mfs, err := n.gather.Gather()
	require.NoError(t, err)
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	require.NoError(t, err)
	require.Empty(t, problems)
	code, body := do(t, n.Handler(), "GET", "/metrics", "")
	require.Equal(t, 200, code)
	text := string(body)
	for _, line := range lines {
		require.Contains(t, text, line+"\n")
	}
	return text
}

// getJSON GETs target, requires status 200 and decodes the body into a
// generic value (numbers as json.Number), so tests see nulls and exact
// field sets.
func getJSON(t *testing.T, h http.Handler, target string) any {
	t.Helper()
	code, body := do(t, h, http.MethodGet, target, "")
	require.Equal(t, http.StatusOK, code, "%s: %s", target, body)
	return decode(t, body)
}

func decode(t *testing.T, body []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v), "%s", body)
	return v
}

// requireError checks a JSON error answer.
func requireError(t *testing.T, code int, body []byte, wantCode int, contains string) {
	t.Helper()
	require.Equal(t, wantCode, code, "%s", body)
	var e struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &e), "%s", body)
	require.Contains(t, e.Error, contains)
}

// eventually is testutil.Eventually.
func eventually(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	return testutil.Eventually(t, what, cond)
}
