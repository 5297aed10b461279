package policytest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// Hedging returns timeout.NewPolicy (default config) over a tracker where
// "h" answered in 20 ms 100 times, and that tracker: the
// destination's P95 is 20 ms, so its hedge delay is 21 ms and its timeout
// the 250 ms floor. The adapters' hedging tests run against it.
func Hedging(t testing.TB) (*timeout.Decider, *tracker.SyncTracker[string]) {
	t.Helper()
	tr, err := tracker.NewSync[string](tracker.DefaultConfig())
	require.NoError(t, err)
	for range 100 {
		tr.Record("h", 20*time.Millisecond, time.Now())
	}
	p, err := timeout.NewPolicy(timeout.DefaultConfig(), tr)
	require.NoError(t, err)
	return p, tr
}

// HedgedLocal returns the local estimate of "h" (quantile 1) in tr, the
// tracker Hedging returned: what the hedged attempts left there.
func HedgedLocal(t testing.TB, tr *tracker.SyncTracker[string]) tracker.Estimate {
	t.Helper()
	e, err := tracker.LocalEstimate(tr, "h", 1, time.Now())
	require.NoError(t, err)
	return e
}
