package node_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/node"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// DoHedged over three replicas: the fleet median orders them (db-2 is the
// fastest), and a replica whose connection is refused fails over to the
// next at once. (Hedging is off here, HedgeBudget 0, so that the output
// does not depend on how fast the machine runs: ordering and failover
// remain.)
func ExampleNode_DoHedged() {
	errRefused := errors.New("connection refused")
	cfg := node.DefaultConfig()
	cfg.Name, cfg.DisableGossip, cfg.HTTP, cfg.HedgeBudget = "replica-1", true, "", 0
	cfg.Classify = func(err error) timeout.Outcome {
		if errors.Is(err, errRefused) {
			return timeout.Failed // fail over; no latency sample
		}
		return timeout.Completed
	}
	n, err := node.New(cfg, nil, nil)
	if err != nil {
		panic(err)
	}
	defer n.Close()
	for range 100 {
		n.Record("db-1", 30*time.Millisecond)
		n.Record("db-2", 10*time.Millisecond)
		n.Record("db-3", 20*time.Millisecond)
	}

	var tried []string
	dest, err := n.DoHedged(context.Background(), []string{"db-1", "db-2", "db-3"}, 1,
		func(ctx context.Context, dest string) error {
			tried = append(tried, dest) // one attempt at a time: no hedges
			if dest == "db-2" {
				return errRefused
			}
			return nil
		})
	fmt.Println(dest, err, tried)
	// Output: db-3 <nil> [db-2 db-3]
}
