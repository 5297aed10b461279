package timeouthttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// estimates is a fake timeout.Estimator: P-quantile per destination in ms.
type estimates map[string]uint64

func (e estimates) QuantileMillis(dest string, _ float64, _ time.Time) (uint64, bool) {
	v, ok := e[dest]
	return v, ok
}

type sample struct {
	Dest string
	MS   uint64
}

// recorder is a fake timeout.Recorder.
type recorder struct {
	mu  sync.Mutex
	got []sample
}

func (r *recorder) RecordMillis(dest string, ms uint64, _ time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, sample{dest, ms})
}

func (r *recorder) samples() []sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sample(nil), r.got...)
}

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

// cfg is 10ms..10s, P99.99, safety 2: an estimate of v ms gives 2·v ms.
func cfg() timeout.Config {
	c := timeout.DefaultConfig()
	c.Backoff = timeout.BackoffInterval{Min: 10 * time.Millisecond, Max: 10 * time.Second}
	return c
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

// spy records the deadline of the context each request reaches the base
// transport with.
type spy struct {
	base     http.RoundTripper
	mu       sync.Mutex
	deadline time.Time
	has      bool
}

func (s *spy) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.deadline, s.has = r.Context().Deadline()
	s.mu.Unlock()
	return s.base.RoundTrip(r)
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

func TestFastRecordedAtItsLatency(t *testing.T) {
	srv, host := server(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") })
	rec := &recorder{}
	clock := &stepClock{t: time.Unix(1_700_000_000, 0), step: 7 * time.Millisecond}
	tr := newTransport(t, Options{Base: srv.Client().Transport, Config: cfg(), Estimator: estimates{host: 40},
		Recorder: rec, Now: clock.Now})
	c := &http.Client{Transport: tr}

	resp, err := get(t, context.Background(), c, srv.URL)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "hello", string(body))
	// Three clock reads, 7 ms apart: start, headers, and the read that
	// brought the last of the Content-Length bytes.
	require.Equal(t, []sample{{host, 14}}, rec.samples(), "recorded when the body arrived")
	require.NoError(t, resp.Body.Close())
	require.Equal(t, []sample{{host, 14}}, rec.samples(), "recorded once")
}

func TestSlowTimedOutAndRecordedAtTheTimeout(t *testing.T) {
	srv, host := server(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	rec := &recorder{}
	sp := &spy{base: srv.Client().Transport}
	tr := newTransport(t, Options{Base: sp, Config: cfg(), Estimator: estimates{host: 25}, Recorder: rec})
	c := &http.Client{Transport: tr}

	ctx := WithAttempt(context.Background(), 1)
	before := time.Now()
	resp, err := get(t, ctx, c, srv.URL)
	require.Nil(t, resp)
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var te *TimeoutError
	require.ErrorAs(t, err, &te)
	require.Equal(t, TimeoutError{Dest: host, Attempt: 1, Limit: 50 * time.Millisecond, Err: te.Err}, *te)
	var ue *url.Error
	require.ErrorAs(t, err, &ue)
	require.True(t, ue.Timeout())
	require.Equal(t, []sample{{host, 50}}, rec.samples(), "censored at the timeout")
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
	rec := &recorder{}
	clock := &stepClock{t: time.Unix(1_700_000_000, 0), step: 3 * time.Millisecond}
	tr := newTransport(t, Options{Base: srv.Client().Transport, Config: cfg(), Estimator: estimates{host: 5000},
		Recorder: rec, Now: clock.Now})
	c := &http.Client{Transport: tr}

	resp, err := get(t, context.Background(), c, srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	// RoundTrip has returned; the attempt's context must still be alive.
	buf := make([]byte, len(first))
	_, err = io.ReadFull(resp.Body, buf)
	require.NoError(t, err)
	require.Empty(t, rec.samples())
	close(next)
	rest, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "the end", string(rest))
	got := rec.samples()
	require.Len(t, got, 1, "recorded once, at EOF")
	require.Equal(t, host, got[0].Dest)
}

func TestStreamingBodyCutAtTheTimeout(t *testing.T) {
	srv, host := server(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "part")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	rec := &recorder{}
	tr := newTransport(t, Options{Base: srv.Client().Transport, Config: cfg(), Estimator: estimates{host: 30}, Recorder: rec})
	c := &http.Client{Transport: tr}

	resp, err := get(t, context.Background(), c, srv.URL)
	require.NoError(t, err)
	got, err := io.ReadAll(resp.Body)
	require.Equal(t, "part", string(got))
	require.ErrorIs(t, err, ErrTimeout)
	require.Equal(t, []sample{{host, 60}}, rec.samples())
	require.NoError(t, resp.Body.Close())
	require.Equal(t, []sample{{host, 60}}, rec.samples(), "recorded once")
}

func TestCallerDeadline(t *testing.T) {
	t.Run("shorter than adaptive: the caller's, not recorded", func(t *testing.T) {
		srv, host := server(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		rec := &recorder{}
		sp := &spy{base: srv.Client().Transport}
		tr := newTransport(t, Options{Base: sp, Config: cfg(), Estimator: estimates{host: 1000}, Recorder: rec})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		callerDeadline, _ := ctx.Deadline()

		_, err := get(t, ctx, &http.Client{Transport: tr}, srv.URL)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NotErrorIs(t, err, ErrTimeout)
		require.Equal(t, callerDeadline, sp.deadline, "never later than the caller's deadline")
		require.Empty(t, rec.samples())
	})
	t.Run("longer than adaptive: adaptive, recorded", func(t *testing.T) {
		srv, host := server(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		rec := &recorder{}
		sp := &spy{base: srv.Client().Transport}
		tr := newTransport(t, Options{Base: sp, Config: cfg(), Estimator: estimates{host: 20}, Recorder: rec})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		callerDeadline, _ := ctx.Deadline()

		_, err := get(t, ctx, &http.Client{Transport: tr}, srv.URL)
		require.ErrorIs(t, err, ErrTimeout)
		require.True(t, sp.deadline.Before(callerDeadline))
		require.Equal(t, []sample{{host, 40}}, rec.samples())
	})
}

func TestCallerCancellationNotRecorded(t *testing.T) {
	t.Run("before the response", func(t *testing.T) {
		started := make(chan struct{})
		srv, host := server(t, func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-r.Context().Done()
		})
		rec := &recorder{}
		tr := newTransport(t, Options{Base: srv.Client().Transport, Config: cfg(), Estimator: estimates{host: 5000}, Recorder: rec})
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-started; cancel() }()

		_, err := get(t, ctx, &http.Client{Transport: tr}, srv.URL)
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrTimeout)
		require.Empty(t, rec.samples())
	})
	t.Run("while reading the body", func(t *testing.T) {
		srv, host := server(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "part")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		})
		rec := &recorder{}
		tr := newTransport(t, Options{Base: srv.Client().Transport, Config: cfg(), Estimator: estimates{host: 5000}, Recorder: rec})
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
		require.Empty(t, rec.samples())
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
		rec := &recorder{}
		tr := newTransport(t, Options{Base: base, Config: cfg(), Recorder: rec,
			Estimator:   estimates{"db-1": 30, "db-2": 3000},
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
			{"db-2", 2, 10 * time.Second}, // ceiling
			{"unknown", 1, 10 * time.Millisecond},
			{"unknown", 4, 80 * time.Millisecond}, // exponential fallback
		}
		for _, tt := range tests {
			req, err := http.NewRequestWithContext(WithAttempt(context.Background(), tt.attempt), http.MethodGet, "http://ignored/", nil)
			require.NoError(t, err)
			req.Header.Set("X-Dest", tt.dest)
			require.Equal(t, tt.want, tr.Timeout(req))
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			require.Equal(t, time.Now().Add(tt.want), deadline, "%s attempt %d", tt.dest, tt.attempt)
			require.NoError(t, resp.Body.Close())
		}
		require.Len(t, rec.samples(), len(tests))
		for i, s := range rec.samples() {
			require.Equal(t, sample{tests[i].dest, 0}, s, "no time passes in the bubble")
		}
	})
}

