package tracker

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeLocal is a localWindow with fixed answers per destination.
type fakeLocal map[string]fakeView

// fakeView is one destination's local view: quantile ms of samples when
// ok; with censored > 0, M is m when hasM (else none), otherwise ms.
type fakeView struct {
	ms, samples uint64
	ok          bool
	censored    uint64
	m           uint64
	hasM        bool
}

func (l fakeLocal) viewOf(dest string, q float64, now time.Time) viewFacts {
	v := l[dest]
	switch {
	case !v.ok:
		return viewFacts{}
	case v.censored == 0:
		return viewFacts{q: v.ms, samples: v.samples, m: v.ms, hasM: true}
	default:
		return viewFacts{q: v.ms, samples: v.samples, censored: v.censored, m: v.m, hasM: v.hasM}
	}
}

// qsOK returns the view's quantile and samples, and whether it holds any
// sample: what localView returned before it carried censored counts.
func (v viewFacts) qsOK() (uint64, uint64, bool) { return v.q, v.samples, v.samples > 0 }

// view is a tracker's localView.
func view(t localWindow, dest string, q float64, now time.Time) viewFacts {
	return t.viewOf(dest, q, now)
}

const testE = 100000 // the epoch tests start in

func testFleetConfig() FleetConfig {
	c := DefaultFleetConfig()
	c.Self = "self"
	return c
}

// at returns a time inside epoch e, offset ms into it.
func fleetAt(c FleetConfig, e int64, ms int64) time.Time {
	return c.Tracker.EpochStart(e).Add(time.Duration(ms) * time.Millisecond)
}

func newTestFleet(t testing.TB, c FleetConfig, local localWindow) *Fleet {
	t.Helper()
	f, err := NewFleet(c, local)
	require.NoError(t, err)
	return f
}

// dc builds a destination's counts from latencies in ms.
func dc(t testing.TB, dest string, values ...int64) DestCounts {
	t.Helper()
	g, err := newGeometry(DefaultConfig().Layout())
	require.NoError(t, err)
	counts := map[int]uint32{}
	for _, v := range values {
		counts[g.index(v)]++
	}
	out := DestCounts{Dest: dest, Total: uint64(len(values))}
	for i, c := range counts {
		out.Buckets = append(out.Buckets, Bucket{Index: uint16(i), Count: c})
	}
	slices.SortFunc(out.Buckets, func(a, b Bucket) int { return int(a.Index) - int(b.Index) })
	return out
}

// dcBuckets builds a destination's counts from (index, count) pairs.
func dcBuckets(dest string, pairs ...uint32) DestCounts {
	out := DestCounts{Dest: dest}
	for i := 0; i < len(pairs); i += 2 {
		out.Buckets = append(out.Buckets, Bucket{Index: uint16(pairs[i]), Count: pairs[i+1]})
		out.Total += uint64(pairs[i+1])
	}
	return out
}

// timedOut returns d with censored counts from (index, count) pairs.
func timedOut(d DestCounts, pairs ...uint32) DestCounts {
	d.TimedOut = nil
	for i := 0; i < len(pairs); i += 2 {
		d.TimedOut = append(d.TimedOut, Bucket{Index: uint16(pairs[i]), Count: pairs[i+1]})
	}
	return d
}

// withTimeouts marks about a third of each destination's buckets of b as
// partly or entirely censored, at random.
func withTimeouts(r *rand.Rand, b Batch) Batch {
	for i := range b.Dests {
		d := &b.Dests[i]
		d.TimedOut = nil
		for _, bk := range d.Buckets {
			if r.IntN(3) == 0 {
				d.TimedOut = append(d.TimedOut, Bucket{Index: bk.Index, Count: 1 + r.Uint32N(bk.Count)})
			}
		}
	}
	return b
}

func mkBatch(origin string, boot uint64, ep int64, dests ...DestCounts) Batch {
	return Batch{
		Key:    BatchKey{Origin: origin, Boot: boot, Epoch: ep},
		Layout: DefaultConfig().Layout(),
		Dests:  dests,
	}
}

// randomBatch returns a batch of origin for epoch ep over dests, each with
// about perDest samples drawn from a per-destination latency profile.
func randomBatch(r *rand.Rand, origin string, boot uint64, ep int64, dests []string, perDest int) Batch {
	g, _ := newGeometry(DefaultConfig().Layout())
	b := mkBatch(origin, boot, ep)
	for di, d := range dests {
		if r.IntN(10) == 0 {
			continue // not every origin talks to every destination every epoch
		}
		counts := map[int]uint32{}
		n := perDest/2 + r.IntN(perDest)
		for range n {
			v := int64(5*(di+1)) + int64(r.ExpFloat64()*float64(10*(di+1)))
			counts[g.index(min(v, 60000))]++
		}
		out := DestCounts{Dest: d, Total: uint64(n)}
		for i, c := range counts {
			out.Buckets = append(out.Buckets, Bucket{Index: uint16(i), Count: c})
		}
		slices.SortFunc(out.Buckets, func(a, b Bucket) int { return int(a.Index) - int(b.Index) })
		b.Dests = append(b.Dests, out)
	}
	r.Shuffle(len(b.Dests), func(i, j int) { b.Dests[i], b.Dests[j] = b.Dests[j], b.Dests[i] })
	return b
}

