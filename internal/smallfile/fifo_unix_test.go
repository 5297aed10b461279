//go:build unix

package smallfile

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReadFIFO: a FIFO with no writer is refused by its type, at once,
// instead of blocking in open until a writer appears.
func TestReadFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "key.fifo")
	require.NoError(t, syscall.Mkfifo(p, 0o600))
	_, err := Read(p, 1024, time.Minute)
	require.ErrorIs(t, err, ErrNotRegular)
	require.ErrorContains(t, err, "a FIFO")
	require.True(t, Refused(err))
}
