package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/codec"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
	"github.com/stretchr/testify/require"
)

// TestSharedStoreMatchesFleet drives a sharedStore and a real tracker.Fleet
// with the same random sequence of the calls cluster.Protocol makes —
// Insert (new, duplicate, conflicting, too old, too new), Keys, Missing and
// Lookup, with time moving forward over many epochs — and requires the
// same answers from both. Batches are registered in the table as their
// origin's seal does (the first insert of a key).
func TestSharedStoreMatchesFleet(t *testing.T) {
	const origins = 6
	trk := tracker.DefaultConfig()
	names := make([]string, origins)
	boots := make([]uint64, origins)
	for i := range names {
		names[i], boots[i] = fmt.Sprintf("n%04d", i), uint64(100+i)
	}
	for seed := range uint64(5) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			table := newBatchTable(trk, names, boots)
			light := newSharedStore(table, -1)
			// Each origin's own store registers its batches, as its seal does.
			own := make([]*sharedStore, origins)
			for i := range own {
				own[i] = newSharedStore(table, int32(i))
			}
			fc := tracker.DefaultFleetConfig()
			fc.Tracker = trk
			fleet, err := tracker.NewFleet(fc, nil)
			require.NoError(t, err)
			r := newRand(seed, 11)
			sw := trk.SubWindow()
			start := trk.EpochStart(trk.Epoch(time.Unix(1_700_000_000, 0)) + 1)
			now := start
			batch := func(o int, e int64, part uint16, salt uint32) tracker.Batch {
				b := tracker.Batch{Key: tracker.BatchKey{Origin: names[o], Boot: boots[o], Epoch: e, Part: part}, Layout: trk.Layout()}
				for d := range 1 + (o+int(e))%3 {
					c := uint32(1+o+d) + salt
					b.Dests = append(b.Dests, tracker.DestCounts{
						Dest: fmt.Sprintf("d%d-%d", part, d), Total: uint64(c),
						Buckets: []tracker.Bucket{{Index: uint16(10 + d), Count: c}},
					})
				}
				return b
			}
			var seen []tracker.BatchKey
			for step := range 3000 {
				E := trk.Epoch(now)
				switch op := r.IntN(10); {
				case op < 6: // insert
					o := r.IntN(origins)
					e := E - int64(r.IntN(trk.SubWindows+4)) + 1 // E−N−2 .. E+1 and one too new
					if r.IntN(20) == 0 {
						e = E + 2
					}
					part := uint16(r.IntN(2))
					b := batch(o, e, part, 0)
					if o0 := own[o].Insert(b, now); o0 == tracker.InsertNew {
						seen = append(seen, b.Key)
					}
					if _, held := fleet.Lookup(b.Key); held && r.IntN(5) == 0 {
						// Same key, other contents. (A first copy that differs
						// from its origin's is new to a Fleet but a conflict to
						// a sharedStore, which knows the origin's: in a
						// simulation it can only be a bug.)
						b = batch(o, e, part, 1)
					}
					require.Equal(t, fleet.Insert(codec.CloneBatch(b), now), light.Insert(b, now), "step %d insert %v", step, b.Key)
				case op < 7:
					require.Equal(t, fleet.Keys(now), light.Keys(now), "step %d keys", step)
				case op < 9:
					theirs := own[r.IntN(origins)].Keys(now)
					if len(seen) > 0 {
						theirs = append(theirs, seen[r.IntN(len(seen))])
					}
					require.Equal(t, fleet.Missing(theirs, now), light.Missing(theirs, now), "step %d missing", step)
				default:
					if len(seen) == 0 {
						continue
					}
					k := seen[r.IntN(len(seen))]
					fb, fok := fleet.Lookup(k)
					lb, lok := light.Lookup(k)
					require.Equal(t, fok, lok, "step %d lookup %v", step, k)
					if fok {
						require.True(t, sameBatch(&fb, &lb))
					}
				}
				if r.IntN(40) == 0 { // next epoch: expire what the Sim expires at a boundary
					now = trk.EpochStart(E + 1).Add(time.Duration(r.Int64N(int64(sw))))
					old := E + 1 - int64(trk.SubWindows) - 2
					table.expire(old, func(*sharedBatch) {})
					fleet.Advance(now) // as Sim does for observers (Lookup takes no time)
					for _, st := range append(own, light) {
						st.drop(old)
					}
				}
			}
			require.Equal(t, fleet.Stats().Batches, light.n)
		})
	}
}
