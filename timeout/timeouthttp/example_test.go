package timeouthttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/timeout/timeouthttp"
)

// latencies stands in for a tracker.SyncTracker[string]: it is both the
// Estimator and the Recorder (here: the largest sample as the "quantile").
type latencies struct {
	mu      sync.Mutex
	samples map[string][]uint64
}

func (l *latencies) RecordMillis(dest string, ms uint64, _ time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.samples[dest] = append(l.samples[dest], ms)
}

func (l *latencies) QuantileMillis(dest string, _ float64, _ time.Time) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.samples[dest]
	if len(s) == 0 {
		return 0, false
	}
	return slices.Max(s), true
}

func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello")
	}))
	defer srv.Close()

	lat := &latencies{samples: map[string][]uint64{}}
	tr, err := timeouthttp.New(timeouthttp.Options{
		Base:      srv.Client().Transport,
		Config:    timeout.DefaultConfig(), // 250ms..1m, P99.99, safety factor 2
		Estimator: lat,
		Recorder:  lat,
	})
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: tr}

	for attempt := 1; attempt <= 2; attempt++ {
		ctx := timeouthttp.WithAttempt(context.Background(), attempt)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		fmt.Println("attempt", attempt, "timeout", tr.Timeout(req))
		resp, err := client.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body))
	}
	n := 0
	for _, s := range lat.samples {
		n += len(s)
	}
	fmt.Println("samples recorded:", n)
	// Output:
	// attempt 1 timeout 250ms
	// 200 hello
	// attempt 2 timeout 500ms
	// 200 hello
	// samples recorded: 2
}
