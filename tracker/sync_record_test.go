package tracker

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestShardTableMatchesMap inserts and deletes entries of a shard's open
// addressing table at random, with hashes of few distinct values so that
// keys share hashes, probes collide and wrap around the table, and
// compares every lookup, present keys and absent ones, with a map.
func TestShardTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 10 {
		hashOf := func(k int) uint64 { return uint64((k*7)%(3+round)) << 6 } // shard bits zero
		var sh syncShard[int]
		want := map[int]*entry[int]{}
		for step := range 2000 {
			k := rng.IntN(64)
			if en, ok := want[k]; ok {
				if rng.IntN(2) == 0 {
					sh.del(en)
					delete(want, k)
				}
			} else {
				en := &entry[int]{key: k, hash: hashOf(k)}
				sh.put(en)
				want[k] = en
			}
			require.Equal(t, int64(len(want)), sh.n.Load())
			require.LessOrEqual(t, 2*len(want), len(sh.slots))
			require.True(t, sh.get(hashOf(k), k) == want[k], "round %d key %d", round, k)
			if step%16 == 0 {
				for k := range 64 {
					require.True(t, sh.get(hashOf(k), k) == want[k], "round %d key %d", round, k)
				}
			}
		}
		n := 0
		sh.each(func(en *entry[int]) {
			require.True(t, want[en.key] == en)
			n++
		})
		require.Equal(t, len(want), n)
	}
}

// TestRecordHeldAndTags pins RecordHeldMillis (records only a held
// destination), RecordMillisTag (0 for a destination it creates) and
// SetTag (never creates; lost with eviction and Clear), and that all three
// record paths give the answers of RecordMillis.
func TestRecordHeldAndTags(t *testing.T) {
	c := DefaultConfig()
	c.MaxDestinations = 1
	tr, err := NewSync[string](c)
	require.NoError(t, err)
	ref, err := NewSync[string](c)
	require.NoError(t, err)
	now := c.EpochStart(1000)

	tag, held := tr.RecordHeldMillis("a", 10, now)
	require.False(t, held)
	require.Zero(t, tag)
	require.Zero(t, tr.Recorded(), "nothing recorded for a destination not held")
	tr.SetTag("a", 5)
	require.Zero(t, tr.RecordMillisTag("a", 10, now), "SetTag created nothing; the record creates a")
	ref.RecordMillis("a", 10, now)
	tr.SetTag("a", 7)
	require.Equal(t, uint64(7), tr.RecordMillisTag("a", 20, now))
	tag, held = tr.RecordHeldMillis("a", 30, now)
	require.True(t, held)
	require.Equal(t, uint64(7), tag)
	ref.RecordMillis("a", 20, now)
	ref.RecordMillis("a", 30, now)

	tr.RecordMillis("b", 40, now) // evicts a
	ref.RecordMillis("b", 40, now)
	_, held = tr.RecordHeldMillis("a", 10, now)
	require.False(t, held, "a was evicted")
	require.Zero(t, tr.RecordMillisTag("a", 50, now), "a new a has no tag")
	ref.RecordMillis("a", 50, now)
	tr.SetTag("a", 9)
	tr.Clear()
	ref.Clear()
	require.Zero(t, tr.RecordMillisTag("a", 60, now))
	ref.RecordMillis("a", 60, now)

	require.Equal(t, ref.Recorded(), tr.Recorded())
	for _, d := range []string{"a", "b"} {
		q1, ok1 := tr.QuantileMillis(d, 0.5, now)
		q2, ok2 := ref.QuantileMillis(d, 0.5, now)
		require.Equal(t, ok2, ok1, d)
		require.Equal(t, q2, q1, d)
		require.Equal(t, ref.Samples(d, now), tr.Samples(d, now), d)
	}
}

