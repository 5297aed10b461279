package testutil

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestEventuallyReturnsOnceTrue(t *testing.T) {
	n := 0
	took := Eventually(t, "third poll", func() bool { n++; return n == 3 })
	require.Equal(t, 3, n)
	require.Positive(t, took)
}

func TestSyncBufferConcurrent(t *testing.T) {
	var b SyncBuffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			_, _ = b.Write([]byte("x"))
		}
	}()
	for range 100 {
		_ = b.String()
	}
	<-done
	require.Len(t, b.String(), 100)
}

func TestEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls []int
		stop := Every(time.Second, 10, func(k int) { calls = append(calls, k) })
		time.Sleep(2500 * time.Millisecond)
		stop()
		stop() // again: a no-op
		require.Equal(t, []int{0, 1, 2}, calls, "at once, then every second, until stopped")

		calls = nil
		stop = Every(time.Second, 2, func(k int) { calls = append(calls, k) })
		time.Sleep(time.Minute)
		stop() // after its last call: returns at once
		require.Equal(t, []int{0, 1}, calls, "at most n calls")
	})
}

func TestGoroutineID(t *testing.T) {
	id := GoroutineID()
	require.Positive(t, id)
	require.Equal(t, id, GoroutineID())
	other := make(chan uint64)
	go func() { other <- GoroutineID() }()
	require.NotEqual(t, id, <-other)
}

func TestCallerHeldClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hold atomic.Bool
		clock := CallerHeldClock(&hold, 3*time.Millisecond)
		start := time.Now()
		require.Equal(t, start, clock(), "not held before hold is set")
		hold.Store(true)
		done := make(chan time.Time)
		go func() { done <- clock() }()
		require.Equal(t, start, <-done, "another goroutine's read is not held")
		require.True(t, hold.Load(), "nor does it clear hold")
		require.Equal(t, start.Add(3*time.Millisecond), clock(), "the caller's read is held, and returns the time after")
		require.False(t, hold.Load())
		require.Equal(t, start.Add(3*time.Millisecond), clock(), "once")
	})
}
