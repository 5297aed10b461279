package tracker

import "testing"

// benchCachedFleet is benchFleet with a SyncTracker holding 500 samples of
// dest-042 as the local view: the node's request path.
func benchCachedFleet(b *testing.B) (*Fleet, *SyncTracker[string]) {
	c := testFleetConfig()
	local, err := NewSync[string](c.Tracker)
	if err != nil {
		b.Fatal(err)
	}
	now := fleetAt(c, testE, 100)
	for i := range 500 {
		local.RecordMillis("dest-042", uint64(40+i%40), now)
	}
	f, _ := benchFleet(b, c, local)
	return f, local
}

// BenchmarkFleetEstimateCached is the estimate of one destination at 100
// origins × 100 destinations with a SyncTracker as the local view and no
// change between estimates: the fleet's facts and the local view from the
// cache in the tracker entry, no Fleet lock.
func BenchmarkFleetEstimateCached(b *testing.B) { benchCachedEstimate(b, false) }

// BenchmarkFleetEstimateCachedRecorded is BenchmarkFleetEstimateCached
// with a record of the destination before each estimate (the record is
// included): the fleet's facts from the cache, the local view walked again.
func BenchmarkFleetEstimateCachedRecorded(b *testing.B) {
	f, local := benchCachedFleet(b)
	now := fleetAt(f.cfg, testE, 100)
	b.ReportAllocs()
	for b.Loop() {
		local.RecordMillis("dest-042", 50, now)
		if e, _ := f.Estimate("dest-042", 0.9999, now); e.Source != SourceFleet {
			b.Fatal(e)
		}
	}
}

// BenchmarkFleetEstimateUncached is BenchmarkFleetEstimateCached through
// EstimateUncached: the Fleet's lock, its view and the local view every
// time (the path before the cache).
func BenchmarkFleetEstimateUncached(b *testing.B) { benchCachedEstimate(b, true) }

func benchCachedEstimate(b *testing.B, uncached bool) {
	f, _ := benchCachedFleet(b)
	benchEstimate(b, f, uncached)
}

// BenchmarkFleetDecisionInput is BenchmarkFleetEstimateCached for the
// decision input alone (Fleet.DecisionInput): the cached input, no
// estimate copied.
func BenchmarkFleetDecisionInput(b *testing.B) { benchDecisionInput(b, false) }

// BenchmarkFleetDecisionInputNaive is the decision input through a whole
// cached estimate (Fleet.EstimateTo, then Estimate.Input): what
// DecisionInput saves.
func BenchmarkFleetDecisionInputNaive(b *testing.B) { benchDecisionInput(b, true) }

// benchDecisionInput measures dest-042's decision input on the cached
// fleet: Fleet.DecisionInput, or through a whole estimate when naive.
func benchDecisionInput(b *testing.B, naive bool) {
	f, _ := benchCachedFleet(b)
	now := fleetAt(f.cfg, testE, 100)
	b.ReportAllocs()
	var in DecisionInput
	var e Estimate
	for b.Loop() {
		if naive {
			_ = f.EstimateTo(&e, "dest-042", 0.9999, now)
			in = e.Input()
		} else {
			_ = f.DecisionInput(&in, "dest-042", 0.9999, now)
		}
		if in.Source != SourceFleet {
			b.Fatal(in)
		}
	}
}

// BenchmarkFleetDecisionInputLocked is BenchmarkFleetDecisionInput through
// the cache under the shard lock (the path before the published inputs):
// what the lock-free read of the published input saves.
func BenchmarkFleetDecisionInputLocked(b *testing.B) {
	f, local := benchCachedFleet(b)
	now := fleetAt(f.cfg, testE, 100)
	b.ReportAllocs()
	var in DecisionInput
	_ = f.DecisionInput(&in, "dest-042", 0.9999, now)
	for b.Loop() {
		h, sh := local.shard("dest-042")
		_, c, _ := local.current(h, sh, "dest-042", "dest-042", 0.9999, now, f.ver.Load(), f.minSamples())
		in = c.in
		sh.mu.Unlock()
		if in.Source != SourceFleet {
			b.Fatal(in)
		}
	}
}
