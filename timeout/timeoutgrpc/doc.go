// Package timeoutgrpc gives gRPC calls the adaptive timeout a
// timeout.Policy decides, through client interceptors, and tells the Policy
// how each call ended, so a gRPC client gets adaptive timeouts, and the
// fleet's view when the Policy is a *node.Node:
//
//	cc, err := grpc.NewClient(target,
//		grpc.WithUnaryInterceptor(timeoutgrpc.UnaryClientInterceptor(p)),
//		grpc.WithStreamInterceptor(timeoutgrpc.StreamClientInterceptor(p)))
//
// The destination key is cc.Target() unless WithDestination chooses it (per
// method, say), and the attempt number comes from timeout.WithAttempt on the
// call's context (1 when unset): a retry loop sets it per try so that each
// retry's timeout grows. Our timeout never extends the caller's deadline.
// When it ends a call, the call fails with a *TimeoutError whose status is
// codes.DeadlineExceeded and which matches ErrTimeout with errors.Is; the
// caller's own deadline gives gRPC's usual DeadlineExceeded error, which
// does not match ErrTimeout.
//
// # Outcomes
//
// Every call is observed once (Policy.Observe): a reply, or any status
// except Unavailable, is timeout.Completed at its latency (the destination
// answered, whatever the application's result); Unavailable (connection
// refused or lost, no server) is timeout.Failed, not a latency sample; our
// timeout is timeout.TimedOut, a censored sample; the caller's cancellation
// or deadline is timeout.Canceled, nothing learned. Whichever ended the call
// first decides, as in node.Do and timeouthttp: a call our timeout ended is
// timed out even if the caller cancels while it is still returning, whether
// or not it could have become a probe; an error the invoker returned before
// the deadline (ours, or the caller's) is its own, by its status, though
// the deadline may have passed by the time the interceptor looks.
//
// A unary call's timeout covers the whole call. A stream's covers
// establishing it and its first response message; after that the stream is
// the caller's. Unary calls may become shadow probes when the Policy offers
// one (UnaryClientInterceptor says when): the caller gets its error at the
// normal timeout while the call goes on unseen until the probe timeout, so
// the Policy learns a latency above the current timeout, or that a failing
// destination answers again. Streams are never probed.
//
// # Hedging
//
// WithHedging names the idempotent methods whose unary calls may be
// hedged when the Policy is a timeout.Hedger (*node.Node,
// timeout.NewPolicy): a call that has not answered after its destination's
// hedge delay is sent again to the same destination, within the Policy's
// hedge budget; the first answer wins and the other attempt is observed as
// timeout.Superseded (whatever it returns then, timeout.TimedOut if its
// own timeout had ended it before the win, timeout.Canceled if the
// caller's context had). A reply or status of the first attempt in hand
// when the delay's passing is handled comes first: the call is not sent
// again, no token spent. node.DoHedged's rule for one destination;
// streams are never hedged.
//
// # Time and concurrency
//
// WithClock (default time.Now) is the clock of the Policy's decisions and of
// latency, read for a hedged call's attempts and for a call that may
// become a shadow probe by the goroutine that runs the invoker, as it
// returns (as node.DoHedged reads when fn returned): the interceptor's own
// delay in handling a return is not latency. Deadlines themselves are
// context and runtime timers. The
// interceptors are safe for concurrent use (every Policy is). A unary call
// that may become a shadow probe runs in a goroutine of its own, which ends
// by the probe timeout; a stream arms one runtime timer, stopped at its
// first message.
package timeoutgrpc
