// Package testutil holds helpers shared by this module's tests.
package testutil

import (
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
	start := time.Now()
	for !cond() {
		if time.Since(start) > WaitWide {
			t.Fatalf("not within %v: %s", WaitWide, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}
