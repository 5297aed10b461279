package tracker

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// aggDense returns a's counts dense in the default layout, nil when empty
// (as Fleet.ViewCounts).
func aggDense(a Aggregate) []uint64 {
	if a.Total == 0 {
		return nil
	}
	out := make([]uint64, DefaultConfig().Layout().CountsLen())
	for _, b := range a.Buckets {
		out[b.Index] += uint64(b.Count)
	}
	return out
}

func sumCounts(bs []Bucket) uint64 {
	var n uint64
	for _, b := range bs {
		n += uint64(b.Count)
	}
	return n
}

// TestOwnedMatchesFleet is the property destination-owned aggregation
// rests on: an owner holding every origin's records of a destination
// publishes the aggregate that is, bucket for bucket, v1's fleet view of it
// (a Fleet holding every origin's whole batch), with the same samples,
// peers, effective peers, censored counts and staleness, share cap and
// exclusions included; and a reader fed only those aggregates answers
// every estimate as the Fleet does.
func TestOwnedMatchesFleet(t *testing.T) {
	dests := []string{"db-1", "db-2", "cache", "queue"}
	for seed := range uint64(12) {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 23))
			c := testFleetConfig()
			c.MaxOriginShare = []float64{0, 0.25, 0.5}[seed%3]
			v1 := newTestFleet(t, c, nil)
			own, err := NewOwned(c)
			require.NoError(t, err)
			origins := []string{"a", "b", "c", "d", "e", "self"}
			e := int64(testE)
			for step := range 40 {
				now := fleetAt(c, e, int64(r.IntN(6000)))
				if r.IntN(8) == 0 {
					e++ // the window slides
				}
				o := origins[r.IntN(len(origins))]
				boot := uint64(1 + r.IntN(2)) // a restart now and then
				ep := e - int64(r.IntN(c.Tracker.SubWindows+1)) + 1
				per := 20
				if o == "a" && seed%2 == 0 {
					per = 400 // a flooder, for the share cap
				}
				b := randomBatch(r, o, boot, ep, dests, per)
				if r.IntN(3) == 0 {
					b = withTimeouts(r, b)
				}
				fo := v1.Insert(b, now)
				oo := own.InsertRecords(b, now)
				if fo == InsertNew {
					require.Equal(t, InsertNew, oo, "step %d: %v", step, b.Key)
				}
				if r.IntN(10) == 0 {
					x := origins[r.IntN(len(origins))]
					xb := uint64(1 + r.IntN(2))
					if r.IntN(2) == 0 {
						v1.Exclude(x, xb, now)
						own.Exclude(x, xb, now)
					} else {
						v1.Include(x, xb, now)
						own.Include(x, xb, now)
					}
				}
				for _, d := range dests {
					a, ok := own.Aggregate(d, now)
					want := v1.ViewCounts(d, now)
					est, err := v1.Estimate(d, 0.99, now)
					require.NoError(t, err)
					if !ok {
						require.Nil(t, want, "step %d %s: the fleet has a view, the owner no aggregate", step, d)
						continue
					}
					require.Equal(t, want, aggDense(a), "step %d %s: counts", step, d)
					require.Equal(t, est.Samples, a.Total, "step %d %s: samples", step, d)
					require.Equal(t, est.Peers, a.Peers, "step %d %s: peers", step, d)
					require.Equal(t, est.EffectivePeers, a.EffectivePeers(), "step %d %s: effective peers", step, d)
					require.Equal(t, est.Censored, sumCounts(a.TimedOut), "step %d %s: censored", step, d)
					require.Equal(t, c.Tracker.Epoch(now)-1, a.Epoch)
					// A fresh reader: a member excluded within an epoch lowers
					// the coverage, and a reader keeps the larger one it holds.
					reader := newTestFleet(t, c, nil)
					require.Equal(t, InsertNew, reader.InsertAggregate(a, now))
					require.Equal(t, InsertDuplicate, reader.InsertAggregate(a, now))
					for _, q := range []float64{0.5, 0.99, 0.9999, 1} {
						we, err := v1.Estimate(d, q, now)
						require.NoError(t, err)
						ge, err := reader.Estimate(d, q, now)
						require.NoError(t, err)
						require.Equal(t, we, ge, "step %d %s q=%v: the reader's estimate", step, d, q)
					}
					require.Equal(t, want, reader.ViewCounts(d, now))
				}
			}
		})
	}
}

