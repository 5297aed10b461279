package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// AssetPrefix is the path under which Handler serves the page's scripts,
// styles and the vendored uPlot files, relative to where the dashboard is
// mounted.
const AssetPrefix = "/static/"

// static holds the page and its assets. The list is explicit so that files
// kept beside them for people (static/vendor/README.md) are not served.
//
//go:embed static/index.html static/app.js static/app.css static/favicon.svg
//go:embed static/vendor/uPlot.iife.min.js static/vendor/uPlot.min.css static/vendor/LICENSE
var static embed.FS

// contentTypes maps the extensions of the embedded files to their media
// types. It is fixed here rather than taken from the mime package, whose
// answers depend on the host's mime.types files.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	"":      "text/plain; charset=utf-8", // LICENSE
}

// contentSecurityPolicy allows only same-origin scripts, styles and API
// calls: the page loads nothing from the network and runs no inline code.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// asset is one file ready to serve: its bytes never change after Handler
// builds it, so its hash is both the ETag and the cache-busting version.
type asset struct {
	name        string // base name, for http.ServeContent
	body        []byte
	contentType string
	version     string // first 16 hex digits of the SHA-256 of body
}

func newAsset(name string, body []byte) *asset {
	sum := sha256.Sum256(body)
	ct, ok := contentTypes[path.Ext(name)]
	if !ok {
		ct = "application/octet-stream"
	}
	return &asset{name: path.Base(name), body: body, contentType: ct, version: hex.EncodeToString(sum[:8])}
}

func (a *asset) etag() string { return `"` + a.version + `"` }

// handler serves the index at "/" and the assets under AssetPrefix.
type handler struct {
	index  *asset
	assets map[string]*asset // keyed by path below AssetPrefix, e.g. "vendor/uPlot.min.css"
}

// Handler returns the dashboard: the page at "/" and its assets under
// AssetPrefix, everything embedded in the binary. It answers GET and HEAD
// (405 otherwise) and 404 for every other path, so a node can mount it with
// mux.Handle("GET /", dashboard.Handler()) behind its more specific API
// routes.
//
// The page reads the node's JSON API from the same origin with paths
// relative to the page (v1/status, v1/members, v1/history?dest=D,
// v1/timeout?dest=A&dest=B), so it
// also works behind a reverse proxy that serves the whole node under a
// prefix. It refreshes every 2 s (a query parameter interval=MS, 250 to
// 60000, changes that) and pauses while its tab is hidden.
//
// The index is sent with Cache-Control no-cache and refers to each asset
// with ?v=<content hash>; an asset requested with its current hash may be
// cached for a year, any other request for it revalidates by ETag. Every
// response carries a Content-Security-Policy that forbids inline scripts
// and all cross-origin loads.
//
// The returned handler is immutable and safe for concurrent use. Handler
// panics only if the embedded files are broken, which the package's tests
// rule out.
func Handler() http.Handler {
	h := &handler{assets: make(map[string]*asset)}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || p == "static/index.html" {
			return err
		}
		body, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, "static/")
		h.assets[rel] = newAsset(rel, body)
		return nil
	})
	if err != nil {
		panic("dashboard: reading embedded assets: " + err.Error())
	}
	src, err := static.ReadFile("static/index.html")
	if err != nil {
		panic("dashboard: reading embedded index: " + err.Error())
	}
	tmpl, err := template.New("index").Option("missingkey=error").Funcs(template.FuncMap{
		// asset turns a path below static/ into the URL the page uses,
		// relative to the page and carrying the content hash.
		"asset": func(rel string) (string, error) {
			a, ok := h.assets[rel]
			if !ok {
				return "", fs.ErrNotExist
			}
			return strings.TrimPrefix(AssetPrefix, "/") + rel + "?v=" + a.version, nil
		},
	}).Parse(string(src))
	if err != nil {
		panic("dashboard: parsing embedded index: " + err.Error())
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, nil); err != nil {
		panic("dashboard: rendering embedded index: " + err.Error())
	}
	h.index = newAsset("index.html", buf.Bytes())
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var (
		a         *asset
		immutable bool
	)
	switch p := r.URL.Path; {
	case p == "/":
		a = h.index
	case strings.HasPrefix(p, AssetPrefix):
		a = h.assets[strings.TrimPrefix(p, AssetPrefix)]
		immutable = a != nil && r.URL.Query().Get("v") == a.version
	}
	if a == nil {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", a.contentType)
	hdr.Set("ETag", a.etag())
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Content-Security-Policy", contentSecurityPolicy)
	hdr.Set("Referrer-Policy", "no-referrer")
	if immutable {
		hdr.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		hdr.Set("Cache-Control", "no-cache")
	}
	// A zero modtime leaves Last-Modified out; ServeContent then answers
	// If-None-Match against the ETag above with 304, and handles HEAD.
	http.ServeContent(w, r, a.name, time.Time{}, bytes.NewReader(a.body))
}
