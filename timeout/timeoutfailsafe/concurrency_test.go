package timeoutfailsafe

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/failsafe-go/failsafe-go"
	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/internal/policytest"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// TestZeroTimeoutCallerProbe: a timeout of zero fires at once, on another
// core maybe before Apply has stored its timer; the caller probe it
// starts still runs to its probe timeout, or ends with the answer, and is
// observed once. Real time (a bubble runs the timer only
// once the function blocks); each outcome is the same whichever comes
// first, and -race checks the orders the runs took.
func TestZeroTimeoutCallerProbe(t *testing.T) {
	t.Run("hangs", func(t *testing.T) {
		for range 50 {
			p := policytest.New(time.Hour)
			p.SetTimeout("db-1", 0)
			p.OfferProbe(time.Millisecond)
			_, err := failsafe.With(New[string](p, "db-1")).GetWithExecution(hangs)
			require.EqualError(t, err, "timeoutfailsafe: adaptive timeout exceeded (dest db-1, attempt 1, timeout 1ms)")
			o := p.Observed()
			require.Len(t, o, 1)
			require.Equal(t, timeout.TimedOut, o[0].Outcome)
			require.True(t, o[0].Probe)
			require.False(t, p.InFlight("db-1"))
		}
	})
	t.Run("answers", func(t *testing.T) {
		for range 200 {
			p := policytest.New(time.Hour)
			p.SetTimeout("db-1", 0)
			p.OfferProbe(time.Hour)
			got, err := failsafe.With(New[string](p, "db-1")).Get(func() (string, error) { return "ok", nil })
			require.NoError(t, err)
			require.Equal(t, "ok", got)
			o := p.Observed()
			require.Len(t, o, 1)
			require.Equal(t, timeout.Completed, o[0].Outcome)
			require.False(t, p.InFlight("db-1"), "a probe started is released")
		}
	})
}

// TestReturnsAtTheTimeoutWithAProbe: a function that returns at the very
// moment its timeout starts a caller probe, or at the probe timeout, is
// observed once and releases the probe, whichever of the two wins: before
// the probe timeout its answer is the caller's either way; at it, the
// caller gets the answer or our timeout. Repeated to give either order
// its turn.
func TestReturnsAtTheTimeoutWithAProbe(t *testing.T) {
	for _, at := range []time.Duration{100 * time.Millisecond, time.Second} {
		for range 64 {
			synctest.Test(t, func(t *testing.T) {
				p := policytest.New(100 * time.Millisecond)
				p.OfferProbe(time.Second)
				got, err := failsafe.With(New[string](p, "db-1")).Get(func() (string, error) {
					time.Sleep(at)
					return "ok", nil
				})
				synctest.Wait()
				o := p.Observed()
				require.Len(t, o, 1)
				require.False(t, p.InFlight("db-1"))
				if err != nil {
					require.Equal(t, time.Second, at, "only the probe timeout ends it")
					require.EqualError(t, err, "timeoutfailsafe: adaptive timeout exceeded (dest db-1, attempt 1, timeout 1s)")
					require.Equal(t, obs{Dest: "db-1", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: time.Second, Probe: true}, o[0])
					return
				}
				require.Equal(t, "ok", got)
				require.Equal(t, timeout.Completed, o[0].Outcome)
				require.Equal(t, at, o[0].Elapsed)
				if at == time.Second {
					require.True(t, o[0].Probe)
				}
			})
		}
	}
}

type destKey struct{}

// TestAttemptsAfterATimeout: an attempt a timeout reached (its function
// returning at that moment, or after it) leaves nothing behind that acts
// on the policy's later attempts, which may reuse the state of the earlier
// ones whose timer never fired: those run to their own timeouts, from
// goroutines at once.
func TestAttemptsAfterATimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policytest.New(100 * time.Millisecond)
		for i := range 4 {
			p.SetTimeout(fmt.Sprint("slow-", i), time.Second)
		}
		adaptive := NewBuilder[string](p, "").WithDestinationFunc(func(exec failsafe.ExecutionInfo) string {
			return exec.Context().Value(destKey{}).(string)
		}).Build()
		run := func(dest string, d time.Duration) (string, error) {
			ctx := context.WithValue(context.Background(), destKey{}, dest)
			return failsafe.With(adaptive).WithContext(ctx).GetWithExecution(answers(d))
		}
		for range 32 {
			_, _ = run("fast", 100*time.Millisecond) // at the timeout: either wins
			_, err := run("fast", 150*time.Millisecond)
			require.ErrorIs(t, err, ErrTimeout)
			var wg sync.WaitGroup
			for i := range 4 {
				wg.Go(func() {
					got, err := run(fmt.Sprint("slow-", i), 900*time.Millisecond)
					require.NoError(t, err)
					require.Equal(t, "ok", got)
				})
			}
			wg.Wait()
		}
		synctest.Wait()
		var completed int
		for _, o := range p.Observed() {
			if o.Dest != "fast" {
				require.Equal(t, timeout.Completed, o.Outcome)
				require.Equal(t, 900*time.Millisecond, o.Elapsed)
				completed++
			}
		}
		require.Equal(t, 32*4, completed)
		require.Len(t, p.Observed(), 32*6)
	})
}