// TestAggregateMaxBy checks the reader's rule: per destination and epoch
// the aggregate with the largest coverage, whatever the order they come
// in; never a sum.
func TestAggregateMaxBy(t *testing.T) {
	c := testFleetConfig()
	now := fleetAt(c, testE, 3000)
	mk := func(records uint32, hash uint64, counts ...uint32) Aggregate {
		a := Aggregate{Dest: "db", Epoch: testE - 1, Layout: c.Tracker.Layout(), Peers: 1, Newest: testE - 1,
			Coverage: Coverage{Records: records, Hash: hash}}
		for i, n := range counts {
			a.Buckets = append(a.Buckets, Bucket{Index: uint16(10 + i), Count: n})
			a.Total += uint64(n)
		}
		addSquare(&a.SquareSum, a.Total)
		return a
	}
	small, large, tie := mk(2, 7, 1, 1), mk(3, 1, 1, 1, 1), mk(3, 9, 2, 2, 2)
	orders := [][]Aggregate{{small, large, tie}, {tie, large, small}, {large, small, tie}}
	for _, order := range orders {
		f := newTestFleet(t, c, nil)
		for _, a := range order {
			f.InsertAggregate(a, now)
		}
		e, err := f.Estimate("db", 1, now)
		require.NoError(t, err)
		require.Equal(t, uint64(6), e.Samples, "the largest coverage (3, 9) alone, in any order")
		require.Equal(t, 1, f.Stats().Aggregates)
	}
	f := newTestFleet(t, c, nil)
	require.Equal(t, InsertNew, f.InsertAggregate(large, now))
	require.Equal(t, InsertSuperseded, f.InsertAggregate(small, now))
	require.Equal(t, InsertDuplicate, f.InsertAggregate(large, now))
	other := large
	other.Buckets = []Bucket{{Index: 10, Count: 3}}
	require.Equal(t, InsertConflict, f.InsertAggregate(other, now), "same coverage, other counts")
	old := large
	old.Epoch = testE - 4
	require.Equal(t, InsertTooOld, f.InsertAggregate(old, now))
	for ep, want := range map[int64]InsertOutcome{testE - 3: InsertNew, testE + 1: InsertNew, testE + 2: InsertTooNew} {
		a := large
		a.Epoch = ep
		require.Equal(t, want, f.InsertAggregate(a, now), "epoch E%+d: accepted in [E−3, E+1]", ep-testE)
	}
	bad := large
	bad.Total++
	require.Equal(t, InsertMalformed, f.InsertAggregate(bad, now))

	// The view reads E−1, and E−2 until E−1 arrives; older aggregates age out.
	f = newTestFleet(t, c, nil)
	prev := mk(1, 1, 5)
	prev.Epoch = testE - 2
	require.Equal(t, InsertNew, f.InsertAggregate(prev, now))
	e, _ := f.Estimate("db", 1, now)
	require.Equal(t, uint64(5), e.Samples, "E−2 until E−1 arrives")
	require.Equal(t, InsertNew, f.InsertAggregate(large, now))
	e, _ = f.Estimate("db", 1, now)
	require.Equal(t, uint64(3), e.Samples)
	later := fleetAt(c, testE+2, 0)
	e, _ = f.Estimate("db", 1, later)
	require.Zero(t, e.Samples, "no aggregate of E−1 or E−2")
	require.Equal(t, 1, f.Stats().Aggregates, "E−1 of then is E−3 now: still held")
	f.Advance(fleetAt(c, testE+3, 0))
	require.Zero(t, f.Stats().Aggregates)
}

