package dashboard_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/adaptivetimeout/adaptivetimeout/node/dashboard"
)

// The node mounts the dashboard at GET / behind its API routes; the
// dashboard answers 404 for any path it does not own.
func ExampleHandler() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"node":"n0"}`)
	})
	mux.Handle("GET /", dashboard.Handler())

	for _, path := range []string{"/", "/static/app.js", "/v1/status", "/nope"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Println(path, rec.Code, rec.Header().Get("Content-Type"))
	}
	// Output:
	// / 200 text/html; charset=utf-8
	// /static/app.js 200 text/javascript; charset=utf-8
	// /v1/status 200 application/json
	// /nope 404 text/plain; charset=utf-8
}
