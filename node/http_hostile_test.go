package node

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	rtmetrics "runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clientWait bounds every wait of these tests for the server: far above
// the deadlines they configure, so only a server that holds on hits it.
const clientWait = 10 * time.Second

// startHTTP starts a node alone serving HTTP on a free loopback port.
func startHTTP(t *testing.T, mutate func(*Config)) *Node {
	t.Helper()
	n := newAlone(t, nil, func(c *Config) {
		c.HTTP = "127.0.0.1:0"
		if mutate != nil {
			mutate(c)
		}
	})
	require.NoError(t, n.Start(t.Context()))
	return n
}

// rawRequest opens a connection to addr and writes head (a request's
// line and headers, CRLF-separated, without the blank line) and then the
// first bytes of a body, and stalls.
func rawRequest(t *testing.T, addr, head, partialBody string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, clientWait)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = io.WriteString(c, strings.ReplaceAll(head, "\n", "\r\n")+"\r\n\r\n"+partialBody)
	require.NoError(t, err)
	return c
}

// readUntilClosed reads c until the server closes it, and returns what it
// read; it fails the test if the server still holds c after clientWait.
func readUntilClosed(t *testing.T, c net.Conn) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	require.NoError(t, c.SetReadDeadline(start.Add(clientWait)))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server still holds the connection after %v; read %q", clientWait, b)
	}
	// A reset after the answer (the server closed with body bytes unread) is a close too.
	return string(b), time.Since(start)
}

// metricValue is the value of n's unlabelled gauge or counter name.
func metricValue(t *testing.T, n *Node, name string) float64 {
	t.Helper()
	mfs, err := n.gather.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestHTTPServerConfig(t *testing.T) {
	c := DefaultHTTPServerConfig()
	require.Equal(t, HTTPServerConfig{
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxConnections: 1024,
	}, c, "the documented defaults: a stalled body is closed within 30 s, 1024 connections")
	require.Equal(t, c, DefaultConfig().HTTPServer)
	require.NoError(t, c.Validate())

	err := HTTPServerConfig{ReadTimeout: -1}.Validate()
	for _, want := range []string{"-http-read-header-timeout: must be > 0", "-http-read-timeout: must be > 0, got -1ns",
		"-http-write-timeout", "-http-idle-timeout", "-http-max-connections: must be >= 1, got 0"} {
		require.ErrorContains(t, err, want)
	}
	cfg := DefaultConfig()
	cfg.HTTPServer.MaxConnections = 0
	require.ErrorContains(t, cfg.Validate(), "-http-max-connections")
	cfg.HTTP = "" // no listener: nothing to bound
	require.NoError(t, cfg.Validate())

	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.RegisterFlags(fs)
	require.NoError(t, fs.Parse([]string{"-http-read-timeout", "5s", "-http-max-connections", "64", "-http-write-timeout", "1m",
		"-http-read-header-timeout", "2s", "-http-idle-timeout", "3s"}))
	require.Equal(t, HTTPServerConfig{ReadHeaderTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second,
		WriteTimeout: time.Minute, IdleTimeout: 3 * time.Second, MaxConnections: 64}, c)

	n := startHTTP(t, nil)
	require.Equal(t, 30*time.Second, n.srv.ReadTimeout, "the node's own server reads with the default deadline")
	require.Equal(t, 10*time.Second, n.srv.ReadHeaderTimeout)
}

// TestStalledBodyClosed checks that a connection stalling mid-body is
// closed once the read deadline passes, with or without a valid token:
// the body's read fails and the request is refused.
func TestStalledBodyClosed(t *testing.T) {
	const tok = "s3cret"
	n := startHTTP(t, func(c *Config) {
		c.HTTPServer.ReadTimeout = 300 * time.Millisecond
		c.HTTPTokenFile = writeToken(t, tok)
	})
	for _, auth := range []string{"Bearer " + tok, "Bearer wrong"} {
		t.Run(auth, func(t *testing.T) {
			c := rawRequest(t, n.HTTPAddr(), "POST /v1/record HTTP/1.1\nHost: 127.0.0.1\nContent-Type: application/json\n"+
				"Authorization: "+auth+"\nContent-Length: 1000", `{"samples":[{"dest":"a",`)
			resp, took := readUntilClosed(t, c)
			t.Logf("closed %v after the stall: %q", took, firstLine(resp))
			if auth == "Bearer wrong" {
				require.True(t, strings.HasPrefix(resp, "HTTP/1.1 401 "), "%q", resp)
			} else {
				require.True(t, strings.HasPrefix(resp, "HTTP/1.1 400 "), "%q", resp)
				require.Contains(t, resp, "reading body")
			}
		})
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\r\n")
	return line
}

// TestRefusedBeforeTheBody checks that a POST without a valid token (401)
// or with another Content-Type (415) is answered at once, before its body,
// and its connection closed: with the default 30 s read deadline a stalled
// body must not hold the answer back.
func TestRefusedBeforeTheBody(t *testing.T) {
	const tok = "s3cret"
	n := startHTTP(t, func(c *Config) { c.HTTPTokenFile = writeToken(t, tok) })
	for _, tc := range []struct {
		name, headers string
		status        int
	}{
		{"no token", "Content-Type: application/json", 401},
		{"wrong token", "Content-Type: application/json\nAuthorization: Bearer nope", 401},
		{"text/plain", "Content-Type: text/plain\nAuthorization: Bearer " + tok, 415},
		{"chunked, no token", "Content-Type: application/json\nTransfer-Encoding: chunked", 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head := "POST /v1/record HTTP/1.1\nHost: 127.0.0.1\n" + tc.headers
			body := "10\r\n" + `{"samples":[{"d`
			if !strings.Contains(tc.headers, "chunked") {
				head += "\nContent-Length: 1000"
				body = `{"samples":[{"d`
			}
			c := rawRequest(t, n.HTTPAddr(), head, body)
			require.NoError(t, c.SetReadDeadline(time.Now().Add(clientWait)))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			require.NoError(t, err, "the answer comes before the body")
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode, "%s", b)
			require.True(t, resp.Close, "Connection: close")
			_, took := readUntilClosed(t, c)
			t.Logf("%d %s; closed %v after the answer", resp.StatusCode, bytes.TrimSpace(b), took)
		})
	}
}

