// Package smallfile reads the small files an operator points a node at (the
// gossip key file, the HTTP token file) without trusting them: only a regular
// file, at most a size limit, and within a deadline, so that a FIFO, a
// device or a hung network mount can neither exhaust memory nor block the
// caller (a reload on SIGHUP, a shutdown waiting behind it).
//
// The read runs on its own goroutine. When the deadline passes first, Read
// returns ErrTimeout at once and that goroutine is left to finish (or stay
// blocked) in the kernel; it holds one file descriptor and at most limit+1
// bytes, and sends its result nowhere.
package smallfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// Errors of Read. Other errors are the operating system's (*fs.PathError).
var (
	// ErrNotRegular: the path names a directory, FIFO, socket or device.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge: the file holds more than the limit.
	ErrTooLarge = errors.New("file too large")
	// ErrTimeout: the file could not be read within the deadline.
	ErrTimeout = errors.New("read timed out")
)

// Refused reports whether err says the file itself is unacceptable (not a
// regular file, or too large), as opposed to unreadable (missing, no
// permission, an I/O error, a timeout).
func Refused(err error) bool {
	return errors.Is(err, ErrNotRegular) || errors.Is(err, ErrTooLarge)
}

// Read returns the contents of the regular file at path, which must hold at
// most limit bytes, or an error within timeout. The file is opened
// non-blocking, so opening a FIFO never waits for a writer; it is refused by
// its type.
func Read(path string, limit int64, timeout time.Duration) ([]byte, error) {
	return read(path, limit, timeout, openNonBlocking)
}

type result struct {
	data []byte
	err  error
}

func read(path string, limit int64, timeout time.Duration, open func(string) (*os.File, error)) ([]byte, error) {
	done := make(chan result, 1) // buffered: a late reader never blocks
	go func() {
		data, err := readAll(path, limit, open)
		done <- result{data, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-done:
		return r.data, r.err
	case <-t.C:
		return nil, fmt.Errorf("%s: %w after %v", path, ErrTimeout, timeout)
	}
}

func openNonBlocking(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

func readAll(path string, limit int64, open func(string) (*os.File, error)) ([]byte, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, kind(fi.Mode()))
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s: %w: %d bytes, at most %d", path, ErrTooLarge, fi.Size(), limit)
	}
	// The size can change under us: read at most one byte more than allowed.
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w: more than %d bytes", path, ErrTooLarge, limit)
	}
	return data, nil
}

// kind names a file type for an error message.
func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	default:
		return "type " + m.Type().String()
	}
}
