package timeouthttp

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/adaptivetimeout/adaptivetimeout/internal/policytest"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type obs = policytest.Observation

// stepClock returns a time step later on every call, so the latency of an
// attempt (two calls: start and end) is exactly step.
type stepClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.t
	c.t = c.t.Add(c.step)
	return t
}

// stepped returns a Transport over base and p whose clock reads step later
// every time.
func stepped(t *testing.T, base http.RoundTripper, p timeout.Policy, step time.Duration) *Transport {
	t.Helper()
	clock := &stepClock{t: time.Unix(1_700_000_000, 0), step: step}
	return newTransport(t, Options{Base: base, Policy: p, Now: clock.Now})
}

// policy returns a test Policy whose first attempts get d to dest and
// 10 ms to any other destination.
func policy(dest string, d time.Duration) *policytest.Policy {
	p := policytest.New(10 * time.Millisecond)
	p.SetTimeout(dest, d)
	return p
}

// server starts an httptest server whose connections are all closed when the
// test ends. Handlers must return once their request's context is done.
func server(t *testing.T, h http.HandlerFunc) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	return srv, u.Host
}

// stalledBody sends the headers and the first part of the body, then
// nothing more until the request's context is done.
func stalledBody(w http.ResponseWriter, r *http.Request) {
	_, _ = io.WriteString(w, "part")
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

// spy records the context, and its deadline, each request reaches the
// base transport with.
type spy struct {
	base     http.RoundTripper
	mu       sync.Mutex
	ctx      context.Context
	deadline time.Time
	has      bool
}

func (s *spy) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.ctx = r.Context()
	s.deadline, s.has = s.ctx.Deadline()
	s.mu.Unlock()
	return s.base.RoundTrip(r)
}

// last returns the context of the last request that reached the base.
func (s *spy) last() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctx
}

func newTransport(t *testing.T, o Options) *Transport {
	t.Helper()
	tr, err := New(o)
	require.NoError(t, err)
	return tr
}

func get(t *testing.T, ctx context.Context, c *http.Client, u string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	require.NoError(t, err)
	return c.Do(req)
}

func TestFastObservedAtItsLatency(t *testing.T) {
	srv, host := server(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") })
	p := policy(host, 80*time.Millisecond)
	c := &http.Client{Transport: stepped(t, srv.Client().Transport, p, 7*time.Millisecond)}

	resp, err := get(t, context.Background(), c, srv.URL)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "hello", string(body))
	// Clock reads 7 ms apart: start, headers, and the read that brought
	// the last of the Content-Length bytes (then one more for Observe).
	want := []obs{{Dest: host, Attempt: 1, Outcome: timeout.Completed, Elapsed: 14 * time.Millisecond}}
	require.Equal(t, want, p.Observed(), "observed when the body arrived")
	require.NoError(t, resp.Body.Close())
	require.Equal(t, want, p.Observed(), "observed once")
}

func TestSlowTimedOut(t *testing.T) {
	srv, host := server(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	p := policy(host, 50*time.Millisecond)
	sp := &spy{base: srv.Client().Transport}
	tr := newTransport(t, Options{Base: sp, Policy: p})
	c := &http.Client{Transport: tr}

	before := time.Now()
	resp, err := get(t, timeout.WithAttempt(context.Background(), 1), c, srv.URL)
	require.Nil(t, resp)
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var te *TimeoutError
	require.ErrorAs(t, err, &te)
	require.Equal(t, TimeoutError{Dest: host, Attempt: 1, Limit: 50 * time.Millisecond, Err: te.Err}, *te)
	var ue *url.Error
	require.ErrorAs(t, err, &ue)
	require.True(t, ue.Timeout())
	require.Equal(t, []timeout.Outcome{timeout.TimedOut}, p.Outcomes())
	require.Equal(t, "Get \""+srv.URL+"\": timeouthttp: adaptive timeout exceeded (dest "+host+
		", attempt 1, timeout 50ms)", err.Error())
	require.True(t, sp.has)
	require.False(t, sp.deadline.Before(before.Add(50*time.Millisecond)))
}

func TestStreamingBodyNotTruncated(t *testing.T) {
	first := strings.Repeat("a", 256<<10) // larger than any transport buffer
	next := make(chan struct{})
	srv, host := server(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, first)
		w.(http.Flusher).Flush()
		select { // the rest only once the client has read the first part
		case <-next:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "the end")
	})
	p := policy(host, 10*time.Second)
	c := &http.Client{Transport: stepped(t, srv.Client().Transport, p, 3*time.Millisecond)}

	resp, err := get(t, context.Background(), c, srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	// RoundTrip has returned; the attempt's context must still be alive.
	buf := make([]byte, len(first))
	_, err = io.ReadFull(resp.Body, buf)
	require.NoError(t, err)
	require.Empty(t, p.Observed())
	close(next)
	rest, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "the end", string(rest))
	require.Equal(t, []timeout.Outcome{timeout.Completed}, p.Outcomes(), "observed once, at EOF")
}

