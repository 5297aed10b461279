// Package testutil holds helpers shared by this module's tests.
package testutil

import (
	"bytes"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"
)

// WaitWide is the deadline of Eventually: wide, because the machines that run
// the tests are shared and slow under -race, while a condition that holds
// returns at once.
const WaitWide = 20 * time.Second

// Eventually polls cond every 10 ms until it holds, failing t when WaitWide
// passes first, and returns how long it took (tests log it as a measurement,
// never assert on it).
func Eventually(t testing.TB, what string, cond func() bool) time.Duration {
	t.Helper()
	return EventuallyWhy(t, what, cond, nil)
}

// EventuallyWhy is Eventually with a report: when WaitWide passes, the
// failure includes why() (what is still missing), so a test that times out
// on a loaded machine tells what it waited for. why is called only then;
// nil reports nothing.
func EventuallyWhy(t testing.TB, what string, cond func() bool, why func() string) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > WaitWide {
			if why != nil {
				t.Fatalf("not within %v: %s; still missing: %s", WaitWide, what, why())
			}
			t.Fatalf("not within %v: %s", WaitWide, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// Every calls fn in a goroutine of its own at once and then every d, at
// most n times (k = 0, 1, …): a test's background load, bounded in count.
// The returned stop ends it and waits until fn has returned for the last
// time; it may be called more than once.
func Every(d time.Duration, n int, fn func(k int)) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(d)
		defer tick.Stop()
		for k := range n {
			fn(k)
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-done
	}
}

// SyncBuffer is a bytes.Buffer safe for concurrent use: loggers, memberlist
// goroutines and subprocess pipes write to it while a test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// maxFailureLog is how much of a failed test's log Logger prints: the end,
// where the failure is. ATNODE_FULL_LOGS=1 prints all of it (to read what a
// flaky test's cluster sent before it went wrong).
const maxFailureLog = 64 << 10

// Logger returns a debug-level logger whose output t prints only if it fails
// (its last 64 KiB, or all of it with ATNODE_FULL_LOGS=1): memberlist and
// the cluster log a lot, and goroutines may log briefly after a test
// returns.
func Logger(t testing.TB) *slog.Logger {
	t.Helper()
	buf := &SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			out := buf.String()
			if len(out) > maxFailureLog && os.Getenv("ATNODE_FULL_LOGS") != "1" {
				out = "…" + out[len(out)-maxFailureLog:]
			}
			t.Logf("logs:\n%s", out)
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
