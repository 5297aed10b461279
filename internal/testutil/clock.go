package testutil

import (
	"bytes"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"
)

// GoroutineID returns the calling goroutine's id, as the first line of its
// stack trace gives it ("goroutine 7 [running]:"). Tests use it to tell
// the goroutine that calls the code under test from the goroutines that
// code starts.
func GoroutineID() uint64 {
	var buf [64]byte
	b := bytes.TrimPrefix(buf[:runtime.Stack(buf[:], false)], []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i >= 0 {
		b = b[:i]
	}
	id, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		panic("testutil: no goroutine id in " + strconv.Quote(string(buf[:])))
	}
	return id
}

// CallerHeldClock returns a clock on time.Now whose first read by the
// goroutine that called CallerHeldClock, after hold is set, takes d and
// returns the time at its end: a coordinator that reads a slow clock, or
// that the scheduler keeps off the CPU as it reads, and so handles late
// whatever it reads the clock for. Reads by any other goroutine (those the
// code under test starts) are never held and do not clear hold. Use it
// inside a testing/synctest bubble, where the sleep is exact.
func CallerHeldClock(hold *atomic.Bool, d time.Duration) func() time.Time {
	caller := GoroutineID()
	return func() time.Time {
		if hold.Load() && GoroutineID() == caller && hold.CompareAndSwap(true, false) {
			time.Sleep(d)
		}
		return time.Now()
	}
}
