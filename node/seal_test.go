package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// TestSealCutToFleetCaps: a node's own sealed sub-window is cut, first
// destinations by name kept, to what the fleet accepts from one member per
// epoch, by destinations and by buckets; otherwise the whole batch would be
// refused by this node's fleet and by every peer's.
func TestSealCutToFleetCaps(t *testing.T) {
	clk := &testClock{now: epochStart(e0)}
	n := newAlone(t, clk, nil)
	for i := range 6 {
		dest := fmt.Sprintf("d%d", i)
		for _, ms := range []time.Duration{1, 20, 300} { // 3 distinct buckets per destination
			n.Record(dest, ms*time.Millisecond)
		}
	}
	for _, tc := range []struct {
		name            string
		maxDests        int
		maxEpochBuckets int
		want            []string
	}{
		{"under both caps", 10, 18, []string{"d0", "d1", "d2", "d3", "d4", "d5"}},
		{"destination cap", 4, 100, []string{"d0", "d1", "d2", "d3"}},
		{"bucket cap", 10, 8, []string{"d0", "d1"}}, // 3 + 3 fit in 8, a third would make 9
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := n.fleet.Config()
			fc.MaxDestinations, fc.MaxEpochBuckets = tc.maxDests, tc.maxEpochBuckets
			f, err := tracker.NewFleet(fc, n.local)
			require.NoError(t, err)
			n.fleet = f
			got := n.seal(e0, epochStart(e0+1))
			var names []string
			for _, dc := range got {
				require.Len(t, dc.Buckets, 3)
				names = append(names, dc.Dest)
			}
			require.Equal(t, tc.want, names)
			b := tracker.Batch{Key: tracker.BatchKey{Origin: "n0", Boot: 1, Epoch: e0}, Layout: n.tcfg.Layout(), Dests: got}
			require.Equal(t, tracker.InsertNew, f.Insert(b, epochStart(e0+1)), "the cut batch is accepted")
		})
	}
}
