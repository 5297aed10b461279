package dashboard

import (
	"context"
	"net/http"
	"testing"
)

// Exports for the external tests (package dashboard_test), which may
// import package node: it imports this package, so tests that run a real
// node cannot live in package dashboard itself.

// PageState is what the browser tests read back from a page.
type PageState = pageState

// NewBrowser starts headless Chromium from ATNODE_BROWSER, or skips t.
func NewBrowser(t *testing.T) context.Context { return newBrowser(t) }

// OpenPage opens url in a new tab and polls its state until done holds;
// problems lists the console errors, warnings and exceptions seen.
func OpenPage(t *testing.T, browserCtx context.Context, url string, width, height int64,
	done func(first, last PageState) bool) (first, last PageState, problems func() []string) {
	first, last, p := openPage(t, browserCtx, url, width, height, false, done)
	return first, last, p.list
}

// Drawn reports whether every chart of st has ink on its canvas.
func Drawn(st PageState) bool { return drawn(st) }

// CheckCharts checks the charts of st as every browser test does: series
// in draw order, axis titles, ticks with units, the legend's latest values
// without hover, and the timeout visible where it meets the peers line.
func CheckCharts(t *testing.T, st PageState) { checkCharts(t, st) }

// FakeAPI serves the fake API of scenario (fakeapi_test.go) and the
// dashboard, as the browser test does.
func FakeAPI(scenario string) http.Handler {
	mux := http.NewServeMux()
	(&fakeAPI{scenario: scenario}).register(mux)
	mux.Handle("GET /", Handler())
	return mux
}
