package tracker

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFleetConfigValidate(t *testing.T) {
	require.NoError(t, DefaultFleetConfig().Validate())
	tests := []struct {
		name   string
		modify func(*FleetConfig)
		want   []string
	}{
		{"tracker", func(c *FleetConfig) { c.Tracker.SubWindows = 0 }, []string{"SubWindows"}},
		{"min peers", func(c *FleetConfig) { c.MinPeers = -1 }, []string{"MinPeers"}},
		{"share NaN", func(c *FleetConfig) { c.MaxOriginShare = math.NaN() }, []string{"MaxOriginShare"}},
		{"share > 1", func(c *FleetConfig) { c.MaxOriginShare = 1.5 }, []string{"MaxOriginShare"}},
		{"origins", func(c *FleetConfig) { c.MaxOrigins = 0 }, []string{"MaxOrigins"}},
		{"origins too many", func(c *FleetConfig) { c.MaxOrigins = 5000 }, []string{"MaxOrigins"}},
		{"dests", func(c *FleetConfig) { c.MaxDestinations = 0 }, []string{"MaxDestinations"}},
		{"epoch buckets", func(c *FleetConfig) { c.MaxEpochBuckets = 0 }, []string{"MaxEpochBuckets"}},
		{"buckets", func(c *FleetConfig) { c.MaxBuckets = -1 }, []string{"MaxBuckets"}},
		{"all joined", func(c *FleetConfig) { c.MinPeers, c.MaxOrigins = -1, -1 }, []string{"MinPeers", "MaxOrigins"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultFleetConfig()
			tt.modify(&c)
			err := c.Validate()
			require.Error(t, err)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
			_, err = NewFleet(c, nil)
			require.Error(t, err)
		})
	}
}

func TestFleetInsertOutcomes(t *testing.T) {
	c := testFleetConfig()
	c.MaxDestinations = 3
	N := int64(c.Tracker.SubWindows)
	now := fleetAt(c, testE, 10)
	good := func(ep int64) Batch { return mkBatch("a", 1, ep, dcBuckets("x", 5, 2, 7, 1)) }
	tests := []struct {
		name  string
		batch Batch
		want  InsertOutcome
	}{
		{"oldest accepted", good(testE - N - 1), InsertNew},
		{"too old", good(testE - N - 2), InsertTooOld},
		{"newest accepted", good(testE + 1), InsertNew},
		{"too new", good(testE + 2), InsertTooNew},
		{"layout", func() Batch { b := good(testE - 1); b.Layout.Highest = 1000; return b }(), InsertLayoutMismatch},
		{"empty origin", mkBatch("", 1, testE-1, dcBuckets("x", 1, 1)), InsertMalformed},
		{"empty dest", mkBatch("b", 1, testE-1, dcBuckets("", 1, 1)), InsertMalformed},
		{"long dest", mkBatch("b", 1, testE-1, dcBuckets(string(make([]byte, 257)), 1, 1)), InsertMalformed},
		{"dest not UTF-8", mkBatch("b", 1, testE-1, dcBuckets("\xff", 1, 1)), InsertMalformed},
		{"origin not UTF-8", mkBatch("\xff", 1, testE-1, dcBuckets("x", 1, 1)), InsertMalformed},
		{"repeated dest", mkBatch("b", 1, testE-1, dcBuckets("x", 1, 1), dcBuckets("x", 2, 1)), InsertMalformed},
		{"descending buckets", mkBatch("b", 1, testE-1, dcBuckets("x", 5, 1, 4, 1)), InsertMalformed},
		{"repeated bucket", mkBatch("b", 1, testE-1, dcBuckets("x", 5, 1, 5, 1)), InsertMalformed},
		{"index out of range", mkBatch("b", 1, testE-1, dcBuckets("x", 1280, 1)), InsertMalformed},
		{"zero count", mkBatch("b", 1, testE-1, dcBuckets("x", 3, 0)), InsertMalformed},
		{"wrong total", func() Batch { b := mkBatch("b", 1, testE-1, dcBuckets("x", 3, 2)); b.Dests[0].Total = 3; return b }(), InsertMalformed},
		{"censored not ascending", mkBatch("b", 1, testE-1, timedOut(dcBuckets("x", 3, 2, 5, 2), 5, 1, 3, 1)), InsertMalformed},
		{"censored repeated", mkBatch("b", 1, testE-1, timedOut(dcBuckets("x", 3, 2), 3, 1, 3, 1)), InsertMalformed},
		{"censored outside the buckets", mkBatch("b", 1, testE-1, timedOut(dcBuckets("x", 3, 2), 4, 1)), InsertMalformed},
		{"censored above the count", mkBatch("b", 1, testE-1, timedOut(dcBuckets("x", 3, 2), 3, 3)), InsertMalformed},
		{"censored zero", mkBatch("b", 1, testE-1, timedOut(dcBuckets("x", 3, 2), 3, 0)), InsertMalformed},
		{"censored and unknown", mkBatch("b", 1, testE-1, func() DestCounts {
			d := timedOut(dcBuckets("x", 3, 2), 3, 1)
			d.CensoringUnknown = true
			return d
		}()), InsertMalformed},
		{"censored in an empty destination", mkBatch("b", 1, testE-1, timedOut(DestCounts{Dest: "x"}, 3, 1)), InsertMalformed},
		{"too many dests", mkBatch("b", 1, testE-1, dcBuckets("w", 1, 1), dcBuckets("x", 1, 1), dcBuckets("y", 1, 1), dcBuckets("z", 1, 1)), InsertTooLarge},
		{"new", good(testE - 1), InsertNew},
		{"duplicate", good(testE - 1), InsertDuplicate},
		{"conflict", mkBatch("a", 1, testE-1, dcBuckets("x", 5, 2, 7, 2)), InsertConflict},
		{"other part", func() Batch { b := good(testE - 1); b.Key.Part = 1; return b }(), InsertNew},
		{"other boot", mkBatch("a", 2, testE-1, dcBuckets("x", 5, 2, 7, 2)), InsertNew},
		{"censored", mkBatch("d", 1, testE-1, timedOut(dcBuckets("y", 5, 2, 7, 2), 7, 2)), InsertNew},
		{"censored conflicts", mkBatch("d", 1, testE-1, timedOut(dcBuckets("y", 5, 2, 7, 2), 7, 1)), InsertConflict},
		{"censoring unknown", func() Batch {
			b := mkBatch("e", 1, testE-1, dcBuckets("y", 5, 1))
			b.Dests[0].CensoringUnknown = true
			return b
		}(), InsertNew},
		{"empty dest counts", mkBatch("c", 1, testE-1, DestCounts{Dest: "x"}), InsertNew},
	}
	f := newTestFleet(t, c, nil)
	want := FleetStats{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, f.Insert(tt.batch, now))
			want.Inserts[tt.want]++
			require.Equal(t, want.Inserts, f.Stats().Inserts)
			checkInvariants(t, f)
		})
	}
	// The conflict kept the first copy.
	b, ok := f.Lookup(BatchKey{Origin: "a", Boot: 1, Epoch: testE - 1})
	require.True(t, ok)
	require.Equal(t, []Bucket{{5, 2}, {7, 1}}, b.Dests[0].Buckets)
	// The view holds a (parts 0 and 1, boot 1) and a boot 2: one peer.
	e, err := f.Estimate("x", 1, now)
	require.NoError(t, err)
	require.Equal(t, uint64(3+3+4), e.Samples)
	require.Equal(t, 1, e.Peers, `"c" sent only empty counts`)
	e, err = f.Estimate("y", 1, now)
	require.NoError(t, err)
	require.Equal(t, uint64(5), e.Samples)
	require.Equal(t, uint64(2), e.Censored)
	require.Equal(t, 1, f.dests["y"].unknown, "e's censoring is unknown")
	require.Equal(t, "new", InsertNew.String())
	require.Equal(t, "origin_capped", InsertOriginCapped.String())
	require.Equal(t, "buckets_capped", InsertBucketsCapped.String())
	require.Equal(t, "unknown", InsertOutcome(200).String())
}

// TestFleetInsertCopies checks the caller may reuse a batch's memory.
func TestFleetInsertCopies(t *testing.T) {
	c := testFleetConfig()
	f := newTestFleet(t, c, nil)
	now := fleetAt(c, testE, 0)
	b := mkBatch("a", 1, testE-1, dcBuckets("y", 3, 1), dcBuckets("x", 5, 2))
	require.Equal(t, InsertNew, f.Insert(b, now))
	b.Dests[0].Buckets[0].Count = 99
	b.Dests[1].Dest = "z"
	got, ok := f.Lookup(b.Key)
	require.True(t, ok)
	require.Equal(t, []DestCounts{dcBuckets("x", 5, 2), dcBuckets("y", 3, 1)}, got.Dests)
	// The same contents in another order is a duplicate, not a conflict.
	require.Equal(t, InsertDuplicate, f.Insert(mkBatch("a", 1, testE-1, dcBuckets("x", 5, 2), dcBuckets("y", 3, 1)), now))
	checkInvariants(t, f)
}

