//go:build unix

package cluster

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/internal/smallfile"
)

// TestLoadKeyFileFIFO: a FIFO in place of the key file is refused at once
// (it would otherwise block the open until a writer appears).
func TestLoadKeyFileFIFO(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "cluster.key")
	require.NoError(t, syscall.Mkfifo(p, 0o600))
	_, err := LoadKeyFile(p)
	require.ErrorIs(t, err, ErrKeyFile)
	require.ErrorContains(t, err, "not a regular file (a FIFO)")
	require.NotErrorIs(t, err, smallfile.ErrTimeout, "refused by its type, not by the deadline")
}
