package timeout

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// hiddenTracker is a SyncTracker behind the Learner interface only, so a
// Decider over it looks its detector state up on every record, as before
// records carried the tracker entry's tag.
type hiddenTracker struct{ t *tracker.SyncTracker[string] }

func (h hiddenTracker) RecordMillis(dest string, ms uint64, now time.Time) {
	h.t.RecordMillis(dest, ms, now)
}

func (h hiddenTracker) RecordTimeoutMillis(dest string, ms uint64, now time.Time) {
	h.t.RecordTimeoutMillis(dest, ms, now)
}

// TestRecordTagsMatchLookup runs seeded random sequences of records of
// every outcome, decisions, probes and their observations, clock steps,
// records straight into the tracker and Clear, on a Decider over a
// SyncTracker (whose completions skip the detector's lock when the
// entry's tag proves dest has no state) and on one over the same kind of
// tracker hidden behind Learner (which always looks), and requires the
// same detector, probes and decisions after every step. Few destinations
// beyond both caps make the tracker evict entries, and the Decider its
// state, along the way.
func TestRecordTagsMatchLookup(t *testing.T) {
	tc := tracker.DefaultConfig()
	tc.MaxDestinations = 6
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 7))
		trA, err := tracker.NewSync[string](tc)
		require.NoError(t, err)
		trB, err := tracker.NewSync[string](tc)
		require.NoError(t, err)
		tagged, err := NewPolicy(DefaultConfig(), trA)
		require.NoError(t, err)
		plain, err := NewDecider(DefaultConfig(), tc, localEstimates{trB}, hiddenTracker{trB})
		require.NoError(t, err)
		require.NotNil(t, tagged.local)
		require.Nil(t, plain.local)
		dests := make([]string, 9)
		for i := range dests {
			dests[i] = fmt.Sprintf("d%d", i)
		}
		now := t0
		var flight []Attempt // probes reserved on both, not yet observed
		for step := range 500 {
			dest := dests[rng.IntN(len(dests))]
			ms := uint64(rng.IntN(400))
			op := rng.IntN(20)
			switch {
			case op < 9: // mostly completions, the path the tag serves
				if op%2 == 0 || !tagged.RecordKnown(dest, ms, now) {
					tagged.Record(dest, Completed, ms, now)
				}
				plain.Record(dest, Completed, ms, now)
			case op < 13:
				o := Outcome(rng.IntN(int(Canceled) + 1))
				tagged.Record(dest, o, ms, now)
				plain.Record(dest, o, ms, now)
			case op < 16:
				a, b := tagged.Decide(dest, 1, now), plain.Decide(dest, 1, now)
				require.Equal(t, a, b, "seed %d step %d", seed, step)
				pa, pb := tagged.Probe(&a, now), plain.Probe(&b, now)
				require.Equal(t, pa, pb, "seed %d step %d", seed, step)
				if pa {
					flight = append(flight, a)
				} else {
					o := Outcome(rng.IntN(int(Canceled) + 1))
					tagged.Observe(a, o, time.Duration(ms)*time.Millisecond, now)
					plain.Observe(b, o, time.Duration(ms)*time.Millisecond, now)
				}
			case op < 17 && len(flight) > 0:
				a := flight[0]
				flight = flight[1:]
				o := Outcome(rng.IntN(int(Canceled) + 1))
				tagged.Observe(a, o, time.Duration(ms)*time.Millisecond, now)
				plain.Observe(a, o, time.Duration(ms)*time.Millisecond, now)
			case op < 18:
				now = now.Add(time.Duration(rng.IntN(4000)) * time.Millisecond)
			case op < 19: // another writer of the tracker creates entries untagged
				trA.RecordMillis(dest, ms, now)
				trB.RecordMillis(dest, ms, now)
			default:
				if rng.IntN(4) == 0 {
					trA.Clear()
					trB.Clear()
				}
			}
			require.Equal(t, plain.Detected(), tagged.Detected(), "seed %d step %d", seed, step)
			require.Equal(t, plain.Stats(), tagged.Stats(), "seed %d step %d", seed, step)
			for _, d := range dests {
				require.Equal(t, plain.Failing(d), tagged.Failing(d), "seed %d step %d dest %s", seed, step, d)
			}
			require.Equal(t, plain.Decide(dest, 2, now), tagged.Decide(dest, 2, now), "seed %d step %d", seed, step)
		}
	}
}

// TestRecordTagsConcurrent records completions from several goroutines
// while others fail the same destinations (for the race detector), then
// completes every destination once from one goroutine: no failure count
// may survive a completion that came after it, tags or not.
func TestRecordTagsConcurrent(t *testing.T) {
	_, tr, d := syncPolicy(t)
	dests := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 3000 {
				dest := dests[(g*3+i)%len(dests)]
				switch {
				case g == 0 && i%5 == 0:
					d.Record(dest, Failed, 0, t0)
				case g == 1 && i%7 == 0:
					d.Record(dest, TimedOut, 900, t0)
				default:
					d.Record(dest, Completed, uint64(i%50), t0)
				}
			}
		})
	}
	wg.Wait()
	require.NotZero(t, d.gen.Load()-1, "state was created along the way")
	for _, dest := range dests {
		d.Record(dest, Completed, 10, t0)
	}
	require.Empty(t, d.Detected())
	require.Zero(t, d.Stats().Tracked)
	require.Equal(t, uint64(4*3000-3000/5+len(dests)), tr.Recorded(), "every call but the failed ones recorded a sample")
}

// TestRecordKnown pins RecordKnown: a completion of a destination its
// SyncTracker holds, recorded and reset in the detector as Record does;
// false and nothing done for a new destination or another Learner.
func TestRecordKnown(t *testing.T) {
	tr, err := tracker.NewSync[string](tracker.DefaultConfig())
	require.NoError(t, err)
	d, err := NewPolicy(DefaultConfig(), tr)
	require.NoError(t, err)
	require.False(t, d.RecordKnown("db", 10, t0))
	require.Zero(t, tr.Recorded())
	for range FailingAfter {
		d.Record("db", TimedOut, 900, t0)
	}
	require.True(t, d.Failing("db"))
	require.True(t, d.RecordKnown("db", 10, t0))
	require.False(t, d.Failing("db"), "the completion reset the detector")
	require.Equal(t, uint64(FailingAfter+1), tr.Recorded())

	other, _, rec := newTestDecider(t, DefaultConfig(), map[string]tracker.Estimate{})
	require.False(t, other.RecordKnown("db", 10, t0))
	require.Empty(t, rec.take())
}
