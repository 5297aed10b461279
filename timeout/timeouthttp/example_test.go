package timeouthttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/timeout/timeouthttp"
)

// backoffPolicy stands in for a real timeout.Policy (*node.Node, or
// timeout.NewPolicy over a tracker): every attempt gets timeout.Config's
// exponential fallback, nothing is probed, and it prints what it learns.
type backoffPolicy struct{ cfg timeout.Config }

func (p backoffPolicy) Decide(dest string, attempt int, _ time.Time) timeout.Attempt {
	return timeout.Attempt{Dest: dest, Attempt: attempt, Timeout: p.cfg.ExponentialBackoff(attempt), Reason: timeout.ReasonFallback}
}

func (backoffPolicy) Probe(*timeout.Attempt, time.Time) bool { return false }

func (backoffPolicy) Observe(a timeout.Attempt, o timeout.Outcome, _ time.Duration, _ time.Time) {
	fmt.Println("observed attempt", a.Attempt, o)
}

func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello")
	}))
	defer srv.Close()
	var p timeout.Policy = backoffPolicy{timeout.Config{Backoff: timeout.BackoffInterval{Min: time.Second, Max: time.Minute}}}

	rt, err := timeouthttp.New(timeouthttp.Options{Policy: p, Base: srv.Client().Transport})
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: rt}

	for attempt := 1; attempt <= 2; attempt++ {
		ctx := timeout.WithAttempt(context.Background(), attempt) // every retry's timeout grows
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if err != nil {
			panic(err)
		}
		fmt.Println("attempt", attempt, "timeout", rt.Timeout(req))
		resp, err := client.Do(req)
		if err != nil {
			panic(err) // errors.Is(err, timeouthttp.ErrTimeout): our timeout; retry with attempt+1
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body))
	}
	// Output:
	// attempt 1 timeout 1s
	// observed attempt 1 completed
	// 200 hello
	// attempt 2 timeout 2s
	// observed attempt 2 completed
	// 200 hello
}