// TestFleetHeldCompact checks the compact held form: a batch without
// censored counts holds no censored part, and Lookup hands back every
// batch as inserted, censored counts and unknown censoring included.
func TestFleetHeldCompact(t *testing.T) {
	c := testFleetConfig()
	f := newTestFleet(t, c, nil)
	now := fleetAt(c, testE, 0)
	plain := mkBatch("a", 1, testE-1, dcBuckets("x", 5, 2), dcBuckets("y", 3, 1))
	cens := dcBuckets("y", 3, 4)
	cens.TimedOut = []Bucket{{3, 1}}
	unknown := dcBuckets("z", 7, 1)
	unknown.CensoringUnknown = true
	mixed := mkBatch("b", 1, testE-1, dcBuckets("x", 5, 2), cens, unknown)
	for _, b := range []Batch{plain, mixed} {
		require.Equal(t, InsertNew, f.Insert(b, now))
		got, ok := f.Lookup(b.Key)
		require.True(t, ok)
		require.Equal(t, b, got)
		require.Equal(t, InsertDuplicate, f.Insert(got, now))
	}
	hb := f.members[memberKey{"a", 1}].epochs[testE-1].parts[0]
	require.Nil(t, hb.cens, "no censored part without censored counts")
	hb = f.members[memberKey{"b", 1}].epochs[testE-1].parts[0]
	require.Equal(t, []heldCensoring{{}, {timedOut: []Bucket{{3, 1}}}, {unknown: true}}, hb.cens)
	// Another censored count under the same key is a conflict.
	cens.TimedOut = []Bucket{{3, 2}}
	require.Equal(t, InsertConflict, f.Insert(mkBatch("b", 1, testE-1, dcBuckets("x", 5, 2), cens, unknown), now))
	checkInvariants(t, f)
}

// TestFleetWindow follows one batch through the view and out of the store.
func TestFleetWindow(t *testing.T) {
	c := testFleetConfig()
	N := int64(c.Tracker.SubWindows)
	f := newTestFleet(t, c, nil)
	e0 := int64(testE)
	b := mkBatch("a", 1, e0, dcBuckets("x", 10, 4))
	future := mkBatch("b", 1, e0+1, dcBuckets("x", 20, 1))
	require.Equal(t, InsertNew, f.Insert(b, fleetAt(c, e0, 0)))
	require.Equal(t, InsertNew, f.Insert(future, fleetAt(c, e0, 0)))
	samples := func(e int64) uint64 {
		est, err := f.Estimate("x", 0.5, fleetAt(c, e, 0))
		require.NoError(t, err)
		checkInvariants(t, f)
		return est.Samples
	}
	require.Equal(t, uint64(0), samples(e0), "the current epoch is not in the view")
	require.Equal(t, uint64(4), samples(e0+1))
	require.Equal(t, uint64(5), samples(e0+2))
	require.Equal(t, uint64(5), samples(e0+N-1), "last epoch with b in view")
	require.Equal(t, uint64(1), samples(e0+N), "b left the view")
	require.Len(t, f.Keys(fleetAt(c, e0+N+1, 0)), 2, "b is still held at E-N-1")
	require.Equal(t, uint64(0), f.Stats().Expired)
	require.Len(t, f.Keys(fleetAt(c, e0+N+2, 0)), 1, "b expired")
	require.Equal(t, uint64(1), f.Stats().Expired)
	require.Equal(t, 1, f.Stats().Members, "a forgotten once its data aged out")
	// A clock going backwards slides nothing.
	require.Len(t, f.Keys(fleetAt(c, e0, 0)), 1)
	// A long gap drops everything.
	require.Empty(t, f.Keys(fleetAt(c, e0+1000, 0)))
	s := f.Stats()
	require.Equal(t, 0, s.Members+s.Peers+s.Destinations+s.Batches+s.Buckets)
	checkInvariants(t, f)
}

func TestFleetMembership(t *testing.T) {
	c := testFleetConfig()
	N := int64(c.Tracker.SubWindows)
	f := newTestFleet(t, c, nil)
	now := fleetAt(c, testE, 0)
	ins := func(b Batch) { require.Equal(t, InsertNew, f.Insert(b, now)) }
	ins(mkBatch("a", 1, testE-1, dcBuckets("x", 10, 4)))
	ins(mkBatch("b", 1, testE-1, dcBuckets("x", 20, 2)))
	ins(mkBatch("b", 1, testE-2, dcBuckets("x", 20, 1)))
	est := func() Estimate {
		e, err := f.Estimate("x", 1, now)
		require.NoError(t, err)
		checkInvariants(t, f)
		return e
	}
	require.Equal(t, uint64(7), est().Samples)

	t.Run("exclude at once, keep batches", func(t *testing.T) {
		f.Exclude("b", 1, now)
		f.Exclude("b", 1, now) // idempotent
		e := est()
		require.Equal(t, uint64(4), e.Samples)
		require.Equal(t, 1, e.Peers)
		require.Len(t, f.Keys(now), 3)
		// Batches arriving for an excluded member are stored, not counted.
		ins(mkBatch("b", 1, testE-3, dcBuckets("x", 20, 5)))
		require.Equal(t, uint64(4), est().Samples)
	})
	t.Run("refutation includes again", func(t *testing.T) {
		f.Include("b", 1, now)
		f.Include("b", 1, now) // idempotent
		require.Equal(t, uint64(12), est().Samples)
		require.Equal(t, 2, est().Peers)
	})
	t.Run("restart is the same peer", func(t *testing.T) {
		ins(mkBatch("b", 2, testE-1, dcBuckets("x", 30, 3)))
		e := est()
		require.Equal(t, uint64(15), e.Samples)
		require.Equal(t, 2, e.Peers)
		// The old boot's member is declared dead: its batches leave the view.
		f.Exclude("b", 1, now)
		e = est()
		require.Equal(t, uint64(7), e.Samples)
		require.Equal(t, 2, e.Peers)
		require.Equal(t, 3, f.Stats().Members)
		require.Equal(t, 2, f.Stats().Peers)
	})
	t.Run("unknown member excluded in advance", func(t *testing.T) {
		f.Exclude("z", 9, now)
		ins(mkBatch("z", 9, testE-1, dcBuckets("x", 40, 1)))
		require.Equal(t, uint64(7), est().Samples)
		f.Include("nobody", 1, now) // unknown: nothing happens
	})
	t.Run("forget after data aged out", func(t *testing.T) {
		later := fleetAt(c, testE+N+2, 0)
		f.Advance(later)
		require.Equal(t, 0, f.Stats().Members)
		require.Equal(t, 2, f.Stats().Excluded, "exclusions stay while their batches could still be accepted")
		f.Advance(fleetAt(c, testE+N+3, 0))
		s := f.Stats()
		require.Equal(t, 0, s.Members)
		require.Equal(t, 0, s.Excluded)
		require.Equal(t, 0, s.Peers)
		require.Equal(t, 0, s.Batches)
		checkInvariants(t, f)
	})
}

// TestFleetExclusionOutlivesEviction is the reviewer's repro: a dead
// member's batches evicted by the MaxOrigins cap and delivered again must
// not count, and an unknown member excluded while the cap is full stays
// excluded.
func TestFleetExclusionOutlivesEviction(t *testing.T) {
	c := testFleetConfig()
	c.Self, c.MaxOrigins = "", 3
	N := int64(c.Tracker.SubWindows)
	f := newTestFleet(t, c, nil)
	now := fleetAt(c, testE, 0)
	samples := func() uint64 {
		e, err := f.Estimate("x", 1, now)
		require.NoError(t, err)
		checkInvariants(t, f)
		return e.Samples
	}
	dead := mkBatch("dead", 1, testE-1, dcBuckets("x", 9, 100))
	require.Equal(t, InsertNew, f.Insert(dead, now))
	f.Exclude("dead", 1, now)
	for _, o := range []string{"a", "b", "c"} {
		require.Equal(t, InsertNew, f.Insert(mkBatch(o, 1, testE-2, dcBuckets("x", 1, 1)), now))
	}
	require.Equal(t, uint64(1), f.Stats().OriginsEvicted, "dead was evicted first")
	_, held := f.Lookup(dead.Key)
	require.False(t, held)
	require.Equal(t, uint64(3), samples())

	require.Equal(t, InsertNew, f.Insert(dead, now), "stored again (evicting a, the oldest)")
	require.Equal(t, uint64(2), samples(), "but not counted: a's sample left, dead's never came")

	// An unknown member excluded while the cap is full stays excluded.
	f.Exclude("ghost", 1, now)
	require.Equal(t, 3, f.Stats().Members)
	require.Equal(t, 2, f.Stats().Excluded)
	require.Equal(t, InsertNew, f.Insert(mkBatch("ghost", 1, testE, dcBuckets("x", 1, 50)), now))
	require.Equal(t, uint64(2), samples(), "dead (excluded) was evicted for ghost, whose batch is not counted")

	// Include forgets the exclusion: dead's batch counts when delivered again.
	f.Include("dead", 1, now)
	require.Equal(t, 1, f.Stats().Excluded)
	require.Equal(t, InsertNew, f.Insert(dead, now), "evicting ghost, excluded")
	require.Equal(t, uint64(102), samples())

	// The exclusion of ghost lasts until nothing it sent can be accepted.
	f.Advance(fleetAt(c, testE+N+2, 0))
	require.Equal(t, 1, f.Stats().Excluded)
	f.Advance(fleetAt(c, testE+N+3, 0))
	require.Equal(t, 0, f.Stats().Excluded)
	checkInvariants(t, f)
}

