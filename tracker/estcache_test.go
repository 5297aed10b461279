package tracker

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
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
// with EstimateUncached's, field by field. Records are often at, just
// below or just above the cached local quantile, or M, so that the records
// a cached local view survives (viewPos.shift) sit at its edges. It also
// requires that most estimates were answered from the cache, and that many
// records kept a cached local view, so that it tests something. CI
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
		{"share cap, 3 sub-windows", shareCapped(3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testFleetConfig()
			if tc.mut != nil {
				tc.mut(&c)
			}
			for seed := uint64(1); seed <= seeds; seed++ {
				hits, total, kept, recs, pubs := estimateCacheRun(t, c, seed, steps)
				require.Greater(t, hits, total/3, "seed %d: the cache answered %d of %d estimates", seed, hits, total)
				require.Greater(t, pubs, total/10, "seed %d: the published inputs answered %d of %d", seed, pubs, total)
				require.Greater(t, kept, recs/5, "seed %d: %d of %d records kept a cached local view", seed, kept, recs)
			}
		})
	}
}

// estimateCacheRun is one sequence of TestEstimateCacheMatchesUncached; it
// returns how many of the estimates compared came from the cache, how
// many records found a fresh cached local view and kept it, and how many
// decision inputs the published cells gave (each compared too).
func estimateCacheRun(t *testing.T, c FleetConfig, seed uint64, steps int) (hits, total, kept, recs, pubs int) {
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
			out := randomDestCounts(r, &g, d, 40, math.MaxInt64, true)
			b.Dests = append(b.Dests, out)
		}
		return b
	}
	check := func(step int, what string) {
		// A decision's read of several destinations at once (before the
		// calls below republish anything): the published inputs where
		// they hold, the locked path for the rest.
		all := append(slices.Clone(dests), "unknown")
		ins := make([]DecisionInput, len(all))
		require.NoError(t, f.DecisionInputs(ins, all, 0.99, now))
		for i, d := range all {
			want, err := f.EstimateUncached(d, 0.99, now)
			require.NoError(t, err)
			require.Equal(t, want.Input(), ins[i], "seed %d step %d (%s): DecisionInputs %s", seed, step, what, d)
		}
		for _, d := range append(dests, "unknown") {
			qs := []float64{0.99, 0.99}
			switch r.IntN(10) {
			case 0, 1, 2, 3:
				qs = append(qs, 0.5, 0.9) // cached beside 0.99
			case 4:
				qs = append(qs, 0.25) // a fourth quantile replaces one
			}
			for _, q := range qs {
				var pin DecisionInput // what the lock-free path answers, before any locked call advances or republishes
				pub := local.published(&pin, d, q, now, f.ver.Load(), f.minSamples())
				var e Estimate
				if local.cached(&e, d, d, q, now, f.ver.Load(), f.minSamples()) {
					hits++
				}
				total++
				var in DecisionInput // read first: the input path fills and assembles alone
				require.NoError(t, f.DecisionInput(&in, d, q, now))
				got, err := f.Estimate(d, q, now)
				require.NoError(t, err)
				want, err := f.EstimateUncached(d, q, now)
				require.NoError(t, err)
				require.Equal(t, want, got, "seed %d step %d (%s): %s q %v", seed, step, what, d, q)
				require.Equal(t, want.Input(), in, "seed %d step %d (%s): DecisionInput %s q %v", seed, step, what, d, q)
				if pub {
					pubs++
					require.Equal(t, want.Input(), pin, "seed %d step %d (%s): published %s q %v", seed, step, what, d, q)
				}
			}
		}
	}
	// edge returns a latency at an edge of d's cached local view at q (Q's
	// bucket, M's, or just beside either; kind 0–3, or random when -1), or
	// sometimes a random one.
	edge := func(d string, lo int, q float64, kind int) uint64 {
		random := uint64(lo + r.IntN(300))
		c := localSlot(local, d, q)
		if c == nil || r.IntN(3) == 0 {
			return random
		}
		v := c.lv.q
		if c.lv.hasM && r.IntN(3) == 0 {
			v = c.lv.m
		}
		lowest := uint64(g.lowestEquivalent(g.index(int64(v))))
		if kind < 0 {
			kind = r.IntN(4)
		}
		switch kind {
		case 0:
			return v
		case 1:
			return v + 1 // the next bucket up
		case 2:
			return lowest
		default:
			return max(lowest, 1) - 1 // the bucket below
		}
	}
	anyQ := func() float64 { return []float64{0.99, 0.99, 0.5, 0.9, 0.25}[r.IntN(5)] }
	// record records one sample and counts whether the fresh cached local
	// views of d stayed fresh.
	record := func(d string, ms uint64, timedOut bool) {
		fresh := freshSlots(local, d)
		if timedOut {
			local.RecordTimeoutMillis(d, ms, now)
		} else {
			local.RecordMillis(d, ms, now)
		}
		if fresh > 0 {
			recs++
			if freshSlots(local, d) == fresh {
				kept++
			}
		}
	}
	for step := range steps {
		var what string
		switch k := r.IntN(100); {
		case k < 30:
			d := dests[r.IntN(len(dests))]
			ms := edge(d, 1, anyQ(), -1)
			what = fmt.Sprintf("record %s %d", d, ms)
			record(d, ms, false)
		case k < 35: // a burst in one sub-window at one edge of one view: kept across several records
			// (kind 4: into Q's bucket, then below it, so Q moves down
			// while its bucket is full)
			d, n, q, kind := dests[r.IntN(len(dests))], 2+r.IntN(40), anyQ(), r.IntN(5)
			what = fmt.Sprintf("burst %s %d at q %v edge %d", d, n, q, kind)
			_, err := f.Estimate(d, q, now) // a fresh view at q to keep
			require.NoError(t, err)
			for j := range n {
				kj := kind
				if kind == 4 {
					kj = 2 + 2*j/n
				}
				record(d, edge(d, 1, q, kj), r.IntN(4) == 0)
			}
			var in DecisionInput
			require.NoError(t, f.DecisionInput(&in, d, q, now))
			got, err := f.Estimate(d, q, now)
			require.NoError(t, err)
			want, err := f.EstimateUncached(d, q, now)
			require.NoError(t, err)
			require.Equal(t, want, got, "seed %d step %d (%s)", seed, step, what)
			require.Equal(t, want.Input(), in, "seed %d step %d (%s): DecisionInput", seed, step, what)
		case k < 45:
			d := dests[r.IntN(len(dests))]
			ms := edge(d, 50, anyQ(), -1)
			what = fmt.Sprintf("timeout %s %d", d, ms)
			record(d, ms, true)
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
		case k < 86:
			d := time.Duration(r.IntN(int(sw/time.Millisecond))) * time.Millisecond / 3
			what = fmt.Sprintf("step %v", d)
			now = now.Add(d)
		case k < 88: // another destination's record a sub-window ahead: the tracker's epoch moves past now's
			d := dests[r.IntN(len(dests))]
			what = "record ahead " + d
			local.RecordMillis(d, uint64(1+r.IntN(300)), now.Add(sw))
			if r.IntN(2) == 0 { // then now there, before the Fleet slides: inputs published a sub-window ago must not answer
				what += ", then there"
				now = now.Add(sw)
			}
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
	return hits, total, kept, recs, pubs
}

// localSlot returns the cache of dest's estimate at q in local, nil when
// there is none or its local view is stale.
func localSlot(local *SyncTracker[string], dest string, q float64) *estCache {
	h, sh := local.shard(dest)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	en := sh.get(h, dest)
	if en == nil || en.ec == nil {
		return nil
	}
	c := en.ec.slot(q)
	if c == nil || !c.lok || c.lver != en.ver {
		return nil
	}
	cp := *c
	return &cp
}

// freshViews calls fn with each of dest's cached estimates that holds a
// local view of its window as it is, under dest's shard lock.
func freshViews(local *SyncTracker[string], dest string, fn func(c *estCache)) {
	h, sh := local.shard(dest)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	en := sh.get(h, dest)
	if en == nil || en.ec == nil {
		return
	}
	for i := range en.ec.slots {
		if c := &en.ec.slots[i]; c.lok && c.lver == en.ver {
			fn(c)
		}
	}
}

// freshSlots returns how many of dest's cached estimates hold a local
// view of its window as it is.
func freshSlots(local *SyncTracker[string], dest string) int {
	n := 0
	freshViews(local, dest, func(*estCache) { n++ })
	return n
}

// TestEstimateCacheKeptViewsExact records seeded random samples (some
// timed out) into a few crowded buckets of one destination within one
// sub-window, so that quantiles sit in full buckets and move by one
// bucket at a time, and after each record compares the estimates at four
// quantiles with EstimateUncached's: the records a cached local view
// survives (viewPos.shift) at their most exacting. It requires that most
// records kept a view.
func TestEstimateCacheKeptViewsExact(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		c := testFleetConfig()
		c.Tracker.MinSamples = 1 + uint32(seed)*3
		local, err := NewSync[string](c.Tracker)
		require.NoError(t, err)
		f := newTestFleet(t, c, local)
		r := rand.New(rand.NewPCG(seed, 7))
		now := fleetAt(c, testE, 100)
		vals := []uint64{3, 10, 11, 40, 41, 42, 90, 200}
		kept, recs := 0, 0
		for step := range 1500 {
			ms := vals[r.IntN(len(vals))]
			if r.IntN(2) == 0 { // crowd the middle
				ms = vals[3+r.IntN(3)]
			}
			timedOut := r.IntN(5) == 0
			fresh := freshSlots(local, "d")
			if timedOut {
				local.RecordTimeoutMillis("d", ms, now)
			} else {
				local.RecordMillis("d", ms, now)
			}
			if fresh > 0 {
				recs++
				if freshSlots(local, "d") == fresh {
					kept++
				}
			}
			for _, q := range []float64{0.5, 0.9, 0.99} {
				got, err := f.Estimate("d", q, now)
				require.NoError(t, err)
				want, err := f.EstimateUncached("d", q, now)
				require.NoError(t, err)
				require.Equal(t, want, got, "seed %d step %d: %d timed out %v, q %v", seed, step, ms, timedOut, q)
			}
		}
		require.Greater(t, kept, recs/2, "seed %d: %d of %d records kept the cached views", seed, kept, recs)
	}
}

