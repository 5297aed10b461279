package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// Environment of the browser test.
const (
	// envBrowser names the Chromium binary; the test skips without it.
	envBrowser = "ATNODE_BROWSER"
	// envScreenshot, when set, is the PNG path for a full-page screenshot of
	// the busy scenario; other scenarios write beside it with their name.
	envScreenshot = "ATNODE_SCREENSHOT"
)

// pageState is what the test reads back from window.__dashboard and the DOM.
type pageState struct {
	Updates      int          `json:"updates"`
	Errors       int          `json:"errors"`
	LastError    *string      `json:"lastError"`
	Charts       []chartState `json:"charts"`
	Cards        []string     `json:"cards"`
	Notes        []string     `json:"notes"`
	EmptyShown   bool         `json:"emptyShown"`
	MemberRows   [][]string   `json:"memberRows"`
	SelfMember   string       `json:"selfMember"`
	Node         string       `json:"node"`
	Conn         string       `json:"conn"`
	ScrollWidth  int          `json:"scrollWidth"`
	ViewWidth    int          `json:"viewWidth"`
	GossipIn     string       `json:"gossipIn"`
	HTTPAddr     string       `json:"httpAddr"`
	RejectedText string       `json:"rejectedText"`
	CardStats    []cardStats  `json:"cardStats"`
	Failing      []string     `json:"failing"`      // the page's failing set (window.__dashboard.failing)
	Warnings     []string     `json:"warnings"`     // banner items, "kind: message"
	WarningsLink string       `json:"warningsLink"` // the header's link to the banner, "" when hidden
	// WarningsAboveMembers: the banner is shown and comes before the members table.
	WarningsAboveMembers bool `json:"warningsAboveMembers"`
}

// cardStats is what a destination's card shows above its chart.
type cardStats struct {
	Dest         string            `json:"dest"`
	FailingBadge bool              `json:"failingBadge"` // the "failing" badge is rendered
	BadgeIsRed   bool              `json:"badgeIsRed"`   // ...on the --bad colour
	TimeoutLabel string            `json:"timeoutLabel"`
	Values       map[string]string `json:"values"` // stat key (local, fleet, timeout, peers, samples, localSamples) -> text
}

type chartState struct {
	Dest   string  `json:"dest"`
	Points int     `json:"points"`
	Series int     `json:"series"`
	LastT  float64 `json:"lastT"`
	Width  int     `json:"width"`
	Inked  int     `json:"inked"` // canvas pixels with any alpha
	// SeriesLabels in draw order; Legend maps each label to the value its
	// legend shows (the cursor is never over the chart in these tests).
	SeriesLabels []string          `json:"seriesLabels"`
	Legend       map[string]string `json:"legend"`
	// AxisTitles and AxisTicks of the latency (left) and peers (right)
	// axes, as uPlot draws them on the canvas; empty tick labels left out.
	AxisTitles []string   `json:"axisTitles"`
	AxisTicks  [][]string `json:"axisTicks"`
	// Coincident counts the canvas columns where a flat timeout and a flat
	// peers line are within 2 px of each other; TimeoutInk how many of them
	// show the timeout's colour within 2 px of its line.
	Coincident int `json:"coincident"`
	TimeoutInk int `json:"timeoutInk"`
}

