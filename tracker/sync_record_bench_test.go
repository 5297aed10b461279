package tracker

import (
	"fmt"
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
