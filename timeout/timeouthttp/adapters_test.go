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

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
	"github.com/adaptivetimeout/adaptivetimeout/timeout/timeoutgrpc"
)

// How a destination handles one attempt, in either protocol.
type handling int

const (
	answers    handling = iota // an answer after its delay, whatever its context says (a response; a reply)
	appError                   // an application's error after its delay (an error Classify calls Completed; NotFound)
	refuses                    // a fast failure after its delay (errRefused; Unavailable)
	hangs                      // nothing until its context ends, then its context's error
	reportsCtx                 // its context's error, after its delay (it reports the end late)
)

// attemptScript is one attempt: how it is handled, and after how long
// from its start.
type attemptScript struct {
	h handling
	d time.Duration
}

// roundTrip is the attempt over HTTP.
func (s attemptScript) roundTrip(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	if s.h == hangs {
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}
	time.Sleep(s.d)
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
func (s attemptScript) invoke(ctx context.Context, reply *wrapperspb.StringValue) error {
	if s.h == hangs {
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	}
	time.Sleep(s.d)
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
// hedging the other attempt's win.
func TestAdaptersAgree(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name     string
		timeout  time.Duration
		cancelAt time.Duration // the caller cancels; 0: never
		deadline time.Duration // the caller's deadline; 0: none
		tries    []attemptScript
		hedge    bool // hedged after 21 ms
		timedOut bool // the caller's error is our timeout's
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
			tries: []attemptScript{{answers, 50 * ms}},
			want:  []obs{{Outcome: timeout.Completed, Elapsed: 50 * ms}}},
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
			return ctx
		}
		t.Run(tc.name+"/http", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := hedger(tc.timeout)
				base := &callsBase{}
				for _, s := range tc.tries {
					base.calls = append(base.calls, s.roundTrip)
				}
				rt := newTransport(t, Options{Base: base, Policy: p, Hedge: tc.hedge, Classify: classifyTest})
				req, err := http.NewRequestWithContext(callerCtx(t), http.MethodGet, "http://h/", nil)
				require.NoError(t, err)
				resp, err := rt.RoundTrip(req)
				if err == nil {
					_, err = io.ReadAll(resp.Body)
					require.NoError(t, resp.Body.Close())
				}
				require.Equal(t, tc.timedOut, errors.Is(err, ErrTimeout), "the caller's error: %v", err)
				time.Sleep(time.Second)
				synctest.Wait()
				require.ElementsMatch(t, tc.want, p.Observed())
			})
		})
		t.Run(tc.name+"/grpc", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := hedger(tc.timeout)
				var n atomic.Int32
				invoker := func(ctx context.Context, _ string, _, reply any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
					s := tc.tries[n.Add(1)-1]
					return s.invoke(ctx, reply.(*wrapperspb.StringValue))
				}
				opts := []timeoutgrpc.Option{timeoutgrpc.WithDestination(func(context.Context, string, *grpc.ClientConn) string { return "h" })}
				if tc.hedge {
					opts = append(opts, timeoutgrpc.WithHedging(func(string) bool { return true }))
				}
				err := timeoutgrpc.UnaryClientInterceptor(p, opts...)(callerCtx(t), "/test.Echo/Unary",
					wrapperspb.String("x"), new(wrapperspb.StringValue), nil, invoker)
				require.Equal(t, tc.timedOut, errors.Is(err, timeoutgrpc.ErrTimeout), "the caller's error: %v", err)
				time.Sleep(time.Second)
				synctest.Wait()
				require.ElementsMatch(t, tc.want, p.Observed())
			})
		})
	}
}
