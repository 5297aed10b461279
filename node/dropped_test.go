package node

import (
	"fmt"
	"regexp"
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