func TestStreamingBodyCutAtTheTimeout(t *testing.T) {
	srv, host := server(t, stalledBody)
	p := policy(host, 60*time.Millisecond)
	tr := newTransport(t, Options{Base: srv.Client().Transport, Policy: p})
	c := &http.Client{Transport: tr}

	resp, err := get(t, context.Background(), c, srv.URL)
	require.NoError(t, err)
	got, err := io.ReadAll(resp.Body)
	require.Equal(t, "part", string(got))
	require.ErrorIs(t, err, ErrTimeout)
	require.Equal(t, []timeout.Outcome{timeout.TimedOut}, p.Outcomes())
	require.NoError(t, resp.Body.Close())
	require.Equal(t, []timeout.Outcome{timeout.TimedOut}, p.Outcomes(), "observed once")
}

func TestCallerDeadline(t *testing.T) {
	t.Run("shorter than adaptive: the caller's, canceled", func(t *testing.T) {
		srv, host := server(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		p := policy(host, 2*time.Second)
		sp := &spy{base: srv.Client().Transport}
		tr := newTransport(t, Options{Base: sp, Policy: p})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		callerDeadline, _ := ctx.Deadline()

		_, err := get(t, ctx, &http.Client{Transport: tr}, srv.URL)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NotErrorIs(t, err, ErrTimeout)
		require.Equal(t, callerDeadline, sp.deadline, "never later than the caller's deadline")
		require.Equal(t, []timeout.Outcome{timeout.Canceled}, p.Outcomes())
	})
	t.Run("longer than adaptive: adaptive, timed out", func(t *testing.T) {
		srv, host := server(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		p := policy(host, 40*time.Millisecond)
		sp := &spy{base: srv.Client().Transport}
		tr := newTransport(t, Options{Base: sp, Policy: p})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		callerDeadline, _ := ctx.Deadline()

		_, err := get(t, ctx, &http.Client{Transport: tr}, srv.URL)
		require.ErrorIs(t, err, ErrTimeout)
		require.True(t, sp.deadline.Before(callerDeadline))
		require.Equal(t, []timeout.Outcome{timeout.TimedOut}, p.Outcomes())
	})
}

func TestCallerCancellation(t *testing.T) {
	t.Run("before the response", func(t *testing.T) {
		started := make(chan struct{})
		srv, host := server(t, func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-r.Context().Done()
		})
		p := policy(host, 10*time.Second)
		tr := newTransport(t, Options{Base: srv.Client().Transport, Policy: p})
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-started; cancel() }()

		_, err := get(t, ctx, &http.Client{Transport: tr}, srv.URL)
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrTimeout)
		require.Equal(t, []timeout.Outcome{timeout.Canceled}, p.Outcomes())
	})
	t.Run("while reading the body", func(t *testing.T) {
		srv, host := server(t, stalledBody)
		p := policy(host, 10*time.Second)
		tr := newTransport(t, Options{Base: srv.Client().Transport, Policy: p})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()

		resp, err := get(t, ctx, &http.Client{Transport: tr}, srv.URL)
		require.NoError(t, err)
		buf := make([]byte, 4)
		_, err = io.ReadFull(resp.Body, buf)
		require.NoError(t, err)
		cancel()
		_, err = io.ReadAll(resp.Body)
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrTimeout)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, []timeout.Outcome{timeout.Canceled}, p.Outcomes())
	})
}

// roundTripFunc is an in-memory http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func okResponse(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("hello world")), Request: r}, nil
}