// TestAggregateHorizon: on a grid of many sub-windows a reader reads
// aggregates a quarter of the window back (a late one still gives a
// view), keeps one epoch more, and refuses older ones; on the default
// grid it reads E−1 and E−2 (TestAggregateMaxBy).
func TestAggregateHorizon(t *testing.T) {
	require.Equal(t, int64(2), DefaultConfig().AggregateHorizon())
	c := testFleetConfig()
	c.Tracker.Window, c.Tracker.SubWindows = 127500*time.Millisecond, 255
	h := c.Tracker.AggregateHorizon()
	require.Equal(t, int64(63), h)
	now := fleetAt(c, testE, 100)
	f := newTestFleet(t, c, nil)
	mk := func(ep int64, n uint32) Aggregate {
		a := Aggregate{Dest: "db", Epoch: ep, Newest: ep, Layout: c.Tracker.Layout(), Peers: 1, Coverage: Coverage{Records: 1, Hash: 1},
			Buckets: []Bucket{{Index: 10, Count: n}}, Total: uint64(n)}
		addSquare(&a.SquareSum, a.Total)
		return a
	}
	require.Equal(t, InsertTooOld, f.InsertAggregate(mk(testE-h-2, 2), now))
	require.Equal(t, InsertNew, f.InsertAggregate(mk(testE-h-1, 2), now), "E−H−1: kept")
	e, err := f.Estimate("db", 1, now)
	require.NoError(t, err)
	require.Zero(t, e.Samples, "E−H−1: not read")
	require.Equal(t, InsertNew, f.InsertAggregate(mk(testE-h, 4), now), "E−H: kept")
	e, _ = f.Estimate("db", 1, now)
	require.Equal(t, uint64(4), e.Samples, "E−H read: the newest held up to E−1")
	require.Equal(t, InsertNew, f.InsertAggregate(mk(testE-5, 7), now))
	e, _ = f.Estimate("db", 1, now)
	require.Equal(t, uint64(7), e.Samples, "the newest")
	e, _ = f.Estimate("db", 1, fleetAt(c, testE+h-5, 0))
	require.Equal(t, uint64(7), e.Samples, "E−5 of then is E−H now")
	e, _ = f.Estimate("db", 1, fleetAt(c, testE+h-4, 0))
	require.Zero(t, e.Samples, "past the horizon")
}

// TestAggregateBounds: a Fleet holds aggregates of at most MaxDestinations
// destinations (a further one is refused, one already held is not), and its
// digests cover the epochs [E−2, E].
func TestAggregateBounds(t *testing.T) {
	c := testFleetConfig()
	c.MaxDestinations = 2
	now := fleetAt(c, testE, 3000)
	f := newTestFleet(t, c, nil)
	mk := func(dest string, ep int64) Aggregate {
		a := Aggregate{Dest: dest, Epoch: ep, Layout: c.Tracker.Layout(), Peers: 1, Newest: ep,
			Coverage: Coverage{Records: 1, Hash: 1}, Buckets: []Bucket{{Index: 10, Count: 1}}, Total: 1}
		addSquare(&a.SquareSum, a.Total)
		return a
	}
	require.Equal(t, InsertNew, f.InsertAggregate(mk("a", testE-2), now))
	require.Equal(t, InsertNew, f.InsertAggregate(mk("b", testE), now))
	require.Equal(t, InsertTooLarge, f.InsertAggregate(mk("c", testE-1), now))
	require.Equal(t, InsertNew, f.InsertAggregate(mk("a", testE-1), now), "a held destination, another epoch")
	require.Equal(t, []string{"a", "b"}, f.AggregateDestinations(now))
	var epochs []int64
	for _, g := range f.AggregateDigests(now) {
		epochs = append(epochs, g.Epoch)
	}
	require.Equal(t, []int64{testE - 2, testE - 1, testE}, epochs)
}

// TestFleetStatsCountAggregates: a destination with a fleet view from
// aggregates (protocol v2) counts in Destinations as one with batches
// does, once when it has both.
func TestFleetStatsCountAggregates(t *testing.T) {
	c := testFleetConfig()
	now := fleetAt(c, testE, 3000)
	f := newTestFleet(t, c, nil)
	require.Equal(t, InsertNew, f.Insert(mkBatch("p", 1, testE-1, dcBuckets("a", 10, 1), dcBuckets("b", 10, 1)), now))
	for _, d := range []string{"b", "c"} {
		a := Aggregate{Dest: d, Epoch: testE - 1, Layout: c.Tracker.Layout(), Peers: 1, Newest: testE - 1,
			Coverage: Coverage{Records: 1, Hash: 1}, Buckets: []Bucket{{Index: 10, Count: 1}}, Total: 1}
		addSquare(&a.SquareSum, a.Total)
		require.Equal(t, InsertNew, f.InsertAggregate(a, now))
	}
	s := f.Stats()
	require.Equal(t, 3, s.Destinations, "a, b and c")
	require.Equal(t, 2, s.AggregateDestinations)
	require.Equal(t, 2, s.Aggregates)
	require.Equal(t, 1, s.Batches)
}

