package memtransport

import (
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// streamBuffer is how many bytes a stream buffers in each direction: more
// than the largest message memberlist carries (the cluster's 1 MiB cap), so
// that, as on a TCP socket with room in its buffers, a write returns once
// its bytes are queued rather than once the peer has read them.
const streamBuffer = 4 << 20

// bufferedPipe returns the two ends of a stream that buffers up to limit
// bytes in each direction. Unlike net.Pipe, whose every write waits for the
// reader, a write waits only while the buffer is full: a sender's deadline
// then measures its own progress, not how soon the receiving goroutine is
// scheduled (on a starved machine, under -race, a 1 MiB message through
// net.Pipe's 4 KiB reads took longer than the stream timeout). Closing an
// end lets the other read what was written before, then io.EOF; writes
// after a close fail with io.ErrClosedPipe. Deadlines behave as net.Conn
// says: past one, reads and writes fail with os.ErrDeadlineExceeded.
func bufferedPipe(limit int) (net.Conn, net.Conn) {
	ab, ba := newHalf(limit), newHalf(limit)
	return &pipeEnd{in: ba, out: ab}, &pipeEnd{in: ab, out: ba}
}

// half is one direction of a buffered pipe.
type half struct {
	mu      sync.Mutex
	buf     []byte
	limit   int
	wclosed bool          // the writing end closed: readers see EOF once buf is empty
	rclosed bool          // the reading end closed: writes fail
	wake    chan struct{} // closed and replaced at every change of the above
}

func newHalf(limit int) *half { return &half{limit: limit, wake: make(chan struct{})} }

// changedLocked wakes every goroutine waiting on h.
func (h *half) changedLocked() {
	close(h.wake)
	h.wake = make(chan struct{})
}

func (h *half) poke() {
	h.mu.Lock()
	h.changedLocked()
	h.mu.Unlock()
}

// pipeEnd is one end of a buffered pipe.
type pipeEnd struct {
	in, out *half

	mu        sync.Mutex // guards the deadlines
	rdl, wdl  time.Time
	closeOnce sync.Once
}

// wait blocks until wake is closed or the deadline read by dl passes.
func (p *pipeEnd) wait(wake <-chan struct{}, dl func() time.Time) error {
	d := dl()
	if d.IsZero() {
		<-wake
		return nil
	}
	left := time.Until(d)
	if left <= 0 {
		return os.ErrDeadlineExceeded
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-wake:
	case <-t.C:
	}
	return nil // the caller's loop checks the deadline again
}

func (p *pipeEnd) readDeadline() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rdl
}

func (p *pipeEnd) writeDeadline() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wdl
}

func expired(d time.Time) bool { return !d.IsZero() && !time.Now().Before(d) }

// Read reads what the other end wrote: at most len(p) bytes, waiting while
// nothing is buffered.
func (p *pipeEnd) Read(b []byte) (int, error) {
	h := p.in
	for {
		h.mu.Lock()
		switch {
		case h.rclosed:
			h.mu.Unlock()
			return 0, io.ErrClosedPipe
		case expired(p.readDeadline()):
			h.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		case len(b) == 0:
			h.mu.Unlock()
			return 0, nil
		case len(h.buf) > 0:
			n := copy(b, h.buf)
			h.buf = h.buf[n:]
			if len(h.buf) == 0 {
				h.buf = nil
			}
			h.changedLocked()
			h.mu.Unlock()
			return n, nil
		case h.wclosed:
			h.mu.Unlock()
			return 0, io.EOF
		}
		wake := h.wake
		h.mu.Unlock()
		if err := p.wait(wake, p.readDeadline); err != nil {
			return 0, err
		}
	}
}

// Write queues b for the other end, waiting while the buffer is full.
func (p *pipeEnd) Write(b []byte) (int, error) {
	h := p.out
	n := 0
	for {
		if len(b) == 0 { // all queued: a close after this does not undo it
			return n, nil
		}
		h.mu.Lock()
		switch {
		case h.wclosed || h.rclosed:
			h.mu.Unlock()
			return n, io.ErrClosedPipe
		case expired(p.writeDeadline()):
			h.mu.Unlock()
			return n, os.ErrDeadlineExceeded
		}
		if room := h.limit - len(h.buf); room > 0 {
			k := min(room, len(b))
			h.buf = append(h.buf, b[:k]...)
			b, n = b[k:], n+k
			h.changedLocked()
			h.mu.Unlock()
			continue
		}
		wake := h.wake
		h.mu.Unlock()
		if err := p.wait(wake, p.writeDeadline); err != nil {
			return n, err
		}
	}
}

// Close closes this end: the other end reads what was written, then EOF;
// its writes fail.
func (p *pipeEnd) Close() error {
	p.closeOnce.Do(func() {
		p.out.mu.Lock()
		p.out.wclosed = true
		p.out.changedLocked()
		p.out.mu.Unlock()
		p.in.mu.Lock()
		p.in.rclosed = true
		p.in.buf = nil
		p.in.changedLocked()
		p.in.mu.Unlock()
	})
	return nil
}

func (p *pipeEnd) LocalAddr() net.Addr  { return pipeAddr{} }
func (p *pipeEnd) RemoteAddr() net.Addr { return pipeAddr{} }

// SetDeadline sets both deadlines and wakes waiting reads and writes so
// they see it.
func (p *pipeEnd) SetDeadline(t time.Time) error {
	p.mu.Lock()
	p.rdl, p.wdl = t, t
	p.mu.Unlock()
	p.in.poke()
	p.out.poke()
	return nil
}

// SetReadDeadline sets the read deadline.
func (p *pipeEnd) SetReadDeadline(t time.Time) error {
	p.mu.Lock()
	p.rdl = t
	p.mu.Unlock()
	p.in.poke()
	return nil
}

// SetWriteDeadline sets the write deadline.
func (p *pipeEnd) SetWriteDeadline(t time.Time) error {
	p.mu.Lock()
	p.wdl = t
	p.mu.Unlock()
	p.out.poke()
	return nil
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