// TestTimeoutInBubble shows the censoring value exactly: the base blocks until
// its context ends and the bubble's clock jumps to the deadline.
func TestTimeoutInBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			return nil, r.Context().Err()
		})
		rec := &recorder{}
		tr := newTransport(t, Options{Base: base, Config: cfg(), Recorder: rec, Estimator: estimates{"h": 333}})
		req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		start := time.Now()
		_, err = tr.RoundTrip(req)
		require.ErrorIs(t, err, ErrTimeout)
		require.EqualError(t, err, "timeouthttp: adaptive timeout exceeded (dest h, attempt 1, timeout 666ms)")
		require.Equal(t, 666*time.Millisecond, time.Since(start))
		require.Equal(t, []sample{{"h", 666}}, rec.samples())
	})
}

func TestCloseBeforeEOFRecordsLatency(t *testing.T) {
	rec := &recorder{}
	clock := &stepClock{t: time.Unix(1_700_000_000, 0), step: 12 * time.Millisecond}
	tr := newTransport(t, Options{Base: roundTripFunc(okResponse), Recorder: rec, Now: clock.Now})
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
	require.Equal(t, []sample{{"db-1:8080", 24}}, rec.samples(), "recorded when the data last arrived")
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

// TestCallerTimeIsNotLatency: a caller that reads the response (without
// reaching EOF) and then works on it past the timeout before closing the
// body must record the destination's latency, not its own time and not a
// timeout. The timeout is 80 ms (estimate 40 ms, safety 2).
func TestCallerTimeIsNotLatency(t *testing.T) {
	for _, tc := range []struct {
		name   string
		length int64
		read   int // bytes the caller reads before closing
		want   uint64
	}{
		{"content length, read whole", 10, 10, 30},  // headers at 10 ms, two chunks
		{"unknown length, read part", -1, 5, 20},    // the last read at 20 ms
		{"unknown length, headers only", -1, 0, 10}, // nothing read: the headers
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &recorder{}
				tr := newTransport(t, Options{Config: cfg(), Estimator: estimates{"h": 40}, Recorder: rec,
					Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
						time.Sleep(10 * time.Millisecond)
						return &http.Response{StatusCode: http.StatusOK, ContentLength: tc.length, Request: r,
							Body: &dripBody{chunks: []string{"01234", "56789"}, delay: 10 * time.Millisecond}}, nil
					})})
				req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
				require.NoError(t, err)
				resp, err := tr.RoundTrip(req)
				require.NoError(t, err)
				if tc.read > 0 {
					_, err = io.ReadFull(resp.Body, make([]byte, tc.read))
					require.NoError(t, err)
				}
				time.Sleep(time.Second) // the caller's own work, far past the timeout
				require.NoError(t, resp.Body.Close())
				require.Equal(t, []sample{{"h", tc.want}}, rec.samples())
			})
		})
	}
}

