package timeout_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// p9999 is a stand-in for tracker.SyncTracker or the fleet view: the P99.99
// latency per destination in ms; a destination missing from the map has no
// data yet.
type p9999 map[string]uint64

func (p p9999) QuantileMillis(dest string, _ float64, _ time.Time) (uint64, bool) {
	v, ok := p[dest]
	return v, ok
}

func ExampleSelect() {
	cfg := timeout.DefaultConfig() // 250ms..1m, P99.99, safety factor 2
	est := p9999{"db-1": 40, "db-2": 700}
	now := time.Now()

	// No data: exponential backoff from the floor.
	fmt.Println(timeout.Select(cfg, est, []string{"db-9"}, 1, now))
	fmt.Println(timeout.Select(cfg, est, []string{"db-9"}, 3, now))
	// A fast destination: 2·40ms is below the floor.
	fmt.Println(timeout.Select(cfg, est, []string{"db-1"}, 1, now))
	// A request that needs both waits for the slower: 2·700ms.
	fmt.Println(timeout.Select(cfg, est, []string{"db-1", "db-2"}, 1, now))
	// Its retry doubles: 2·700ms·2.
	fmt.Println(timeout.Select(cfg, est, []string{"db-1", "db-2"}, 2, now))
	// Output:
	// 250ms
	// 1s
	// 250ms
	// 1.4s
	// 2.8s
}

func ExampleExplain() {
	cfg := timeout.DefaultConfig()
	est := p9999{"db-1": 40, "db-2": 700}
	dests := []string{"db-1", "db-2", "db-3"}

	d := timeout.Explain(cfg, est, dests, 1, time.Now())
	fmt.Printf("%v decided by %s, fallback %t\n", d.Timeout, dests[d.DecidedBy], d.Fallback)

	d = timeout.Explain(cfg, est, dests[:1], 4, time.Now())
	fmt.Printf("%v decided by %d, fallback %t\n", d.Timeout, d.DecidedBy, d.Fallback)
	// Output:
	// 1.4s decided by db-2, fallback false
	// 2s decided by -1, fallback true
}

func ExampleSelectQuorum() {
	cfg := timeout.DefaultConfig()
	est := p9999{"r1": 100, "r2": 150, "r3": 5000}
	replicas := []string{"r1", "r2", "r3"}

	// A write that succeeds on 2 of 3 replicas does not wait for r3.
	fmt.Println(timeout.SelectQuorum(cfg, est, replicas, 2, 1, time.Now()))
	fmt.Println(timeout.SelectQuorum(cfg, est, replicas, 3, 1, time.Now()))
	// Output:
	// 300ms
	// 10s
}

func ExampleParseBackoffInterval() {
	b, err := timeout.ParseBackoffInterval("0.5s .. 2 minutes")
	fmt.Println(b.Min, b.Max, b, err)

	_, err = timeout.ParseBackoffInterval("10s..1s")
	fmt.Println(err, errors.Is(err, timeout.ErrMinExceedsMax))

	_, err = timeout.ParseBackoffInterval("10ms..1 fortnight")
	fmt.Println(err, errors.Is(err, timeout.ErrInvalidMax))
	// Output:
	// 500ms 2m0s 500ms..2m <nil>
	// min timeout (10000ms) exceeds max timeout (1000ms) true
	// invalid max timeout: unknown unit: fortnight true
}

func ExampleBackoffInterval_UnmarshalText() {
	var cfg timeout.Config
	err := json.Unmarshal([]byte(`{"backoff":"100ms..30s","quantile":0.999,"safety_factor":3}`), &cfg)
	fmt.Println(cfg.Backoff, cfg.Quantile, cfg.SafetyFactor, err, cfg.Validate())
	// Output:
	// 100ms..30s 0.999 3 <nil> <nil>
}

func ExampleConfig_ExponentialBackoff() {
	cfg := timeout.DefaultConfig()
	for attempt := 1; attempt <= 10; attempt += 3 {
		fmt.Println(attempt, cfg.ExponentialBackoff(attempt))
	}
	// Output:
	// 1 250ms
	// 4 2s
	// 7 16s
	// 10 1m0s
}