// TestFleetExclusionsBounded checks the exclusions remembered are bounded
// by 4·MaxOrigins, the oldest forgotten first and counted.
func TestFleetExclusionsBounded(t *testing.T) {
	c := testFleetConfig()
	c.MaxOrigins = 2
	f := newTestFleet(t, c, nil)
	now := fleetAt(c, testE, 0)
	require.Equal(t, InsertNew, f.Insert(mkBatch("old", 1, testE-1, dcBuckets("x", 1, 1)), now))
	f.Exclude("old", 1, now)
	for i := range 8 {
		f.Exclude(fmt.Sprint("m", i), 1, fleetAt(c, testE+1, 0))
	}
	s := f.Stats()
	require.Equal(t, 8, s.Excluded)
	require.Equal(t, uint64(1), s.ExclusionsEvicted)
	require.Zero(t, s.Members, "the forgotten exclusion's batches went with it")
	f.Exclude("m3", 1, fleetAt(c, testE+1, 0)) // remembered already: nothing forgotten
	require.Equal(t, uint64(1), f.Stats().ExclusionsEvicted)
	f.Exclude("new", 1, fleetAt(c, testE+1, 0))
	require.Equal(t, uint64(2), f.Stats().ExclusionsEvicted)
	require.Equal(t, InsertNew, f.Insert(mkBatch("m0", 1, testE, dcBuckets("x", 1, 1)), fleetAt(c, testE+1, 0)),
		"m0 (same epoch, first by name) was forgotten: its batch counts")
	e, _ := f.Estimate("x", 1, fleetAt(c, testE+1, 0))
	require.Equal(t, uint64(1), e.Samples)
	checkInvariants(t, f)
}

// TestFleetReplay replays a seeded random message log once, and three times
// in other orders, and requires identical states.
func TestFleetReplay(t *testing.T) {
	c := testFleetConfig()
	N := int64(c.Tracker.SubWindows)
	r := rand.New(rand.NewPCG(7, 7))
	dests := []string{"d0", "d1", "d2", "d3", "d4"}
	var log []Batch
	for o := range 6 {
		for ep := testE - N - 3; ep <= testE+3; ep++ { // includes refused epochs
			b := randomBatch(r, fmt.Sprintf("o%d", o), uint64(o+1), ep, dests, 20)
			if r.IntN(2) == 0 {
				b = withTimeouts(r, b)
			}
			log = append(log, b)
			if r.IntN(4) == 0 {
				log = append(log, b) // a re-delivery
			}
		}
	}
	log = append(log, mkBatch("bad", 1, testE-1, dcBuckets("x", 2000, 1)))
	replay := func(times int, seed uint64) (*Fleet, string) {
		f := newTestFleet(t, c, nil)
		f.Exclude("o5", 6, fleetAt(c, testE, 0))
		var all []Batch
		for range times {
			all = append(all, log...)
		}
		rr := rand.New(rand.NewPCG(seed, 1))
		rr.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		for _, b := range all {
			f.Insert(b, fleetAt(c, testE, int64(rr.IntN(6000))))
		}
		checkInvariants(t, f)
		return f, fleetState(f)
	}
	f1, want := replay(1, 1)
	require.Positive(t, f1.Stats().Outcome(InsertNew))
	require.Positive(t, f1.Stats().Outcome(InsertTooOld))
	require.Positive(t, f1.Stats().Outcome(InsertTooNew))
	for seed := uint64(2); seed < 6; seed++ {
		_, got := replay(1, seed)
		require.Equal(t, want, got, "once, order %d", seed)
		f3, got := replay(3, seed)
		require.Equal(t, want, got, "three times, order %d", seed)
		require.Equal(t, f1.Stats().Outcome(InsertNew), f3.Stats().Outcome(InsertNew))
	}
}

// exactUnion sums, from the generated batches, the counts of dest over the
// view of epoch e, per peer and over all peers.
func exactUnion(batches []Batch, dest string, e, n int64, excluded map[memberKey]bool) (map[string][]uint64, []uint64) {
	perPeer := exactPerPeer(batches, dest, e, n, excluded, func(d *DestCounts) []Bucket { return d.Buckets })
	all := make([]uint64, 1280)
	for _, h := range perPeer {
		for i, c := range h {
			all[i] += c
		}
	}
	return perPeer, all
}

// exactCensoredPerPeer sums, from the generated batches, the censored
// counts of dest over the view of epoch e, per peer.
func exactCensoredPerPeer(batches []Batch, dest string, e, n int64, excluded map[memberKey]bool) map[string][]uint64 {
	return exactPerPeer(batches, dest, e, n, excluded, func(d *DestCounts) []Bucket { return d.TimedOut })
}

// exactPerPeer sums, per peer, the buckets pick takes from dest's counts in
// every generated batch of the view of epoch e whose member is not
// excluded.
func exactPerPeer(batches []Batch, dest string, e, n int64, excluded map[memberKey]bool, pick func(*DestCounts) []Bucket) map[string][]uint64 {
	perPeer := map[string][]uint64{}
	for _, b := range batches {
		if b.Key.Epoch < e-n+1 || b.Key.Epoch > e-1 || excluded[memberKey{b.Key.Origin, b.Key.Boot}] {
			continue
		}
		for i := range b.Dests {
			if b.Dests[i].Dest != dest {
				continue
			}
			if perPeer[b.Key.Origin] == nil {
				perPeer[b.Key.Origin] = make([]uint64, 1280)
			}
			for _, bk := range pick(&b.Dests[i]) {
				perPeer[b.Key.Origin][bk.Index] += uint64(bk.Count)
			}
		}
	}
	return perPeer
}

// exactCensored is the censored union, as non-zero buckets.
func exactCensored(batches []Batch, dest string, e, n int64, excluded map[memberKey]bool) map[int]uint64 {
	out := map[int]uint64{}
	for _, h := range exactCensoredPerPeer(batches, dest, e, n, excluded) {
		for i, c := range h {
			if c > 0 {
				out[i] += c
			}
		}
	}
	return out
}

// cappedCensored applies the share cap to exact per-peer censored counts by
// brute force: a capped peer's samples are laid out bucket by bucket, the
// censored ones last in each, and sample j (1-based) of its n is kept when
// floor(j·t/n) > floor((j−1)·t/n), which keeps exactly floor(n·t/n) = t
// of them spread evenly; the censored ones kept are counted.
func cappedCensored(perPeer, perPeerC map[string][]uint64, share float64) map[int]uint64 {
	var pcs []peerCount
	for name, h := range perPeer {
		var n uint64
		for _, c := range h {
			n += c
		}
		pcs = append(pcs, peerCount{&fleetPeer{name: name}, n})
	}
	slices.SortFunc(pcs, comparePeerCounts)
	k, t, ok := shareCap(pcs, share)
	out := map[int]uint64{}
	for x, pc := range pcs {
		h, hc := perPeer[pc.p.name], perPeerC[pc.p.name]
		var j uint64
		for i := range h {
			var ci uint64
			if hc != nil {
				ci = hc[i]
			}
			for s := range h[i] {
				j++
				if !ok || x >= k {
					if s >= h[i]-ci {
						out[i]++
					}
					continue
				}
				if j*t/pc.n > (j-1)*t/pc.n && s >= h[i]-ci {
					out[i]++
				}
			}
		}
	}
	for i, c := range out {
		if c == 0 {
			delete(out, i)
		}
	}
	return out
}