// readState reads the page back. Charts are read from their uPlot
// instances (series, axes, the legend) and their canvas pixels: the ink,
// and where the timeout and peers lines coincide, the colour at the
// timeout's position.
const readState = `(() => {
  const d = window.__dashboard;
  if (!d) return null;
  const css = getComputedStyle(document.documentElement);
  const rgb = (name) => {
    const h = css.getPropertyValue(name).trim().replace('#', '');
    return [0, 2, 4].map((i) => parseInt(h.slice(i, i + 2), 16));
  };
  const timeoutRGB = rgb('--c-timeout');
  const charts = Object.keys(d.charts).sort().map((dest) => {
    const u = d.charts[dest];
    const xs = u.data[0] || [];
    const canvas = u.root.querySelector('canvas');
    let inked = 0, coincident = 0, timeoutInk = 0;
    if (canvas && canvas.width > 0 && canvas.height > 0) {
      // Read a copy, so the chart's own canvas is not switched to the slow
      // read-back path (Chromium warns about repeated getImageData).
      const probe = document.createElement('canvas');
      const w = canvas.width, h = canvas.height;
      probe.width = w;
      probe.height = h;
      const ctx = probe.getContext('2d', { willReadFrequently: true });
      ctx.drawImage(canvas, 0, 0);
      const px = ctx.getImageData(0, 0, w, h).data;
      for (let i = 3; i < px.length; i += 4) if (px[i] !== 0) inked++;

      const ti = u.series.findIndex((s) => s.label === 'timeout');
      const pi = u.series.findIndex((s) => s.label === 'peers');
      const to = u.data[ti] || [], pe = u.data[pi] || [];
      const box = u.bbox, tol = 2 * window.devicePixelRatio;
      const isTimeout = (x, y) => {
        if (x < 0 || y < 0 || x >= w || y >= h) return false;
        const i = (y * w + x) * 4;
        return px[i + 3] > 128 && Math.hypot(px[i] - timeoutRGB[0], px[i + 1] - timeoutRGB[1], px[i + 2] - timeoutRGB[2]) < 60;
      };
      // Each column of the plot, where the timeout and the peers lines are
      // flat around it (same value at its point and both neighbours).
      const flat = (col, k) => col[k] != null && col[k - 1] === col[k] && col[k + 1] === col[k];
      for (let x = Math.ceil(box.left); x < box.left + box.width; x++) {
        const k = u.posToIdx((x - box.left) / window.devicePixelRatio);
        if (k < 1 || k + 1 >= xs.length || !flat(to, k) || !flat(pe, k)) continue;
        const yT = Math.round(u.valToPos(to[k], 'ms', true)), yP = u.valToPos(pe[k], 'peers', true);
        if (Math.abs(yT - yP) > tol) continue;
        coincident++;
        for (let y = yT - tol; y <= yT + tol; y++) if (isTimeout(x, y)) { timeoutInk++; break; }
      }
    }
    const legend = {};
    u.root.querySelectorAll('.u-legend .u-series').forEach((tr) => {
      const label = tr.querySelector('.u-label'), value = tr.querySelector('.u-value');
      if (label && value) legend[label.textContent] = value.textContent;
    });
    const yAxes = u.axes.filter((a) => a.scale !== 'x');
    return { dest, points: xs.length, series: u.series.length, lastT: xs.length ? xs[xs.length - 1] : 0,
             width: canvas ? canvas.width : 0, inked, coincident, timeoutInk,
             seriesLabels: u.series.map((s) => s.label), legend,
             axisTitles: yAxes.map((a) => a.label || ''),
             axisTicks: yAxes.map((a) => (a._values || []).filter((v) => v != null && v !== '').map(String)) };
  });
  const rows = Array.from(document.querySelectorAll('#members tbody tr'));
  const banner = document.getElementById('warnings');
  const link = document.getElementById('warn-link');
  const shown = (e) => !!e && !e.hidden && e.getClientRects().length > 0;
  return {
    updates: d.updates, errors: d.errors, lastError: d.lastError, charts,
    cards: Array.from(document.querySelectorAll('#dests .card')).map((c) => c.dataset.dest),
    notes: Array.from(document.querySelectorAll('#dests .card .note')).map((n) => n.textContent),
    emptyShown: !document.getElementById('dests-empty').hidden,
    memberRows: rows.map((tr) => Array.from(tr.cells).map((c) => c.textContent)),
    selfMember: (document.querySelector('#members tr.self') || {dataset: {}}).dataset.member || '',
    node: document.getElementById('node-name').textContent,
    conn: document.getElementById('conn').dataset.state,
    scrollWidth: document.documentElement.scrollWidth,
    viewWidth: window.innerWidth,
    gossipIn: document.getElementById('f-gossip-in').textContent,
    httpAddr: document.getElementById('f-http-addr').textContent,
    rejectedText: document.getElementById('f-rejected').textContent,
    cardStats: Array.from(document.querySelectorAll('#dests .card')).map((c) => {
      const values = {};
      c.querySelectorAll('.stats > div').forEach((s) => { values[s.className.replace(/^s-/, '')] = s.querySelector('dd').textContent; });
      const badge = c.querySelector('.badge-failing');
      const bad = rgb('--bad');
      return { dest: c.dataset.dest, failingBadge: shown(badge),
               badgeIsRed: !!badge && getComputedStyle(badge).backgroundColor === 'rgb(' + bad.join(', ') + ')',
               timeoutLabel: c.querySelector('.s-timeout dt').textContent, values };
    }),
    failing: d.failing,
    warnings: shown(banner) ? Array.from(banner.querySelectorAll('li')).map((li) => li.dataset.kind + ': ' + li.querySelector('.w-msg').textContent) : [],
    warningsLink: shown(link) ? link.textContent : '',
    warningsAboveMembers: shown(banner) &&
      !!(banner.compareDocumentPosition(document.getElementById('members')) & Node.DOCUMENT_POSITION_FOLLOWING),
  };
})()`

