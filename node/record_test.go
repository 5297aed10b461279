package node

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRecordChecksNewNamesOnly: a name the local tracker does not hold is
// checked on every record, so an invalid one is counted as rejected each
// time and never recorded; a valid one is recorded the first time and from
// then on without the check (the tracker holds only checked names), also
// after MaxDestinations evicted it.
func TestRecordChecksNewNamesOnly(t *testing.T) {
	clk := &testClock{now: epochStart(e0)}
	n := newAlone(t, clk, func(c *Config) { c.Tracker.MaxDestinations = 1 })
	bad := []string{"", strings.Repeat("x", maxDestLen+1), "a\xffb"}
	for round := range 2 {
		for _, d := range bad {
			n.Record(d, time.Millisecond)
			n.RecordSince(d, clk.Now())
		}
		require.Equal(t, float64(2*len(bad)*(round+1)), counterValue(t, n.met.rejected))
		require.Zero(t, n.local.Recorded())
	}
	for _, d := range []string{"db", "db", "cache", "db"} { // cache evicts db, then db evicts cache
		n.Record(d, 12*time.Millisecond)
	}
	require.Equal(t, uint64(4), n.local.Recorded())
	require.Equal(t, uint64(1), n.local.Samples("db", clk.Now()), "the db created again after cache evicted it")
	require.Zero(t, n.local.Samples("cache", clk.Now()))
	require.Equal(t, float64(2*len(bad)*2), counterValue(t, n.met.rejected))
}