// naiveViewCensored merges, from scratch, every counted batch the fleet
// holds for dest with an epoch in the view: the reference the incremental
// view must equal (counts, censored counts as a map of non-zero buckets, the
// entries whose censoring is unknown, samples per peer).
func naiveViewCensored(f *Fleet, dest string) (counts []uint64, censored map[int]uint64, unknown int, perPeer map[string]uint64) {
	counts = make([]uint64, f.geo.countsLen)
	censored = map[int]uint64{}
	perPeer = map[string]uint64{}
	for _, m := range f.members {
		for hb := range f.viewParts(m) {
			for i := range hb.dests {
				dc := hb.dest(i)
				if dc.Dest != dest || hb.ds[i] == nil || hb.ds[i].evicted {
					continue
				}
				for _, b := range dc.Buckets {
					counts[b.Index] += uint64(b.Count)
				}
				for _, b := range dc.TimedOut {
					censored[int(b.Index)] += uint64(b.Count)
				}
				if dc.CensoringUnknown {
					unknown++
				}
				perPeer[m.key.name] += dc.Total
			}
		}
	}
	return counts, censored, unknown, perPeer
}

// sparseMap returns s's entries as a map, checking they ascend, are
// non-zero and sum to its total.
func sparseMap(t testing.TB, s *sparseSum) map[int]uint64 {
	t.Helper()
	out := map[int]uint64{}
	var total uint64
	if len(s.n) != len(s.idx) {
		t.Fatalf("sparse sum of %d indices and %d counts", len(s.idx), len(s.n))
	}
	for k, i := range s.idx {
		if k > 0 && s.idx[k-1] >= i || s.n[k] == 0 {
			t.Fatalf("sparse sum not ascending or with a zero: %v %v", s.idx, s.n)
		}
		out[int(i)] = s.n[k]
		total += s.n[k]
	}
	if total != s.total {
		t.Fatalf("sparse sum total %d, counts sum to %d", s.total, total)
	}
	return out
}

// checkInvariants recomputes every destination's state from the held
// batches and compares it with the incremental one.
func checkInvariants(t testing.TB, f *Fleet) {
	t.Helper()
	batches, buckets := 0, 0
	refs := map[*destState]int{}
	require.LessOrEqual(t, len(f.excluded), 4*f.cfg.MaxOrigins)
	for k, ep := range f.excluded {
		if f.members[k] == nil {
			require.GreaterOrEqual(t, ep+1, f.epoch-f.n-1, "an expired exclusion of %v is kept", k)
		}
	}
	for _, m := range f.members {
		require.Same(t, m, f.members[m.key])
		require.Contains(t, m.peer.members, m)
		require.NotEmpty(t, m.epochs, "a member without batches is held")
		_, excl := f.excluded[m.key]
		require.Equal(t, excl, m.excluded, "member %v", m.key)
		for ep, me := range m.epochs {
			require.GreaterOrEqual(t, ep, f.epoch-f.n-1)
			require.LessOrEqual(t, ep, f.epoch+1)
			meBuckets := 0
			for part, hb := range me.parts {
				require.Equal(t, part, hb.key.Part)
				if hb.cens != nil {
					require.Len(t, hb.cens, len(hb.dests))
				}
				batches++
				buckets += hb.buckets
				meBuckets += hb.buckets
				for i, d := range hb.ds {
					if m.excluded {
						require.Nil(t, d)
					}
					if d != nil {
						refs[d]++
						require.Equal(t, hb.dests[i].name, d.name)
					}
				}
			}
			require.Equal(t, meBuckets, me.buckets)
			require.LessOrEqual(t, me.buckets, f.cfg.MaxEpochBuckets)
		}
	}
	require.Equal(t, batches, f.batches)
	require.Equal(t, buckets, f.buckets)
	require.LessOrEqual(t, f.buckets, f.cfg.MaxBuckets)
	require.LessOrEqual(t, len(f.dests), f.cfg.MaxDestinations)
	require.LessOrEqual(t, len(f.members), f.cfg.MaxOrigins)
	listed := map[*destState]bool{}
	for l := range f.lists {
		var prev *listNode[*destState]
		for n := f.lists[l].head; n != nil; n = n.next {
			d := n.v
			require.Same(t, d, f.dests[d.name])
			require.Same(t, n, &d.cand)
			require.Equal(t, int8(l), d.level, d.name)
			require.Same(t, prev, n.prev)
			require.False(t, listed[d])
			listed[d] = true
			prev = n
		}
		require.Same(t, prev, f.lists[l].tail)
	}
	for name, d := range f.dests {
		require.Equal(t, int8(min(len(d.contrib), 2)), d.level, name)
		require.Equal(t, d.level < 2, listed[d], name)
	}
	for name, d := range f.dests {
		require.Equal(t, refs[d], d.refs, name)
		require.Positive(t, d.refs, name)
		counts, censored, unknown, perPeer := naiveViewCensored(f, name)
		require.Equal(t, counts, d.h.counts, name)
		if got := sparseMap(t, &d.c); !maps.Equal(censored, got) {
			t.Fatalf("censored counts of %s: %v, rebuilt %v", name, got, censored)
		}
		require.Equal(t, unknown, d.unknown, name)
		for i, c := range censored {
			if c > counts[i] {
				t.Fatalf("C %d > H %d at %d of %s", c, counts[i], i, name)
			}
		}
		if s := f.summary(d); s.capped {
			for i, c := range sparseMap(t, &s.cc) {
				if c > s.ch.counts[i] || c > censored[i] {
					t.Fatalf("capped C %d at %d of %s: capped H %d, C %d", c, i, name, s.ch.counts[i], censored[i])
				}
			}
		}
		var total uint64
		for i, c := range counts {
			total += c
			require.Equal(t, c, d.h.counts[i])
		}
		require.Equal(t, total, d.h.total, name)
		hi := -1
		for i, c := range counts {
			if c != 0 {
				hi = i
			}
		}
		require.Equal(t, hi, d.h.hi, "highest non-empty index of %s", name)
		for b := range d.h.blocks {
			var s uint64
			for i := b << blockShift; i < min((b+1)<<blockShift, len(counts)); i++ {
				s += counts[i]
			}
			require.Equal(t, s, d.h.blocks[b])
		}
		got := map[string]uint64{}
		for p, c := range d.contrib {
			got[p.name] = c
		}
		require.Equal(t, perPeer, got, name)
	}
}