// TestOwnedRecords checks record identity and manifests: a record is its
// (destination, origin, boot, epoch), whatever part carried it.
func TestOwnedRecords(t *testing.T) {
	c := testFleetConfig()
	now := fleetAt(c, testE, 3000)
	o, err := NewOwned(c)
	require.NoError(t, err)
	b1 := mkBatch("a", 1, testE-1, dcBuckets("x", 3, 2), dcBuckets("y", 4, 1))
	require.Equal(t, InsertNew, o.InsertRecords(b1, now))
	require.Equal(t, InsertDuplicate, o.InsertRecords(b1, now))
	b2 := mkBatch("a", 1, testE-1, dcBuckets("y", 4, 1), dcBuckets("z", 9, 9))
	b2.Key.Part = 3
	require.Equal(t, InsertNew, o.InsertRecords(b2, now), "z is new; y a duplicate")
	b3 := mkBatch("a", 1, testE-1, dcBuckets("z", 9, 8))
	require.Equal(t, InsertConflict, o.InsertRecords(b3, now))
	var want Manifest
	for _, d := range []string{"x", "y", "z"} {
		want.Add(d)
	}
	require.Equal(t, want, o.Manifest("a", 1, testE-1, now))
	require.Equal(t, []string{"x", "y", "z"}, o.Destinations(now))
	o.Retain(func(d string) bool { return d != "y" })
	want = Manifest{}
	want.Add("x")
	want.Add("z")
	require.Equal(t, want, o.Manifest("a", 1, testE-1, now))
	// Without z (held) and y and w (not held from a in that epoch): as if
	// only x were held.
	b4 := mkBatch("a", 1, testE-2, dcBuckets("w", 1, 1))
	require.Equal(t, InsertNew, o.InsertRecords(b4, now))
	only := Manifest{}
	only.Add("x")
	require.Equal(t, only, o.ManifestWithout("a", 1, testE-1, slices.Values([]string{"z", "y", "w"}), now))
	require.Equal(t, want, o.ManifestWithout("a", 1, testE-1, slices.Values([]string{"q"}), now))
	require.Equal(t, Manifest{}, o.ManifestWithout("a", 2, testE-1, slices.Values([]string{"x"}), now), "another boot holds nothing")
	cov := o.Coverage("x", now)
	a, ok := o.Aggregate("x", now)
	require.True(t, ok)
	require.Equal(t, cov, a.Coverage)
	require.Equal(t, Coverage{Records: 1, Hash: RecordHash("a", 1, testE-1)}, cov)
	require.Equal(t, []Bucket{{Index: 3, Count: 2}}, a.Buckets)
	require.True(t, slices.Equal(o.Destinations(fleetAt(c, testE+int64(c.Tracker.SubWindows)+2, 0)), []string{}))
}

// TestOwnedAggregateOf: the aggregate of a past epoch, merged later (a
// round an owner's loop missed), is the one Aggregate merged in its own
// round, as long as Owned holds its whole window (E−1 to E−3); records
// of later epochs are not in it.
func TestOwnedAggregateOf(t *testing.T) {
	c := testFleetConfig()
	n := int64(c.Tracker.SubWindows)
	o, err := NewOwned(c)
	require.NoError(t, err)
	var want []Aggregate
	for ep := testE - n - 1; ep <= testE+2; ep++ { // records of each epoch, sent at the next one's start
		now := fleetAt(c, ep+1, 100)
		require.Equal(t, InsertNew, o.InsertRecords(mkBatch("a", 1, ep, dcBuckets("x", 3, uint32(ep-testE+n+2))), now), "epoch %d", ep)
		if ep == testE {
			require.Equal(t, InsertNew, o.InsertRecords(mkBatch("b", 1, ep, dcBuckets("x", 5, 7)), now))
		}
		if ep >= testE {
			a, ok := o.Aggregate("x", fleetAt(c, ep+1, 200)) // the round's publish
			require.True(t, ok)
			require.Equal(t, ep, a.Epoch)
			want = append(want, a)
		}
	}
	late := fleetAt(c, testE+3, 4000)
	for _, a := range want {
		got, ok := o.AggregateOf("x", a.Epoch, late)
		require.True(t, ok, "epoch %d", a.Epoch)
		require.Equal(t, a, got, "epoch %d merged late", a.Epoch)
		require.Equal(t, a.Coverage, o.CoverageOf("x", a.Epoch, late))
		require.Equal(t, 2, got.Peers, "b's record of %d is in it", testE)
	}
	_, ok := o.AggregateOf("x", testE-1, late)
	require.False(t, ok, "E−4's window is no longer held whole")
	require.Equal(t, Coverage{}, o.CoverageOf("x", testE-1, late))
	_, ok = o.AggregateOf("x", testE+3, late)
	require.False(t, ok, "E's is not due")
	_, ok = o.AggregateOf("y", testE+2, late)
	require.False(t, ok, "no records of y")
}