// TestEvictionMatchesTracker replays seeded floods of new names among
// steady, often recorded ones, under a bound above evictionCandidates (so
// evictions choose among candidates spread over shards, some recorded,
// moved or evicted since the last one), with clock steps and an occasional
// Clear, and requires the SyncTracker to hold exactly the destinations and
// samples the Tracker holds after every record.
func TestEvictionMatchesTracker(t *testing.T) {
	c := DefaultConfig()
	c.MaxDestinations = 40
	c.MinSamples = 0
	names := make([]string, 200)
	for i := range names {
		names[i] = fmt.Sprintf("n%03d", i)
	}
	for seed := range uint64(3) {
		rng := rand.New(rand.NewPCG(seed, 11))
		tr, err := New[string](c)
		require.NoError(t, err)
		st, err := NewSync[string](c)
		require.NoError(t, err)
		now := c.EpochStart(1000)
		for i := range 6000 {
			var d string
			switch r := rng.IntN(10); {
			case r < 5: // steady: 10 names
				d = names[rng.IntN(10)]
			case r < 9: // the flood
				d = names[10+rng.IntN(190)]
			default:
				now = now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
				continue
			}
			if i%1500 == 1499 {
				tr.Clear()
				st.Clear()
			}
			ms := uint64(rng.IntN(300))
			tr.RecordMillis(d, ms, now)
			st.RecordMillis(d, ms, now)
			require.Equal(t, Stats(tr).DestinationsEvicted, Stats(st).DestinationsEvicted, "seed %d op %d", seed, i)
			if i%40 == 0 {
				for _, n := range names {
					require.Equal(t, tr.Samples(n, now), st.Samples(n, now), "seed %d op %d %s", seed, i, n)
				}
			}
		}
		require.NotZero(t, Stats(st).DestinationsEvicted)
	}
}

// TestListMatchesSlice applies random pushes, removals and moves to a list
// and to a slice and compares both directions of the list after each.
func TestListMatchesSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	nodes := make([]listNode[int], 8)
	for i := range nodes {
		nodes[i].v = i
	}
	var l list[int]
	var want []int // head first
	for step := range 3000 {
		i := rng.IntN(len(nodes))
		n := &nodes[i]
		k := slices.Index(want, i)
		switch op := rng.IntN(4); {
		case k < 0 && op < 2:
			l.pushFront(n)
			want = slices.Insert(want, 0, i)
		case k < 0:
			l.pushBack(n)
			want = append(want, i)
		case op == 0:
			l.remove(n)
			want = slices.Delete(want, k, k+1)
		case op == 1:
			l.moveToBack(n)
			want = append(slices.Delete(want, k, k+1), i)
		default:
			l.moveToFront(n)
			want = slices.Insert(slices.Delete(want, k, k+1), 0, i)
		}
		var fwd, back []int
		for x := l.head; x != nil; x = x.next {
			fwd = append(fwd, x.v)
		}
		for x := l.tail; x != nil; x = x.prev {
			back = append(back, x.v)
		}
		slices.Reverse(back)
		require.True(t, slices.Equal(want, fwd), "step %d: %v, want %v", step, fwd, want)
		require.True(t, slices.Equal(fwd, back), "step %d: %v backwards %v", step, fwd, back)
	}
}

// TestStrHashSpreads checks the string hash that chooses a destination's
// shard and slot: equal names hash equally (a copy of the bytes too),
// names of every length up to 40 and names differing in one byte anywhere
// hash differently, and the shards of 64·100 names like a node's are
// spread (each shard within 50–150 % of its share).
func TestStrHashSpreads(t *testing.T) {
	const seed = 0x9e3779b97f4a7c15
	seen := map[uint64]string{}
	add := func(s string) {
		h := strHash(seed, s)
		require.Equal(t, h, strHash(seed, string([]byte(s))), "%q", s)
		if o, ok := seen[h]; ok {
			require.Equal(t, o, s, "collision")
		}
		seen[h] = s
	}
	base := []byte("abcdefghijklmnopqrstuvwxyz0123456789ABCD")
	for n := range len(base) + 1 {
		add(string(base[:n]))
		for i := range n {
			b := slices.Clone(base[:n])
			b[i] ^= 1
			add(string(b))
		}
	}
	var shards [numShards]int
	const names = 100 * numShards
	for i := range names {
		shards[strHash(seed, fmt.Sprintf("dest-%04d", i))&(numShards-1)]++
	}
	for k, c := range shards {
		require.True(t, c >= 50 && c <= 150, "shard %d holds %d of %d", k, c, names)
	}
	require.NotEqual(t, strHash(seed, "dest-01"), strHash(seed+1, "dest-01"))
}