// consoleLog collects everything the page reports as a problem.
type consoleLog struct {
	mu       sync.Mutex
	problems []string
}

func (c *consoleLog) add(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

func (c *consoleLog) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.problems...)
}

func (c *consoleLog) listen(ev any) {
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		switch ev.Type {
		case runtime.ConsoleAPICalledTypeError, runtime.ConsoleAPICalledTypeWarning, runtime.ConsoleAPICalledTypeAssert:
			args := make([]string, 0, len(ev.Args))
			for _, a := range ev.Args {
				if a.Value != nil {
					args = append(args, string(a.Value))
				} else {
					args = append(args, a.Description)
				}
			}
			c.add("console.%s: %s", ev.Type, strings.Join(args, " "))
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg := d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		c.add("exception at %s:%d: %s", d.URL, d.LineNumber, msg)
	case *log.EventEntryAdded:
		// Failed loads (404s), CSP violations and the like land here.
		if e := ev.Entry; e.Level == log.EntryLevelError || e.Level == log.EntryLevelWarning {
			c.add("log %s %s: %s %s", e.Level, e.Source, e.Text, e.URL)
		}
	}
}

// newBrowser starts headless Chromium from ATNODE_BROWSER, or skips.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	exe := os.Getenv(envBrowser)
	if exe == "" {
		t.Skipf("browser test skipped: set %s to a Chromium binary (e.g. %s=/usr/bin/chromium after apt-get install chromium)", envBrowser, envBrowser)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), // small /dev/shm in containers
		chromedp.WindowSize(1280, 900),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	browserCtx, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		cancelBrowser() // closes the browser...
		cancelAlloc()   // ...and waits for its process to exit
	})
	start := time.Now()
	require.NoError(t, chromedp.Do(browserCtx), "start %s", exe)
	t.Logf("browser started in %v", time.Since(start).Round(time.Millisecond))
	return browserCtx
}

