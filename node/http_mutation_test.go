package node

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// requireExactError checks a JSON error answer: the status, and a body
// that is exactly {"error": want}, no other field.
func requireExactError(t *testing.T, code int, body []byte, wantCode int, want string) {
	t.Helper()
	require.Equal(t, wantCode, code, "%s", body)
	var e map[string]any
	require.NoError(t, json.Unmarshal(body, &e), "%s", body)
	require.Equal(t, map[string]any{"error": want}, e)
}

// TestErrorTextsExact pins the API's error texts word for word: the
// other tests match parts of them, and clients read them.
func TestErrorTextsExact(t *testing.T) {
	n, _ := handDataset(t)
	h := n.Handler()
	bad256 := strings.Repeat("x", 255) + "%ff" // 256 bytes, not UTF-8
	tests := []struct {
		method, target, body string
		code                 int
		err                  string
	}{
		{"GET", "/v1/estimate", "", 400, "missing query parameter dest"},
		{"GET", "/v1/estimate?dest=", "", 400, "dest must not be empty"},
		{"GET", "/v1/estimate?dest=" + strings.Repeat("x", 257), "", 400, "dest is 257 bytes, more than 256"},
		{"GET", "/v1/estimate?dest=" + bad256, "", 400, "dest is not valid UTF-8"},
		{"GET", "/v1/estimate?dest=a&dest=b&dest=c", "", 400, "want one dest, got 3"},
		{"GET", "/v1/estimate?dest=a&q=1.5", "", 400, "q must be in (0, 1], got 1.5"},
		{"GET", "/v1/estimate?dest=a&q=NaN", "", 400, `q must be a number in (0, 1], got "NaN"`},
		{"GET", "/v1/estimate?dest=a&q=0.5&q=0.6", "", 400, "want one q, got 2"},
		{"GET", "/v1/timeout", "", 400, "want 1..64 dest parameters, got 0"},
		{"GET", "/v1/timeout?dest=a&dest=" + bad256, "", 400, "dest[1] is not valid UTF-8"},
		{"GET", "/v1/timeout?dest=a&attempt=0", "", 400, "attempt must be >= 1, got 0"},
		{"GET", "/v1/timeout?dest=a&attempt=x", "", 400, `attempt must be a whole number, got "x"`},
		{"GET", "/v1/timeout?dest=a&attempt=1&attempt=1", "", 400, "want one attempt, got 2"},
		{"GET", "/v1/timeout?dest=a&dest=b&need=0", "", 400, "need must be in 1..2, got 0"},
		{"GET", "/v1/timeout?dest=a&dest=b&need=3", "", 400, "need must be in 1..2, got 3"},
		{"GET", "/v1/history", "", 400, "missing query parameter dest"},
		{"GET", "/v1/history?dest=a&dest=b", "", 400, "want one dest, got 2"},
		{"GET", "/v1/status?" + strings.Repeat("&", 10_000), "", 400, "query has more than 10000 parameters"},
		{"GET", "/v1/estimate?dest=a&quantile=0.5", "", 400, `unknown query parameter "quantile": /v1/estimate takes dest, q`},
		{"GET", "/v1/timeout?b=1&a=2", "", 400, `unknown query parameters "a", "b": /v1/timeout takes dest, attempt, need`},
		{"GET", "/v1/members?a=1&b=2&c=3&d=4&e=5&f=6", "", 400, `unknown query parameters "a", "b", "c", "d", "e" and 1 more: /v1/members takes none`},
		{"GET", "/v1/members?f=1&e=2&d=3&c=4&b=5", "", 400, `unknown query parameters "b", "c", "d", "e", "f": /v1/members takes none`},
		{"GET", "/v1/status?verbose", "", 400, `unknown query parameter "verbose": /v1/status takes none`},
		{"GET", "/healthz?x=1", "", 400, `unknown query parameter "x": /healthz takes none`},
		{"GET", "/v1/nope", "", 404, "no such path: /v1/nope"},
		{"GET", "/static/nope.js", "", 404, "no such path: /static/nope.js"},
		{"GET", "/v1/record", "", 405, "method GET not allowed on /v1/record; allowed: POST"},
		{"POST", "/v1/status", "", 405, "method POST not allowed on /v1/status; allowed: GET, HEAD"},

		{"POST", "/v1/record", `{"samples":[{"dest":"a","latency_ms":1}]}` + strings.Repeat(" ", 1<<20), 413, "body exceeds 1 MiB"},
		{"POST", "/v1/record", `[]`, 400, `body is not a JSON object of the form {"samples":[...]}: invalid character '[', want '{' at byte 0`},
		{"POST", "/v1/record", `{}`, 400, `missing field "samples"`},
		{"POST", "/v1/record", `{"samples":null}`, 400, `missing field "samples"`},
		{"POST", "/v1/record", `{"samples":{}}`, 400, `"samples" must be an array`},
		{"POST", "/v1/record", `{"samples":[{"dest":"a","latency_ms":1}],"samples":[]}`, 400, `duplicate field "samples"`},
		{"POST", "/v1/record", `{"samples":[]}`, 400, "samples: want 1..10000 samples, got 0"},
		{"POST", "/v1/record", `{"samples":[1]}`, 400, "samples[0]: must be an object"},
		{"POST", "/v1/record", `{"samples":[{"latency_ms":1}]}`, 400, `samples[0]: missing field "dest"`},
		{"POST", "/v1/record", `{"samples":[{"dest":"a"}]}`, 400, `samples[0]: missing field "latency_ms"`},
		{"POST", "/v1/record", `{"samples":[{"dest":"a","dest":"b","latency_ms":1}]}`, 400, `samples[0]: duplicate field "dest"`},
		{"POST", "/v1/record", `{"samples":[{"dest":1,"latency_ms":1}]}`, 400, `samples[0]: "dest" must be a string`},
		{"POST", "/v1/record", `{"samples":[{"dest":"","latency_ms":1}]}`, 400, `samples[0]: "dest" must not be empty`},
		{"POST", "/v1/record", `{"samples":[{"dest":"` + strings.Repeat("x", 257) + `","latency_ms":1}]}`, 400, `samples[0]: "dest" is 257 bytes, more than 256`},
		{"POST", "/v1/record", `{"samples":[{"dest":"\ud800","latency_ms":1}]}`, 400, `samples[0]: "dest" is not valid UTF-8`},
		{"POST", "/v1/record", `{"samples":[{"dest":"a","latency_ms":"1"}]}`, 400, `samples[0]: "latency_ms" must be a number`},
		{"POST", "/v1/record", `{"samples":[{"dest":"a","latency_ms":-1}]}`, 400, `samples[0]: "latency_ms" must be a finite number >= 0, got -1`},
		{"POST", "/v1/record", `{"samples":[{"dest":"a","latency_ms":1e999}]}`, 400, `samples[0]: "latency_ms" 1e999 is out of range`},
		{"POST", "/v1/record", `{"samples":[{"dest":"a","latency_ms":1` + strings.Repeat("0", 1000) + `}]}`, 400, `samples[0]: "latency_ms" must be a number of at most 1000 characters`},
		{"POST", "/v1/record", `{"samples":[{"dest":"a","latency_ms":1,"timed_out":1}]}`, 400, `samples[0]: "timed_out" must be true or false`},
		{"POST", "/v1/record", `{"samples":[{"dest":"a","latency_ms":1,"failed":"yes"}]}`, 400, `samples[0]: "failed" must be true or false`},
		{"POST", "/v1/record", `{"samples":[{"dest":"a","latency_ms":1,"timed_out":true,"failed":true}]}`, 400, `samples[0]: "timed_out" and "failed" cannot both be true`},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.target[:min(len(tc.target), 60)]+" "+tc.body[:min(len(tc.body), 60)], func(t *testing.T) {
			code, body := do(t, h, tc.method, tc.target, tc.body)
			requireExactError(t, code, body, tc.code, tc.err)
		})
	}
}

