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
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello")
	}))
	defer srv.Close()
	// The failure-aware Policy over this process's own tracker (a node
	// would pass its *node.Node: the fleet's view). Until the tracker holds
	// MinSamples latencies of a destination, its attempts get the fallback:
	// 1s, doubling per attempt.
	tr, err := tracker.NewSync[string](tracker.DefaultConfig())
	if err != nil {
		panic(err)
	}
	cfg := timeout.DefaultConfig()
	cfg.Backoff = timeout.BackoffInterval{Min: time.Second, Max: time.Minute}
	p, err := timeout.NewPolicy(cfg, tr)
	if err != nil {
		panic(err)
	}

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
	// 200 hello
	// attempt 2 timeout 2s
	// 200 hello
}