// viewCensored returns dest's fleet view's censored counts after the share
// cap, as non-zero buckets.
func viewCensored(f *Fleet, dest string) map[int]uint64 {
	out := map[int]uint64{}
	d := f.dests[dest]
	if d == nil {
		return out
	}
	c := &d.c
	if s := f.summary(d); s.capped {
		c = &s.cc
	}
	for k, i := range c.idx {
		out[int(i)] = c.n[k]
	}
	return out
}

// cappedUnion applies the share cap to exact per-peer counts with exact
// integer arithmetic: a capped peer's cumulative counts scaled by t/n and
// rounded down.
func cappedUnion(perPeer map[string][]uint64, share float64) []uint64 {
	var pcs []peerCount
	hists := map[*fleetPeer][]uint64{}
	for name, h := range perPeer {
		var n uint64
		for _, c := range h {
			n += c
		}
		p := &fleetPeer{name: name}
		hists[p] = h
		pcs = append(pcs, peerCount{p, n})
	}
	slices.SortFunc(pcs, func(a, b peerCount) int {
		if a.n != b.n {
			return map[bool]int{true: -1, false: 1}[a.n > b.n]
		}
		return map[bool]int{true: -1, false: 1}[a.p.name < b.p.name]
	})
	k, t, ok := shareCap(pcs, share)
	out := make([]uint64, 1280)
	for i, pc := range pcs {
		var cum, kept uint64
		for j, c := range hists[pc.p] {
			if ok && i < k {
				cum += c
				scaled := cum * t / pc.n // small counts in tests: no overflow
				c, kept = scaled-kept, scaled
			}
			out[j] += c
		}
	}
	return out
}

// TestShareCapLevelClamped checks shareCap never caps a peer to more than
// its count: in exact arithmetic the level is below the smallest capped
// count, but float64 rounding of counts near 2^58 put it above (this case,
// found by a random search, gave t = n+41 before the clamp), and capPeer's
// c−(k−kept) would underflow.
func TestShareCapLevelClamped(t *testing.T) {
	ns := []uint64{284724136982558742, 284724118333884265, 284724114446962967, 284724114446962954, 284724114446962945}
	pcs := make([]peerCount, len(ns))
	for i, n := range ns {
		pcs[i] = peerCount{&fleetPeer{name: fmt.Sprint(i)}, n}
	}
	k, tt, ok := shareCap(pcs, 0.2)
	require.True(t, ok)
	require.Equal(t, 3, k)
	require.LessOrEqual(t, tt, ns[k-1])
	r := rand.New(rand.NewPCG(3, 3))
	for range 100000 {
		base := r.Uint64N(1 << 58)
		for i := range pcs {
			pcs[i].n = base + r.Uint64N(1<<r.IntN(40))
		}
		slices.SortFunc(pcs, comparePeerCounts)
		share := []float64{0.1, 0.2, 0.25, 0.3, 0.33}[r.IntN(5)]
		if k, tt, ok := shareCap(pcs, share); ok {
			require.LessOrEqual(t, tt, pcs[k-1].n, "share %v counts %v", share, pcs)
		}
	}
}

// TestShareCapGates pins when the share cap bites at all: 4 peers or more,
// and the largest holding more than the share (exactly the share is not
// capped).
func TestShareCapGates(t *testing.T) {
	for _, tc := range []struct {
		ns   []uint64
		k    int
		t    uint64
		bite bool
	}{
		{ns: []uint64{90, 5, 5}},       // three peers: never
		{ns: []uint64{25, 25, 25, 25}}, // the largest holds exactly the share
		{[]uint64{70, 10, 10, 10}, 1, 10, true},
		{[]uint64{26, 25, 25, 24}, 3, 24, true}, // three capped to 24: each a quarter of 96
	} {
		pcs := make([]peerCount, len(tc.ns))
		for i, n := range tc.ns {
			pcs[i] = peerCount{&fleetPeer{name: fmt.Sprint(i)}, n}
		}
		k, tt, ok := shareCap(pcs, 0.25)
		require.Equal(t, tc.bite, ok, "%v", tc.ns)
		if ok {
			require.Equal(t, tc.k, k, "%v", tc.ns)
			require.Equal(t, tc.t, tt, "%v", tc.ns)
		}
	}
}

// TestFleetNodesConverge simulates nodes that each receive every batch, in
// their own order at their own times, and requires every fleet view to be
// bucket-for-bucket the exact union (and the capped union when one origin
// floods).
func TestFleetNodesConverge(t *testing.T) {
	for _, flood := range []bool{false, true} {
		t.Run(fmt.Sprintf("flood=%v", flood), func(t *testing.T) {
			c := testFleetConfig()
			N := int64(c.Tracker.SubWindows)
			r := rand.New(rand.NewPCG(11, 12))
			dests := []string{"db-1", "db-2", "db-3"}
			var batches []Batch
			for o := range 8 {
				per := 50
				if flood && o == 3 {
					per = 2000
				}
				for ep := testE - N + 1; ep <= testE-1; ep++ {
					batches = append(batches, withTimeouts(r, randomBatch(r, fmt.Sprintf("n%d", o), uint64(100+o), ep, dests, per)))
				}
			}
			excluded := map[memberKey]bool{{"n7", 107}: true}
			var views [][]uint64
			for node := range 5 {
				f := newTestFleet(t, c, nil)
				f.Exclude("n7", 107, fleetAt(c, testE, 0))
				order := slices.Clone(batches)
				rr := rand.New(rand.NewPCG(uint64(node), 3))
				rr.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
				for _, b := range order {
					require.Equal(t, InsertNew, f.Insert(b, fleetAt(c, testE, int64(rr.IntN(6000)))))
				}
				checkInvariants(t, f)
				for _, d := range dests {
					perPeer, all := exactUnion(batches, d, testE, N, excluded)
					want := all
					if flood {
						want = cappedUnion(perPeer, c.MaxOriginShare)
						require.NotEqual(t, all, want, "the cap bites")
					}
					got := f.ViewCounts(d, fleetAt(c, testE, 5999))
					gotC := viewCensored(f, d)
					wantC := exactCensored(batches, d, testE, N, excluded)
					if flood {
						perPeerC := exactCensoredPerPeer(batches, d, testE, N, excluded)
						wantC = cappedCensored(perPeer, perPeerC, c.MaxOriginShare)
					}
					require.Equal(t, wantC, gotC, "censored counts, node %d dest %s", node, d)
					require.Equal(t, want, got, "node %d dest %s", node, d)
					views = append(views, got)
					e, err := f.Estimate(d, 0.99, fleetAt(c, testE, 0))
					require.NoError(t, err)
					require.Equal(t, 7, e.Peers)
					require.Equal(t, SourceFleet, e.Source)
				}
			}
			for i := len(dests); i < len(views); i++ {
				require.Equal(t, views[i%len(dests)], views[i])
			}
		})
	}
}