// TestRecordFields pins the optional fields of a sample: "failed" needs no
// latency and "timed_out" is a sample like any other; a null is as if the
// field were absent; a trailing ',' in the array is a syntax error.
func TestRecordFields(t *testing.T) {
	n := newAlone(t, &testClock{now: epochStart(e0)}, nil)
	h := n.Handler()
	code, body := do(t, h, "POST", "/v1/record", `{"samples":[{"dest":"f","failed":true},{"dest":"f","failed":false,"latency_ms":3},{"dest":"f","latency_ms":4,"timed_out":true},{"dest":"f","latency_ms":5,"timed_out":null,"failed":null}]}`, "")
	require.Equal(t, 200, code, "%s", body)
	require.JSONEq(t, `{"recorded":4}`, string(body))
	e, err := n.Estimate("f", 1)
	require.NoError(t, err)
	require.EqualValues(t, 3, e.LocalSamples, "a failed attempt is no latency sample")

	code, body = do(t, h, "POST", "/v1/record", `{"samples":[{"dest":"f","latency_ms":1},]}`, "")
	requireExactError(t, code, body, 400, `body is not a JSON object of the form {"samples":[...]}: invalid character ']', want a value after ',' at byte 40`)
	code, body = do(t, h, "POST", "/v1/record", `{"samples":[{"dest":"f","latency_ms":null}]}`, "")
	requireExactError(t, code, body, 400, `samples[0]: missing field "latency_ms"`)
}

