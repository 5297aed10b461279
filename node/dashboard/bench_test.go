package dashboard

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"testing"
)

// The handler keeps each asset's bytes, type and hash in memory and answers
// from a map; the naive alternative is the standard file server over the
// embedded tree, which opens, stats and sniffs on every request (and sets no
// cache policy or CSP).
func benchmarkServe(b *testing.B, h http.Handler, target string) {
	req := httptest.NewRequest(http.MethodGet, target, nil)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("%s: %d", target, rec.Code)
		}
	}
}

func naiveHandler(b *testing.B) http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		b.Fatal(err)
	}
	return http.StripPrefix("/static/", http.FileServerFS(sub))
}

func BenchmarkServeUPlot(b *testing.B) {
	benchmarkServe(b, Handler(), "/static/vendor/uPlot.iife.min.js")
}

func BenchmarkServeUPlotNaive(b *testing.B) {
	benchmarkServe(b, naiveHandler(b), "/static/vendor/uPlot.iife.min.js")
}

func BenchmarkServeIndex(b *testing.B) {
	benchmarkServe(b, Handler(), "/")
}
