package integration

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clientWait bounds every wait of the hostile HTTP client for the agent:
// far above the deadlines the agent is given, so only an agent that holds
// a connection on hits it.
const clientWait = 15 * time.Second

// TestAgentHostileHTTP runs one agent (a 1 s read deadline, 64
// connections at most, a token) against hostile HTTP clients, each bounded
// in count and time:
//   - 100 bodies of 1 MiB of {} objects, 50 at a time, each refused at its
//     first sample: the agent's peak RSS stays bounded;
//   - 10 connections that stall mid-body, with and without the token: each
//     is answered and closed within the read deadline, the 401 before the
//     body;
//   - connections over the cap: closed at once and counted, the cap freed
//     when they go;
//   - a foreign Host or Origin and text/plain: refused on loopback.
func TestAgentHostileHTTP(t *testing.T) {
	t.Parallel()
	const (
		token   = "hostile-test-token"
		maxConn = 64
		bodies  = 100
		atOnce  = 50
		stalled = 10
		rssCap  = 64 << 20 // the rule's bound is 256 MiB; the agent needs far less
	)
	tokFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokFile, []byte(token+"\n"), 0o600))
	a := startAgent(t, "hostile-http", "-http-token-file", tokFile,
		"-http-read-timeout", "1s", "-http-max-connections", strconv.Itoa(maxConn))
	client := &http.Client{Timeout: clientWait, Transport: &http.Transport{DisableKeepAlives: true, MaxConnsPerHost: atOnce}}
	post := func(body []byte, hdr ...string) (int, string, error) {
		req, err := http.NewRequest(http.MethodPost, "http://"+a.http+"/v1/record", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	idle := func() { // the hostile clients' connections are gone
		eventually(t, "the agent holds no client connection", func() (bool, string) {
			v := agentMetric(t, a, "atnode_http_connections")
			return v <= 1, fmt.Sprintf("%v open", v) // this scrape's own
		})
	}

	t.Run("hostile bodies", func(t *testing.T) {
		rssBefore := peakRSS(t, a)
		hostile := []byte(`{"samples":[` + strings.Repeat("{},", 349_519) + `{}]}`)
		require.LessOrEqual(t, len(hostile), 1<<20)
		start := time.Now()
		refused := 0
		for round := range bodies / atOnce {
			var wg sync.WaitGroup
			var mu sync.Mutex
			for range atOnce {
				wg.Go(func() {
					code, body, err := post(hostile)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil:
						t.Errorf("round %d: %v", round, err) // a reset would have destroyed the answer
					case code == http.StatusBadRequest && strings.Contains(body, `samples[0]: missing field \"dest\"`):
						refused++
					default:
						t.Errorf("round %d: %d %s", round, code, body)
					}
				})
			}
			wg.Wait()
			idle()
		}
		rss := peakRSS(t, a)
		t.Logf("%d hostile 1 MiB bodies, %d at a time, in %v: %d answered 400; peak RSS %.1f → %.1f MiB (bound %d MiB)",
			bodies, atOnce, time.Since(start).Round(time.Millisecond), refused, mib(rssBefore), mib(rss), rssCap>>20)
		require.Equal(t, bodies, refused, "every refusal read by its client, none lost to a reset")
		require.Less(t, rss, uint64(rssCap), "peak RSS under hostile bodies")
		require.True(t, a.alive())
	})

	t.Run("stalled bodies", func(t *testing.T) {
		start := time.Now()
		var wg sync.WaitGroup
		for i := range stalled {
			auth := token
			if i%2 == 1 {
				auth = "wrong"
			}
			wg.Go(func() {
				c, err := net.DialTimeout("tcp", a.http, clientWait)
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close()
				head := "POST /v1/record HTTP/1.1\r\nHost: " + a.http + "\r\nContent-Type: application/json\r\nAuthorization: Bearer " + auth +
					"\r\nContent-Length: 1000\r\n\r\n" + `{"samples":[{"dest":"stall",`
				if _, err := io.WriteString(c, head); err != nil {
					t.Error(err)
					return
				}
				_ = c.SetReadDeadline(time.Now().Add(clientWait))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Errorf("no answer to a stalled body (token %s): %v", auth, err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := http.StatusBadRequest // the body's read timed out
				if auth != token {
					want = http.StatusUnauthorized // before the body
				}
				if resp.StatusCode != want || !resp.Close {
					t.Errorf("token %s: %d %s (close %v), want %d and a close", auth, resp.StatusCode, b, resp.Close, want)
				}
				if _, err := io.ReadAll(c); isTimeout(err) {
					t.Errorf("token %s: the connection is held after the answer", auth)
				}
			})
		}
		wg.Wait()
		t.Logf("%d stalled bodies answered and closed in %v", stalled, time.Since(start).Round(time.Millisecond))
		e := a.estimate(t, "stall", 1)
		require.Zero(t, e.LocalSamples, "nothing of a stalled body recorded")
	})

	t.Run("connection cap", func(t *testing.T) {
		idle()
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for range maxConn {
			c, err := net.DialTimeout("tcp", a.http, clientWait)
			require.NoError(t, err)
			held = append(held, c)
		}
		over, err := net.DialTimeout("tcp", a.http, clientWait)
		require.NoError(t, err)
		defer over.Close()
		_, _ = io.WriteString(over, "GET /healthz HTTP/1.1\r\nHost: "+a.http+"\r\n\r\n")
		require.NoError(t, over.SetReadDeadline(time.Now().Add(clientWait)))
		b, err := io.ReadAll(over)
		require.False(t, isTimeout(err), "a connection over the cap is held")
		require.Empty(t, b, "closed without an answer")

		// One of the held connections asks for the counters.
		_, err = io.WriteString(held[0], "GET /metrics HTTP/1.1\r\nHost: "+a.http+"\r\nConnection: close\r\n\r\n")
		require.NoError(t, err)
		require.NoError(t, held[0].SetReadDeadline(time.Now().Add(clientWait)))
		resp, err := http.ReadResponse(bufio.NewReader(held[0]), nil)
		require.NoError(t, err)
		text, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, float64(maxConn), metricIn(t, string(text), "atnode_http_connections"))
		require.GreaterOrEqual(t, metricIn(t, string(text), "atnode_http_connections_refused_total"), 1.0)

		for _, c := range held {
			_ = c.Close()
		}
		held = nil
		eventually(t, "the cap frees up", func() (bool, string) {
			code, body, err := a.do(http.MethodGet, "/healthz", nil)
			return err == nil && code == http.StatusOK, fmt.Sprintf("%d %s %v", code, body, err)
		})
	})

	t.Run("foreign pages", func(t *testing.T) {
		for _, tc := range []struct {
			hdr  []string
			code int
		}{
			{[]string{"Content-Type", "text/plain"}, http.StatusUnsupportedMediaType},
			{[]string{"Origin", "http://evil.example"}, http.StatusForbidden},
			{[]string{"Host", "rebound.evil.example"}, http.StatusForbidden},
			{nil, http.StatusOK},
		} {
			req, err := http.NewRequest(http.MethodPost, "http://"+a.http+"/v1/record",
				strings.NewReader(`{"samples":[{"dest":"page","latency_ms":1}]}`))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+token)
			for i := 0; i+1 < len(tc.hdr); i += 2 {
				if tc.hdr[i] == "Host" {
					req.Host = tc.hdr[i+1]
				} else {
					req.Header.Set(tc.hdr[i], tc.hdr[i+1])
				}
			}
			resp, err := client.Do(req)
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, tc.code, resp.StatusCode, "%v: %s", tc.hdr, b)
		}
		require.EqualValues(t, 1, a.estimate(t, "page", 1).LocalSamples, "only the request of this server's own page")
	})
}

// peakRSS is the agent's peak resident set (VmHWM on Linux).
func peakRSS(t *testing.T, a *agent) uint64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.cmd.Process.Pid))
	if err != nil {
		t.Skipf("no peak RSS to read here: %v", err)
	}
	m := regexp.MustCompile(`(?m)^VmHWM:\s+(\d+) kB$`).FindSubmatch(status)
	require.NotNil(t, m, "no VmHWM in /proc/%d/status", a.cmd.Process.Pid)
	kb, err := strconv.ParseUint(string(m[1]), 10, 64)
	require.NoError(t, err)
	return kb << 10
}

// agentMetric reads one unlabelled metric of a's /metrics.
func agentMetric(t *testing.T, a *agent, name string) float64 {
	t.Helper()
	code, body, err := a.do(http.MethodGet, "/metrics", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	return metricIn(t, string(body), name)
}

func metricIn(t *testing.T, text, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(text)
	require.NotNil(t, m, "no %s in /metrics", name)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
