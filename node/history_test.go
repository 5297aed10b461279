package node

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestScrapeReadsOneState: a scrape that is the first call after an epoch
// boundary seals the finished epoch before it reads anything, so two
// destinations with the same data read the same in it (the first one was
// read before the seal and the others after).
func TestScrapeReadsOneState(t *testing.T) {
	clk := &testClock{now: epochStart(e0).Add(100 * time.Millisecond)}
	n := newAlone(t, clk, nil)
	n.step(clk.Now())
	post(t, n, samplesBody("a", 10, 10, 10, 10, 10))
	post(t, n, samplesBody("b", 10, 10, 10, 10, 10))
	clk.Set(epochStart(e0).Add(1100 * time.Millisecond))
	n.step(clk.Now())                                       // both tracked now
	clk.Set(epochStart(e0 + 1).Add(100 * time.Millisecond)) // the boundary passed, nothing polled since
	code, body := do(t, n.Handler(), http.MethodGet, "/metrics", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), "atnode_destination_samples{dest=\"a\"} 5\n")
	require.Contains(t, string(body), "atnode_destination_samples{dest=\"b\"} 5\n")
}

// TestHistoryAfterClockStepBack: a clock stepped back an hour goes on
// sampling the history, one point a second, and new destinations get a
// ring; it used to sample nothing until the clock was past the last
// sampled second again.
func TestHistoryAfterClockStepBack(t *testing.T) {
	t0 := epochStart(e0).Add(100 * time.Millisecond)
	clk := &testClock{now: t0}
	n := newAlone(t, clk, nil)
	post(t, n, samplesBody("a", 10, 10, 10))
	n.step(clk.Now())
	for i := 1; i <= 10; i++ {
		clk.Set(t0.Add(-time.Hour + time.Duration(i)*time.Second))
		post(t, n, samplesBody("b", 10))
		n.step(clk.Now())
		n.step(clk.Now()) // still one point per second
	}
	pa, _ := n.hist.get("a")
	require.Len(t, pa, 11)
	_, tracked := n.hist.get("b")
	require.True(t, tracked)
}