// slowProbe is a Policy whose Probe, once called, lets the function
// answer (inProbe) and takes a while to decide.
type slowProbe struct {
	*policytest.Policy
	inProbe chan struct{}
}

func (p *slowProbe) Probe(a *timeout.Attempt, now time.Time) bool {
	close(p.inProbe)
	time.Sleep(20 * time.Millisecond) // the function returns meanwhile
	return p.Policy.Probe(a, now)
}

// TestReturnsWhileAProbeIsDecided: a function that returns while the
// timeout is deciding on a caller probe waits for the decision: the probe
// goes on, and ends with the answer, observed once, the probe released.
// Real time; the sleep in Probe only makes the overlap likely, and the
// outcome is the same without it.
func TestReturnsWhileAProbeIsDecided(t *testing.T) {
	for range 3 {
		p := &slowProbe{Policy: policytest.New(time.Millisecond), inProbe: make(chan struct{})}
		p.OfferProbe(time.Hour)
		got, err := failsafe.With(New[string](p, "db-1")).Get(func() (string, error) {
			<-p.inProbe
			return "ok", nil
		})
		require.NoError(t, err)
		require.Equal(t, "ok", got)
		o := p.Observed()
		require.Len(t, o, 1)
		require.Equal(t, timeout.Completed, o[0].Outcome)
		require.True(t, o[0].Probe)
		require.False(t, p.InFlight("db-1"))
	}
}

// firesWhileDeciding is a Policy whose Probe, having reserved the probe,
// lets the attempt's timer callback run again before it returns, as a
// probe timer does that fires while the timeout's callback is still
// deciding: after it armed the probe's timer and before it handed the
// attempt back (a probe window about zero, or that callback descheduled
// there). again is closed when that second run returned.
type firesWhileDeciding struct {
	*policytest.Policy
	again chan struct{}
}

func (p *firesWhileDeciding) Probe(a *timeout.Attempt, now time.Time) bool {
	ok := p.Policy.Probe(a, now)
	r := attemptOf(a)
	go func() {
		r.fire()
		close(p.again)
	}()
	// Let the second run get as far as it can while the decision is
	// pending: a run that waits for it does not return meanwhile.
	for range 1000 {
		select {
		case <-p.again:
			return ok
		default:
			runtime.Gosched()
		}
	}
	return ok
}

// attemptOf returns the attempt whose Attempt a is (Probe gets &r.a).
func attemptOf(a *timeout.Attempt) *attempt[string] {
	var z attempt[string]
	return (*attempt[string])(unsafe.Add(unsafe.Pointer(a), -int(unsafe.Offsetof(z.a))))
}

// TestProbeTimerFiresWhileDeciding: a probe's timer that fires while the
// timeout's callback is still deciding on the probe is not lost: it waits
// for the decision and then ends the probe, which otherwise would go on
// past its probe timeout, the caller waiting, until its function returned.
func TestProbeTimerFiresWhileDeciding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &firesWhileDeciding{Policy: policytest.New(100 * time.Millisecond), again: make(chan struct{})}
		p.OfferProbe(time.Hour)
		start := time.Now()
		_, err := failsafe.With(New[string](p, "db-1")).GetWithExecution(hangs)
		require.ErrorIs(t, err, ErrTimeout)
		require.Equal(t, 100*time.Millisecond, time.Since(start), "ended by the run that came while deciding")
		<-p.again
		synctest.Wait()
		require.Equal(t, []obs{{Dest: "db-1", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 100 * time.Millisecond, Probe: true}}, p.Observed())
		require.False(t, p.InFlight("db-1"))
	})
}