// roomUsed returns the room left in dest's cached views that hold its
// window as it is, summed.
func roomUsed(local *SyncTracker[string], dest string) uint64 {
	var n uint64
	freshViews(local, dest, func(c *estCache) { n += c.lp.room })
	return n
}

// TestEstimateCacheRoomExact records long seeded runs of completed
// samples below the cached quantiles' buckets (each of which the cached
// views take with no check while their room lasts: estCaches.recorded),
// now and then one in the quantile's bucket, above it or timed out, from a
// start with the quantiles at a bucket's edge and below the trust
// threshold, and after each record compares the estimates at three
// quantiles with EstimateUncached's: a room one sample too large would
// keep a view whose quantile has moved down a bucket. It requires that
// the views took many records on their room.
func TestEstimateCacheRoomExact(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		c := testFleetConfig()
		c.Tracker.MinSamples = 5 + uint32(seed)*7
		local, err := NewSync[string](c.Tracker)
		require.NoError(t, err)
		f := newTestFleet(t, c, local)
		r := rand.New(rand.NewPCG(seed, 11))
		now := fleetAt(c, testE, 100)
		qs := []float64{0.5, 0.99, 1} // estSlots of them
		for range 3 {
			local.RecordMillis("d", 200, now)
		}
		taken := 0
		for step := range 2000 {
			ms := []uint64{1, 3, 10, 11}[r.IntN(4)]
			timedOut := false
			switch r.IntN(25) {
			case 0:
				ms = 200
			case 1:
				ms = 500
			case 2:
				timedOut = true
			}
			before := roomUsed(local, "d")
			if timedOut {
				local.RecordTimeoutMillis("d", ms, now)
			} else {
				local.RecordMillis("d", ms, now)
			}
			if after := roomUsed(local, "d"); after < before {
				taken++
			}
			for _, q := range qs {
				got, err := f.Estimate("d", q, now)
				require.NoError(t, err)
				want, err := f.EstimateUncached("d", q, now)
				require.NoError(t, err)
				require.Equal(t, want, got, "seed %d step %d: %d timed out %v, q %v", seed, step, ms, timedOut, q)
			}
		}
		require.Greater(t, taken, 500, "seed %d: %d records taken on room", seed, taken)
	}
}

