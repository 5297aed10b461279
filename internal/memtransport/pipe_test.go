package memtransport

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBufferedPipeWriteReturnsBeforeRead pins what bufferedPipe is for: a
// write returns once queued, before anyone reads (net.Pipe's waits for the
// reader), and the reader then gets every byte, then EOF after a close.
func TestBufferedPipeWriteReturnsBeforeRead(t *testing.T) {
	a, b := bufferedPipe(1 << 20)
	msg := bytes.Repeat([]byte("x"), 64<<10)
	require.NoError(t, a.SetWriteDeadline(time.Now().Add(time.Hour)))
	n, err := a.Write(msg) // nobody reads yet: through net.Pipe this blocks
	require.NoError(t, err)
	require.Equal(t, len(msg), n)
	require.NoError(t, a.Close())
	got, err := io.ReadAll(b)
	require.NoError(t, err)
	require.Equal(t, msg, got)
	_, err = b.Write([]byte("late"))
	require.ErrorIs(t, err, io.ErrClosedPipe, "the other end closed")
	_, err = a.Write([]byte("late"))
	require.ErrorIs(t, err, io.ErrClosedPipe, "this end closed")
}

func TestBufferedPipeFullBufferAndDeadlines(t *testing.T) {
	a, b := bufferedPipe(4)
	// A read with nothing written times out at its deadline.
	require.NoError(t, b.SetReadDeadline(time.Now().Add(20*time.Millisecond)))
	_, err := b.Read(make([]byte, 8))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "a timeout, as memberlist checks")

	// A write larger than the buffer queues what fits, then times out.
	require.NoError(t, a.SetWriteDeadline(time.Now().Add(20*time.Millisecond)))
	n, err := a.Write([]byte("abcdefgh"))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.Equal(t, 4, n)

	// Reading makes room: a write waiting on a full buffer goes on.
	require.NoError(t, a.SetWriteDeadline(time.Time{}))
	require.NoError(t, b.SetReadDeadline(time.Time{}))
	done := make(chan error, 1)
	go func() {
		_, err := a.Write([]byte("ijkl"))
		done <- err
	}()
	var got []byte
	buf := make([]byte, 8)
	for len(got) < 8 {
		k, err := b.Read(buf)
		require.NoError(t, err)
		got = append(got, buf[:k]...)
	}
	require.NoError(t, <-done)
	require.Equal(t, "abcdijkl", string(got))

	// Closing the reading end fails a write waiting on a full buffer.
	_, err = a.Write([]byte("mnop"))
	require.NoError(t, err)
	go func() {
		_, err := a.Write([]byte("q"))
		done <- err
	}()
	require.NoError(t, b.Close())
	require.ErrorIs(t, <-done, io.ErrClosedPipe)
}
