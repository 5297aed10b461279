package testutil

import (
	"bytes"
	"context"
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

// SlowDone returns ctx with a Done whose first call takes d before it
// returns ctx.Done(): code that calls Done as it enters its wait (a
// coordinator's select) comes back to find whatever became ready meanwhile
// in hand at once, as after the scheduler kept it off the CPU. Held says
// whether that first call was made. Use it inside a testing/synctest
// bubble, where the sleep is exact.
func SlowDone(ctx context.Context, d time.Duration) *SlowDoneContext {
	return &SlowDoneContext{Context: ctx, d: d}
}

// SlowDoneContext is SlowDone's context.
type SlowDoneContext struct {
	context.Context
	d    time.Duration
	held atomic.Bool
}

// Done is the context's Done, the first call after d.
func (c *SlowDoneContext) Done() <-chan struct{} {
	if c.held.CompareAndSwap(false, true) {
		time.Sleep(c.d)
	}
	return c.Context.Done()
}

// Held reports whether Done has been called.
func (c *SlowDoneContext) Held() bool { return c.held.Load() }
