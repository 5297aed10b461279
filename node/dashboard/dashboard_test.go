package dashboard

import (
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve sends one request to h and returns the recorded response.
func serve(t testing.TB, h http.Handler, method, target string, hdr http.Header) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

var assetRef = regexp.MustCompile(`(?:src|href)="(static/[^"?]+)\?v=([0-9a-f]{16})"`)

// indexAssets returns the versioned asset URLs the index refers to, keyed by
// path below static/.
func indexAssets(t *testing.T, h http.Handler) map[string]string {
	t.Helper()
	rec := serve(t, h, http.MethodGet, "/", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	refs := make(map[string]string)
	for _, m := range assetRef.FindAllStringSubmatch(rec.Body.String(), -1) {
		refs[strings.TrimPrefix(m[1], "static/")] = "/" + m[1] + "?v=" + m[2]
	}
	return refs
}

func TestHandlerIndex(t *testing.T) {
	h := Handler()
	rec := serve(t, h, http.MethodGet, "/", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "text/html; charset=utf-8", rec.Header().Get("Content-Type"))
	require.Equal(t, "no-cache", rec.Header().Get("Cache-Control"))
	require.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
	require.Contains(t, rec.Header().Get("Content-Security-Policy"), "script-src 'self'")
	require.NotEmpty(t, rec.Header().Get("ETag"))
	body := rec.Body.String()
	require.True(t, strings.HasPrefix(body, "<!doctype html>"), "index starts with a doctype")
	require.NotContains(t, body, "{{", "template fully rendered")

	// The index refers to every served asset except the licence, each with
	// the version that makes it cacheable.
	refs := indexAssets(t, h)
	require.Equal(t, []string{"app.css", "app.js", "favicon.svg", "vendor/uPlot.iife.min.js", "vendor/uPlot.min.css"},
		slices.Sorted(maps.Keys(refs)))
}

func TestHandlerAssets(t *testing.T) {
	h := Handler()
	refs := indexAssets(t, h)
	tests := []struct {
		path        string // below static/
		contentType string
		contains    string
	}{
		{"app.js", "text/javascript; charset=utf-8", "window.__dashboard"},
		{"app.css", "text/css; charset=utf-8", "--c-local"},
		{"favicon.svg", "image/svg+xml", "<svg"},
		{"vendor/uPlot.iife.min.js", "text/javascript; charset=utf-8", "var uPlot="},
		{"vendor/uPlot.min.css", "text/css; charset=utf-8", ".uplot"},
		{"vendor/LICENSE", "text/plain; charset=utf-8", "MIT License"},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			plain := serve(t, h, http.MethodGet, "/static/"+tc.path, nil)
			require.Equal(t, http.StatusOK, plain.Code)
			require.Equal(t, tc.contentType, plain.Header().Get("Content-Type"))
			require.Equal(t, "nosniff", plain.Header().Get("X-Content-Type-Options"))
			require.Contains(t, plain.Body.String(), tc.contains)
			require.Equal(t, "no-cache", plain.Header().Get("Cache-Control"), "unversioned URL revalidates")

			wrong := serve(t, h, http.MethodGet, "/static/"+tc.path+"?v=0000000000000000", nil)
			require.Equal(t, http.StatusOK, wrong.Code)
			require.Equal(t, "no-cache", wrong.Header().Get("Cache-Control"), "stale version revalidates")

			etag := plain.Header().Get("ETag")
			require.NotEmpty(t, etag)
			cached := serve(t, h, http.MethodGet, "/static/"+tc.path, http.Header{"If-None-Match": {etag}})
			require.Equal(t, http.StatusNotModified, cached.Code)
			require.Empty(t, cached.Body.Bytes())

			ref, ok := refs[tc.path]
			if !ok {
				return // the licence is linked without a version
			}
			versioned := serve(t, h, http.MethodGet, ref, nil)
			require.Equal(t, http.StatusOK, versioned.Code)
			require.Equal(t, "public, max-age=31536000, immutable", versioned.Header().Get("Cache-Control"))
			require.Equal(t, plain.Body.String(), versioned.Body.String())
		})
	}
}

