package timeoutfailsafe_test

import (
	"fmt"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/timeout/timeoutfailsafe"
)

// backoffPolicy stands in for a real timeout.Policy (*node.Node, or
// timeout.NewPolicy over a tracker): every attempt gets timeout.Config's
// exponential fallback, nothing is probed, and it prints what it decides
// and learns.
type backoffPolicy struct{ cfg timeout.Config }

func (p backoffPolicy) Decide(dest string, attempt int, _ time.Time) timeout.Attempt {
	d := p.cfg.ExponentialBackoff(attempt)
	fmt.Println("attempt", attempt, "to", dest, "timeout", d)
	return timeout.Attempt{Dest: dest, Attempt: attempt, Timeout: d, Reason: timeout.ReasonFallback}
}

func (backoffPolicy) Probe(*timeout.Attempt, time.Time) bool { return false }

func (backoffPolicy) Observe(a timeout.Attempt, o timeout.Outcome, _ time.Duration, _ time.Time) {
	fmt.Println("observed attempt", a.Attempt, o)
}

// A retry loop whose attempts get growing adaptive timeouts: the destination
// does not answer the first two, and answers the third.
func Example() {
	var p timeout.Policy = backoffPolicy{timeout.Config{Backoff: timeout.BackoffInterval{Min: 10 * time.Millisecond, Max: time.Minute}}}

	adaptive := timeoutfailsafe.New[string](p, "db-1")
	retry := retrypolicy.NewBuilder[string]().HandleErrors(timeoutfailsafe.ErrTimeout).WithMaxRetries(3).Build()

	calls := 0
	got, err := failsafe.With(retry, adaptive).GetWithExecution(func(exec failsafe.Execution[string]) (string, error) {
		if calls++; calls < 3 {
			<-exec.Canceled() // no answer: only our timeout ends the attempt
			return "", exec.Context().Err()
		}
		return "hello", nil // callDB(exec.Context()), say
	})
	fmt.Println(got, err)
	// Output:
	// attempt 1 to db-1 timeout 10ms
	// observed attempt 1 timed_out
	// attempt 2 to db-1 timeout 20ms
	// observed attempt 2 timed_out
	// attempt 3 to db-1 timeout 40ms
	// observed attempt 3 completed
	// hello <nil>
}