// TestFleetDecisionInputQuantile: DecisionInput refuses a quantile outside
// (0, 1] as Estimate does, with a zero input, and otherwise gives
// Estimate's Input with and without a SyncTracker as the local view.
func TestFleetDecisionInputQuantile(t *testing.T) {
	c := testFleetConfig()
	local, err := NewSync[string](c.Tracker)
	require.NoError(t, err)
	now := fleetAt(c, testE, 100)
	for i := range 200 {
		local.RecordMillis("d", uint64(10+i%50), now)
	}
	for _, f := range []*Fleet{newTestFleet(t, c, local), newTestFleet(t, c, fakeLocal{"d": {ms: 80, samples: 500, ok: true}})} {
		for _, q := range []float64{0, -1, 1.0001, math.NaN()} {
			in := DecisionInput{Source: SourceFleet, ValueMillis: 1}
			err := f.DecisionInput(&in, "d", q, now)
			require.ErrorIs(t, err, ErrQuantile)
			_, werr := f.Estimate("d", q, now)
			require.EqualError(t, err, werr.Error())
			require.Zero(t, in)
		}
		for _, d := range []string{"d", "unknown"} {
			for range 2 { // filling the cache, then from it
				var in DecisionInput
				require.NoError(t, f.DecisionInput(&in, d, 0.99, now))
				e, err := f.Estimate(d, 0.99, now)
				require.NoError(t, err)
				require.Equal(t, e.Input(), in, d)
			}
		}
	}
}