// TestSyncConcurrentRecordPaths runs every record path (RecordMillis,
// RecordTimeoutMillis, RecordHeldMillis, RecordMillisTag, SetTag) from
// four goroutines over 30 names under MaxDestinations 12, with times
// rising through 25 epochs (rotations and gaps), while two more read
// (QuantileMillis, LocalEstimate, SealedSubWindow, Samples, Recorded) and
// evictions run: every record the calls report is counted exactly once,
// the bound holds once they return, and each window and the shards'
// bookkeeping stay consistent. Bounded: 4·1500 records.
func TestSyncConcurrentRecordPaths(t *testing.T) {
	const writers, perWriter, names, max = 4, 1500, 30, 12
	st := newST(t, func(c *Config) { c.MaxDestinations = max })
	base := int64(1_700_000_000_000) - 1_700_000_000_000%sub
	var recorded atomic.Uint64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 8))
			<-start
			for i := range perWriter {
				now := at(base + int64(i)*25*sub/perWriter + r.Int64N(sub/2))
				d := fmt.Sprintf("d%d", r.IntN(names))
				ms := uint64(r.IntN(3000))
				switch r.IntN(5) {
				case 0:
					st.RecordMillis(d, ms, now)
					recorded.Add(1)
				case 1:
					st.RecordTimeoutMillis(d, ms, now)
					recorded.Add(1)
				case 2:
					if _, held := st.RecordHeldMillis(d, ms, now); held {
						recorded.Add(1)
					}
				case 3:
					st.RecordMillisTag(d, ms, now)
					recorded.Add(1)
				case 4:
					st.SetTag(d, uint64(i))
				}
			}
		})
	}
	stopReaders := readUntilStopped(2, func(k, i int) {
		d := fmt.Sprintf("d%d", i%names)
		now := at(base + int64(i%25)*sub)
		if k == 0 {
			st.QuantileMillis(d, 0.99, now)
			_, err := LocalEstimate(st, d, 0.9, now)
			require.NoError(t, err)
		} else {
			SealedSubWindow(st, st.s.cfg.Epoch(now)-1, now)
			st.Samples(d, now)
			st.Recorded()
		}
	})
	close(start)
	wg.Wait()
	stopReaders()

	require.Equal(t, recorded.Load(), st.Recorded())
	require.LessOrEqual(t, st.destinations(), max)
	require.Equal(t, int64(st.destinations()), st.count.Load())
	require.NotZero(t, st.trackerStats().DestinationsEvicted)
	require.Equal(t, st.destinations(), checkOrders(t, st))
	for _, en := range syncEntries(st) {
		checkWindowInvariants(t, &st.s.geo, &en.window)
	}
}

// TestSmallIndexTable checks the table settings.index reads for small
// latencies against the layout's computation, for every entry and across
// its end, with the default highest latency and with one inside the
// table (whose samples above it are clamped).
func TestSmallIndexTable(t *testing.T) {
	for _, mut := range []func(*Config){
		nil,
		func(c *Config) { c.MaxTrackableLatency = 500 * time.Millisecond },
		func(c *Config) { c.MaxTrackableLatency = 2 * time.Millisecond },
	} {
		s, err := newSettings(testConfig(mut))
		require.NoError(t, err)
		require.Equal(t, min(smallIndexes, s.highest+1), uint64(len(s.small)))
		for ms := range uint64(smallIndexes + 200) {
			want := s.geo.index(int64(min(ms, s.highest)))
			require.Equal(t, want, s.index(ms), "ms %d", ms)
		}
		require.Equal(t, s.geo.index(int64(s.highest)), s.index(1<<62))
	}
}