// TestFleetShareCap checks the cap's arithmetic on hand-computed examples.
func TestFleetShareCap(t *testing.T) {
	tests := []struct {
		name    string
		share   float64
		peers   []DestCounts // one per peer
		samples uint64
		eff     float64
		buckets map[uint16]uint64 // expected view, nonzero buckets
	}{
		{
			name:  "three peers: no cap",
			share: 0.25,
			peers: []DestCounts{
				dcBuckets("x", 1, 700), dcBuckets("x", 2, 100), dcBuckets("x", 3, 100),
			},
			samples: 900, eff: 900.0 * 900 / (700*700 + 100*100 + 100*100),
			buckets: map[uint16]uint64{1: 700, 2: 100, 3: 100},
		},
		{
			name:  "one flooding peer scaled to 100 (cumulative counts rounded down)",
			share: 0.25,
			peers: []DestCounts{
				dcBuckets("x", 1, 3, 9, 697), dcBuckets("x", 2, 100), dcBuckets("x", 3, 100), dcBuckets("x", 4, 100),
			},
			// L = 0.25·300/0.75 = 100; cumulative 3·100/700 -> 0 at 1,
			// 700·100/700 = 100 at 9, so bucket 9 keeps 100: exactly the share.
			samples: 400, eff: 4,
			buckets: map[uint16]uint64{9: 100, 2: 100, 3: 100, 4: 100},
		},
		{
			name:  "a thin tail survives a slight cap",
			share: 0.25,
			peers: []DestCounts{
				dcBuckets("x", 1, 1, 2, 1, 3, 1, 10, 101), dcBuckets("x", 2, 100), dcBuckets("x", 3, 100), dcBuckets("x", 4, 100),
			},
			// n = 104, L = 100: cumulative 1, 2, 3, 104 scaled by 100/104
			// round down to 0, 1, 2, 100, so buckets 2 and 3 keep their one
			// sample each (per-bucket rounding would have kept neither).
			samples: 400, eff: 4,
			buckets: map[uint16]uint64{2: 1 + 100, 3: 1 + 100, 4: 100, 10: 98},
		},
		{
			name:  "share exactly at the cap: untouched",
			share: 0.25,
			peers: []DestCounts{
				dcBuckets("x", 1, 100), dcBuckets("x", 2, 100), dcBuckets("x", 3, 100), dcBuckets("x", 4, 100),
			},
			samples: 400, eff: 4,
			buckets: map[uint16]uint64{1: 100, 2: 100, 3: 100, 4: 100},
		},
		{
			name:  "two heavy peers both capped",
			share: 0.25,
			peers: []DestCounts{
				dcBuckets("x", 1, 400), dcBuckets("x", 2, 400), dcBuckets("x", 3, 100), dcBuckets("x", 4, 100),
			},
			// k=1: L = 0.25·600/0.75 = 200 < 400; k=2: L = 0.25·200/0.5 = 100.
			samples: 400, eff: 4,
			buckets: map[uint16]uint64{1: 100, 2: 100, 3: 100, 4: 100},
		},
		{
			name:  "share 0.5, five peers",
			share: 0.5,
			peers: []DestCounts{
				dcBuckets("x", 1, 1000), dcBuckets("x", 2, 10), dcBuckets("x", 3, 20), dcBuckets("x", 4, 30), dcBuckets("x", 5, 40),
			},
			// L = 0.5·100/0.5 = 100.
			samples: 200, eff: 200.0 * 200 / (100*100 + 10*10 + 20*20 + 30*30 + 40*40),
			buckets: map[uint16]uint64{1: 100, 2: 10, 3: 20, 4: 30, 5: 40},
		},
		{
			name:  "disabled",
			share: 0,
			peers: []DestCounts{
				dcBuckets("x", 1, 1000), dcBuckets("x", 2, 1), dcBuckets("x", 3, 1), dcBuckets("x", 4, 1),
			},
			samples: 1003, eff: 1003.0 * 1003 / (1000*1000 + 3),
			buckets: map[uint16]uint64{1: 1000, 2: 1, 3: 1, 4: 1},
		},
		{
			name:  "share below 1/peers: all capped to the smallest",
			share: 0.1,
			peers: []DestCounts{
				dcBuckets("x", 1, 50), dcBuckets("x", 2, 40), dcBuckets("x", 3, 30), dcBuckets("x", 4, 20),
			},
			samples: 80, eff: 4,
			buckets: map[uint16]uint64{1: 20, 2: 20, 3: 20, 4: 20},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testFleetConfig()
			c.MaxOriginShare = tt.share
			f := newTestFleet(t, c, nil)
			now := fleetAt(c, testE, 0)
			for i, d := range tt.peers {
				require.Equal(t, InsertNew, f.Insert(mkBatch(fmt.Sprintf("p%d", i), 1, testE-1, d), now))
			}
			e, err := f.Estimate("x", 1, now)
			require.NoError(t, err)
			require.Equal(t, tt.samples, e.Samples)
			require.Equal(t, len(tt.peers), e.Peers)
			require.InDelta(t, tt.eff, e.EffectivePeers, 1e-12)
			got := map[uint16]uint64{}
			for i, c := range f.ViewCounts("x", now) {
				if c > 0 {
					got[uint16(i)] = c
				}
			}
			require.Equal(t, tt.buckets, got)
			checkInvariants(t, f) // the cap never touches the uncapped view
		})
	}
}

func TestFleetEstimate(t *testing.T) {
	c := testFleetConfig()
	local := fakeLocal{}
	f := newTestFleet(t, c, local)
	now := fleetAt(c, testE, 1500) // 1.5 s into epoch E
	t.Run("quantile out of range", func(t *testing.T) {
		for _, q := range []float64{0, -1, 1.0001, math.NaN(), math.Inf(1)} {
			_, err := f.Estimate("x", q, now)
			require.ErrorIs(t, err, ErrQuantile)
			require.EqualError(t, err, fmt.Sprintf("tracker: quantile must be in (0, 1], got %v", q))
			_, ok := f.QuantileMillis("x", q, now)
			require.False(t, ok)
		}
	})
	t.Run("nothing known", func(t *testing.T) {
		e, err := f.Estimate("x", 0.99, now)
		require.NoError(t, err)
		require.Equal(t, Estimate{Dest: "x", Quantile: 0.99}, e)
		js, err := json.Marshal(e)
		require.NoError(t, err)
		require.JSONEq(t, `{"dest":"x","quantile":0.99,"source":"none","value_ms":null,"fleet_value_ms":null,
			"local_value_ms":null,"samples":0,"local_samples":0,"peers":0,"effective_peers":0,"staleness_ms":null,"trusted":false,
			"censored":0,"local_censored":0,"max_completed_ms":null,"failing":false}`, string(js))
	})
	// Peer a: 2 samples of 100 at E−3; self: 1 of 100 at E−2 → 3 samples, 2 peers.
	require.Equal(t, InsertNew, f.Insert(mkBatch("a", 1, testE-3, dc(t, "x", 100, 100)), now))
	require.Equal(t, InsertNew, f.Insert(mkBatch("self", 1, testE-2, dc(t, "x", 100)), now))
	require.Equal(t, InsertNew, f.Insert(mkBatch("self", 1, testE, dc(t, "x", 500)), now)) // current epoch: not in view
	t.Run("fleet trusted with auto MinPeers = 1", func(t *testing.T) {
		e, err := f.Estimate("x", 0.99, now)
		require.NoError(t, err)
		require.Equal(t, Estimate{
			Dest: "x", Quantile: 0.99, Source: SourceFleet, ValueMillis: 100,
			FleetValueMillis: 100, HasFleetValue: true, Samples: 3, Peers: 2,
			EffectivePeers: 9.0 / 5,                                     // (2+1)² / (2²+1²)
			Staleness:      7500 * time.Millisecond, HasStaleness: true, // end of E−2 is 6 s before E
			MaxCompletedMillis: 100, HasMaxCompleted: true,
			Decision: Decision{ValueMillis: 100},
		}, e)
		require.True(t, e.Trusted())
		js, err := json.Marshal(e)
		require.NoError(t, err)
		require.JSONEq(t, `{"dest":"x","quantile":0.99,"source":"fleet","value_ms":100,"fleet_value_ms":100,
			"local_value_ms":null,"samples":3,"local_samples":0,"peers":2,"effective_peers":1.8,"staleness_ms":7500,"trusted":true,
			"censored":0,"local_censored":0,"max_completed_ms":100,"failing":false}`, string(js))
	})
	t.Run("auto MinPeers follows live members", func(t *testing.T) {
		f.SetLiveMembers(5)
		require.Equal(t, 3, f.MinPeers())
		e, err := f.Estimate("x", 0.99, now)
		require.NoError(t, err)
		require.Equal(t, SourceNone, e.Source)
		require.False(t, e.Trusted())
		f.SetLiveMembers(2)
		require.Equal(t, 2, f.MinPeers())
		e, _ = f.Estimate("x", 0.99, now)
		require.Equal(t, SourceFleet, e.Source)
		f.SetLiveMembers(0)
		require.Equal(t, 1, f.MinPeers())
	})
	t.Run("explicit MinPeers and MinSamples", func(t *testing.T) {
		c2 := c
		c2.MinPeers = 3
		g := newTestFleet(t, c2, local)
		g.SetLiveMembers(1)
		require.Equal(t, 3, g.MinPeers())
		c2.MinPeers, c2.Tracker.MinSamples = 1, 4
		g = newTestFleet(t, c2, local)
		require.Equal(t, InsertNew, g.Insert(mkBatch("a", 1, testE-1, dc(t, "x", 1, 2, 3)), now))
		e, _ := g.Estimate("x", 0.5, now)
		require.Equal(t, SourceNone, e.Source)
		require.True(t, e.HasFleetValue)
		require.Equal(t, uint64(2), e.FleetValueMillis)
	})
	t.Run("local fallback and local guard", func(t *testing.T) {
		f.SetLiveMembers(5) // fleet untrusted (2 peers < 3)
		local["x"] = fakeView{ms: 150, samples: 2, ok: true}
		e, _ := f.Estimate("x", 0.99, now)
		require.Equal(t, SourceNone, e.Source, "2 local samples < MinSamples 3")
		require.Equal(t, uint64(150), e.LocalValueMillis)
		local["x"] = fakeView{ms: 150, samples: 3, ok: true}
		e, _ = f.Estimate("x", 0.99, now)
		require.Equal(t, SourceLocal, e.Source)
		require.Equal(t, uint64(150), e.ValueMillis)
		ms, ok := f.QuantileMillis("x", 0.99, now)
		require.True(t, ok)
		require.Equal(t, uint64(150), ms)

		f.SetLiveMembers(2) // fleet trusted at 100
		for _, tc := range []struct {
			local uint64
			want  uint64
			src   Source
		}{{120, 100, SourceFleet}, {121, 121, SourceLocal}, {50, 100, SourceFleet}} {
			local["x"] = fakeView{ms: tc.local, samples: 10, ok: true}
			e, err := f.Estimate("x", 0.99, now)
			require.NoError(t, err)
			ms, ok := e.DecisionValue()
			require.True(t, ok)
			require.Equal(t, tc.want, ms, "local %d", tc.local)
			require.Equal(t, tc.src, e.DecisionSource())
			require.Equal(t, tc.src == SourceLocal, e.Decision.Guarded)
			got, ok := f.QuantileMillis("x", 0.99, now)
			require.True(t, ok)
			require.Equal(t, tc.want, got, "the fleet as a timeout.Estimator applies the guard")
			// The estimate itself stays the fleet's.
			require.Equal(t, SourceFleet, e.Source)
			require.Equal(t, uint64(100), e.ValueMillis)
		}
		local["x"] = fakeView{ms: 1000, samples: 2, ok: true} // untrusted local: no guard
		e, _ = f.Estimate("x", 0.99, now)
		ms, _ = e.DecisionValue()
		require.Equal(t, uint64(100), ms)
		require.Equal(t, SourceFleet, e.DecisionSource())
		_, ok = f.QuantileMillis("nope", 0.99, now)
		require.False(t, ok)
	})
	t.Run("staleness moves with now", func(t *testing.T) {
		e, _ := f.Estimate("x", 0.99, fleetAt(c, testE+1, 2500))
		require.Equal(t, 2500*time.Millisecond, e.Staleness)
		require.Equal(t, uint64(4), e.Samples, "the batch of E entered the view")
	})
	require.Equal(t, "fleet", SourceFleet.String())
	require.Equal(t, "local", SourceLocal.String())
	require.Equal(t, "none", SourceNone.String())
}

