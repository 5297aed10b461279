package tracker

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEstimateCacheMatchesUncached runs seeded random sequences of local
// records (completed and timed out, with evictions under MaxDestinations),
// peer batches (censored, censoring unknown, duplicates), seals of the
// local tracker, exclusions and inclusions, changes of the live member
// count and clock steps (within a sub-window, across one, across the window,
// backwards), and after each step compares every estimate the cache gives
// with EstimateUncached's, field by field. It also requires that most
// estimates were answered from the cache, so that it tests something. CI
// runs one seed of 600 steps per configuration (each invalidation it
// checks fails within the first 200 steps when removed); ATNODE_LONG=1
// runs three seeds of 3000.
func TestEstimateCacheMatchesUncached(t *testing.T) {
	seeds, steps := uint64(1), 600
	if os.Getenv("ATNODE_LONG") == "1" {
		seeds, steps = 3, 3000
	}
	for _, tc := range []struct {
		name string
		mut  func(*FleetConfig)
	}{
		{"defaults", nil},
		{"min samples 5, min peers auto, 3 destinations", func(c *FleetConfig) {
			c.Tracker.MinSamples = 5
			c.Tracker.MaxDestinations = 3
		}},
		{"share cap, 3 sub-windows", func(c *FleetConfig) {
			c.Tracker.MinSamples = 3
			c.Tracker.SubWindows = 3
			c.Tracker.Window = 3 * time.Second
			c.MaxOriginShare = 0.4
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testFleetConfig()
			if tc.mut != nil {
				tc.mut(&c)
			}
			for seed := uint64(1); seed <= seeds; seed++ {
				hits, total := estimateCacheRun(t, c, seed, steps)
				require.Greater(t, hits, total/3, "seed %d: the cache answered %d of %d estimates", seed, hits, total)
			}
		})
	}
}

// estimateCacheRun is one sequence of TestEstimateCacheMatchesUncached; it
// returns how many of the estimates compared came from the cache.
func estimateCacheRun(t *testing.T, c FleetConfig, seed uint64, steps int) (hits, total int) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 24))
	local, err := NewSync[string](c.Tracker)
	require.NoError(t, err)
	f := newTestFleet(t, c, local)
	g, err := newGeometry(c.Tracker.Layout())
	require.NoError(t, err)
	sw := c.Tracker.SubWindow()
	now := c.Tracker.EpochStart(testE)
	dests := []string{"a", "b", "c", "d"}
	peers := []string{"p1", "p2", "p3", "p4", "p5"}
	part := uint16(0)
	batch := func(origin string, ep int64) Batch {
		b := mkBatch(origin, 1, ep)
		b.Layout = c.Tracker.Layout()
		part++
		b.Key.Part = part % 4 // some parts again: duplicates and conflicts
		for _, d := range dests {
			if r.IntN(3) == 0 {
				continue
			}
			counts := map[int]uint32{}
			n := 1 + r.IntN(40)
			base := int64(5 + r.IntN(200))
			for range n {
				counts[g.index(base+int64(r.ExpFloat64()*float64(base)))]++
			}
			out := DestCounts{Dest: d, Total: uint64(n)}
			for i, k := range counts {
				out.Buckets = append(out.Buckets, Bucket{Index: uint16(i), Count: k})
			}
			slices.SortFunc(out.Buckets, func(a, b Bucket) int { return int(a.Index) - int(b.Index) })
			switch r.IntN(6) {
			case 0:
				out.CensoringUnknown = true
			case 1, 2:
				for _, bk := range out.Buckets {
					if r.IntN(2) == 0 {
						out.TimedOut = append(out.TimedOut, Bucket{Index: bk.Index, Count: 1 + r.Uint32N(bk.Count)})
					}
				}
			case 3: // every sample timed out: a failing view
				out.TimedOut = slices.Clone(out.Buckets)
			}
			b.Dests = append(b.Dests, out)
		}
		return b
	}
	check := func(step int, what string) {
		for _, d := range append(dests, "unknown") {
			qs := []float64{0.99, 0.99}
			switch r.IntN(10) {
			case 0:
				qs = append(qs, 0.5, 0.9) // cached beside 0.99
			case 1:
				qs = append(qs, 0.25) // a fourth quantile replaces one
			}
			for _, q := range qs {
				var e Estimate
				if local.cached(&e, d, d, q, now, f.ver.Load(), f.minSamples()) {
					hits++
				}
				total++
				got, err := f.Estimate(d, q, now)
				require.NoError(t, err)
				want, err := f.EstimateUncached(d, q, now)
				require.NoError(t, err)
				require.Equal(t, want, got, "seed %d step %d (%s): %s q %v", seed, step, what, d, q)
			}
		}
	}
	for step := range steps {
		var what string
		switch k := r.IntN(100); {
		case k < 35:
			d := dests[r.IntN(len(dests))]
			ms := uint64(1 + r.IntN(300))
			what = fmt.Sprintf("record %s %d", d, ms)
			local.RecordMillis(d, ms, now)
		case k < 45:
			d := dests[r.IntN(len(dests))]
			ms := uint64(50 + r.IntN(300))
			what = fmt.Sprintf("timeout %s %d", d, ms)
			local.RecordTimeoutMillis(d, ms, now)
		case k < 60:
			p := peers[r.IntN(len(peers))]
			ep := c.Tracker.Epoch(now) - int64(r.IntN(int(c.Tracker.SubWindows)+2))
			what = fmt.Sprintf("insert %s epoch %d", p, ep)
			f.Insert(batch(p, ep), now)
		case k < 65:
			ep := c.Tracker.Epoch(now) - 1
			what = fmt.Sprintf("seal %d", ep)
			b := mkBatch(c.Self, 7, ep, SealedSubWindow(local, ep, now)...)
			b.Layout = c.Tracker.Layout()
			f.Insert(b, now)
		case k < 68:
			n := 1 + r.IntN(5)
			what = fmt.Sprintf("live %d", n)
			f.SetLiveMembers(n)
		case k < 71:
			p := peers[r.IntN(len(peers))]
			what = "exclude " + p
			f.Exclude(p, 1, now)
		case k < 74:
			p := peers[r.IntN(len(peers))]
			what = "include " + p
			f.Include(p, 1, now)
		case k < 88:
			d := time.Duration(r.IntN(int(sw/time.Millisecond))) * time.Millisecond / 3
			what = fmt.Sprintf("step %v", d)
			now = now.Add(d)
		case k < 94:
			what = "next sub-window"
			now = now.Add(sw)
		case k < 96:
			what = "past the window"
			now = now.Add(c.Tracker.Window + sw*time.Duration(r.IntN(3)))
		case k < 98:
			what = "back"
			now = now.Add(-sw / 2)
		case k < 99:
			what = "advance"
			f.Advance(now)
		default: // the loop's clock ahead of the caller's
			what = "advance ahead"
			f.Advance(now.Add(sw))
		}
		check(step, what)
	}
	return hits, total
}
