package timeoutgrpc

import (
	"context"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// StreamClientInterceptor returns an interceptor whose adaptive timeout
// covers establishing a stream and its first response message: if the first
// RecvMsg has not returned by the timeout p decides, the stream is cancelled
// and its calls fail with a *TimeoutError (codes.DeadlineExceeded, matching
// ErrTimeout). After the first message the stream is the caller's, bounded
// only by its own context. The destination and attempt are chosen as for
// UnaryClientInterceptor, and every stream is observed once: at its first
// message, or when it ends before one, as timeout.Completed (any status but
// Unavailable), timeout.Failed (Unavailable), timeout.TimedOut (our timeout)
// or timeout.Canceled (the caller's context). For a client-streaming call
// the timeout includes the caller's sending, since the first response comes
// after it. Streams are never probed.
func StreamClientInterceptor(p timeout.Policy, opts ...Option) grpc.StreamClientInterceptor {
	o := newOptions(p, opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		s := &clientStream{call: o.begin(ctx, method, cc), parent: ctx}
		s.ctx, s.cancel = context.WithCancelCause(ctx)
		s.timer = time.AfterFunc(s.a.Timeout, s.expire)
		callOpts = append(callOpts[:len(callOpts):len(callOpts)], grpc.OnFinish(s.finish))
		cs, err := streamer(s.ctx, desc, cc, method, callOpts...)
		if err != nil {
			s.first(err)
			s.cancel(nil)
			return nil, s.wrap(err)
		}
		s.ClientStream = cs
		return s, nil
	}
}

// clientStream is a stream under the adaptive timeout.
type clientStream struct {
	grpc.ClientStream
	call
	parent context.Context
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
	// settled observes the stream once: at its first message or end, or at
	// the timeout, whichever comes first. sync.Once also makes a RecvMsg
	// that races the timer return only once the stream was observed.
	settled sync.Once
}

// expire runs at the timeout: unless the first response came first, the
// stream is cancelled and observed as timed out.
func (s *clientStream) expire() {
	s.settled.Do(func() {
		if s.parent.Err() != nil {
			s.observe(timeout.Canceled, s.elapsed())
			return
		}
		s.cancel(ErrTimeout)
		s.observe(timeout.TimedOut, s.elapsed())
	})
}

// first observes the stream when its first response (or its end) came
// before the timeout.
func (s *clientStream) first(err error) {
	s.settled.Do(func() {
		s.timer.Stop()
		s.observe(outcome(s.parent, s.ctx, err, false), s.elapsed()) // before expire, which observes our timeout itself
	})
}

// finish is the stream's grpc.OnFinish: it ends the stream's context.
func (s *clientStream) finish(err error) {
	s.first(err)
	s.cancel(nil)
}

// wrap turns an error caused by our timeout into a *TimeoutError.
func (s *clientStream) wrap(err error) error {
	if err != nil && err != io.EOF && context.Cause(s.ctx) == ErrTimeout {
		return s.timeoutError(err)
	}
	return err
}

// RecvMsg receives a message; the first one (or the stream's end) settles
// the timeout.
func (s *clientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.first(err)
	return s.wrap(err)
}

// SendMsg sends a message.
func (s *clientStream) SendMsg(m any) error { return s.wrap(s.ClientStream.SendMsg(m)) }

// Header returns the response header metadata.
func (s *clientStream) Header() (metadata.MD, error) {
	md, err := s.ClientStream.Header()
	return md, s.wrap(err)
}
