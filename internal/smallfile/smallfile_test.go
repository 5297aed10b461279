package smallfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, size int) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(strings.Repeat("k", size)), 0o600))
		return p
	}
	const limit = 64 << 10
	tests := []struct {
		name    string
		path    string
		size    int // bytes expected back
		err     error
		refused bool
		msg     string
	}{
		{name: "empty", path: write("empty", 0)},
		{name: "small", path: write("small", 45), size: 45},
		{name: "at the limit", path: write("limit", limit), size: limit},
		{name: "one byte over", path: write("over", limit+1), err: ErrTooLarge, refused: true, msg: "65537 bytes, at most 65536"},
		{name: "directory", path: dir, err: ErrNotRegular, refused: true, msg: "not a regular file (a directory)"},
		{name: "missing", path: filepath.Join(dir, "none"), err: os.ErrNotExist},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(tc.path, limit, 10*time.Second)
			if tc.err == nil {
				require.NoError(t, err)
				require.Len(t, got, tc.size)
				return
			}
			require.ErrorIs(t, err, tc.err)
			require.Equal(t, tc.refused, Refused(err))
			require.ErrorContains(t, err, tc.msg)
			require.Nil(t, got)
		})
	}
}

// TestReadTimeout stands in for a hung network mount: the open never
// returns until released, and Read still returns at its deadline.
func TestReadTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		hung := func(string) (*os.File, error) {
			<-release
			return nil, os.ErrDeadlineExceeded
		}
		start := time.Now()
		_, err := read("/mnt/hung/key", 1024, 5*time.Second, hung)
		require.ErrorIs(t, err, ErrTimeout)
		require.ErrorContains(t, err, "/mnt/hung/key: read timed out after 5s")
		require.False(t, Refused(err))
		require.Equal(t, 5*time.Second, time.Since(start))
		close(release) // the abandoned read finishes and sends into its buffer
		synctest.Wait()
	})
}
