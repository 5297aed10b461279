package tracker

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// decideP is decide with nil for a missing view.
func decideP(e *Estimate, fleet, local *viewFacts, fleetTrusted bool, minSamples uint64) {
	decide(e, fleet, local, fleet != nil, local != nil, fleetTrusted, minSamples)
}

// TestDecide pins the decision's precedence on hand-made views: v =
// min(Q, M) per view, failing views, the local override and deferral, and
// the local guard on v.
func TestDecide(t *testing.T) {
	const minSamples = 3
	ok := func(q, m uint64) *viewFacts { return &viewFacts{q: q, samples: 10, m: m, hasM: true} }
	capped := func(q, m uint64) *viewFacts { return &viewFacts{q: q, samples: 10, censored: 2, m: m, hasM: true} }
	failing := func(q uint64) *viewFacts { return &viewFacts{q: q, samples: 10, censored: 10} }
	few := &viewFacts{q: 900, samples: 2, censored: 2} // untrusted, would be failing
	unknown := &viewFacts{q: 100, samples: 10, censored: 10, unknown: true}
	tests := []struct {
		name         string
		fleet, local *viewFacts
		fleetTrusted bool
		src          Source
		value        uint64 // 0: no value
		failing      bool
		guarded      bool
		maxCompleted uint64 // 0: none
	}{
		{"nothing", nil, nil, false, SourceNone, 0, false, false, 0},
		{"fleet, no censoring", ok(100, 120), nil, true, SourceFleet, 100, false, false, 120},
		{"fleet capped by M", capped(100, 80), nil, true, SourceFleet, 80, false, false, 80},
		{"fleet failing", failing(100), nil, true, SourceFleet, 0, true, false, 0},
		{"fleet failing, local trusted defers", failing(100), capped(90, 60), true, SourceFleet, 60, false, true, 0},
		{"fleet failing, local too few", failing(100), few, true, SourceFleet, 0, true, false, 0},
		{"local failing overrides a good fleet", ok(100, 100), failing(50), true, SourceFleet, 0, true, true, 100},
		{"local failing, but too few samples", ok(100, 100), few, true, SourceFleet, 100, false, false, 100},
		{"guard on v: local v 121 > 1.2·100", ok(100, 100), ok(121, 130), true, SourceFleet, 121, false, true, 100},
		{"guard on v: local Q high but M caps it", ok(100, 100), capped(500, 110), true, SourceFleet, 100, false, false, 100},
		{"guard on v: fleet capped low", capped(100, 50), ok(70, 70), true, SourceFleet, 70, false, true, 50},
		{"fleet untrusted: local", ok(100, 100), capped(90, 40), false, SourceLocal, 40, false, false, 40},
		{"fleet untrusted: local failing", ok(100, 100), failing(90), false, SourceLocal, 0, true, false, 0},
		{"local only, too few", nil, few, false, SourceNone, 0, false, false, 0},
		{"censoring unknown: today's rule", unknown, nil, true, SourceFleet, 100, false, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e Estimate
			decideP(&e, tt.fleet, tt.local, tt.fleetTrusted, minSamples)
			require.Equal(t, tt.src, e.Source)
			v, has := e.DecisionValue()
			require.Equal(t, tt.value != 0, has)
			require.Equal(t, tt.value, v)
			require.Equal(t, tt.failing, e.Failing)
			require.Equal(t, tt.guarded, e.Decision.Guarded)
			require.Equal(t, tt.maxCompleted != 0, e.HasMaxCompleted)
			require.Equal(t, tt.maxCompleted, e.MaxCompletedMillis)
			if tt.guarded {
				require.Equal(t, SourceLocal, e.DecisionSource())
			}
			require.Equal(t, strings.HasPrefix(tt.name, "fleet failing"), e.FleetFailing, "the fleet view named by Source is failing")
		})
	}
}

// TestEstimateFailingJSON checks the failure-aware fields of the JSON, and
// that a caller setting Failing on its copy (a node's own detector) turns
// the decision to the fallback.
func TestEstimateFailingJSON(t *testing.T) {
	var e Estimate
	e.Dest, e.Quantile = "db", 0.99
	e.localView(&viewFacts{q: 250, samples: 4, censored: 1, m: 100, hasM: true})
	decideP(&e, nil, &viewFacts{q: 250, samples: 4, censored: 1, m: 100, hasM: true}, false, 3)
	js, err := json.Marshal(e)
	require.NoError(t, err)
	require.JSONEq(t, `{"dest":"db","quantile":0.99,"source":"local","value_ms":250,"fleet_value_ms":null,
		"local_value_ms":250,"samples":0,"local_samples":4,"peers":0,"effective_peers":0,"staleness_ms":null,
		"trusted":true,"censored":0,"local_censored":1,"max_completed_ms":100,"failing":false}`, string(js))
	v, ok := e.DecisionValue()
	require.True(t, ok)
	require.Equal(t, uint64(100), v)
	require.Equal(t, uint64(250), e.DecisionQuantileMillis())
	e.Failing = true
	_, ok = e.DecisionValue()
	require.False(t, ok)
	js, err = json.Marshal(e)
	require.NoError(t, err)
	require.Contains(t, string(js), `"failing":true`)

	// The decision input alone says the same.
	in := e.Input()
	require.True(t, in.Failing)
	_, ok = in.Value()
	require.False(t, ok, "failing: no value")
	in.Failing = false
	v, ok = in.Value()
	require.True(t, ok)
	require.Equal(t, uint64(100), v)

	// No view trusted: no value and no M in the JSON, whatever the fields hold.
	e.Source = SourceNone
	js, err = json.Marshal(e)
	require.NoError(t, err)
	require.Contains(t, string(js), `"value_ms":null`)
	require.Contains(t, string(js), `"max_completed_ms":null`)
}

// TestSinceMillis checks the staleness arithmetic against time.Time.Sub.
func TestSinceMillis(t *testing.T) {
	end := int64(1_700_000_000_000)
	for _, now := range []time.Time{
		time.UnixMilli(end), time.UnixMilli(end).Add(1500 * time.Microsecond), time.UnixMilli(end + 7500),
		time.UnixMilli(end).Add(-time.Nanosecond), time.UnixMilli(end - 9000), time.UnixMilli(end).Add(123456789),
		time.UnixMilli(end).Add(500 * time.Microsecond), // within end's millisecond
	} {
		require.Equal(t, max(now.Sub(time.UnixMilli(end)), 0), sinceMillis(now, end), "%v", now)
	}
	// At the edge of saturation: below it the exact difference, from the
	// largest whole number of milliseconds a Duration holds (which with a
	// sub-millisecond part may not fit) the maximum, never a wrapped value.
	const edge = math.MaxInt64 / int64(time.Millisecond)
	for _, frac := range []time.Duration{0, 775 * time.Microsecond, 999999} {
		now := time.UnixMilli(end).Add(frac)
		require.Equal(t, now.Sub(time.UnixMilli(end-(edge-1))), sinceMillis(now, end-(edge-1)), "%v", frac)
		for _, d := range []int64{edge, edge + 1} {
			require.Equal(t, time.Duration(math.MaxInt64), sinceMillis(now, end-d), "%d ms and %v", d, frac)
		}
	}
	require.Equal(t, time.Duration(math.MaxInt64), sinceMillis(time.UnixMilli(math.MaxInt64), math.MinInt64/2))
	require.Zero(t, sinceMillis(time.UnixMilli(0), math.MaxInt64))
}