// TestConnectionCap checks that connections beyond MaxConnections are
// closed as soon as they are accepted, counted, and that the cap frees up.
func TestConnectionCap(t *testing.T) {
	const limit = 4
	n := startHTTP(t, func(c *Config) { c.HTTPServer.MaxConnections = limit })
	var held []net.Conn
	for range limit {
		c, err := net.DialTimeout("tcp", n.HTTPAddr(), clientWait)
		require.NoError(t, err)
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	eventually(t, "the server holds the connections", func() bool { return metricValue(t, n, "atnode_http_connections") == limit })

	over := rawRequest(t, n.HTTPAddr(), "GET /healthz HTTP/1.1\nHost: 127.0.0.1", "")
	resp, _ := readUntilClosed(t, over)
	require.Empty(t, resp, "closed without an answer")
	require.Equal(t, 1.0, metricValue(t, n, "atnode_http_connections_refused_total"))
	require.Equal(t, float64(limit), metricValue(t, n, "atnode_http_connections"))

	require.NoError(t, held[0].Close())
	held = held[1:]
	eventually(t, "a closed connection frees its place", func() bool { return metricValue(t, n, "atnode_http_connections") == limit-1 })
	client := &http.Client{Timeout: clientWait, Transport: &http.Transport{DisableKeepAlives: true}}
	r, err := client.Get("http://" + n.HTTPAddr() + "/healthz")
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, http.StatusOK, r.StatusCode)
}