// checkOrders checks every shard's eviction order of st (quiescent): a
// min-heap by placed stamp, each destination's placed stamp at most its
// current one (a later record only raises it), and exactly the shard's
// destinations, once each. It returns how many destinations the orders
// hold.
func checkOrders[D comparable](t *testing.T, st *SyncTracker[D]) int {
	t.Helper()
	total := 0
	for k := range st.shards {
		sh := &st.shards[k]
		h := sh.order.h
		seen := map[*entry[D]]bool{}
		for i, p := range h {
			if i > 0 {
				require.LessOrEqual(t, h[(i-1)/4].stamp, p.stamp, "shard %d: a heap by placed stamp", k)
			}
			require.LessOrEqual(t, p.stamp, p.en.stamp, "shard %d: placed no later than recorded", k)
			require.True(t, sh.get(p.en.hash, p.en.key) == p.en, "shard %d: an entry held there", k)
			require.False(t, seen[p.en], "shard %d: an entry placed twice", k)
			seen[p.en] = true
		}
		require.Equal(t, int(sh.n.Load()), len(h), "shard %d: every entry placed", k)
		total += len(h)
	}
	return total
}

// TestRecencyMatchesSort applies random creations, records (raising a
// placed destination's stamp, as a record does, without telling the
// heap) and removals at any index to a shard's recency heap, and after
// each compares the destinations read in order as evict reads them (the
// root made fresh, then the least of a frontier of fresh children) with
// all of them sorted by current stamp.
func TestRecencyMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 1))
	var r recency[int]
	var in []*entry[int]
	seq := uint64(0)
	for step := range 5000 {
		switch op := rng.IntN(10); {
		case op < 3 || len(in) == 0:
			seq++
			en := &entry[int]{key: step, stamp: seq}
			r.push(en)
			in = append(in, en)
		case op < 8:
			seq++
			in[rng.IntN(len(in))].stamp = seq
		default:
			i := rng.IntN(len(r.h))
			en := r.h[i].en
			r.removeAt(i)
			in = slices.DeleteFunc(in, func(x *entry[int]) bool { return x == en })
		}
		want := slices.SortedFunc(slices.Values(in), func(a, b *entry[int]) int { return cmp.Compare(a.stamp, b.stamp) })
		var got []*entry[int]
		if len(r.h) > 0 {
			r.fix(0)
			for f := []int{0}; len(f) > 0; {
				m := 0
				for x := range f {
					if r.h[f[x]].stamp < r.h[f[m]].stamp {
						m = x
					}
				}
				i := f[m]
				if r.h[i].en.stamp != r.h[i].stamp {
					t.Fatalf("step %d: read stale: stamp %d, held %d", step, r.h[i].en.stamp, r.h[i].stamp)
				}
				got = append(got, r.h[i].en)
				f = slices.Delete(f, m, m+1)
				from, to := r.children(i)
				for c := from; c < to; c++ {
					r.fix(c)
					f = append(f, c)
				}
			}
		}
		// Plain comparisons: a require call per element is most of the
		// test's time under -race.
		if !slices.Equal(want, got) {
			require.Equal(t, want, got, "step %d", step) // the failure's diff
		}
		for i := 1; i < len(r.h); i++ {
			if r.h[(i-1)/4].stamp > r.h[i].stamp {
				t.Fatalf("step %d: not a heap at %d: parent stamp %d > %d", step, i, r.h[(i-1)/4].stamp, r.h[i].stamp)
			}
		}
	}
}

// TestShortHashIsWyhash checks that the record's inline hash of a short
// name is wyhash's, so every path chooses the same shard and slot, for
// every length up to 16 bytes and random seeds and bytes.
func TestShortHashIsWyhash(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 3))
	for range 2000 {
		seed := rng.Uint64()
		b := make([]byte, rng.IntN(17))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		s := string(b)
		require.Equal(t, wyhash(seed, s, seed).hash, shortHash(seed, s), "%q", s)
		require.Equal(t, wyhash(seed, s, seed).hash, strHash(seed, s), "%q", s)
	}
}