func TestBrowserDashboard(t *testing.T) {
	browserCtx := newBrowser(t)
	shot := os.Getenv(envScreenshot)

	tests := []struct {
		scenario      string
		width, height int64
		dark          bool // switch to prefers-color-scheme: dark once the page has data
		check         func(t *testing.T, first, last pageState)
		// failing, if set, is the error the page must report for a
		// request the fake API fails; the browser's log then has a line
		// per failed request and nothing else.
		failing string
	}{
		{scenario: "busy", width: 1280, height: 900, check: checkBusy},
		{scenario: "busy", width: 390, height: 844, check: checkBusy}, // phone
		{scenario: "busy", width: 1024, height: 768, dark: true, check: checkBusy},
		{scenario: "quiet", width: 1280, height: 900, check: func(t *testing.T, _, last pageState) {
			require.Equal(t, []string{"idle", "no-data"}, last.Cards)
			require.Len(t, last.Charts, 2)
			require.Equal(t, 0, last.Charts[0].Points, "idle has no points")
			require.Equal(t, []string{"No history kept here: a node keeps one for at most 100 destinations, those it saw first (a new one gets its first point within a second).", ""},
				last.Notes, "idle: tracked false, said so")
			require.Positive(t, last.Charts[1].Points, "no-data has points with null quantiles")
			require.False(t, last.EmptyShown)
			require.Len(t, last.MemberRows, 1)
			require.Equal(t, fakeSelf.Member, last.SelfMember)
			require.Equal(t, "none", last.RejectedText)
			require.Equal(t, "timeout: fallback", last.CardStats[1].TimeoutLabel, "no-data: source none, the fallback decides")
		}},
		{scenario: "broken", width: 1280, height: 900, failing: "v1/history?dest=broken: 500 history store unavailable",
			check: func(t *testing.T, _, last pageState) {
				require.Equal(t, []string{"broken", "db-1"}, last.Cards)
				require.Equal(t, []string{"history unavailable: v1/history?dest=broken: 500 history store unavailable", ""}, last.Notes)
				require.Len(t, last.Charts, 1, "no chart without a history")
				require.Equal(t, "db-1", last.Charts[0].Dest)
				require.Positive(t, last.Charts[0].Points)
			}},
		{scenario: "empty", width: 1280, height: 900, check: func(t *testing.T, _, last pageState) {
			require.Empty(t, last.Cards)
			require.Empty(t, last.Charts)
			require.True(t, last.EmptyShown, "empty-state message shown")
			require.Equal(t, [][]string{{"No members known yet."}}, last.MemberRows)
		}},
		{scenario: "troubled", width: 1280, height: 900, check: checkTroubled},
		{scenario: "troubled", width: 390, height: 844, check: checkTroubled},
	}
	for _, tc := range tests {
		name := fmt.Sprintf("%s/%dx%d", tc.scenario, tc.width, tc.height)
		if tc.dark {
			name += "/dark"
		}
		t.Run(name, func(t *testing.T) {
			api := &fakeAPI{scenario: tc.scenario}
			mux := http.NewServeMux()
			api.register(mux)
			mux.Handle("GET /", Handler())
			srv := httptest.NewServer(mux) // listens on 127.0.0.1
			t.Cleanup(srv.Close)           // after the tab closes (cleanups run last first)

			start := time.Now()
			first, last, problems := openPage(t, browserCtx, srv.URL+"/?interval=300", tc.width, tc.height, tc.dark, func(first, last pageState) bool {
				return last.Updates >= first.Updates+3 && drawn(last)
			})
			t.Logf("%s: %d refreshes in %v", name, last.Updates, time.Since(start).Round(time.Millisecond))

			require.Equal(t, "live", last.Conn)
			problemList := problems.list()
			if tc.failing == "" {
				require.Zero(t, last.Errors, "page recorded request errors: %v", last.LastError)
				require.Nil(t, last.LastError)
			} else {
				require.GreaterOrEqual(t, last.Errors, last.Updates, "one failure per refresh")
				require.NotNil(t, last.LastError)
				require.Equal(t, tc.failing, *last.LastError)
				for _, p := range problemList {
					require.Contains(t, p, "status of 500", "only the failed requests are logged")
				}
				problemList = nil
			}
			require.Equal(t, "n0", last.Node)
			require.LessOrEqual(t, last.ScrollWidth, last.ViewWidth, "no horizontal page scroll")
			checkCharts(t, last)
			if tc.scenario == "busy" && !tc.dark {
				checkHover(t, problems.ctx)
			}
			if tc.scenario != "troubled" { // only it serves failing destinations and warnings
				for _, c := range last.CardStats {
					require.False(t, c.FailingBadge, "%s: no failing badge", c.Dest)
					require.NotContains(t, c.TimeoutLabel, "failing", c.Dest)
				}
				require.Empty(t, last.Failing)
				require.Empty(t, last.Warnings, "no warnings banner")
				require.Empty(t, last.WarningsLink, "no warnings link")
			}
			tc.check(t, first, last)

			if shot != "" {
				path := shot
				if tc.scenario != "busy" || tc.width != 1280 {
					path = strings.TrimSuffix(shot, filepath.Ext(shot)) + "-" + strings.ReplaceAll(name, "/", "-") + ".png"
				}
				png, err := chromedp.Run(problems.ctx, chromedp.FullScreenshot(100))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(path, png, 0o644))
				t.Logf("screenshot %s", path)
			}
			require.Empty(t, problemList, "console errors, warnings or exceptions")
		})
	}
}