// TestWriteDeadline checks that a client that stops reading is cut off at
// the write deadline: the handler's writes fail instead of blocking.
func TestWriteDeadline(t *testing.T) {
	c := DefaultHTTPServerConfig()
	c.WriteTimeout = 200 * time.Millisecond
	type result struct {
		written int
		err     error
	}
	done := make(chan result, 1)
	srv := c.server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 1<<20)
		var res result
		for res.written < 1<<30 { // bounded: far beyond any socket buffer
			var k int
			if k, res.err = w.Write(chunk); res.err != nil {
				break
			}
			res.written += k
		}
		done <- res
	}), nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(c.listen(ln, nil)) }()
	defer srv.Close()

	_ = rawRequest(t, ln.Addr().String(), "GET /big HTTP/1.1\nHost: 127.0.0.1", "") // never read
	select {
	case res := <-done:
		require.Error(t, res.err)
		t.Logf("the write failed after %d MiB: %v", res.written>>20, res.err)
	case <-time.After(clientWait):
		t.Fatal("the handler still writes to a client that does not read")
	}
}

func TestPprofSampling(t *testing.T) {
	for target, want := range map[string]time.Duration{
		"/debug/pprof/profile":            30 * time.Second,
		"/debug/pprof/profile?seconds=90": 90 * time.Second,
		"/debug/pprof/trace":              time.Second,
		"/debug/pprof/heap?seconds=5":     5 * time.Second,
		"/debug/pprof/heap":               0,
		"/debug/pprof/profile?seconds=x":  30 * time.Second,
		"/v1/status?seconds=5":            0,
	} {
		require.Equal(t, want, pprofSampling(httptest.NewRequest("GET", target, nil)), target)
	}
}

// TestLoopbackGuard checks that on loopback a foreign Host or Origin is
// refused (a web page on this machine, or one rebound to 127.0.0.1, cannot
// use the API) and a POST that is not JSON is 415.
func TestLoopbackGuard(t *testing.T) {
	n := startHTTP(t, nil)
	addr := n.HTTPAddr()
	client := &http.Client{Timeout: clientWait}
	send := func(method, path, host, origin, ctype string) (int, string) {
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader(samplesBody("guard", 1))
		}
		req, err := http.NewRequest(method, "http://"+addr+path, body)
		require.NoError(t, err)
		if host != "" {
			req.Host = host
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const js = "application/json"
	for _, tc := range []struct {
		name, method, host, origin, ctype string
		status                            int
		err                               string
	}{
		{"own", "POST", "", "", js, 200, ""},
		{"localhost, any port", "POST", "localhost:9", "", js, 200, ""},
		{"LOCALHOST", "GET", "LOCALHOST", "", "", 200, ""},
		{"another loopback IP", "POST", "127.0.0.2:80", "", js, 200, ""},
		{"[::1]", "GET", "[::1]:8080", "", "", 200, ""},
		{"own origin", "POST", "", "http://" + addr, js, 200, ""},
		{"charset", "POST", "", "", "application/json; charset=utf-8", 200, ""},
		{"media type in capitals", "POST", "", "", "Application/JSON", 200, ""},
		{"foreign host", "POST", "evil.example", "", js, 403, `Host "evil.example" is not a loopback address or localhost`},
		{"rebound name", "GET", "rebind.evil.example:" + strings.Split(addr, ":")[1], "", "", 403, "is not a loopback address"},
		{"localhost.", "GET", "localhost.", "", "", 403, "not a loopback"},
		{"foreign origin", "POST", "", "http://evil.example", js, 403, `Origin "http://evil.example" is not this server's own (http://` + addr + ")"},
		{"foreign origin on a GET", "GET", "", "http://evil.example", "", 403, "Origin"},
		{"origin of another port", "POST", "", "http://127.0.0.1:1", js, 403, "Origin"},
		{"null origin", "POST", "", "null", js, 403, `Origin "null"`},
		{"text/plain", "POST", "", "", "text/plain", 415, `Content-Type must be application/json, got "text/plain"`},
		{"form", "POST", "", "", "application/x-www-form-urlencoded", 415, "must be application/json"},
		{"no content type", "POST", "", "", "", 415, `got ""`},
		{"json with a suffix", "POST", "", "", "application/jsonx", 415, "must be application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/v1/status"
			if tc.method == http.MethodPost {
				path = "/v1/record"
			}
			code, body := send(tc.method, path, tc.host, tc.origin, tc.ctype)
			if tc.err == "" {
				require.Equal(t, tc.status, code, body)
				return
			}
			requireError(t, code, []byte(body), tc.status, tc.err)
		})
	}
	e, err := n.Estimate("guard", 1)
	require.NoError(t, err)
	require.EqualValues(t, 6, e.LocalSamples, "only the 6 accepted POSTs recorded")
}