// fleetState is a canonical text of everything a Fleet holds (counters
// aside): equal states give equal texts.
func fleetState(f *Fleet) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "epoch %d\n", f.epoch)
	var ms []*fleetMember
	for _, m := range f.members {
		ms = append(ms, m)
	}
	slices.SortFunc(ms, func(a, b *fleetMember) int {
		return strings.Compare(fmt.Sprint(a.key), fmt.Sprint(b.key))
	})
	for _, m := range ms {
		fmt.Fprintf(&sb, "member %v excluded=%v\n", m.key, m.excluded)
	}
	var ex []string
	for k, ep := range f.excluded {
		ex = append(ex, fmt.Sprintf("%v@%d", k, ep))
	}
	slices.Sort(ex)
	fmt.Fprintf(&sb, "excluded %v\n", ex)
	for _, k := range f.Keys(f.cfg.Tracker.EpochStart(f.epoch)) {
		b, _ := f.Lookup(k)
		fmt.Fprintf(&sb, "batch %+v\n", b)
	}
	for _, name := range f.Destinations(f.cfg.Tracker.EpochStart(f.epoch)) {
		d := f.dests[name]
		fmt.Fprintf(&sb, "dest %q total %d epochN %v censored %v/%v unknown %d\n", name, d.h.total, d.epochN, d.c.idx, d.c.n, d.unknown)
		for i, c := range d.h.counts {
			if c > 0 {
				fmt.Fprintf(&sb, "  %d:%d", i, c)
			}
		}
		var ps []string
		for p, n := range d.contrib {
			ps = append(ps, fmt.Sprintf("%s=%d", p.name, n))
		}
		slices.Sort(ps)
		fmt.Fprintf(&sb, "\n  peers %v\n", ps)
	}
	return sb.String()
}

// randomDestCounts is a random record of dest d: 1 to maxN samples spread
// exponentially above a random base (each at most highest), sorted; one in
// six with its censoring unknown, one in three with a random part of its
// buckets timed out, and with failing one in six with every sample timed
// out (a failing view).
func randomDestCounts(r *rand.Rand, g *geometry, d string, maxN int, highest int64, failing bool) DestCounts {
	counts := map[int]uint32{}
	n := 1 + r.IntN(maxN)
	base := int64(5 + r.IntN(200))
	for range n {
		counts[g.index(min(base+int64(r.ExpFloat64()*float64(base)), highest))]++
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
	case 3:
		if failing {
			out.TimedOut = slices.Clone(out.Buckets)
		}
	}
	return out
}

// shareCapped sets a window of 3 one-second sub-windows, an origin share
// cap of 0.4 and minSamples: a configuration where the share cap bites.
func shareCapped(minSamples uint32) func(*FleetConfig) {
	return func(c *FleetConfig) {
		c.Tracker.MinSamples = minSamples
		c.Tracker.SubWindows = 3
		c.Tracker.Window = 3 * time.Second
		c.MaxOriginShare = 0.4
	}
}