// page is a dashboard tab opened by openPage: its context (for more
// commands) and the problems the page reported.
type page struct {
	ctx context.Context
	consoleLog
}

// openPage opens url in a new tab of browserCtx at width×height, switches
// to the dark colour scheme after the first complete render when dark is
// set, and polls the page state until done(first, last) holds, or fails
// the test after 30 s. first is the state after the first refresh.
func openPage(t *testing.T, browserCtx context.Context, url string, width, height int64, dark bool,
	done func(first, last pageState) bool) (first, last pageState, p *page) {
	t.Helper()
	tabCtx, cancelTab := chromedp.NewContext(browserCtx)
	t.Cleanup(cancelTab)
	ctx, cancel := context.WithTimeout(tabCtx, 30*time.Second)
	t.Cleanup(cancel)
	p = &page{ctx: ctx}
	// Listen delivers events in order on the tab's reader, so every
	// problem the page reported before a command returns has been
	// recorded by then. chromedp enables the Runtime and Log domains.
	require.NoError(t, chromedp.Listen(ctx, p.listen))

	require.NoError(t, chromedp.Do(ctx,
		chromedp.EmulateViewport(width, height),
		chromedp.Navigate(url),
	))

	// Poll until done, or the deadline passes.
	haveFirst := false
	for {
		st, err := chromedp.Run(ctx, chromedp.Evaluate[*pageState](readState))
		require.NoError(t, err)
		if st != nil && st.Updates >= 1 && !haveFirst {
			first, haveFirst = *st, true
			if dark { // the page rebuilds its charts in the new colours
				_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
					Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}},
				})
				require.NoError(t, err)
			}
		}
		if st != nil {
			last = *st
		}
		if haveFirst && done(first, last) {
			return first, last, p
		}
		select {
		case <-ctx.Done():
			pl := p.list()
			t.Fatalf("page did not settle: %v; last state %+v; %d console problems, first %q", ctx.Err(), last, len(pl), pl[:min(3, len(pl))])
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// drawn reports whether every chart has a canvas with ink on it. A card
// gets its chart in the same refresh that brings its first history, so the
// scenario checks say which cards must have one.
func drawn(st pageState) bool {
	for _, c := range st.Charts {
		if c.Width == 0 || c.Inked == 0 {
			return false
		}
	}
	return true
}

// Axis titles and tick labels, and the legend without hover.
var (
	wantSeries     = []string{"time", "local P99.99", "fleet P99.99", "peers", "timeout"}
	wantAxisTitles = []string{"latency (log scale)", "peers"}
	msTick         = regexp.MustCompile(`^[0-9]+(\.[0-9]+)? (ms|s)$`)
	peersTick      = regexp.MustCompile(`^[0-9]+$`)
)

// checkCharts holds for every scenario: each chart draws the timeout after
// the peers line, titles both y axes, labels every latency tick with its
// unit, and its legend shows the latest values (the card's) without hover.
func checkCharts(t *testing.T, st pageState) {
	t.Helper()
	stats := make(map[string]cardStats)
	for _, c := range st.CardStats {
		stats[c.Dest] = c
	}
	for _, c := range st.Charts {
		require.Equal(t, wantSeries, c.SeriesLabels, "%s: series in draw order, the timeout last", c.Dest)
		require.Equal(t, wantAxisTitles, c.AxisTitles, "%s: y-axis titles", c.Dest)
		if c.Points == 0 {
			continue // no data, no ticks, nothing in the legend
		}
		require.Len(t, c.AxisTicks, 2, c.Dest)
		require.GreaterOrEqual(t, len(c.AxisTicks[0]), 2, "%s: latency ticks %q", c.Dest, c.AxisTicks[0])
		for _, v := range c.AxisTicks[0] {
			require.Regexp(t, msTick, v, "%s: every latency tick has its unit", c.Dest)
		}
		require.NotEmpty(t, c.AxisTicks[1], "%s: peers ticks", c.Dest)
		for _, v := range c.AxisTicks[1] {
			require.Regexp(t, peersTick, v, "%s: peers ticks are whole", c.Dest)
		}
		card := stats[c.Dest]
		require.Len(t, c.Legend, len(wantSeries), "%s: legend %v", c.Dest, c.Legend)
		require.Regexp(t, `^\d\d:\d\d:\d\d \(latest\)$`, c.Legend["time"], c.Dest)
		for label, key := range map[string]string{"local P99.99": "local", "fleet P99.99": "fleet", "timeout": "timeout", "peers": "peers"} {
			require.Equal(t, card.Values[key], c.Legend[label], "%s: legend %s shows the latest value without hover", c.Dest, label)
		}
		for label, v := range c.Legend {
			require.NotEqual(t, "--", v, "%s: legend %s", c.Dest, label)
		}
		if c.Coincident > 0 {
			require.GreaterOrEqual(t, float64(c.TimeoutInk), 0.4*float64(c.Coincident),
				"%s: the dashed timeout line shows over the peers line where they coincide (%d of %d columns)", c.Dest, c.TimeoutInk, c.Coincident)
		}
	}
}

// checkHover moves the mouse over the first chart: every legend (the
// cursors are synced) shows the values under it, not the latest; moved
// away, the legends show the latest values again.
func checkHover(t *testing.T, ctx context.Context) {
	t.Helper()
	box, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`(() => {
	  const r = document.querySelector('#dests .card .u-over');
	  r.scrollIntoView({block: 'center'});
	  const b = r.getBoundingClientRect();
	  return [b.left + b.width / 4, b.top + b.height / 2];
	})()`))
	require.NoError(t, err)
	legendTimes := func() []string {
		st, err := chromedp.Run(ctx, chromedp.Evaluate[*pageState](readState))
		require.NoError(t, err)
		var out []string
		for _, c := range st.Charts {
			out = append(out, c.Legend["time"])
		}
		return out
	}
	until := func(what string, ok func([]string) bool) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			times := legendTimes()
			if ok(times) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: legend times %q", what, times)
			}
			time.Sleep(50 * time.Millisecond) // polling, bounded by the deadline
		}
	}
	allLatest := func(latest bool) func([]string) bool {
		return func(times []string) bool {
			for _, v := range times {
				if strings.HasSuffix(v, "(latest)") != latest || v == "—" {
					return false
				}
			}
			return len(times) > 0
		}
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, box[0], box[1])))
	until("cursor over a chart", allLatest(false))
	require.NoError(t, chromedp.Do(ctx, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, 1, 1)))
	until("cursor off the charts", allLatest(true))
}

