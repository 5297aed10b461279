package timeouthttp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// stub is an in-memory http.RoundTripper with an empty body, so the
// benchmark measures the wrapper, not the network.
type stub struct{}

func (stub) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
}

type constEst uint64

func (v constEst) QuantileMillis(string, float64, time.Time) (uint64, bool) { return uint64(v), true }

type nopRec struct{}

func (nopRec) RecordMillis(string, uint64, time.Time) {}

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

// BenchmarkRoundTrip compares the bare transport with the same transport
// wrapped, in memory (the wrapper's whole cost) and over loopback HTTP.
func BenchmarkRoundTrip(b *testing.B) {
	wrap := func(base http.RoundTripper) http.RoundTripper {
		tr, err := New(Options{Base: base, Estimator: constEst(400), Recorder: nopRec{}})
		if err != nil {
			b.Fatal(err)
		}
		return tr
	}
	b.Run("stub/bare", func(b *testing.B) { roundTrips(b, stub{}, "http://db-1/") })
	b.Run("stub/timeouthttp", func(b *testing.B) { roundTrips(b, wrap(stub{}), "http://db-1/") })

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	base := srv.Client().Transport
	b.Run("loopback/bare", func(b *testing.B) { roundTrips(b, base, srv.URL) })
	b.Run("loopback/timeouthttp", func(b *testing.B) { roundTrips(b, wrap(base), srv.URL) })
}