// TestDeadlinePerAttempt runs in a synctest bubble, so the deadline each
// attempt reaches the base transport with is exact.
func TestDeadlinePerAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var deadline time.Time
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			deadline, _ = r.Context().Deadline()
			return okResponse(r)
		})
		p := policy("db-1", 60*time.Millisecond)
		p.SetTimeout("db-2", 6*time.Second)
		tr := newTransport(t, Options{Base: base, Policy: p,
			Destination: func(r *http.Request) string { return r.Header.Get("X-Dest") }})
		tests := []struct {
			dest    string
			attempt int
			want    time.Duration
		}{
			{"db-1", 0, 60 * time.Millisecond},
			{"db-1", 1, 60 * time.Millisecond},
			{"db-1", 2, 120 * time.Millisecond},
			{"db-1", 3, 240 * time.Millisecond},
			{"db-2", 1, 6 * time.Second},
			{"unknown", 4, 80 * time.Millisecond},
		}
		var want []obs
		for _, tt := range tests {
			ctx := timeout.WithAttempt(context.Background(), tt.attempt)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://ignored/", nil)
			require.NoError(t, err)
			req.Header.Set("X-Dest", tt.dest)
			require.Equal(t, tt.want, tr.Timeout(req))
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			require.Equal(t, time.Now().Add(tt.want), deadline, "%s attempt %d", tt.dest, tt.attempt)
			require.NoError(t, resp.Body.Close())
			want = append(want, obs{Dest: tt.dest, Attempt: max(tt.attempt, 1), Outcome: timeout.Completed})
		}
		require.Equal(t, want, p.Observed(), "no time passes in the bubble")
	})
}

// TestTimeoutInBubble shows the timeout exactly: the base blocks until its
// context ends and the bubble's clock jumps to the deadline.
func TestTimeoutInBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			return nil, r.Context().Err()
		})
		p := policy("h", 666*time.Millisecond)
		tr := newTransport(t, Options{Base: base, Policy: p})
		req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		start := time.Now()
		_, err = tr.RoundTrip(req)
		require.ErrorIs(t, err, ErrTimeout)
		require.EqualError(t, err, "timeouthttp: adaptive timeout exceeded (dest h, attempt 1, timeout 666ms)")
		require.Equal(t, 666*time.Millisecond, time.Since(start))
		require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 666 * time.Millisecond}}, p.Observed())
	})
}

func TestCloseBeforeEOFObservesLatency(t *testing.T) {
	p := policytest.New(time.Second)
	tr := stepped(t, roundTripFunc(okResponse), p, 12*time.Millisecond)
	req, err := http.NewRequest(http.MethodGet, "http://db-1:8080/x", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	buf := make([]byte, 5)
	_, err = io.ReadFull(resp.Body, buf)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, resp.Body.Close())
	// Clock reads 12 ms apart: start, headers, the read; Close adds none.
	require.Equal(t, []obs{{Dest: "db-1:8080", Attempt: 1, Outcome: timeout.Completed, Elapsed: 24 * time.Millisecond}},
		p.Observed(), "observed when the data last arrived")
}

// dripBody returns one chunk per Read, each after its delay (bubble time).
type dripBody struct {
	chunks []string
	delay  time.Duration
}

func (b *dripBody) Read(p []byte) (int, error) {
	if len(b.chunks) == 0 {
		return 0, io.EOF
	}
	time.Sleep(b.delay)
	n := copy(p, b.chunks[0])
	b.chunks = b.chunks[1:]
	return n, nil
}

func (b *dripBody) Close() error { return nil }

// dripGet sends a GET to h over a Transport on p whose base answers after
// 10 ms (bubble time) with a body of length (its ContentLength) that
// brings "01234" and "56789" 10 ms apart. It returns the response and the
// context the base got.
func dripGet(t *testing.T, p timeout.Policy, length int64) (*http.Response, context.Context) {
	t.Helper()
	var ctx context.Context
	tr := newTransport(t, Options{Policy: p,
		Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			ctx = r.Context()
			time.Sleep(10 * time.Millisecond)
			return &http.Response{StatusCode: http.StatusOK, ContentLength: length, Request: r,
				Body: &dripBody{chunks: []string{"01234", "56789"}, delay: 10 * time.Millisecond}}, nil
		})})
	req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	return resp, ctx
}