// TestIsKeyMatchesEquality compares isKey, which compares a short key's
// words and length, with the keys' equality over pairs of short names,
// among them names of equal words and different lengths ("aaaa" and
// "aaaaa", "cccccccc" and "ccccccccc" read the same two words), and
// random ones over a two-letter alphabet.
func TestIsKeyMatchesEquality(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 4))
	keys := []string{"", "a", "aa", "aaa", "aaaa", "aaaaa", "aaaaaaa", "cccccccc", "ccccccccc", "cccccccccccccccc", "abcdefghabcdefgh", "abcdefgh"}
	for range 300 {
		b := make([]byte, rng.IntN(17))
		for i := range b {
			b[i] = "ab"[rng.IntN(2)]
		}
		keys = append(keys, string(b))
	}
	same := 0
	for _, k := range keys {
		en := &entry[string]{key: k}
		en.words[0], en.words[1] = shortWords(k)
		const h = 0x9e3779b97f4a7c15 // one hash for all: only the key decides
		s := destSlot[string]{hash: slotHash(h, k), en: en}
		for _, o := range keys {
			a, b := shortWords(o)
			require.Equal(t, k == o, s.isKey(slotHashLen(h|uint64(rng.IntN(numShards)), len(o)), a, b), "%q, %q", k, o)
			if k != o && en.words == [2]uint64{a, b} {
				same++
			}
		}
	}
	require.NotZero(t, same, "some distinct names share words")
}

// TestCommonRecordTakesTheQuickPath pins which records recordMillis does
// itself and which it leaves to recordAny: a completed sample of a held
// short name in the current epoch is recorded without recordAny (were the
// written-out hash to differ from strHash, every record would fall
// through, still right but slow); a creation, a timeout, a long name, a
// latency beyond the small table and the first record of a new epoch go
// through recordAny. The answers of both paths are checked against
// Tracker by TestSyncMatchesTracker and TestEvictionMatchesTracker.
func TestCommonRecordTakesTheQuickPath(t *testing.T) {
	st := newST(t, nil)
	anyRecs := func() uint64 {
		return st.sumShards(func(sh *syncShard[string]) uint64 { return sh.anyRecs })
	}
	now := st.s.cfg.EpochStart(1000)
	long := "a-destination-name-longer-than-16-bytes"
	names := []string{"", "a", "abc", "abcd", "abcdefg", "abcdefgh", "abcdefghijklmnop", long}
	for _, d := range names {
		st.RecordMillis(d, 5, now)
	}
	base := anyRecs()
	require.Equal(t, uint64(len(names)), base, "each creation goes through recordAny")
	for range 3 {
		for _, d := range names[:len(names)-1] {
			st.RecordMillis(d, 5, now)
			_, held := st.RecordHeldMillis(d, 7, now.Add(time.Millisecond))
			require.True(t, held)
		}
	}
	require.Equal(t, base, anyRecs(), "records of held short names in the epoch")
	for i, rec := range []func(){
		func() { st.RecordMillis(long, 5, now) },
		func() { st.RecordTimeoutMillis("abc", 5, now) },
		func() { st.RecordMillis("abc", uint64(len(st.s.small)), now) },
		func() { st.RecordMillis("new", 5, now) },
		func() { st.RecordHeldMillis("absent", 5, now) },
		func() { st.RecordMillis("abc", 5, st.s.cfg.EpochStart(1001)) },
	} {
		rec()
		require.Equal(t, base+uint64(i)+1, anyRecs(), "record %d goes through recordAny", i)
	}
	st.RecordMillis("abc", 5, st.s.cfg.EpochStart(1001))
	require.Equal(t, base+6, anyRecs(), "after its rotation, abc's records are quick again")
}