// TestBodyStalledPastTheTimeout: a body whose data stops arriving is cut at
// the timeout and recorded at it, even after part of it was read.
func TestBodyStalledPastTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		tr := newTransport(t, Options{Config: cfg(), Estimator: estimates{"h": 40}, Recorder: rec,
			Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: http.StatusOK, ContentLength: -1, Request: r,
					Body: io.NopCloser(io.MultiReader(strings.NewReader("part"), ctxReader{r.Context()}))}, nil
			})})
		req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		got, err := io.ReadAll(resp.Body)
		require.Equal(t, "part", string(got))
		require.ErrorIs(t, err, ErrTimeout)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, []sample{{"h", 80}}, rec.samples())
	})
}

// ctxReader blocks until ctx ends, then fails with its cause, as net/http's
// body does.
type ctxReader struct{ ctx context.Context }

func (r ctxReader) Read([]byte) (int, error) {
	<-r.ctx.Done()
	return 0, context.Cause(r.ctx)
}

func TestOtherFailuresNotRecorded(t *testing.T) {
	boom := errors.New("connection refused, say")
	rec := &recorder{}
	tr := newTransport(t, Options{Base: roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, boom }),
		Recorder: rec})
	req, err := http.NewRequest(http.MethodGet, "http://db-1/", nil)
	require.NoError(t, err)
	_, err = tr.RoundTrip(req)
	require.Same(t, boom, err)

	// A body that breaks mid-read.
	tr = newTransport(t, Options{Recorder: rec, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: io.NopCloser(io.MultiReader(strings.NewReader("x"), iotestErr{boom}))}, nil
	})})
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	require.Same(t, boom, err)
	require.NoError(t, resp.Body.Close())
	require.Empty(t, rec.samples())
}

type iotestErr struct{ err error }

func (e iotestErr) Read([]byte) (int, error) { return 0, e.err }

func TestNilBodyCompletes(t *testing.T) {
	rec := &recorder{}
	tr := newTransport(t, Options{Recorder: rec, Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusNoContent}, nil
	})})
	req, err := http.NewRequest(http.MethodGet, "http://db-1/", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	require.Nil(t, resp.Body)
	require.Len(t, rec.samples(), 1)
}

func TestNew(t *testing.T) {
	tr, err := New(Options{})
	require.NoError(t, err)
	require.Equal(t, timeout.DefaultConfig(), tr.cfg)
	require.Same(t, http.DefaultTransport, tr.base)
	req, err := http.NewRequest(http.MethodGet, "http://db-1/", nil)
	require.NoError(t, err)
	require.Equal(t, 250*time.Millisecond, tr.Timeout(req), "no estimator: exponential fallback")
	require.Equal(t, time.Second, tr.Timeout(req.WithContext(WithAttempt(req.Context(), 3))))

	bad := timeout.DefaultConfig()
	bad.Quantile = 2
	_, err = New(Options{Config: bad})
	require.ErrorIs(t, err, timeout.ErrQuantile)
	require.ErrorContains(t, err, "timeouthttp: timeout: quantile")
}

func TestAttemptFrom(t *testing.T) {
	require.Equal(t, 1, AttemptFrom(context.Background()))
	require.Equal(t, 5, AttemptFrom(WithAttempt(context.Background(), 5)))
	require.Equal(t, 2, AttemptFrom(WithAttempt(WithAttempt(context.Background(), 5), 2)))
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
	base := &idleCloser{roundTripFunc: okResponse}
	c := &http.Client{Transport: newTransport(t, Options{Base: base})}
	c.CloseIdleConnections()
	require.Equal(t, 1, base.closed)
	// A base without the method is fine.
	newTransport(t, Options{Base: roundTripFunc(okResponse)}).CloseIdleConnections()
}
