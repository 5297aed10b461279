package node

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDestinationsDroppedCounted: every destination dropped is counted in
// atnode_destinations_dropped_total by where it was cut: by the tracker's
// -max-destinations, and by the fleet's per-member caps when sealing.
func TestDestinationsDroppedCounted(t *testing.T) {
	metric := func(t *testing.T, n *Node, where string) string {
		code, body := do(t, n.Handler(), "GET", "/metrics", "")
		require.Equal(t, 200, code)
		line := regexp.MustCompile(`(?m)^atnode_destinations_dropped_total\{where="` + where + `"\} \d+$`).Find(body)
		require.NotNil(t, line, "no series for %s", where)
		return string(line)
	}
	t.Run("tracker", func(t *testing.T) {
		clk := &testClock{now: epochStart(e0).Add(100 * time.Millisecond)}
		n := newAlone(t, clk, func(c *Config) { c.Tracker.MaxDestinations = 2 })
		for i := range 5 {
			n.Record(fmt.Sprintf("d%d", i), time.Millisecond)
		}
		require.Equal(t, `atnode_destinations_dropped_total{where="tracker"} 3`, metric(t, n, "tracker"))
	})
	t.Run("seal", func(t *testing.T) {
		clk := &testClock{now: epochStart(e0).Add(100 * time.Millisecond)}
		n := newAlone(t, clk, func(c *Config) { c.Fleet.MaxDestinations = 2 })
		for i := range 5 {
			for range i + 1 { // d4 has the most samples, d0 the fewest
				n.Record(fmt.Sprintf("d%d", i), time.Millisecond)
			}
		}
		clk.Set(epochStart(e0 + 1).Add(100 * time.Millisecond))
		n.step(clk.Now())
		require.Equal(t, `atnode_destinations_dropped_total{where="seal"} 3`, metric(t, n, "seal"))
		require.Equal(t, `atnode_destinations_dropped_total{where="tracker"} 0`, metric(t, n, "tracker"))
	})
}

// TestJunkDestinationsKeepRealData is the attack of a client posting 9000
// junk destination names (sorting before every real name, fresh ones
// every 2 s) beside a real destination recorded at 1000 samples/s: the
// real destination keeps at least 90 % of its fleet samples (the local
// eviction and the seal's cap both keep the destinations with the most
// samples), and what was dropped is counted. The control is the same run
// without junk.
func TestJunkDestinationsKeepRealData(t *testing.T) {
	const steps = 4 // 2 s apart: 8 s, a sealed sub-window
	run := func(t *testing.T, junk bool) (fleet uint64, n *Node) {
		clk := &testClock{now: epochStart(e0).Add(100 * time.Millisecond)}
		n = newAlone(t, clk, nil)
		var body strings.Builder
		for step := range steps {
			for range 2000 {
				n.Record("real", 20*time.Millisecond)
			}
			if junk {
				body.Reset()
				body.WriteString(`{"samples":[`)
				for i := range 9000 {
					if i > 0 {
						body.WriteByte(',')
					}
					fmt.Fprintf(&body, `{"dest":"!junk-%d-%d","latency_ms":1}`, step, i)
				}
				body.WriteString(`]}`)
				code, resp := do(t, n.Handler(), "POST", "/v1/record", body.String())
				require.Equal(t, 200, code, "%s", resp)
			}
			clk.Set(clk.Now().Add(2 * time.Second))
			n.step(clk.Now())
		}
		e, err := n.Estimate("real", 0.5)
		require.NoError(t, err)
		return e.Samples, n
	}
	want, _ := run(t, false)
	require.Positive(t, want)
	got, n := run(t, true)
	t.Logf("real's fleet samples: %d with junk, %d without", got, want)
	require.GreaterOrEqual(t, float64(got), 0.9*float64(want), "the real destination keeps its fleet samples")
	_, metrics := do(t, n.Handler(), "GET", "/metrics", "")
	for _, where := range []string{"tracker", "seal"} {
		m := regexp.MustCompile(`(?m)^atnode_destinations_dropped_total\{where="` + where + `"\} (\d+)$`).FindSubmatch(metrics)
		require.NotNil(t, m, "no series for %s", where)
		require.NotEqual(t, "0", string(m[1]), "what %s dropped is counted", where)
		t.Logf("dropped by %s: %s", where, m[1])
	}
}