// TestRecordBodyLimitExact pins the 1 MiB body limit to the byte, for a
// declared length and for a chunked body.
func TestRecordBodyLimitExact(t *testing.T) {
	n := newAlone(t, &testClock{now: epochStart(e0)}, nil)
	h := n.Handler()
	sample := `{"samples":[{"dest":"a","latency_ms":1}]}`
	for _, chunked := range []bool{false, true} {
		for _, size := range []int{1 << 20, 1<<20 + 1} {
			body := sample + strings.Repeat(" ", size-len(sample))
			r := httptest.NewRequest("POST", "/v1/record", strings.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			if chunked {
				r.ContentLength = -1
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if size == 1<<20 {
				require.Equal(t, 200, w.Code, "chunked %v: %s", chunked, w.Body)
				continue
			}
			requireExactError(t, w.Code, w.Body.Bytes(), 413, "body exceeds 1 MiB")
		}
	}
}

// TestTimeoutAnswerHeaders pins the headers of GET /v1/timeout, written
// without writeJSON: JSON, never cached, like every other answer.
func TestTimeoutAnswerHeaders(t *testing.T) {
	n, _ := handDataset(t)
	for _, target := range []string{"/v1/timeout?dest=db", "/v1/estimate?dest=db", "/v1/status"} {
		w := httptestRecorder(n.Handler(), "GET", target)
		require.Equal(t, 200, w.Code, target)
		require.Equal(t, "application/json", w.Header().Get("Content-Type"), target)
		require.Equal(t, "no-store", w.Header().Get("Cache-Control"), target)
	}
}

// TestEffectivePeersThreeDecimals pins the rounding of effective_peers in
// GET /v1/estimate to 3 decimals: 120²/(100²+20²) is 1.384615….
func TestEffectivePeersThreeDecimals(t *testing.T) {
	nodes := memNodes(t, 2)
	for i, k := range []int{100, 20} {
		for range k {
			nodes[i].Record("db", 10*time.Millisecond)
		}
	}
	eventually(t, "both nodes' samples are in the fleet view", func() bool {
		e, err := nodes[0].Estimate("db", 0)
		return err == nil && e.Peers == 2 && e.Samples == 120
	})
	est := getJSON(t, nodes[0].Handler(), "/v1/estimate?dest=db").(map[string]any)
	require.Equal(t, "1.385", fmt.Sprint(est["effective_peers"]))
}

// TestLoopbackGuardDetails pins the parts of the loopback guard the
// main test leaves open: an empty Host passes, an Origin compares without
// regard to case, "localhost" in any case and a bracketed IPv6 Host
// without a port are loopback, and two Origin headers are refused even
// when one is the server's own.
func TestLoopbackGuardDetails(t *testing.T) {
	n := startHTTP(t, nil)
	addr := n.HTTPAddr()
	send := func(host string, hdr ...string) int {
		t.Helper()
		req, err := http.NewRequest("GET", "http://"+addr+"/healthz", nil)
		require.NoError(t, err)
		req.Host = host
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Add(hdr[i], hdr[i+1])
		}
		resp, err := (&http.Client{Timeout: clientWait}).Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp.StatusCode
	}
	require.Equal(t, 200, send("LOCALHOST:8080"))
	require.Equal(t, 200, send("[::1]"))
	require.Equal(t, 200, send(addr, "Origin", "HTTP://"+strings.ToUpper(addr)))
	require.Equal(t, 403, send(addr, "Origin", "http://"+addr, "Origin", "http://"+addr))
	require.Equal(t, 403, send("localhost.example.com"))
}

// TestMembersSortedWhenSelfAdded pins the order of GET /v1/members when
// this node is not among the cluster's members: by name, then member.
func TestMembersSortedWhenSelfAdded(t *testing.T) {
	n := newAlone(t, nil, func(c *Config) { c.Name = "m" })
	ms := n.members()
	require.Len(t, ms, 1)
	require.Equal(t, "m", ms[0].Name)
	require.Equal(t, "alive", ms[0].State)
	require.Len(t, ms[0].BootID, 16, "16 hex digits")
}

// TestStatusCountsSelfBeforeStart pins members_alive at 1, this node,
// while the cluster has not started (memberlist knows no member yet).
func TestStatusCountsSelfBeforeStart(t *testing.T) {
	n := newAlone(t, nil, func(c *Config) {
		c.DisableGossip = false
		c.Cluster.Bind = "127.0.0.1:0"
	})
	st := getJSON(t, n.Handler(), "/v1/status").(map[string]any)
	require.Equal(t, json.Number("1"), st["members_alive"])
}

// TestBootHexIsSixteenDigits pins boot_id's form: 16 lowercase hex
// digits, leading zeros kept.
func TestBootHexIsSixteenDigits(t *testing.T) {
	require.Equal(t, "00000000000000ff", bootHex(255))
	require.Equal(t, "0000000000000000", bootHex(0))
	require.Equal(t, "ffffffffffffffff", bootHex(^uint64(0)))
}

// TestUnauthorizedNamesTheScheme pins the challenge of a 401 (RFC 9110
// section 11.6.1: a 401 carries WWW-Authenticate).
func TestUnauthorizedNamesTheScheme(t *testing.T) {
	n, _ := handDataset(t, "Authorization", "Bearer tok")
	for _, p := range []string{"/v1/record", "/debug/pprof/"} {
		method := "POST"
		if strings.HasPrefix(p, "/debug") {
			method = "GET"
		}
		r := httptest.NewRequest(method, p, strings.NewReader(samplesBody("db", 1)))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		n.Handler().ServeHTTP(w, r)
		requireExactError(t, w.Code, w.Body.Bytes(), 401, "missing or wrong bearer token")
		require.Equal(t, `Bearer realm="atnode"`, w.Header().Get("WWW-Authenticate"), p)
	}
}

// TestRecordUnknownFieldNesting pins the nesting bound of an unknown
// field to encoding/json's: the whole body nests at most 10000 deep, so a
// sample's unknown field (inside object, array, object) takes 9997
// levels and a top-level one 9999.
func TestRecordUnknownFieldNesting(t *testing.T) {
	nested := func(k int) string { return strings.Repeat("[", k) + strings.Repeat("]", k) }
	body := func(sampleLevels, topLevels int) string {
		return `{"samples":[{"dest":"a","latency_ms":1,"x":` + nested(sampleLevels) + `}],"y":` + nested(topLevels) + `}`
	}
	for _, tc := range []struct {
		sample, top int
		ok          bool
	}{{9997, 9999, true}, {9998, 1, false}, {1, 10_000, false}} {
		_, err := decodeRecord(strings.NewReader(body(tc.sample, tc.top)))
		if tc.ok {
			require.NoError(t, err, "%d, %d", tc.sample, tc.top)
			continue
		}
		require.ErrorContains(t, err, "nesting deeper than 10000", "%d, %d", tc.sample, tc.top)
	}
}

// TestUnsupportedMediaTypeSaysWhat pins the 415 of a POST without JSON:
// its text and the Accept-Post header naming what is taken.
func TestUnsupportedMediaTypeSaysWhat(t *testing.T) {
	n, _ := handDataset(t)
	r := httptest.NewRequest("POST", "/v1/record", strings.NewReader(samplesBody("db", 1)))
	r.Header.Set("Content-Type", "text/plain")
	w := httptest.NewRecorder()
	n.Handler().ServeHTTP(w, r)
	requireExactError(t, w.Code, w.Body.Bytes(), 415, `Content-Type must be application/json, got "text/plain"`)
	require.Equal(t, "application/json", w.Header().Get("Accept-Post"))
}

// TestPprofSamplingLikePprof pins the sampling time to what net/http/pprof
// does with seconds: 0 or less takes the default, more than a day is cut
// to a day.
func TestPprofSamplingLikePprof(t *testing.T) {
	for target, want := range map[string]time.Duration{
		"/debug/pprof/profile?seconds=0":          30 * time.Second,
		"/debug/pprof/trace?seconds=-5":           time.Second,
		"/debug/pprof/profile?seconds=86400":      24 * time.Hour,
		"/debug/pprof/profile?seconds=1000000000": 24 * time.Hour,
	} {
		require.Equal(t, want, pprofSampling(httptest.NewRequest("GET", target, nil)), target)
	}
}

// TestLoopbackGuardTakesNoHost: an HTTP/1.0 request may carry no Host;
// on loopback it is not refused for that (only a foreign Host is).
func TestLoopbackGuardTakesNoHost(t *testing.T) {
	n := startHTTP(t, nil)
	c := rawRequest(t, n.HTTPAddr(), "GET /healthz HTTP/1.0", "")
	resp, _ := readUntilClosed(t, c)
	require.True(t, strings.HasPrefix(resp, "HTTP/1.0 200 OK\r\n"), "%q", resp)
}

// fakeAddr is a net.Addr of another type than *net.TCPAddr.
type fakeAddr string

func (fakeAddr) Network() string  { return "fake" }
func (a fakeAddr) String() string { return string(a) }

// TestIsLoopbackAddrOfAnyType: a listener's address that is not a
// *net.TCPAddr is judged by its text.
func TestIsLoopbackAddrOfAnyType(t *testing.T) {
	require.True(t, isLoopbackAddr(fakeAddr("127.0.0.1:80")))
	require.True(t, isLoopbackAddr(fakeAddr("[::1]:80")))
	require.False(t, isLoopbackAddr(fakeAddr("10.0.0.1:80")))
	require.False(t, isLoopbackAddr(fakeAddr("/run/atnode.sock")))
}