// TestCallerTimeIsNotLatency: a caller that reads the response (without
// reaching EOF) and then works on it past the timeout before closing the
// body must be observed at the destination's latency, not its own time and
// not a timeout. The timeout is 80 ms.
func TestCallerTimeIsNotLatency(t *testing.T) {
	for _, tc := range []struct {
		name   string
		length int64
		read   int // bytes the caller reads before closing
		want   time.Duration
	}{
		{"content length, read whole", 10, 10, 30 * time.Millisecond},  // headers at 10 ms, two chunks
		{"unknown length, read part", -1, 5, 20 * time.Millisecond},    // the last read at 20 ms
		{"unknown length, headers only", -1, 0, 10 * time.Millisecond}, // nothing read: the headers
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := policy("h", 80*time.Millisecond)
				resp, _ := dripGet(t, p, tc.length)
				if tc.read > 0 {
					_, err := io.ReadFull(resp.Body, make([]byte, tc.read))
					require.NoError(t, err)
				}
				time.Sleep(time.Second) // the caller's own work, far past the timeout
				require.NoError(t, resp.Body.Close())
				require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: tc.want}}, p.Observed())
			})
		})
	}
}

// TestBodyAccounting pins when a body's attempt completes, in bubble time:
// headers at 10 ms, a chunk per Read 10 ms apart (then EOF at once), the
// caller's Close a second later. A known length completes at the read that
// brings its last byte; a body shorter than it announced, at EOF; a body
// read in part, at the last read. The attempt's context ends at EOF, or at
// Close (if the timeout has not ended it first).
func TestBodyAccounting(t *testing.T) {
	for _, tc := range []struct {
		name   string
		length int64
		read   int // bytes read before Close; -1: to EOF
		want   time.Duration
	}{
		{"content length, read part", 10, 5, 20 * time.Millisecond},
		{"content length, read to EOF", 10, -1, 30 * time.Millisecond},
		{"content length above the body, read to EOF", 20, -1, 30 * time.Millisecond},
		{"unknown length, read to EOF", -1, -1, 30 * time.Millisecond},
		{"content length, headers only", 10, 0, 10 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := policy("h", 80*time.Millisecond)
				resp, ctx := dripGet(t, p, tc.length)
				switch {
				case tc.read < 0:
					_, err := io.ReadAll(resp.Body)
					require.NoError(t, err)
					require.ErrorIs(t, ctx.Err(), context.Canceled, "released at EOF, before Close")
				case tc.read > 0:
					_, err := io.ReadFull(resp.Body, make([]byte, tc.read))
					require.NoError(t, err)
					require.NoError(t, ctx.Err(), "alive until Close")
				}
				time.Sleep(time.Second)
				require.NoError(t, resp.Body.Close())
				require.NoError(t, resp.Body.Close(), "a second Close is harmless")
				require.Error(t, ctx.Err())
				require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: tc.want}}, p.Observed())
			})
		})
	}
}

// TestCloseRacesRead: net/http lets Close run while a Read is under way;
// every attempt is still observed exactly once (run with -race).
func TestCloseRacesRead(t *testing.T) {
	p := policytest.New(time.Second)
	tr := newTransport(t, Options{Policy: p, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, ContentLength: -1, Request: r,
			Body: io.NopCloser(strings.NewReader(strings.Repeat("x", 64)))}, nil
	})})
	const n = 200
	for range n {
		req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, 8)
			for {
				if _, err := resp.Body.Read(buf); err != nil {
					return
				}
			}
		}()
		require.NoError(t, resp.Body.Close())
		<-done
	}
	require.Len(t, p.Outcomes(), n)
	for _, o := range p.Outcomes() {
		require.Equal(t, timeout.Completed, o)
	}
}

// TestBodyStalledPastTheTimeout: a body whose data stops arriving is cut at
// the timeout and observed as timed out, even after part of it was read.
func TestBodyStalledPastTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policy("h", 80*time.Millisecond)
		readStalledBody(t, newTransport(t, Options{Policy: p, Base: stallingBody(0)}))
		require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 80 * time.Millisecond}}, p.Observed())
	})
}

