package tracker

import (
	"fmt"
	"hash/maphash"
	"testing"
)

// BenchmarkRecordEvictingSteady records, round robin, into MaxDestinations
// (10 000) destinations that are all in use, and every 100th op a new
// name, which evicts one of them: a bounded tracker at its working set
// with a trickle of new names, where every destination is recorded
// between two evictions (per op: the 99 records plus a hundredth of an
// eviction). An eviction order that is rebuilt when it goes stale pays
// its rebuild at every eviction here.
func BenchmarkRecordEvictingSteady(b *testing.B) {
	c := DefaultConfig()
	c.MaxDestinations = 10_000
	for _, im := range recTrackers(c) {
		b.Run(im.name, func(b *testing.B) {
			t, err := im.make()
			if err != nil {
				b.Fatal(err)
			}
			steady := make([]string, c.MaxDestinations)
			for i := range steady {
				steady[i] = fmt.Sprint("d", i)
				t.RecordMillis(steady[i], 5, benchStart)
			}
			fresh := make([]string, 1<<16)
			for i := range fresh {
				fresh[i] = fmt.Sprint("new-", i)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if i%100 == 99 {
					t.RecordMillis(fresh[(i/100)&(len(fresh)-1)], 5, benchStart)
				} else {
					t.RecordMillis(steady[i%len(steady)], 5, benchStart)
				}
				i++
			}
		})
	}
}

// BenchmarkRecordParts takes a SyncTracker record apart, each step alone
// on the state the whole record sees (64 destinations, one epoch, 12 ms
// samples), so that one run shows where a record's time goes: the epoch
// (advance's common case), the bucket index (the table, with the
// computation it replaced beside it), the name's hash (strHash, with
// maphash.String, which it replaced, beside it), the shard lock, the
// table lookup, the eviction order's shared sequence, the window's count;
// then the whole record, bounded and unbounded. The parts do not add up
// exactly: the whole overlaps them.
func BenchmarkRecordParts(b *testing.B) {
	bounded := DefaultConfig()
	bounded.MaxDestinations = 10_000
	st, err := NewSync[string](bounded)
	if err != nil {
		b.Fatal(err)
	}
	un, err := NewSync[string](DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	dests := make([]string, 64)
	for i := range dests {
		dests[i] = fmt.Sprintf("dest-%02d", i)
		st.RecordMillis(dests[i], 12, benchStart)
		un.RecordMillis(dests[i], 12, benchStart)
	}
	seed := maphash.MakeSeed()
	var sink uint64
	b.Run("advance", func(b *testing.B) {
		for b.Loop() {
			sink += uint64(st.advance(benchStart))
		}
	})
	b.Run("index/table", func(b *testing.B) {
		i := 0
		for b.Loop() {
			sink += uint64(st.s.index(uint64(12 + i&1)))
			i++
		}
	})
	b.Run("index/computed", func(b *testing.B) {
		i := 0
		for b.Loop() {
			sink += uint64(st.s.geo.index(int64(min(uint64(12+i&1), st.s.highest))))
			i++
		}
	})
	b.Run("hash/strHash", func(b *testing.B) {
		i, seed := 0, st.sseed
		for b.Loop() {
			sink += strHash(seed, dests[i&63])
			i++
		}
	})
	b.Run("hash/maphash.String", func(b *testing.B) {
		i := 0
		for b.Loop() {
			sink += maphash.String(seed, dests[i&63])
			i++
		}
	})
	b.Run("lock-unlock", func(b *testing.B) {
		i := 0
		for b.Loop() {
			sh := &st.shards[i&63]
			sh.mu.Lock()
			//lint:ignore SA2001 the lock's own cost is what is measured
			sh.mu.Unlock()
			i++
		}
	})
	b.Run("get", func(b *testing.B) {
		hs := make([]uint64, len(dests))
		for i, d := range dests {
			hs[i], _ = st.shard(d)
		}
		i := 0
		for b.Loop() {
			h := hs[i&63]
			if st.shards[h&(numShards-1)].get(h, dests[i&63]) == nil {
				b.Fatal("not held")
			}
			i++
		}
	})
	b.Run("seq", func(b *testing.B) {
		for b.Loop() {
			sink += st.seq.Add(1)
		}
	})
	b.Run("window-record", func(b *testing.B) {
		ens := syncEntries(un)
		i := 0
		for b.Loop() {
			ens[i&63].record(6)
			i++
		}
	})
	b.Run("RecordMillis/bounded", func(b *testing.B) {
		i := 0
		for b.Loop() {
			st.RecordMillis(dests[i&63], 12, benchStart)
			i++
		}
	})
	b.Run("RecordMillis/unbounded", func(b *testing.B) {
		i := 0
		for b.Loop() {
			un.RecordMillis(dests[i&63], 12, benchStart)
			i++
		}
	})
	_ = sink
}