func TestExceeds20(t *testing.T) {
	tests := []struct {
		local, fleet uint64
		want         bool
	}{
		{6, 5, false}, {7, 5, true}, {120, 100, false}, {121, 100, true}, {1, 0, true}, {0, 0, false},
		{math.MaxUint64, math.MaxUint64, false}, {math.MaxUint64, math.MaxUint64 / 2, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.local, "/", tt.fleet), func(t *testing.T) {
			require.Equal(t, tt.want, exceeds20(tt.local, tt.fleet))
		})
	}
}

// TestFleetHostile feeds batches meant to exhaust memory or break the sums
// and requires them bounded by the caps and counted.
func TestFleetHostile(t *testing.T) {
	c := testFleetConfig()
	c.MaxOrigins, c.MaxDestinations = 4, 8
	now := fleetAt(c, testE, 0)
	t.Run("huge counts", func(t *testing.T) {
		f := newTestFleet(t, c, nil)
		huge := DestCounts{Dest: "x"}
		for i := range 300 {
			huge.Buckets = append(huge.Buckets, Bucket{Index: uint16(i), Count: math.MaxUint32})
			huge.Total += math.MaxUint32
		}
		require.Equal(t, InsertTooLarge, f.Insert(mkBatch("h", 1, testE-1, huge), now))
		huge.Buckets, huge.Total = huge.Buckets[:200], 200*math.MaxUint32 // < 2^40
		b := mkBatch("h", 1, testE-1, huge)
		require.Equal(t, InsertNew, f.Insert(b, now))
		b.Key.Part = 1
		require.Equal(t, InsertTooLarge, f.Insert(b, now), "the epoch's samples are bounded over parts")
		for i := range 3 {
			require.Equal(t, InsertNew, f.Insert(mkBatch(fmt.Sprint("p", i), 1, testE-1, dcBuckets("x", 100, 10)), now))
		}
		e, err := f.Estimate("x", 0.5, now)
		require.NoError(t, err)
		require.Equal(t, 4, e.Peers)
		// The flooding peer is capped to a quarter (t = 0.25·30/0.75 = 10):
		// its cumulative counts scaled by 10/(200·(2^32−1)) cross an integer
		// every 20 buckets, so 10 of its buckets keep one sample each.
		require.Equal(t, uint64(40), e.Samples)
		require.InDelta(t, 4, e.EffectivePeers, 1e-12)
		checkInvariants(t, f)
	})
	t.Run("many destinations", func(t *testing.T) {
		f := newTestFleet(t, c, nil)
		mk := func(origin string, part uint16, from, n int) Batch {
			b := mkBatch(origin, 1, testE-1)
			b.Key.Part = part
			for i := range n {
				b.Dests = append(b.Dests, dcBuckets(fmt.Sprintf("d%03d", from+i), 1, 1))
			}
			return b
		}
		require.Equal(t, InsertTooLarge, f.Insert(mk("a", 0, 0, 9), now))
		require.Equal(t, InsertNew, f.Insert(mk("a", 0, 0, 8), now))
		require.Equal(t, InsertTooLarge, f.Insert(mk("a", 1, 8, 1), now), "dest entries per origin epoch bounded over parts")
		require.Equal(t, InsertNew, f.Insert(mk("b", 0, 8, 8), now))
		s := f.Stats()
		require.Equal(t, 8, s.Destinations)
		require.Equal(t, uint64(8), s.DestinationsEvicted)
		checkInvariants(t, f)
		// Evicted destinations' old counts stay out of their view.
		require.Equal(t, InsertNew, f.Insert(mk("c", 0, 0, 1), now))
		e, _ := f.Estimate("d000", 1, now)
		require.Equal(t, uint64(1), e.Samples)
		checkInvariants(t, f)
		// Exclusion and expiry release evicted states cleanly.
		f.Exclude("a", 1, now)
		checkInvariants(t, f)
		f.Advance(fleetAt(c, testE+100, 0))
		checkInvariants(t, f)
		require.Zero(t, f.Stats().Destinations)
	})
	t.Run("many origins", func(t *testing.T) {
		f := newTestFleet(t, c, nil)
		ins := func(o string, ep int64) InsertOutcome {
			return f.Insert(mkBatch(o, 1, ep, dcBuckets("x", 1, 1)), now)
		}
		require.Equal(t, InsertNew, ins("self", testE-5))
		require.Equal(t, InsertNew, ins("a", testE-4))
		require.Equal(t, InsertNew, ins("b", testE-3))
		require.Equal(t, InsertNew, ins("c", testE-2))
		require.Equal(t, InsertOriginCapped, ins("d", testE-4), "no held member is older than the newcomer but self")
		require.Equal(t, InsertNew, ins("d", testE-1), "evicts a (oldest, self protected)")
		_, ok := f.Lookup(BatchKey{Origin: "a", Boot: 1, Epoch: testE - 4})
		require.False(t, ok)
		_, ok = f.Lookup(BatchKey{Origin: "self", Boot: 1, Epoch: testE - 5})
		require.True(t, ok)
		f.Exclude("d", 1, now)
		require.Equal(t, InsertNew, ins("e", testE-6), "an excluded member goes first")
		s := f.Stats()
		require.Equal(t, uint64(2), s.OriginsEvicted)
		require.Equal(t, uint64(1), s.Outcome(InsertOriginCapped))
		require.Equal(t, 4, s.Members)
		checkInvariants(t, f)
	})
}

// fullDests returns n destinations named from prefix, each with every
// bucket of the default layout (1280) holding one sample.
func fullDests(prefix string, n int) []DestCounts {
	out := make([]DestCounts, n)
	for i := range out {
		d := DestCounts{Dest: fmt.Sprintf("%s%04d", prefix, i), Total: 1280, Buckets: make([]Bucket, 1280)}
		for j := range d.Buckets {
			d.Buckets[j] = Bucket{Index: uint16(j), Count: 1}
		}
		out[i] = d
	}
	return out
}