// stallingBody answers after delay (bubble time) with a body whose data
// stops after "part": its next read blocks until the request's context
// ends.
func stallingBody(delay time.Duration) roundTripFunc {
	return func(r *http.Request) (*http.Response, error) {
		time.Sleep(delay)
		return &http.Response{StatusCode: http.StatusOK, ContentLength: -1, Request: r,
			Body: io.NopCloser(io.MultiReader(strings.NewReader("part"), ctxReader{r.Context()}))}, nil
	}
}

// readStalledBody sends a GET to h over tr, whose base is stallingBody,
// and requires its body to yield "part" and then be cut by the adaptive
// timeout.
func readStalledBody(t *testing.T, tr http.RoundTripper) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	got, err := io.ReadAll(resp.Body)
	require.Equal(t, "part", string(got))
	require.ErrorIs(t, err, ErrTimeout)
	require.NoError(t, resp.Body.Close())
}

// ctxReader blocks until ctx ends, then fails with its cause, as net/http's
// body does.
type ctxReader struct{ ctx context.Context }

func (r ctxReader) Read([]byte) (int, error) {
	<-r.ctx.Done()
	return 0, context.Cause(r.ctx)
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func TestFailuresClassified(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	bad := errors.New(`unsupported protocol scheme "ftp"`)
	failing := func(err error) roundTripFunc {
		return func(*http.Request) (*http.Response, error) { return nil, err }
	}
	breaking := func(err error) roundTripFunc {
		return func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Request: r,
				Body: io.NopCloser(io.MultiReader(strings.NewReader("x"), errReader{err}))}, nil
		}
	}
	for _, tt := range []struct {
		name     string
		base     roundTripFunc
		classify func(error) timeout.Outcome
		err      error
		want     timeout.Outcome
	}{
		{"refused", failing(refused), nil, refused, timeout.Failed},
		{"not the destination's fault", failing(bad), nil, bad, timeout.Canceled},
		{"reset mid-body", breaking(reset), nil, reset, timeout.Failed},
		{"hook", failing(bad), func(error) timeout.Outcome { return timeout.Failed }, bad, timeout.Failed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := policytest.New(time.Second)
			tr := newTransport(t, Options{Base: tt.base, Policy: p, Classify: tt.classify})
			req, err := http.NewRequest(http.MethodGet, "http://db-1/", nil)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				require.NoError(t, resp.Body.Close())
			}
			require.Same(t, tt.err, err, "the base's error, unchanged")
			require.Equal(t, []timeout.Outcome{tt.want}, p.Outcomes())
		})
	}
}

func TestClassifyError(t *testing.T) {
	require.Equal(t, timeout.Failed, ClassifyError(&url.Error{Op: "Get", Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}))
	require.Equal(t, timeout.Failed, ClassifyError(io.ErrUnexpectedEOF))
	require.Equal(t, timeout.Canceled, ClassifyError(errors.New("net/http: timeout awaiting response headers")))
}

func TestNilBodyCompletes(t *testing.T) {
	p := policytest.New(time.Second)
	tr := newTransport(t, Options{Policy: p, Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusNoContent}, nil
	})})
	req, err := http.NewRequest(http.MethodGet, "http://db-1/", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	require.Nil(t, resp.Body)
	require.Equal(t, []timeout.Outcome{timeout.Completed}, p.Outcomes())
}

func TestNew(t *testing.T) {
	_, err := New(Options{})
	require.ErrorIs(t, err, ErrNoPolicy)
	require.EqualError(t, err, "timeouthttp: Options.Policy is nil")

	p := policytest.New(250 * time.Millisecond)
	tr, err := New(Options{Policy: p})
	require.NoError(t, err)
	require.Same(t, http.DefaultTransport, tr.base)
	req, err := http.NewRequest(http.MethodGet, "http://db-1:80/", nil)
	require.NoError(t, err)
	require.Equal(t, 250*time.Millisecond, tr.Timeout(req))
	require.Equal(t, time.Second, tr.Timeout(req.WithContext(timeout.WithAttempt(req.Context(), 3))), "the attempt from the context")
	require.Equal(t, "db-1:80", tr.dest(req))
}

