package timeout_test

import (
	"fmt"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// A destination that stops answering: its timeout does not climb. After
// three timed-out attempts in a row the Policy treats it as failing, and
// its attempts get the fallback; a probe, when due, lets one attempt go on
// past the timeout to see whether it is back. Once an attempt completes,
// the estimate decides again, capped at the highest completed latency
// while the timed-out attempts hold the quantile up.
func ExampleNewPolicy() {
	tr, err := tracker.NewSync[string](tracker.DefaultConfig())
	if err != nil {
		panic(err)
	}
	cfg := timeout.DefaultConfig()
	cfg.Backoff = timeout.BackoffInterval{Min: 10 * time.Millisecond, Max: time.Minute}
	p, err := timeout.NewPolicy(cfg, tr)
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 1000 { // a healthy history: 10–29 ms
		tr.RecordMillis("db", uint64(10+i%20), now)
	}
	a := p.Decide("db", 1, now)
	fmt.Println("healthy:", a.Timeout, a.Reason)

	for range 3 { // it stops answering
		a := p.Decide("db", 1, now)
		now = now.Add(a.Timeout)
		p.Observe(a, timeout.TimedOut, a.Timeout, now)
	}
	a = p.Decide("db", 1, now)
	fmt.Println("dead:", a.Timeout, a.Reason, "failing", a.Failing, "probe", a.ProbeTimeout)

	if p.Probe(&a, now.Add(a.Timeout)) { // the attempt reached its timeout: go on as a probe
		elapsed := 40 * time.Millisecond // it is back: an answer within the probe timeout
		now = now.Add(elapsed)
		p.Observe(a, timeout.Completed, elapsed, now)
	}
	a = p.Decide("db", 1, now)
	fmt.Println("back:", a.Timeout, a.Reason, "failing", a.Failing)
	// Output:
	// healthy: 58ms estimate
	// dead: 10ms failing failing true probe 116ms
	// back: 80ms capped failing false
}