// TestPublishedInputConcurrent runs writers (records, completed and timed
// out, of values that move the quantile and ones that do not; peer
// batches) and readers (Fleet.DecisionInput and DecisionInputs, the
// lock-free path, and Estimate) of the same destinations at once, in rounds with the clock
// moved between them, and after each round, with the writers stopped,
// requires the published input of every destination, when there is one,
// and DecisionInput to equal EstimateUncached's: a published input that a
// concurrent write should have withdrawn would survive the round. Run
// with -race it also checks that the lock-free reads race with nothing.
// Bounded: 40 rounds of 200 operations per goroutine.
func TestPublishedInputConcurrent(t *testing.T) {
	c := testFleetConfig()
	c.Tracker.MinSamples = 5
	local, err := NewSync[string](c.Tracker)
	require.NoError(t, err)
	f := newTestFleet(t, c, local)
	dests := []string{"a", "b", "c", "d"}
	now := fleetAt(c, testE, 100)
	pubs := 0
	for round := range 40 {
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Add(1)
			go func() { // a writer
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				for range 200 {
					d, ms := dests[r.IntN(len(dests))], uint64(1+r.IntN(200))
					if r.IntN(5) == 0 {
						local.RecordTimeoutMillis(d, ms, now)
					} else {
						local.RecordMillis(d, ms, now)
					}
				}
			}()
			wg.Add(1)
			go func() { // a reader
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(round), uint64(w)+10))
				for range 200 {
					var in DecisionInput
					d := dests[r.IntN(len(dests))]
					err := f.DecisionInput(&in, d, 0.99, now)
					if r.IntN(4) == 0 && err == nil {
						_, err = f.Estimate(d, 0.5, now)
					}
					if r.IntN(2) == 0 && err == nil { // a decision's read of them all
						var ins [4]DecisionInput
						err = f.DecisionInputs(ins[:], dests, 0.99, now)
					}
					if err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		if round%3 == 0 {
			wg.Add(1)
			go func() { // a peer's batch
				defer wg.Done()
				b := mkBatch(fmt.Sprint("p", round%5), 1, c.Tracker.Epoch(now)-1)
				b.Layout = c.Tracker.Layout()
				for i, d := range dests[:2+round%3] {
					b.Dests = append(b.Dests, DestCounts{Dest: d, Total: 20,
						Buckets: []Bucket{{Index: uint16(40 + 30*i + round), Count: 20}}})
				}
				f.Insert(b, now)
			}()
		}
		wg.Wait()
		for _, d := range dests {
			want, err := f.EstimateUncached(d, 0.99, now)
			require.NoError(t, err)
			var pin DecisionInput
			if local.published(&pin, d, 0.99, now, f.ver.Load(), f.minSamples()) {
				pubs++
				require.Equal(t, want.Input(), pin, "round %d: published %s", round, d)
			}
			var in DecisionInput
			require.NoError(t, f.DecisionInput(&in, d, 0.99, now))
			require.Equal(t, want.Input(), in, "round %d: DecisionInput %s", round, d)
		}
		var ins [4]DecisionInput
		require.NoError(t, f.DecisionInputs(ins[:], dests, 0.99, now))
		for i, d := range dests {
			want, err := f.EstimateUncached(d, 0.99, now)
			require.NoError(t, err)
			require.Equal(t, want.Input(), ins[i], "round %d: DecisionInputs %s", round, d)
		}
		now = now.Add(c.Tracker.SubWindow() / 3)
	}
	require.Greater(t, pubs, 10, "the published inputs answered %d times after a round", pubs)
}