func TestHandlerMethodsAndNotFound(t *testing.T) {
	h := Handler()
	tests := []struct {
		method, target string
		code           int
	}{
		{http.MethodHead, "/", http.StatusOK},
		{http.MethodHead, "/static/app.js", http.StatusOK},
		{http.MethodPost, "/", http.StatusMethodNotAllowed},
		{http.MethodDelete, "/static/app.css", http.StatusMethodNotAllowed},
		{http.MethodGet, "/index.html", http.StatusNotFound},
		{http.MethodGet, "/static/", http.StatusNotFound},
		{http.MethodGet, "/static", http.StatusNotFound},
		{http.MethodGet, "/static/index.html", http.StatusNotFound},
		{http.MethodGet, "/static/vendor/README.md", http.StatusNotFound},
		{http.MethodGet, "/static/vendor/", http.StatusNotFound},
		{http.MethodGet, "/static/app.js/", http.StatusNotFound},
		{http.MethodGet, "/static/../dashboard.go", http.StatusNotFound},
		{http.MethodGet, "/static/%2e%2e/dashboard.go", http.StatusNotFound},
		{http.MethodGet, "/app.js", http.StatusNotFound},
		{http.MethodGet, "/v1/status", http.StatusNotFound},
		{http.MethodGet, "/favicon.ico", http.StatusNotFound},
		{http.MethodPost, "/nope", http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			rec := serve(t, h, tc.method, tc.target, nil)
			require.Equal(t, tc.code, rec.Code)
			switch tc.code {
			case http.StatusOK: // HEAD
				require.Empty(t, rec.Body.Bytes())
				require.NotEmpty(t, rec.Header().Get("Content-Length"))
			case http.StatusMethodNotAllowed:
				require.Equal(t, "GET, HEAD", rec.Header().Get("Allow"))
			}
		})
	}
}

// TestHandlerMounted mounts the dashboard the way the node does, behind the
// API's more specific routes, over a real loopback connection.
func TestHandlerMounted(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"node":"n0"}`)
	})
	mux.Handle("GET /", Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()

	get := func(path string) (int, string, string) {
		res, err := srv.Client().Get(srv.URL + path)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, res.Header.Get("Content-Type"), string(body)
	}
	code, ct, body := get("/")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "text/html; charset=utf-8", ct)
	require.Contains(t, body, `<table id="members">`)
	code, ct, body = get("/v1/status")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "application/json", ct)
	require.Equal(t, `{"node":"n0"}`, body)
	code, _, _ = get("/v1/nope")
	require.Equal(t, http.StatusNotFound, code)
}

// TestPageIsSelfContained checks the page's own files for what the CSP
// would block or what needs a network: absolute URLs, inline handlers,
// inline scripts and style attributes.
func TestPageIsSelfContained(t *testing.T) {
	for _, name := range []string{"static/index.html", "static/app.js", "static/app.css"} {
		t.Run(name, func(t *testing.T) {
			b, err := static.ReadFile(name)
			require.NoError(t, err)
			src := string(b)
			require.NotRegexp(t, `(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/`, src, "no absolute URLs")
			require.NotRegexp(t, `(?i)<[^>]*\son[a-z]+\s*=`, src, "no inline event handlers")
			require.NotRegexp(t, `(?i)<script(\s[^>]*)?>[^<]`, src, "no inline scripts")
			require.NotRegexp(t, `(?i)<[^>]*\sstyle\s*=`, src, "no style attributes")
			require.NotContains(t, src, "innerHTML", "text goes in with textContent")
			require.NotContains(t, src, "fetch('/", "API paths are relative to the page")
		})
	}
	b, err := static.ReadFile("static/vendor/uPlot.iife.min.js")
	require.NoError(t, err)
	require.NotRegexp(t, `fetch\(|XMLHttpRequest|importScripts|@import`, string(b), "uPlot loads nothing")
}

// TestVendoredUPlotVersion keeps static/vendor/README.md honest.
func TestVendoredUPlotVersion(t *testing.T) {
	js, err := static.ReadFile("static/vendor/uPlot.iife.min.js")
	require.NoError(t, err)
	m := regexp.MustCompile(`^/\*! \S+ \(v(\d+\.\d+\.\d+)\) \*/`).FindSubmatch(js)
	require.NotNil(t, m, "uPlot header comment with version")
	readme, err := os.ReadFile("static/vendor/README.md")
	require.NoError(t, err)
	require.Contains(t, string(readme), "| version | "+string(m[1])+" |")
}

func FuzzHandler(f *testing.F) {
	for _, p := range []string{"/", "/static/app.js", "/static/vendor/LICENSE", "/static/../x", "//", "/static//app.js", "/%00", ""} {
		f.Add(http.MethodGet, p, "")
	}
	f.Add(http.MethodHead, "/static/app.css", "v=0")
	f.Add("BREW", "/", "v=%zz")
	served := map[string]bool{"/": true}
	for _, p := range []string{"app.js", "app.css", "favicon.svg", "vendor/uPlot.iife.min.js", "vendor/uPlot.min.css", "vendor/LICENSE"} {
		served[AssetPrefix+p] = true
	}
	h := Handler()
	f.Fuzz(func(t *testing.T, method, path, rawQuery string) {
		req := &http.Request{Method: method, URL: &url.URL{Path: path, RawQuery: rawQuery}, Header: http.Header{}}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch {
		case !served[path]:
			require.Equal(t, http.StatusNotFound, rec.Code)
		case method == http.MethodGet || method == http.MethodHead:
			require.Equal(t, http.StatusOK, rec.Code)
		default:
			require.Equal(t, http.StatusMethodNotAllowed, rec.Code)
		}
	})
}