// heapObjectsBytes reads the bytes of live and unswept heap objects.
func heapObjectsBytes(s []rtmetrics.Sample) uint64 {
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}

// TestHostileBodiesHeapBounded posts the 1 MiB body of empty objects 100
// times, 50 at a time, and bounds the heap's peak growth meanwhile
// (sampled every 100 µs): each request is refused at its first sample,
// having read one buffer of its body.
func TestHostileBodiesHeapBounded(t *testing.T) {
	const (
		rounds, parallel = 2, 50
		bound            = 16 << 20
	)
	n := newAlone(t, nil, nil)
	h := n.Handler()
	body := hostileBody()
	samples := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	runtime.GC()
	base := heapObjectsBytes(samples)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		s := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			if v := heapObjectsBytes(s); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()
	codes := make(chan int, rounds*parallel)
	for range rounds {
		var wg sync.WaitGroup
		for range parallel {
			wg.Go(func() {
				req := httptest.NewRequest(http.MethodPost, "/v1/record", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				codes <- w.Code
			})
		}
		wg.Wait()
	}
	close(stop)
	<-sampled
	close(codes)
	for c := range codes {
		require.Equal(t, http.StatusBadRequest, c)
	}
	growth := peak.Load() - min(base, peak.Load())
	t.Logf("%d hostile 1 MiB bodies, %d at a time: peak heap %.1f MiB over a base of %.1f MiB (bound %d MiB)",
		rounds*parallel, parallel, float64(growth)/(1<<20), float64(base)/(1<<20), bound>>20)
	require.Less(t, growth, uint64(bound))
}

// TestEffectivePeersRounded checks that /v1/estimate rounds
// effective_peers: 130²/(100² + 30²) = 1.5504587…
func TestEffectivePeersRounded(t *testing.T) {
	nodes := memNodes(t, 2)
	for i, k := range []int{100, 30} {
		for range k {
			nodes[i].Record("db", 10*time.Millisecond)
		}
	}
	eventually(t, "both nodes' samples are in the fleet view", func() bool {
		e, err := nodes[0].Estimate("db", 0)
		return err == nil && e.Peers == 2 && e.Samples == 130
	})
	e, err := nodes[0].Estimate("db", 0)
	require.NoError(t, err)
	require.InDelta(t, 130.0*130/(100*100+30*30), e.EffectivePeers, 1e-12, "the Go API keeps every digit")
	est := getJSON(t, nodes[0].Handler(), "/v1/estimate?dest=db").(map[string]any)
	require.Equal(t, "1.55", fmt.Sprint(est["effective_peers"]))
}

// TestCloseDoesNotWaitForFreshConnections checks that a connection which
// has not sent a byte (a browser opens such connections ahead of need)
// does not hold Close for its grace period: Close closes it and returns
// nil, where http.Server.Shutdown alone would wait up to 5 s for it and
// fail Close with its deadline.
func TestCloseDoesNotWaitForFreshConnections(t *testing.T) {
	n := startHTTP(t, nil)
	fresh, err := net.DialTimeout("tcp", n.HTTPAddr(), clientWait)
	require.NoError(t, err)
	defer fresh.Close()
	// The server accepts in order: once a later connection is answered,
	// the fresh one has been accepted and is open, waiting for a request.
	resp, err := (&http.Client{Timeout: clientWait}).Get("http://" + n.HTTPAddr() + "/healthz")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, n.Close())
	require.NoError(t, fresh.SetReadDeadline(time.Now().Add(clientWait)))
	_, err = fresh.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the fresh connection is closed by Close")
}