// TestPublishedInputWithdrawn: Clear and eviction withdraw a destination's
// published input, so that the destination recorded again (or never) is
// answered from its new window.
func TestPublishedInputWithdrawn(t *testing.T) {
	for _, evict := range []bool{false, true} {
		c := testFleetConfig()
		c.Tracker.MaxDestinations = 2
		local, err := NewSync[string](c.Tracker)
		require.NoError(t, err)
		f := newTestFleet(t, c, local)
		now := fleetAt(c, testE, 100)
		for i := range 5 {
			local.RecordMillis("a", uint64(100+i), now)
		}
		check := func(what string) {
			t.Helper()
			want, err := f.EstimateUncached("a", 0.99, now)
			require.NoError(t, err)
			var in DecisionInput
			require.NoError(t, f.DecisionInput(&in, "a", 0.99, now))
			require.Equal(t, want.Input(), in, what)
		}
		check("filled")
		check("published")
		var pin DecisionInput
		require.True(t, local.published(&pin, "a", 0.99, now, f.ver.Load(), f.minSamples()))
		if evict {
			for i := range 50 { // b, then c: a, with fewer samples than b, goes
				local.RecordMillis("b", uint64(i), now)
			}
			local.RecordMillis("c", 1, now)
			require.Equal(t, uint64(1), local.trackerStats().DestinationsEvicted)
			require.Zero(t, local.Samples("a", now))
		} else {
			local.Clear()
		}
		require.False(t, local.published(&pin, "a", 0.99, now, f.ver.Load(), f.minSamples()), "evicted %v", evict)
		local.RecordMillis("a", 3, now)
		check(fmt.Sprint("recorded again, evicted ", evict))
	}
}

// TestPublishedInputWithdrawnByClaim: when estimates at further quantiles
// replace the cache slot whose decision input is published, the input is
// withdrawn with it; the records that follow, which the new slot's view
// survives, can then never leave the old quantile's published input stale.
func TestPublishedInputWithdrawnByClaim(t *testing.T) {
	c := testFleetConfig()
	local, err := NewSync[string](c.Tracker)
	require.NoError(t, err)
	f := newTestFleet(t, c, local)
	now := fleetAt(c, testE, 100)
	for range 10 {
		local.RecordMillis("a", 10, now)
	}
	check := func(what string) {
		t.Helper()
		want, err := f.EstimateUncached("a", 0.5, now)
		require.NoError(t, err)
		var in DecisionInput
		require.NoError(t, f.DecisionInput(&in, "a", 0.5, now))
		require.Equal(t, want.Input(), in, what)
	}
	check("filled")
	check("published")
	var pin DecisionInput
	require.True(t, local.published(&pin, "a", 0.5, now, f.ver.Load(), f.minSamples()))
	for _, q := range []float64{0.9, 0.99, 0.999, 0.999} { // 0.999 replaces 0.5's slot, then holds a view
		_, err := f.Estimate("a", q, now)
		require.NoError(t, err)
	}
	require.False(t, local.published(&pin, "a", 0.5, now, f.ver.Load(), f.minSamples()), "withdrawn with its slot")
	for range 11 { // below 0.999's bucket: its view holds; the median moves to 1 ms
		local.RecordMillis("a", 1, now)
	}
	require.NotNil(t, localSlot(local, "a", 0.999), "the new slot's view survived the records")
	check("after the records")
}

// TestViewPosFitSafe checks the room fit finds against its contract on
// random views: after room more samples below Q's bucket, Q's rank still
// lies above them (rank(q, n+k) − k never grows with k, so k = room is the
// one to check); and fit finds room on most views that have any.
func TestViewPosFitSafe(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	some := 0
	for range 100_000 {
		n := 1 + r.Uint64N(300)
		q := []float64{0.5, 0.25, 0.75, 0.9, 0.99, 0.999}[r.IntN(6)]
		rk := rank(q, n)
		below := r.Uint64N(rk) // Q's bucket holds the rank: below < rk <= below+at
		p := viewPos{qi: 5, mi: 9, low: 5, below: below, at: rk - below + r.Uint64N(n-rk+1), minSamples: 1}
		p.fit(q, n)
		if p.room > 0 {
			some++
			require.Greater(t, rank(q, n+p.room), below+p.room, "q %v n %d below %d room %d", q, n, below, p.room)
		}
	}
	require.Greater(t, some, 50_000)
}

