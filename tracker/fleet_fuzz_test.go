package tracker

import (
	"testing"
)

// FuzzFleetOps runs a sequence of inserts (valid and malformed), exclusions,
// inclusions and clock moves decoded from the input, with small caps, and
// checks after each step that the incremental state equals one recomputed
// from the held batches and that the caps hold.
func FuzzFleetOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte{0, 0, 12, 0, 2, 1, 5, 2, 9, 0, 0, 12, 0, 2, 1, 5, 2, 9, 1, 0, 0, 2, 1, 0})
	f.Add([]byte{0, 3, 12, 1, 3, 200, 255, 7, 7, 0, 2, 11, 0, 3, 1, 1, 1, 1, 3, 5, 0, 1, 13, 0, 1, 4, 4})
	f.Add([]byte{0, 1, 12, 0, 1, 1, 1, 0, 1, 12, 0, 1, 1, 1, 4, 1, 0, 2, 1, 0, 3, 20})
	f.Fuzz(func(t *testing.T, data []byte) {
		c := DefaultFleetConfig()
		c.Tracker.SubWindows = 4
		c.MaxOrigins, c.MaxDestinations, c.Self = 3, 3, "o0"
		fl, err := NewFleet(c, fakeLocal{})
		if err != nil {
			t.Fatal(err)
		}
		next := func() int {
			if len(data) == 0 {
				return 0
			}
			v := int(data[0])
			data = data[1:]
			return v
		}
		e := int64(testE)
		for steps := 0; len(data) > 0 && steps < 200; steps++ {
			now := fleetAt(c, e, int64(next())*20)
			switch next() % 5 {
			case 0, 1: // insert
				b := mkBatch(string(rune('0' + next()%5))[:1], uint64(next()%2), e+int64(next()%9)-6)
				b.Key.Origin = "o" + b.Key.Origin
				b.Key.Part = uint16(next() % 2)
				nd := next() % 5
				for range nd {
					d := DestCounts{Dest: string(rune('a' + next()%5))}
					idx := -1
					for range next() % 4 {
						idx += 1 + next()%700
						cnt := uint32(next() % 4) // 0 is malformed
						d.Buckets = append(d.Buckets, Bucket{Index: uint16(idx), Count: cnt})
						d.Total += uint64(cnt)
					}
					if next()%16 == 0 {
						d.Total++ // malformed total
					}
					b.Dests = append(b.Dests, d)
				}
				fl.Insert(b, now)
			case 2:
				fl.Exclude("o"+string(rune('0'+next()%5)), uint64(next()%2), now)
			case 3:
				fl.Include("o"+string(rune('0'+next()%5)), uint64(next()%2), now)
			case 4:
				e += int64(next() % 4)
				for _, d := range []string{"a", "b", "c", "d", "e"} {
					if _, err := fl.Estimate(d, 0.99, now); err != nil {
						t.Fatal(err)
					}
				}
			}
			checkInvariants(t, fl)
		}
	})
}