func checkTroubled(t *testing.T, _, last pageState) {
	require.Equal(t, []string{"db-1", "ledger-eu"}, last.Cards)
	require.Equal(t, []string{"ledger-eu"}, last.Failing)
	require.Len(t, last.CardStats, 2)
	db, ledger := last.CardStats[0], last.CardStats[1]
	require.False(t, db.FailingBadge, "db-1 is healthy")
	require.Equal(t, "timeout", db.TimeoutLabel)
	require.True(t, ledger.FailingBadge, "ledger-eu shows its failing badge")
	require.True(t, ledger.BadgeIsRed, "the failing badge is red")
	require.Equal(t, "timeout: fallback (failing)", ledger.TimeoutLabel)
	require.Equal(t, "250 ms", ledger.Values["timeout"], "the backoff floor")
	require.Equal(t, []string{
		"config_mismatch: " + fakeWarnings[0]["message"],
		"clock_skew: " + fakeWarnings[1]["message"],
	}, last.Warnings, "the banner lists /v1/status's warnings in order")
	require.True(t, last.WarningsAboveMembers, "the banner sits above the members table")
	require.Equal(t, "2 warnings", last.WarningsLink)
	require.Len(t, last.MemberRows, 3)
}

func checkBusy(t *testing.T, first, last pageState) {
	dests := []string{"cache eu/west#1", "db-1", "db-2", "search"}
	require.Equal(t, dests, last.Cards, "one card per destination, sorted")
	require.Len(t, last.Charts, len(dests))
	for i, c := range last.Charts {
		require.Equal(t, dests[i], c.Dest)
		require.Equal(t, 180, c.Points, "%s: three minutes at one point a second", c.Dest)
		require.Equal(t, 5, c.Series, "%s: time, local, fleet, peers, timeout", c.Dest)
		require.Greater(t, c.Inked, 1000, "%s: canvas has lines on it", c.Dest)
		require.Greater(t, c.LastT, first.Charts[i].LastT, "%s: live refresh moved the chart", c.Dest)
	}
	names := make([]string, 0, len(last.MemberRows))
	for _, row := range last.MemberRows {
		require.Len(t, row, 5, "name, member, address, state, boot id")
		names = append(names, row[0])
		require.Contains(t, []string{"alive", "suspect", "dead", "left"}, row[3])
		require.Regexp(t, `^[0-9a-f]{16}$`, row[4], "boot id")
		require.Equal(t, row[0]+"-"+row[4][8:], row[1], "member name: name and the boot id's low 32 bits")
	}
	require.Equal(t, []string{"n0", "n1", "n2", "n3", "n4", "n5"}, names)
	require.Equal(t, []string{"n5", "127.0.0.1:7951", "dead"}, []string{last.MemberRows[5][0], last.MemberRows[5][2], last.MemberRows[5][3]})
	require.Equal(t, fakeSelf.Member, last.SelfMember)
	require.Contains(t, last.GossipIn, "batches")
	require.Contains(t, last.RejectedText, "stale epoch")

	// cache eu/west#1's timeout sits at the 250 ms floor, and its 4 peers
	// on the peers scale (0 to 5) land on the same pixels: the pixels
	// there show the timeout.
	cache := last.Charts[0]
	t.Logf("%s: the timeout shows on %d of the %d columns where it meets the peers line", cache.Dest, cache.TimeoutInk, cache.Coincident)
	require.Greater(t, cache.Coincident, 100, "%s: timeout and peers lines coincide over %d columns", cache.Dest, cache.Coincident)
	require.GreaterOrEqual(t, float64(cache.TimeoutInk), 0.4*float64(cache.Coincident), cache.Dest)

	// Samples: the fleet's and this node's, each under its own label.
	db1, db2, search := last.CardStats[1], last.CardStats[2], last.CardStats[3]
	require.Equal(t, []string{"120,000", "24,000"}, []string{db1.Values["samples"], db1.Values["localSamples"]}, "db-1: 5 peers, one of them local")
	require.Equal(t, []string{"24,000", "0"}, []string{search.Values["samples"], search.Values["localSamples"]}, "search: not called by this node")

	// What set each timeout: the estimate, or this node's own quantile
	// above the fleet's (db-2: local 400 ms against the fleet's 210).
	require.Equal(t, "timeout", db1.TimeoutLabel)
	require.Equal(t, "timeout: local guard", db2.TimeoutLabel)
}
