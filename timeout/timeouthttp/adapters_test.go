package timeouthttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/timeout/timeoutgrpc"
)

// How a destination handles one attempt, in either protocol.
type handling int

const (
	answers     handling = iota // an answer after its delay, whatever its context says (a response; a reply)
	appError                    // an application's error after its delay (an error Classify calls Completed; NotFound)
	refuses                     // a fast failure after its delay (errRefused; Unavailable)
	hangs                       // nothing until its context ends, then its context's error
	reportsCtx                  // its context's error, after its delay (it reports the end late)
	answersHeld                 // an answer after its delay, as the coordinator's next clock read is held (attemptScript.held)
)

// attemptScript is one attempt: how it is handled, and after how long
// from its start.
type attemptScript struct {
	h handling
	d time.Duration
}

// held makes the coordinator's next read of a clock from
// testutil.CallerHeldClock(hold, …) slow, for an attempt that answersHeld.
func (s attemptScript) held(hold *atomic.Bool) {
	if s.h == answersHeld {
		hold.Store(true)
	}
}

// roundTrip is the attempt over HTTP.
func (s attemptScript) roundTrip(r *http.Request, hold *atomic.Bool) (*http.Response, error) {
	ctx := r.Context()
	if s.h == hangs {
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}
	time.Sleep(s.d)
	s.held(hold)
	switch s.h {
	case appError:
		return nil, errApp
	case refuses:
		return nil, errRefused
	case reportsCtx:
		return nil, context.Cause(ctx)
	}
	return &http.Response{StatusCode: http.StatusOK, ContentLength: -1, Request: r,
		Body: io.NopCloser(strings.NewReader("ok"))}, nil
}

// invoke is the attempt over gRPC.
func (s attemptScript) invoke(ctx context.Context, reply *wrapperspb.StringValue, hold *atomic.Bool) error {
	if s.h == hangs {
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	}
	time.Sleep(s.d)
	s.held(hold)
	switch s.h {
	case appError:
		return status.Error(codes.NotFound, "not found")
	case refuses:
		return status.Error(codes.Unavailable, "refused")
	case reportsCtx:
		return status.FromContextError(ctx.Err()).Err()
	}
	reply.Value = "ok"
	return nil
}