func TestTimeoutErrorText(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{ErrTimeout, "timeouthttp: adaptive timeout exceeded (dest db-1, attempt 2, timeout 1.5s)"},
		{context.DeadlineExceeded, "timeouthttp: adaptive timeout exceeded (dest db-1, attempt 2, timeout 1.5s)"},
		{nil, "timeouthttp: adaptive timeout exceeded (dest db-1, attempt 2, timeout 1.5s)"},
		{io.ErrUnexpectedEOF, "timeouthttp: adaptive timeout exceeded (dest db-1, attempt 2, timeout 1.5s): unexpected EOF"},
	} {
		e := &TimeoutError{Dest: "db-1", Attempt: 2, Limit: 1500 * time.Millisecond, Err: tt.err}
		require.EqualError(t, e, tt.want)
		require.ErrorIs(t, e, ErrTimeout)
		require.ErrorIs(t, e, context.DeadlineExceeded)
		require.True(t, e.Timeout())
	}
}

type idleCloser struct {
	roundTripFunc
	closed int
}

func (c *idleCloser) CloseIdleConnections() { c.closed++ }

func TestCloseIdleConnections(t *testing.T) {
	p := policytest.New(time.Second)
	base := &idleCloser{roundTripFunc: okResponse}
	c := &http.Client{Transport: newTransport(t, Options{Base: base, Policy: p})}
	c.CloseIdleConnections()
	require.Equal(t, 1, base.closed)
	// A base without the method is fine.
	newTransport(t, Options{Base: roundTripFunc(okResponse), Policy: p}).CloseIdleConnections()
}

// TestConnectionRefusedFails: a destination nobody listens on is a fast
// transport failure, observed as failed, not as a latency sample.
func TestConnectionRefusedFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	p := policytest.New(10 * time.Second)
	c := &http.Client{Transport: newTransport(t, Options{Base: base, Policy: p})}
	_, err = get(t, context.Background(), c, "http://"+addr+"/")
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.Equal(t, []obs{{Dest: addr, Attempt: 1, Outcome: timeout.Failed, Elapsed: p.Observed()[0].Elapsed}}, p.Observed())
}

// TestCallerDelayIsNotLatency: the caller's time between the headers and
// its reads is its own. A caller that works 50 ms before reading a body
// that drips in two 10 ms chunks (headers at 10 ms, timeout 80 ms) is
// observed at 30 ms, not at the 80 ms its read ended; between reads too.
func TestCallerDelayIsNotLatency(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before time.Duration // the caller's work before its first read
		each   time.Duration // and after each read
	}{
		{"before reading", 50 * time.Millisecond, 0},
		{"between reads", 0, 20 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := policy("h", 80*time.Millisecond)
				resp, _ := dripGet(t, p, -1)
				time.Sleep(tc.before)
				buf := make([]byte, 5)
				for {
					_, err := resp.Body.Read(buf)
					if err == io.EOF {
						break
					}
					require.NoError(t, err)
					time.Sleep(tc.each)
				}
				require.NoError(t, resp.Body.Close())
				require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.Completed, Elapsed: 30 * time.Millisecond}}, p.Observed())
			})
		})
	}
}

// TestCallerLateForTheBody: a caller that comes back to read only after
// the timeout has passed gets the timeout's error, but nothing is learned
// of the destination (its own delay used the attempt up); one that was
// reading when the timeout came has it counted as the destination's.
func TestCallerLateForTheBody(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration // before the caller's read; the timeout is 80 ms
		want  timeout.Outcome
	}{
		{"back after the timeout", 100 * time.Millisecond, timeout.Canceled},
		{"reading when it came", 0, timeout.TimedOut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := policy("h", 80*time.Millisecond)
				tr := newTransport(t, Options{Policy: p,
					Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
						time.Sleep(10 * time.Millisecond)
						// A body whose rest never comes: a read ends with the request's context.
						return &http.Response{StatusCode: http.StatusOK, ContentLength: -1, Request: r,
							Body: io.NopCloser(ctxReader{r.Context()})}, nil
					})})
				req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
				require.NoError(t, err)
				resp, err := tr.RoundTrip(req)
				require.NoError(t, err)
				time.Sleep(tc.delay)
				_, err = resp.Body.Read(make([]byte, 5))
				require.ErrorIs(t, err, ErrTimeout, "the caller gets the timeout either way")
				require.NoError(t, resp.Body.Close())
				got := p.Observed()
				require.Len(t, got, 1)
				require.Equal(t, tc.want, got[0].Outcome)
			})
		})
	}
}
