package timeouthttp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/internal/policytest"
)

// stub is an in-memory http.RoundTripper with a two-byte body, so the
// benchmark measures the wrapper, not the network.
type stub struct{}

func (stub) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, ContentLength: 2, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
}

// fixed is the naive alternative: a fixed context.WithTimeout per request,
// cancelled when the body is closed (cancelling on return would truncate
// bodies), measuring and learning nothing.
type fixed struct {
	base http.RoundTripper
	d    time.Duration
}

func (f fixed) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(r.Context(), f.d)
	resp, err := f.base.RoundTrip(r.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

func roundTrips(b *testing.B, rt http.RoundTripper, url string) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := rt.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
}

// BenchmarkRoundTrip compares the bare transport, the naive fixed timeout
// and timeouthttp (over a Policy that costs nothing, so the adapter's own
// cost shows), in memory (the wrapper's whole cost) and over loopback HTTP.
func BenchmarkRoundTrip(b *testing.B) {
	wrap := func(base http.RoundTripper) http.RoundTripper {
		tr, err := New(Options{Base: base, Policy: policytest.Fixed(time.Second)})
		if err != nil {
			b.Fatal(err)
		}
		return tr
	}
	b.Run("stub/bare", func(b *testing.B) { roundTrips(b, stub{}, "http://db-1/") })
	b.Run("stub/fixed", func(b *testing.B) { roundTrips(b, fixed{stub{}, time.Second}, "http://db-1/") })
	b.Run("stub/timeouthttp", func(b *testing.B) { roundTrips(b, wrap(stub{}), "http://db-1/") })

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	base := srv.Client().Transport
	b.Run("loopback/bare", func(b *testing.B) { roundTrips(b, base, srv.URL) })
	b.Run("loopback/fixed", func(b *testing.B) { roundTrips(b, fixed{base, time.Second}, srv.URL) })
	b.Run("loopback/timeouthttp", func(b *testing.B) { roundTrips(b, wrap(base), srv.URL) })
}
