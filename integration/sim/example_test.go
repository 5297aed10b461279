package sim_test

import (
	"fmt"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/integration/sim"
)

// A 20-node cluster recording latencies to 100 destinations on protocol
// v2 (the default): every (destination, epoch) aggregate reaches every node
// within a second of the epoch's end, every fleet view is the exact union
// of the origins' sealed counts, and the fleet's P99.99 is closer to the
// truth than one node's own.
func ExampleRunScale() {
	r, err := sim.RunScale(sim.ScaleConfig{Seed: 1, Nodes: 20, Epochs: 2})
	if err != nil {
		panic(err)
	}
	fmt.Println("aggregates:", r.Batches, "unconverged:", r.Unconverged)
	fmt.Println("identical within 1s:", r.ConvergeP99 < time.Second)
	fmt.Println("views = exact union:", r.UnionChecks-r.UnionMismatches, "of", r.UnionChecks)
	fmt.Println("samples fleet / local:", r.FleetSamples, "/", r.LocalSamples)
	fmt.Println("fleet closer to the truth:", r.FleetErrP50 < r.LocalErrP50)
	// Output:
	// aggregates: 200 unconverged: 0
	// identical within 1s: true
	// views = exact union: 200 of 200
	// samples fleet / local: 10800 / 600
	// fleet closer to the truth: true
}

// Driving a Sim directly: one observer records its own latencies, and its
// fleet view holds every node's sealed sub-windows one epoch later.
func ExampleSim() {
	cfg := sim.DefaultConfig(5)
	cfg.Observers = 5
	s, err := sim.New(cfg)
	if err != nil {
		panic(err)
	}
	for i := range 5 {
		s.At(time.Second, func(now time.Time) { s.Tracker(i).RecordMillis("db", uint64(10+i), now) })
	}
	if err := s.Run(8 * time.Second); err != nil { // past the seal of the first epoch
		panic(err)
	}
	est, err := s.Fleet(0).Estimate("db", 0.99, s.Now())
	if err != nil {
		panic(err)
	}
	fmt.Println(est.Source, est.Samples, est.Peers, est.ValueMillis)
	// Output:
	// fleet 5 5 14
}
