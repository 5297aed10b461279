package tracker

import (
	"cmp"
	"maps"
	"slices"
	"testing"
)

// FuzzFleetOps runs a sequence of inserts (valid and malformed, with and
// without censored counts, some with censoring unknown), exclusions,
// inclusions and clock moves decoded from the input, with small caps, and
// checks after each step that the incremental state equals one recomputed
// from the held batches, that the caps hold, and that the exclusions
// remembered are a reference model's (so an excluded member's batches,
// evicted and delivered again, never count).
func FuzzFleetOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte{0, 0, 12, 0, 2, 1, 5, 2, 9, 0, 0, 12, 0, 2, 1, 5, 2, 9, 1, 0, 0, 2, 1, 0})
	f.Add([]byte{0, 3, 12, 1, 3, 200, 255, 7, 7, 0, 2, 11, 0, 3, 1, 1, 1, 1, 3, 5, 0, 1, 13, 0, 1, 4, 4})
	f.Add([]byte{0, 1, 12, 0, 1, 1, 1, 0, 1, 12, 0, 1, 1, 1, 4, 1, 0, 2, 1, 0, 3, 20})
	f.Fuzz(func(t *testing.T, data []byte) {
		c := DefaultFleetConfig()
		c.Tracker.SubWindows = 4
		c.MaxOrigins, c.MaxDestinations, c.Self = 3, 3, "o0"
		c.MaxEpochBuckets, c.MaxBuckets = 10, 40 // a batch has up to 12
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
		model := exclusionModel{}
		for steps := 0; len(data) > 0 && steps < 200; steps++ {
			now := fleetAt(c, e, int64(next())*20)
			fl.Advance(now) // what every op does first: expire, then prune the model
			model.prune(fl)
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
					switch next() % 4 {
					case 1: // censored counts, valid unless a count was 0
						for _, bk := range d.Buckets {
							if c := uint32(next() % 3); c > 0 {
								d.TimedOut = append(d.TimedOut, Bucket{Index: bk.Index, Count: min(c, bk.Count)})
							}
						}
					case 2: // censored counts, often inconsistent
						for range next() % 3 {
							d.TimedOut = append(d.TimedOut, Bucket{Index: uint16(next() % 8 * 100), Count: uint32(next() % 5)})
						}
					case 3:
						d.CensoringUnknown = true
					}
					b.Dests = append(b.Dests, d)
				}
				fl.Insert(b, now)
			case 2: // boots 2 and 3 are never inserted: exclusions in advance
				k := memberKey{"o" + string(rune('0'+next()%5)), uint64(next() % 4)}
				model.exclude(k, fl.epoch, 4*c.MaxOrigins)
				fl.Exclude(k.name, k.boot, now)
			case 3:
				k := memberKey{"o" + string(rune('0'+next()%5)), uint64(next() % 4)}
				delete(model, k)
				fl.Include(k.name, k.boot, now)
			case 4:
				e += int64(next() % 4)
				for _, d := range []string{"a", "b", "c", "d", "e"} {
					e, err := fl.Estimate(d, 0.99, now)
					if err != nil {
						t.Fatal(err)
					}
					if e.Censored > e.Samples || e.Failing && !e.Trusted() {
						t.Fatalf("estimate %+v", e)
					}
				}
			}
			checkInvariants(t, fl)
			model.prune(fl)
			if !maps.Equal(model, exclusionModel(fl.excluded)) {
				t.Fatalf("exclusions %v, model %v", fl.excluded, model)
			}
		}
	})
}

// exclusionModel is the reference for Fleet.excluded: member → epoch of its
// last Exclude, forgotten on Include, when full (the oldest, then by name
// and boot) and once expired with no batch held.
type exclusionModel map[memberKey]int64

func (m exclusionModel) exclude(k memberKey, epoch int64, limit int) {
	if _, ok := m[k]; !ok && len(m) >= limit {
		victim := slices.MinFunc(slices.Collect(maps.Keys(m)), func(a, b memberKey) int {
			return cmp.Or(cmp.Compare(m[a], m[b]), cmp.Compare(a.name, b.name), cmp.Compare(a.boot, b.boot))
		})
		delete(m, victim)
	}
	m[k] = epoch
}

func (m exclusionModel) prune(f *Fleet) {
	for k, ep := range m {
		if ep+1 < f.epoch-f.n-1 && f.members[k] == nil {
			delete(m, k)
		}
	}
}