// TestAdaptersAgree: the same events give the same outcomes through
// timeouthttp and timeoutgrpc (a response read to its end is a reply, an
// error Options.Classify calls Completed a status other than Unavailable,
// a refusal Unavailable), whichever came first deciding: the attempt's
// answer, its timeout, the caller's cancellation or deadline, and with
// hedging the other attempt's win; and the same latencies: an attempt's
// when it returned (for a response, the headers' arrival, the body timed
// from there), however late the adapter's coordinator handles the return
// (held as it enters its wait on the probeable path, as it spends the
// hedge budget or reads its clock on the hedged path), as node.DoHedged
// reads when fn returned.
func TestAdaptersAgree(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name     string
		timeout  time.Duration
		cancelAt time.Duration // the caller cancels; 0: never
		deadline time.Duration // the caller's deadline; 0: none
		tries    []attemptScript
		hedge    bool          // hedged after 21 ms
		probe    bool          // the Policy offers a shadow probe: the probeable path
		enter    time.Duration // the coordinator enters its wait this late (the caller's context holds it; probeable only)
		spend    time.Duration // spending the hedge budget holds the coordinator this long
		held     bool          // the clock (both adapters' injected one) holds the coordinator 3 ms after an attempt that answersHeld
		timedOut bool          // the caller's error is our timeout's
		answered bool          // the caller gets the answer
		want     []obs
	}{
		{name: "an answer in time", timeout: 100 * ms, tries: []attemptScript{{answers, 50 * ms}},
			want: []obs{{Outcome: timeout.Completed, Elapsed: 50 * ms}}},
		{name: "an application's error", timeout: 100 * ms, tries: []attemptScript{{appError, 50 * ms}},
			want: []obs{{Outcome: timeout.Completed, Elapsed: 50 * ms}}},
		{name: "a refusal", timeout: 100 * ms, tries: []attemptScript{{refuses, 50 * ms}},
			want: []obs{{Outcome: timeout.Failed, Elapsed: 50 * ms}}},
		{name: "our timeout", timeout: 100 * ms, tries: []attemptScript{{hangs, 0}}, timedOut: true,
			want: []obs{{Outcome: timeout.TimedOut, Elapsed: 100 * ms}}},
		{name: "an answer after our timeout", timeout: 100 * ms, tries: []attemptScript{{answers, 150 * ms}},
			want: []obs{{Outcome: timeout.Completed, Elapsed: 150 * ms}}},
		{name: "our timeout, then the caller cancels", timeout: 100 * ms, cancelAt: 150 * ms,
			tries: []attemptScript{{reportsCtx, 200 * ms}}, timedOut: true,
			want: []obs{{Outcome: timeout.TimedOut, Elapsed: 200 * ms}}},
		{name: "the caller cancels", timeout: 100 * ms, cancelAt: 30 * ms, tries: []attemptScript{{hangs, 0}},
			want: []obs{{Outcome: timeout.Canceled, Elapsed: 30 * ms}}},
		{name: "the caller's deadline first", timeout: 100 * ms, deadline: 60 * ms, tries: []attemptScript{{hangs, 0}},
			want: []obs{{Outcome: timeout.Canceled, Elapsed: 60 * ms}}},
		{name: "an answer after the caller cancelled", timeout: 100 * ms, cancelAt: 20 * ms,
			tries: []attemptScript{{answers, 50 * ms}}, answered: true,
			want: []obs{{Outcome: timeout.Completed, Elapsed: 50 * ms}}},
		{name: "probeable: an answer after the caller cancelled", timeout: 100 * ms, cancelAt: 20 * ms, probe: true,
			tries: []attemptScript{{answers, 50 * ms}}, answered: true,
			want: []obs{{Outcome: timeout.Completed, Elapsed: 50 * ms}}},
		{name: "probeable: an answer handled late", timeout: 100 * ms, probe: true, enter: 60 * ms,
			tries: []attemptScript{{answers, 40 * ms}}, answered: true,
			want: []obs{{Outcome: timeout.Completed, Elapsed: 40 * ms}}},
		{name: "probeable: an application's error handled late", timeout: 100 * ms, probe: true, enter: 60 * ms,
			tries: []attemptScript{{appError, 40 * ms}},
			want:  []obs{{Outcome: timeout.Completed, Elapsed: 40 * ms}}},
		{name: "probeable: a refusal handled late", timeout: 100 * ms, probe: true, enter: 60 * ms,
			tries: []attemptScript{{refuses, 40 * ms}},
			want:  []obs{{Outcome: timeout.Failed, Elapsed: 40 * ms}}},
		{name: "probeable: our timeout, the probe answers", timeout: 100 * ms, probe: true,
			tries: []attemptScript{{answers, 150 * ms}}, timedOut: true,
			want: []obs{{Outcome: timeout.Completed, Elapsed: 150 * ms, Probe: true}}},
		{name: "probeable: the caller cancels", timeout: 100 * ms, cancelAt: 30 * ms, probe: true,
			tries: []attemptScript{{hangs, 0}},
			want:  []obs{{Outcome: timeout.Canceled, Elapsed: 30 * ms}}},
		{name: "probeable: a refusal after the caller cancelled", timeout: 100 * ms, cancelAt: 20 * ms, probe: true,
			tries: []attemptScript{{refuses, 50 * ms}},
			want:  []obs{{Outcome: timeout.Canceled, Elapsed: 50 * ms}}},
		{name: "probeable: an answer after the caller cancelled, handled late", timeout: 100 * ms, cancelAt: 20 * ms,
			probe: true, enter: 60 * ms, tries: []attemptScript{{answers, 40 * ms}}, answered: true,
			want: []obs{{Outcome: timeout.Completed, Elapsed: 40 * ms}}},
		{name: "probeable: an answer after our timeout, handled later", timeout: 100 * ms, probe: true, enter: 120 * ms,
			tries: []attemptScript{{answers, 110 * ms}}, answered: true,
			want: []obs{{Outcome: timeout.Completed, Elapsed: 110 * ms}}},
		{name: "probeable: a refusal after our timeout, handled later", timeout: 100 * ms, probe: true, enter: 120 * ms,
			tries: []attemptScript{{refuses, 110 * ms}},
			want:  []obs{{Outcome: timeout.Failed, Elapsed: 110 * ms}}},
		{name: "probeable: our timeout, the probe is refused", timeout: 100 * ms, probe: true,
			tries: []attemptScript{{refuses, 150 * ms}}, timedOut: true,
			want: []obs{{Outcome: timeout.Failed, Elapsed: 150 * ms, Probe: true}}},
		{name: "a refusal after the caller cancelled", timeout: 100 * ms, cancelAt: 20 * ms,
			tries: []attemptScript{{refuses, 50 * ms}},
			want:  []obs{{Outcome: timeout.Canceled, Elapsed: 50 * ms}}},
		{name: "a refusal before the caller's deadline", timeout: 100 * ms, deadline: 60 * ms,
			tries: []attemptScript{{refuses, 50 * ms}},
			want:  []obs{{Outcome: timeout.Failed, Elapsed: 50 * ms}}},
		{name: "hedged: the hedge wins", timeout: time.Second, hedge: true,
			tries: []attemptScript{{hangs, 0}, {answers, 30 * ms}},
			want:  []obs{{Outcome: timeout.Superseded, Elapsed: 51 * ms}, {Outcome: timeout.Completed, Elapsed: 30 * ms}}},
		{name: "hedged: an application's error wins", timeout: time.Second, hedge: true,
			tries: []attemptScript{{hangs, 0}, {appError, 30 * ms}},
			want:  []obs{{Outcome: timeout.Superseded, Elapsed: 51 * ms}, {Outcome: timeout.Completed, Elapsed: 30 * ms}}},
		{name: "hedged: a refusal leaves the other running", timeout: time.Second, hedge: true,
			tries: []attemptScript{{answers, 60 * ms}, {refuses, 10 * ms}},
			want:  []obs{{Outcome: timeout.Completed, Elapsed: 60 * ms}, {Outcome: timeout.Failed, Elapsed: 10 * ms}}},
		{name: "hedged: both refuse", timeout: time.Second, hedge: true,
			tries: []attemptScript{{refuses, 50 * ms}, {refuses, 10 * ms}},
			want:  []obs{{Outcome: timeout.Failed, Elapsed: 50 * ms}, {Outcome: timeout.Failed, Elapsed: 10 * ms}}},
		{name: "hedged: a loser our timeout ended first", timeout: 100 * ms, hedge: true,
			tries: []attemptScript{{answers, 150 * ms}, {answers, 90 * ms}},
			want:  []obs{{Outcome: timeout.TimedOut, Elapsed: 150 * ms}, {Outcome: timeout.Completed, Elapsed: 90 * ms}}},
		{name: "hedged: a loser that lost before its deadline", timeout: 100 * ms, hedge: true,
			tries: []attemptScript{{reportsCtx, 150 * ms}, {answers, 50 * ms}},
			want:  []obs{{Outcome: timeout.Superseded, Elapsed: 71 * ms}, {Outcome: timeout.Completed, Elapsed: 50 * ms}}},
		{name: "hedged: the caller cancelled before the win", timeout: time.Second, hedge: true, cancelAt: 40 * ms,
			tries: []attemptScript{{answers, 200 * ms}, {answers, 50 * ms}},
			want:  []obs{{Outcome: timeout.Canceled, Elapsed: 200 * ms}, {Outcome: timeout.Completed, Elapsed: 50 * ms}}},
		{name: "hedged: the caller cancels", timeout: time.Second, hedge: true, cancelAt: 40 * ms,
			tries: []attemptScript{{hangs, 0}, {hangs, 0}},
			want:  []obs{{Outcome: timeout.Canceled, Elapsed: 40 * ms}, {Outcome: timeout.Canceled, Elapsed: 19 * ms}}},
		{name: "hedged: both time out", timeout: 100 * ms, hedge: true, timedOut: true,
			tries: []attemptScript{{hangs, 0}, {hangs, 0}},
			want:  []obs{{Outcome: timeout.TimedOut, Elapsed: 100 * ms}, {Outcome: timeout.TimedOut, Elapsed: 100 * ms}}},
		// The first attempt returns at 22 ms, while spending holds the
		// coordinator from 21 to 24 ms (the return was not in hand at the
		// delay: the hedge is sent, at 24 ms, and loses at once).
		{name: "hedged: an answer handled late", timeout: time.Second, hedge: true, spend: 3 * ms,
			tries: []attemptScript{{answers, 22 * ms}, {hangs, 0}}, answered: true,
			want: []obs{{Outcome: timeout.Completed, Elapsed: 22 * ms}, {Outcome: timeout.Superseded, Elapsed: 0}}},
		{name: "hedged: a refusal handled late", timeout: time.Second, hedge: true, spend: 3 * ms,
			tries: []attemptScript{{refuses, 22 * ms}, {answers, 10 * ms}}, answered: true,
			want: []obs{{Outcome: timeout.Failed, Elapsed: 22 * ms}, {Outcome: timeout.Completed, Elapsed: 10 * ms}}},
		// The hedge answers at 248 ms; the coordinator's reading of the win
		// takes until 251 ms, and the first attempt returns at 249 ms,
		// before its timeout and before the win was handled.
		{name: "hedged: a win handled late", timeout: 250 * ms, hedge: true, held: true,
			tries: []attemptScript{{answers, 249 * ms}, {answersHeld, 227 * ms}}, answered: true,
			want: []obs{{Outcome: timeout.Superseded, Elapsed: 249 * ms}, {Outcome: timeout.Completed, Elapsed: 227 * ms}}},
	} {
		for i := range tc.want {
			tc.want[i].Dest, tc.want[i].Attempt = "h", 1
		}
		// callerCtx is the caller's context, as the table says.
		callerCtx := func(t *testing.T) context.Context {
			ctx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				t.Cleanup(cancel)
			}
			if tc.cancelAt > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				t.Cleanup(cancel)
				time.AfterFunc(tc.cancelAt, cancel)
			}
			if tc.enter > 0 {
				ctx = testutil.SlowDone(ctx, tc.enter)
			}
			return ctx
		}
		// policy is the Policy, as the table says.
		policy := func() *fixedHedger {
			p := hedger(tc.timeout)
			p.hold = tc.spend
			if tc.probe {
				p.OfferProbe(time.Minute)
			}
			return p
		}
		// clock is the adapters' clock, as the table says (nil: their
		// default), held by hold; made by the goroutine that calls the
		// adapter, which runs its coordinator.
		clock := func(hold *atomic.Bool) func() time.Time {
			if !tc.held {
				return nil
			}
			return testutil.CallerHeldClock(hold, 3*time.Millisecond)
		}
		t.Run(tc.name+"/http", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := policy()
				var hold atomic.Bool
				base := &callsBase{}
				for _, s := range tc.tries {
					base.calls = append(base.calls, func(r *http.Request) (*http.Response, error) { return s.roundTrip(r, &hold) })
				}
				rt := newTransport(t, Options{Base: base, Policy: p, Hedge: tc.hedge, Classify: classifyTest, Now: clock(&hold)})
				req, err := http.NewRequestWithContext(callerCtx(t), http.MethodGet, "http://h/", nil)
				require.NoError(t, err)
				resp, err := rt.RoundTrip(req)
				var body []byte
				if err == nil {
					body, err = io.ReadAll(resp.Body)
					require.NoError(t, resp.Body.Close())
				}
				require.Equal(t, tc.timedOut, errors.Is(err, ErrTimeout), "the caller's error: %v", err)
				if tc.answered {
					require.NoError(t, err)
					require.Equal(t, "ok", string(body))
				}
				time.Sleep(time.Second)
				synctest.Wait()
				require.ElementsMatch(t, tc.want, p.Observed())
			})
		})
		t.Run(tc.name+"/grpc", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := policy()
				var hold atomic.Bool
				var n atomic.Int32
				invoker := func(ctx context.Context, _ string, _, reply any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
					s := tc.tries[n.Add(1)-1]
					return s.invoke(ctx, reply.(*wrapperspb.StringValue), &hold)
				}
				opts := []timeoutgrpc.Option{timeoutgrpc.WithDestination(func(context.Context, string, *grpc.ClientConn) string { return "h" })}
				if tc.hedge {
					opts = append(opts, timeoutgrpc.WithHedging(func(string) bool { return true }))
				}
				if c := clock(&hold); c != nil {
					opts = append(opts, timeoutgrpc.WithClock(c))
				}
				reply := new(wrapperspb.StringValue)
				err := timeoutgrpc.UnaryClientInterceptor(p, opts...)(callerCtx(t), "/test.Echo/Unary",
					wrapperspb.String("x"), reply, nil, invoker)
				require.Equal(t, tc.timedOut, errors.Is(err, timeoutgrpc.ErrTimeout), "the caller's error: %v", err)
				if tc.answered {
					require.NoError(t, err)
					require.Equal(t, "ok", reply.GetValue())
				}
				time.Sleep(time.Second)
				synctest.Wait()
				require.ElementsMatch(t, tc.want, p.Observed())
			})
		})
	}
}