// TestFleetBucketBudget is a hostile member sending full destinations at
// the default caps: what it holds is bounded per epoch by MaxEpochBuckets
// (over parts), so over every accepted epoch by (N+3)·MaxEpochBuckets, and
// a realistic batch is still accepted.
func TestFleetBucketBudget(t *testing.T) {
	c := testFleetConfig()
	N := int64(c.Tracker.SubWindows)
	per := c.MaxEpochBuckets
	require.Equal(t, 1<<18, per, "the default")
	f := newTestFleet(t, c, nil)
	now := fleetAt(c, testE, 0)
	full := per / 1280 // 204 full destinations fit
	for ep := testE - N - 1; ep <= testE+1; ep++ {
		b := mkBatch("hostile", 1, ep, fullDests("h", full+1)...)
		require.Equal(t, InsertTooLarge, f.Insert(b, now), "epoch %d", ep)
		b.Dests = b.Dests[:full]
		require.Equal(t, InsertNew, f.Insert(b, now))
		b.Key.Part = 1
		b.Dests = fullDests("i", 1)
		require.Equal(t, InsertTooLarge, f.Insert(b, now), "the budget holds over parts")
		b.Dests[0].Buckets, b.Dests[0].Total = b.Dests[0].Buckets[:per-full*1280], uint64(per-full*1280)
		require.Equal(t, InsertNew, f.Insert(b, now), "up to the budget exactly")
		b.Key.Part = 2
		b.Dests[0].Buckets, b.Dests[0].Total = b.Dests[0].Buckets[:1], 1
		require.Equal(t, InsertTooLarge, f.Insert(b, now))
	}
	s := f.Stats()
	require.Equal(t, int(N+3)*per, s.Buckets, "(N+3)·MaxEpochBuckets, not (N+3)·4096·1280")
	require.Equal(t, uint64(3*(N+3)), s.Outcome(InsertTooLarge))

	// A busy node's epoch (100 destinations × 100 buckets) is accepted.
	busy := mkBatch("busy", 1, testE-1)
	for i := range 100 {
		d := DestCounts{Dest: fmt.Sprint("d", i)}
		for j := range 100 {
			d.Buckets = append(d.Buckets, Bucket{Index: uint16(10 * j), Count: 3})
			d.Total += 3
		}
		busy.Dests = append(busy.Dests, d)
	}
	require.Equal(t, InsertNew, f.Insert(busy, now))
	checkInvariants(t, f)
}

// TestFleetBucketCap checks the buckets held over all batches stay within
// MaxBuckets: beyond it new batches are refused and counted, re-deliveries
// are still recognised, and room comes back as batches expire.
func TestFleetBucketCap(t *testing.T) {
	c := testFleetConfig()
	c.MaxBuckets = 3 * 1280
	N := int64(c.Tracker.SubWindows)
	f := newTestFleet(t, c, nil)
	now := fleetAt(c, testE, 0)
	ins := func(o string, ep int64) InsertOutcome {
		return f.Insert(mkBatch(o, 1, ep, fullDests(o, 1)...), now)
	}
	require.Equal(t, InsertNew, ins("a", testE-N-1))
	require.Equal(t, InsertNew, ins("b", testE-1))
	require.Equal(t, InsertNew, ins("c", testE-1))
	require.Equal(t, InsertBucketsCapped, ins("d", testE-1))
	require.Equal(t, InsertBucketsCapped, ins("a", testE-1))
	require.Equal(t, InsertDuplicate, ins("b", testE-1), "a re-delivery is still recognised")
	unsorted := mkBatch("x", 1, testE-1, dcBuckets("z", 1, 1), dcBuckets("y", 1, 1))
	require.Equal(t, InsertBucketsCapped, f.Insert(unsorted, now))
	s := f.Stats()
	require.Equal(t, 3*1280, s.Buckets)
	require.Equal(t, uint64(3), s.Outcome(InsertBucketsCapped))
	checkInvariants(t, f)
	// a's batch expires: there is room again.
	now = fleetAt(c, testE+1, 0)
	require.Equal(t, InsertNew, f.Insert(mkBatch("d", 1, testE, fullDests("d", 1)...), now))
	checkInvariants(t, f)
}

// TestFleetJunkDestinations is a noisy peer sending as many junk
// destination names as it may, every accepted epoch: destinations several
// peers report keep their views, and when only those are held, junk is
// refused and counted instead.
func TestFleetJunkDestinations(t *testing.T) {
	c := testFleetConfig()
	N := int64(c.Tracker.SubWindows)
	now := fleetAt(c, testE, 0)
	junk := func(t *testing.T, f *Fleet, want InsertOutcome) {
		for ep := testE - N - 1; ep <= testE+1; ep++ {
			b := mkBatch("noisy", 1, ep)
			for i := range c.MaxDestinations {
				b.Dests = append(b.Dests, dcBuckets(fmt.Sprintf("junk-%d-%d", ep, i), 3, 1000))
			}
			require.Equal(t, want, f.Insert(b, now))
			checkInvariants(t, f)
		}
	}
	report := func(t *testing.T, f *Fleet, dests ...string) {
		for _, p := range []string{"p1", "p2", "p3"} {
			b := mkBatch(p, 1, testE-1)
			for _, d := range dests {
				b.Dests = append(b.Dests, dcBuckets(d, 5, 10))
			}
			require.Equal(t, InsertNew, f.Insert(b, now))
		}
	}
	requireView := func(t *testing.T, f *Fleet, dest string) {
		e, err := f.Estimate(dest, 0.5, now)
		require.NoError(t, err)
		require.Equal(t, 3, e.Peers, dest)
		require.Equal(t, uint64(30), e.Samples, dest)
	}

	t.Run("junk evicts only junk", func(t *testing.T) {
		c.MaxDestinations = 8
		f := newTestFleet(t, c, nil)
		report(t, f, "db", "cache")
		junk(t, f, InsertNew)
		requireView(t, f, "db")
		requireView(t, f, "cache")
		s := f.Stats()
		require.Equal(t, 8, s.Destinations)
		require.Equal(t, uint64(13*8-6), s.DestinationsEvicted, "all junk but the 6 newest")
		require.Zero(t, s.DestinationsRefused)
		// A single peer's destination is a candidate like junk.
		require.Equal(t, InsertNew, f.Insert(mkBatch("p1", 1, testE-2, dcBuckets("solo", 5, 1)), now))
		junk(t, f, InsertDuplicate) // nothing moves
		require.Contains(t, f.Destinations(now), "solo")
		checkInvariants(t, f)
	})
	t.Run("refused when only shared destinations are held", func(t *testing.T) {
		c.MaxDestinations = 2
		f := newTestFleet(t, c, nil)
		report(t, f, "db", "cache")
		junk(t, f, InsertNew)
		requireView(t, f, "db")
		requireView(t, f, "cache")
		s := f.Stats()
		require.Equal(t, 2, s.Destinations)
		require.Zero(t, s.DestinationsEvicted)
		require.Equal(t, uint64(13*2), s.DestinationsRefused)
		checkInvariants(t, f)
	})
}

func TestFleetKeysAndMissing(t *testing.T) {
	c := testFleetConfig()
	N := int64(c.Tracker.SubWindows)
	f := newTestFleet(t, c, nil)
	now := fleetAt(c, testE, 0)
	held := []BatchKey{
		{Origin: "b", Boot: 1, Epoch: testE - 2},
		{Origin: "a", Boot: 1, Epoch: testE - 1},
		{Origin: "a", Boot: 1, Epoch: testE - 2, Part: 1},
		{Origin: "a", Boot: 1, Epoch: testE - 2},
	}
	for _, k := range held {
		b := mkBatch(k.Origin, k.Boot, k.Epoch, dcBuckets("x", 1, 1))
		b.Key.Part = k.Part
		require.Equal(t, InsertNew, f.Insert(b, now))
	}
	require.Equal(t, []BatchKey{held[1], held[3], held[2], held[0]}, f.Keys(now))
	theirs := []BatchKey{
		held[0],
		{Origin: "c", Boot: 1, Epoch: testE - 3},
		{Origin: "c", Boot: 1, Epoch: testE + 1},
		{Origin: "c", Boot: 1, Epoch: testE + 2},     // would be refused
		{Origin: "c", Boot: 1, Epoch: testE - N - 2}, // would be refused
		{Origin: "a", Boot: 2, Epoch: testE - 3},
		{Origin: "c", Boot: 1, Epoch: testE - 3}, // repeated
	}
	require.Equal(t, []BatchKey{
		{Origin: "c", Boot: 1, Epoch: testE + 1},
		{Origin: "a", Boot: 2, Epoch: testE - 3},
		{Origin: "c", Boot: 1, Epoch: testE - 3},
	}, f.Missing(theirs, now))
	_, ok := f.Lookup(BatchKey{Origin: "zz"})
	require.False(t, ok)
	_, ok = f.Lookup(BatchKey{Origin: "a", Boot: 1, Epoch: testE - 7})
	require.False(t, ok)
	_, ok = f.Lookup(BatchKey{Origin: "a", Boot: 1, Epoch: testE - 1, Part: 3})
	require.False(t, ok)
}

