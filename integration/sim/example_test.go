package sim_test

import (
	"fmt"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/integration/sim"
)

// A 20-node cluster recording latencies to 100 destinations: every sealed
// batch reaches every node within milliseconds, and the fleet's P99.99 is
// closer to the truth than one node's own.
func ExampleRunScale() {
	r, err := sim.RunScale(sim.ScaleConfig{Seed: 1, Nodes: 20, Epochs: 2})
	if err != nil {
		panic(err)
	}
	fmt.Println("batches:", r.Batches, "unconverged:", r.Unconverged)
	fmt.Println("converged within 100ms:", r.ConvergeP99 < 100*time.Millisecond)
	fmt.Println("samples fleet / local:", r.FleetSamples, "/", r.LocalSamples)
	fmt.Println("fleet closer to the truth:", r.FleetErrP50 < r.LocalErrP50)
	// Output:
	// batches: 40 unconverged: 0
	// converged within 100ms: true
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
