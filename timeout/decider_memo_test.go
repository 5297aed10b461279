package timeout

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// TestQuickCombinesAsTheRule: the memos of random decision inputs (none,
// failing, capped well below and just below the fallback, guarded,
// plain), combined as Quick combines them, give the rule's verdict on the
// inputs for a request that needs all of them, for every memoized
// attempt, or refuse exactly when an input is failing.
func TestQuickCombinesAsTheRule(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	random := func(floor uint64) tracker.Estimate {
		q := uint64(r.IntN(5000))
		switch r.IntN(6) {
		case 0:
			return tracker.Estimate{}
		case 1:
			return failingEst(q)
		case 2:
			return est(q, uint64(r.IntN(int(q)+1)))
		case 3: // capped, its own timeout the fallback, its probe above it
			return est(q+4*floor, uint64(r.IntN(int(floor)+1)))
		case 4:
			return guardedEst(q, q+uint64(r.IntN(3000)), q)
		}
		return est(q, q)
	}
	seen := map[string]int{}
	for i := range 1500 {
		c := cfg(int64(1+r.IntN(300)), int64(1000+r.IntN(60_000)), 0.5+3*r.Float64())
		d, _, _ := newTestDecider(t, c, nil)
		in := make([]tracker.DecisionInput, 1+r.IntN(4))
		failing := false
		for j := range in {
			e := random(uint64(c.Backoff.Min.Milliseconds()))
			in[j] = e.Input()
			failing = failing || in[j].Failing
		}
		for attempt := 1; attempt <= tracker.MemoSlots; attempt++ {
			m := make([]tracker.Memo, len(in))
			for j := range in {
				m[j] = d.Memo(&in[j], attempt-1)
			}
			got, ok := combine(m)
			require.Equal(t, !failing, ok, "case %d: %+v attempt %d", i, in, attempt)
			if !ok {
				continue
			}
			want := d.rules[attempt-1].verdict(in, len(in))
			var src tracker.Source
			var guarded bool
			if want.DecidedBy >= 0 {
				src, guarded = in[want.DecidedBy].Source, in[want.DecidedBy].Guarded
			}
			require.Equal(t, []any{want.Timeout, want.DecidedBy, want.Reason, want.ProbeTimeout, src, guarded},
				[]any{got.Timeout(), got.DecidedBy(), got.Reason(), got.ProbeTimeout(), got.Source(), got.Guarded()},
				"case %d: %+v attempt %d", i, in, attempt)
			if want.Fallback && want.Probe > 0 {
				seen["fallback, a later destination's probe"]++
			}
			if !want.Fallback && want.Probe >= 0 {
				seen["decided, its probe"]++
			}
			if guarded {
				seen["guarded"]++
			}
		}
	}
	for _, k := range []string{"fallback, a later destination's probe", "decided, its probe", "guarded"} {
		require.Positive(t, seen[k], "%s never combined: %v", k, seen)
	}
}