// pubFactsOps drives a Fleet through random changes for the published
// facts tests: inserts (some of batches already held, some too old or too
// new), exclusions and inclusions, live members, aggregates, records into
// the local tracker when there is one, and time moving on within an
// epoch, to later epochs and back. step applies one change at *now.
type pubFactsOps struct {
	r     *rand.Rand
	c     FleetConfig
	g     geometry
	dests []string
	peers []string
	local *SyncTracker[string]
	part  uint16
}

func newPubFactsOps(t testing.TB, c FleetConfig, seed uint64, local *SyncTracker[string]) *pubFactsOps {
	g, err := newGeometry(c.Tracker.Layout())
	require.NoError(t, err)
	return &pubFactsOps{r: rand.New(rand.NewPCG(seed, 18)), c: c, g: g, local: local,
		dests: []string{"a", "b", "c", "a-destination-name-longer-than-16"},
		peers: []string{"p1", "p2", "p3", "p4", "p5"}}
}

func (o *pubFactsOps) counts(d string) DestCounts {
	return randomDestCounts(o.r, &o.g, d, 30, o.c.Tracker.Layout().Highest, false)
}

func (o *pubFactsOps) step(f *Fleet, now *time.Time) {
	r, sw := o.r, o.c.Tracker.SubWindow()
	ep := o.c.Tracker.Epoch(*now)
	switch k := r.IntN(20); {
	case k < 7:
		b := mkBatch(o.peers[r.IntN(len(o.peers))], 1, ep-int64(r.IntN(int(o.c.Tracker.SubWindows)+3))+1)
		b.Layout = o.c.Tracker.Layout()
		o.part++
		b.Key.Part = o.part % 3
		for _, d := range o.dests {
			if r.IntN(3) > 0 {
				b.Dests = append(b.Dests, o.counts(d))
			}
		}
		f.Insert(b, *now)
	case k < 8:
		f.Exclude(o.peers[r.IntN(len(o.peers))], 1, *now)
	case k < 9:
		f.Include(o.peers[r.IntN(len(o.peers))], 1, *now)
	case k < 10:
		f.SetLiveMembers(r.IntN(6))
	case k < 11:
		dc := o.counts(o.dests[r.IntN(len(o.dests))])
		a := Aggregate{Dest: dc.Dest, Epoch: ep - 1 - int64(r.IntN(2)), Layout: o.c.Tracker.Layout(),
			Peers: 1 + r.IntN(4), Newest: ep - 1, Coverage: Coverage{Records: 1 + r.Uint32N(9), Hash: r.Uint64()},
			Total: dc.Total, Buckets: dc.Buckets, TimedOut: dc.TimedOut, CensoringUnknown: dc.CensoringUnknown}
		addSquare(&a.SquareSum, a.Total)
		f.InsertAggregate(a, *now)
	case k < 12 && o.local != nil:
		o.local.RecordMillis(o.dests[r.IntN(len(o.dests))], uint64(1+r.IntN(500)), *now)
	case k < 15:
		*now = now.Add(time.Duration(r.Int64N(int64(sw) / 4))) // within the epoch, mostly
	case k < 17:
		*now = now.Add(sw * time.Duration(1+r.IntN(2)))
	case k < 18:
		*now = now.Add(-sw * time.Duration(1+r.IntN(2))) // before the Fleet's epoch: slides nothing
	}
}

// TestFleetPublishedFactsMatchUncached checks the estimates made from the
// published fleet facts (factsTable, read without the Fleet's lock)
// against EstimateUncached after every change of a random sequence, for
// each kind of local view, and that the published facts answered a good
// share of them.
func TestFleetPublishedFactsMatchUncached(t *testing.T) {
	steps := 150
	if os.Getenv("ATNODE_LONG") == "1" {
		steps = 5000
	}
	for _, tc := range []struct {
		name string
		mut  func(*FleetConfig)
	}{
		{"defaults", nil},
		{"share cap, min samples 4, 3 sub-windows", shareCapped(4)},
	} {
		for _, lk := range []string{"none", "fake", "sync"} {
			t.Run(tc.name+"/"+lk, func(t *testing.T) {
				c := testFleetConfig()
				if tc.mut != nil {
					tc.mut(&c)
				}
				local, st := localOfKind(t, c, lk, fakeLocal{"a": {ms: 90, samples: 50, ok: true}, "b": {ms: 9, samples: 3, ok: true, censored: 3}})
				f := newTestFleet(t, c, local)
				o := newPubFactsOps(t, c, 1, st)
				now := fleetAt(c, testE, 0)
				var hits, total int
				for i := range steps {
					o.step(f, &now)
					for _, d := range append(o.dests, "unknown") {
						for _, q := range []float64{0.5, 0.99, 1} {
							for k := range 2 { // the first may publish, the second read it
								if pf, _, _ := f.readFacts(d, q, now); pf != nil {
									hits++
								}
								total++
								got, err := f.Estimate(d, q, now)
								require.NoError(t, err)
								want, err := f.EstimateUncached(d, q, now)
								require.NoError(t, err)
								require.Equal(t, want, got, "step %d %s q=%v call %d", i, d, q, k)
								var in DecisionInput
								require.NoError(t, f.DecisionInput(&in, d, q, now))
								require.Equal(t, want.Input(), in, "step %d %s q=%v call %d", i, d, q, k)
							}
						}
					}
				}
				require.Greater(t, hits, total/3, "the published facts answered %d of %d estimates", hits, total)
			})
		}
	}
}

// TestFleetPublishedFactsConcurrent reads estimates in several goroutines
// while one changes the Fleet (bounded: 300 changes), under -race: every
// estimate read must be one the Fleet gave at some point of the sequence
// (EstimateUncached before or after a change at its time), never a mix of
// two, and the published facts must have answered some.
func TestFleetPublishedFactsConcurrent(t *testing.T) {
	for _, lk := range []string{"none", "fake", "sync"} {
		t.Run(lk, func(t *testing.T) {
			c := testFleetConfig()
			local, st := localOfKind(t, c, lk, fakeLocal{"a": {ms: 90, samples: 50, ok: true}})
			f := newTestFleet(t, c, local)
			o := newPubFactsOps(t, c, 2, nil) // the local tracker is not changed: its view is fixed
			if st != nil {
				st.RecordMillis("a", 80, fleetAt(c, testE, 0))
			}
			dests := append(slices.Clone(o.dests), "unknown")
			now := fleetAt(c, testE, 0)
			var cur atomic.Int64 // now, Unix ns
			cur.Store(now.UnixNano())
			valid := map[Estimate]bool{}
			record := func() {
				for _, d := range dests {
					e, err := f.EstimateUncached(d, 0.99, now)
					require.NoError(t, err)
					e.Staleness = 0
					valid[e] = true
				}
			}
			record()
			const readers = 3
			seen := make([]map[Estimate]bool, readers) // distinct estimates read
			hits := make([]int, readers)
			var done atomic.Bool
			var wg sync.WaitGroup
			for w := range readers {
				seen[w] = map[Estimate]bool{}
				wg.Go(func() {
					for i := 0; i < 100_000; i++ {
						last := done.Load()
						at := time.Unix(0, cur.Load())
						for _, d := range dests {
							if pf, _, _ := f.readFacts(d, 0.99, at); pf != nil {
								hits[w]++
							}
							e, err := f.Estimate(d, 0.99, at)
							if err != nil {
								panic(err)
							}
							if cur.Load() != at.UnixNano() {
								// Time moved on during the read: the Fleet's and the
								// local tracker's epochs only move forward, so an
								// estimate at a time already passed may mix a later
								// epoch's slide with it, which no estimate at one
								// instant of the sequence gives. Not checked.
								continue
							}
							e.Staleness = 0
							seen[w][e] = true
						}
						if last && i > 10 {
							return
						}
					}
				})
			}
			for range 300 {
				prev := now
				o.step(f, &now)
				if now.Before(prev) {
					now = prev // readers' times only move on
				}
				if now != prev {
					cur.Store(now.UnixNano())
				}
				record() // after the change at now, and any slide a reader made
			}
			done.Store(true)
			wg.Wait()
			var n int
			for w := range readers {
				n += hits[w]
				for e := range seen[w] {
					require.True(t, valid[e], "reader %d read an estimate the Fleet never gave: %+v", w, e)
				}
			}
			require.Positive(t, n, "the published facts answered none")
		})
	}
}

// localOfKind is a Fleet's local view of kind "none" (nil), "fake" (fake)
// or "sync" (a new SyncTracker, also returned).
func localOfKind(t *testing.T, c FleetConfig, kind string, fake fakeLocal) (localWindow, *SyncTracker[string]) {
	t.Helper()
	switch kind {
	case "fake":
		return fake, nil
	case "sync":
		st, err := NewSync[string](c.Tracker)
		require.NoError(t, err)
		return st, st
	}
	return nil, nil
}
