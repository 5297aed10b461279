package tracker_test

import (
	"fmt"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// ExampleFleet merges three peers' sealed sub-windows and asks for the
// fleet-backed P99 of one destination.
func ExampleFleet() {
	cfg := tracker.DefaultFleetConfig() // 60 s window of 10 sub-windows of 6 s
	cfg.Self = "node-a"
	fleet, err := tracker.NewFleet(cfg, nil) // nil: no local tracker in this example
	if err != nil {
		panic(err)
	}
	now := time.UnixMilli(1_700_000_000_000) // 2 s into its epoch
	e := cfg.Tracker.Epoch(now)
	batch := func(origin string, boot uint64) tracker.Batch {
		return tracker.Batch{
			Key:    tracker.BatchKey{Origin: origin, Boot: boot, Epoch: e - 1}, // the last sealed epoch
			Layout: cfg.Tracker.Layout(),
			Dests: []tracker.DestCounts{{
				Dest:    "db-1",
				Total:   4,
				Buckets: []tracker.Bucket{{Index: 10, Count: 3}, {Index: 40, Count: 1}}, // 3 × 10 ms, 1 × 40 ms
			}},
		}
	}
	fmt.Println(fleet.Insert(batch("node-a", 1), now))
	fmt.Println(fleet.Insert(batch("node-b", 7), now))
	fmt.Println(fleet.Insert(batch("node-c", 9), now))
	fmt.Println(fleet.Insert(batch("node-c", 9), now)) // re-delivered: counted once
	fleet.SetLiveMembers(3)                            // auto MinPeers = min(3, 3)

	est, err := fleet.Estimate("db-1", 0.99, now)
	if err != nil {
		panic(err)
	}
	fmt.Println(est.Source, est.ValueMillis, "ms from", est.Samples, "samples of", est.Peers, "peers,",
		est.EffectivePeers, "effective; staleness", est.Staleness)
	// Output:
	// new
	// new
	// new
	// duplicate
	// fleet 40 ms from 12 samples of 3 peers, 3 effective; staleness 2s
}