// TestPubKeyDigest: a published cell answers for exactly the name it was
// made for. Names of up to 16 bytes are compared by their digests alone,
// so the digest must tell every two of them apart: pairs of names of
// every length to 40 that differ in one byte (at each position), in length
// only, or not at all, and random names over a two-letter alphabet.
func TestPubKeyDigest(t *testing.T) {
	tb := &pubTable{seed: 0x1234, mask: 1<<16 - 1}
	r := rand.New(rand.NewPCG(9, 9))
	check := func(a, b string) {
		t.Helper()
		ka := tb.key(a)
		cell := &pubCell{key: a, id: ka}
		kb := tb.key(b)
		require.Equal(t, a == b, cell.of(&kb, b), "%q made, %q read", a, b)
		if len(b) <= 16 { // Memo's comparison of a short name, whatever the slot
			require.Equal(t, a == b, cell.isShort(kb.n, kb.a, kb.b), "%q made, %q compared", a, b)
		}
		if len(a) <= 16 && len(b) <= 16 { // the words alone tell them apart, whatever the hash
			ka.hash, kb.hash = 0, 0
			require.Equal(t, a == b, ka == kb, "%q, %q: digests", a, b)
		} else if len(a) == len(b) { // a hash collision of long names is a miss
			collided := &pubCell{key: a, id: kb}
			require.Equal(t, a == b, collided.of(&kb, b), "%q made, %q read with its digest", a, b)
		}
	}
	for n := range 41 {
		name := make([]byte, n)
		for i := range name {
			name[i] = byte('a' + r.IntN(2))
		}
		check(string(name), string(name))
		check(string(name), string(name)+"a")
		check(string(name)+"a", string(name))
		for i := range n {
			other := slices.Clone(name)
			other[i] ^= 1
			check(string(name), string(other))
		}
	}
	for range 20000 {
		a, b := make([]byte, r.IntN(20)), make([]byte, r.IntN(20))
		for i := range a {
			a[i] = byte('a' + r.IntN(2))
		}
		for i := range b {
			b[i] = byte('a' + r.IntN(2))
		}
		check(string(a), string(b))
	}
}

// testMemoizer's memo of an input is its value, quantile and slot.
type testMemoizer struct{}

func (testMemoizer) Memo(in *DecisionInput, slot int) Memo {
	return Memo{A: in.ValueMillis<<8 | uint64(slot), B: in.QuantileMillis}
}

// TestMemoOfEveryNameLength: Memo and Memos, which hash and compare a
// short name by hand, find the published memos of names of every length
// to 40 bytes, and none of a name that differs from a published one in one
// byte (at each position) or in length only (TestPubKeyDigest checks
// isShort on every pair of names).
func TestMemoOfEveryNameLength(t *testing.T) {
	c := testFleetConfig()
	local, err := NewSync[string](c.Tracker)
	require.NoError(t, err)
	f := newTestFleet(t, c, local)
	reg := f.SetMemoizer(testMemoizer{}, 0.99)
	require.NotNil(t, reg)
	now := fleetAt(c, testE, 100)
	r := rand.New(rand.NewPCG(5, 8))
	var names []string
	for n := 1; n <= 40; n++ {
		name := make([]byte, n)
		for i := range name {
			name[i] = byte('a' + r.IntN(2))
		}
		names = append(names, string(name))
	}
	for i, name := range names {
		for j := range 5 {
			local.RecordMillis(name, uint64(10+i+j), now)
		}
	}
	memos := make([]Memo, len(names))
	for slot := range MemoSlots {
		for i, name := range names {
			var in DecisionInput
			for range 2 { // the first read caches the input, the second publishes it, with the memos
				require.NoError(t, f.DecisionInput(&in, name, 0.99, now))
			}
			m, ok := f.Memo(name, slot, now, reg)
			require.True(t, ok, "%q, slot %d", name, slot)
			require.Equal(t, testMemoizer{}.Memo(&in, slot), m, "%q, slot %d", name, slot)
			memos[i] = m
		}
		got := make([]Memo, len(names))
		require.True(t, f.Memos(got, names, slot, now, reg), "slot %d", slot)
		require.Equal(t, memos, got, "slot %d", slot)
	}
	for _, name := range names {
		others := []string{name + "c", "c" + name}
		for i := range len(name) {
			other := []byte(name)
			other[i] = 'c'
			others = append(others, string(other))
		}
		for _, other := range others {
			_, ok := f.Memo(other, 0, now, reg)
			require.False(t, ok, "%q, published %q", other, name)
			require.False(t, f.Memos(make([]Memo, 2), []string{name, other}, 0, now, reg), "%q, published %q", other, name)
		}
	}
}
