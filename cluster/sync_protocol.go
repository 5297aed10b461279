package cluster

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// SyncProtocol is a [Protocol] safe for concurrent use: one mutex around
// it, and an atomic copy of Next so that a Tick or Poll before anything is
// due costs an atomic load and takes no lock. The Cluster's shell drives
// one; a node's query path polls the same one.
type SyncProtocol struct {
	mu   sync.Mutex
	p    *Protocol
	next atomic.Int64 // p.Next() in Unix nanoseconds; math.MinInt64 for at once
	// due is when Poll has something to do, in Unix nanoseconds: next, or
	// math.MaxInt64 while a shell drives the protocol (Poll then does
	// nothing), so that Poll's fast path is one comparison. Written with
	// mu held.
	due    atomic.Int64
	driven bool // a shell ticks it; under mu
}

// NewSyncProtocol returns a SyncProtocol over NewProtocol(cfg).
func NewSyncProtocol(cfg ProtocolConfig) (*SyncProtocol, error) {
	p, err := NewProtocol(cfg)
	if err != nil {
		return nil, err
	}
	s := &SyncProtocol{p: p}
	s.next.Store(math.MinInt64)
	s.due.Store(math.MinInt64)
	return s, nil
}

// publish stores p.Next() (and Poll's due time); called with mu held after
// every change.
func (s *SyncProtocol) publish() {
	next := int64(math.MinInt64)
	if t := s.p.Next(); !t.IsZero() {
		next = t.UnixNano()
	}
	s.next.Store(next)
	if !s.driven {
		s.due.Store(next)
	}
}

// Tick is Protocol.Tick; before Next it returns nil at the cost of one
// atomic load.
func (s *SyncProtocol) Tick(now time.Time) []Message {
	if now.UnixNano() < s.next.Load() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	msgs := s.p.Tick(now)
	s.publish()
	return msgs
}

// Poll advances the protocol on behalf of a caller that is not its shell —
// a node's query path and its background loop — so that a node that was
// never started, or runs without gossip, seals its own sub-windows on time
// and answers lazily. It is Tick with the messages dropped (without a
// shell, there is nobody to send them to; a protocol with no members makes
// none). While a shell drives the protocol (from Cluster.Start until
// Close) it does nothing: the shell ticks on its own timer. Between due
// times (and while driven) it costs one atomic load and one comparison,
// inlined into the caller.
func (s *SyncProtocol) Poll(now time.Time) {
	if now.UnixNano() < s.due.Load() {
		return
	}
	s.poll(now)
}

// poll is Poll once something may be due: Tick unless a shell drives the
// protocol.
func (s *SyncProtocol) poll(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.driven {
		return
	}
	if now.UnixNano() < s.next.Load() {
		return
	}
	_ = s.p.Tick(now)
	s.publish()
}

// drive tells Poll whether a shell ticks the protocol.
func (s *SyncProtocol) drive(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.driven = on
	if on {
		s.due.Store(math.MaxInt64)
	} else {
		s.due.Store(s.next.Load())
	}
}

// Receive is Protocol.Receive.
func (s *SyncProtocol) Receive(msg []byte, now time.Time) (Receipt, []Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, msgs := s.p.Receive(msg, now)
	s.publish()
	return r, msgs
}

// SetMembers is Protocol.SetMembers.
func (s *SyncProtocol) SetMembers(members []Member, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.p.SetMembers(members, now)
	s.publish()
}

// Next is Protocol.Next.
func (s *SyncProtocol) Next() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p.Next()
}

// Stats is Protocol.Stats.
func (s *SyncProtocol) Stats() ProtocolStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p.Stats()
}

// clockWarnings is Protocol.clockWarnings.
func (s *SyncProtocol) clockWarnings(now time.Time) map[string]Warning {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p.clockWarnings(now)
}

// MemberName is Protocol.MemberName.
func (s *SyncProtocol) MemberName() string { return s.p.self }

// Jitter is Protocol.Jitter.
func (s *SyncProtocol) Jitter() time.Duration { return s.p.jitter }

// V2 is Protocol.V2.
func (s *SyncProtocol) V2() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p.V2()
}
