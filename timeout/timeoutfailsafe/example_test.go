package timeoutfailsafe_test

import (
	"fmt"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/timeout/timeoutfailsafe"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// A retry loop whose attempts get growing adaptive timeouts: the destination
// does not answer the first two, and answers the third.
func Example() {
	// The failure-aware Policy over this process's own tracker (a node
	// would pass its *node.Node: the fleet's view). Until the tracker holds
	// MinSamples latencies of db-1, its attempts get the fallback: 10ms,
	// doubling per attempt.
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

	adaptive := timeoutfailsafe.New[string](p, "db-1")
	retry := retrypolicy.NewBuilder[string]().HandleErrors(timeoutfailsafe.ErrTimeout).WithMaxRetries(3).Build()

	calls := 0
	got, err := failsafe.With(retry, adaptive).GetWithExecution(func(exec failsafe.Execution[string]) (string, error) {
		fmt.Println("attempt", exec.Attempts(), "timeout", p.Decide("db-1", exec.Attempts(), time.Now()).Timeout)
		if calls++; calls < 3 {
			<-exec.Canceled() // no answer: only our timeout ends the attempt
			return "", exec.Context().Err()
		}
		return "hello", nil // callDB(exec.Context()), say
	})
	fmt.Println(got, err)
	// Output:
	// attempt 1 timeout 10ms
	// attempt 2 timeout 20ms
	// attempt 3 timeout 40ms
	// hello <nil>
}
