package testutil

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEventuallyReturnsOnceTrue(t *testing.T) {
	n := 0
	took := Eventually(t, "third poll", func() bool { n++; return n == 3 })
	require.Equal(t, 3, n)
	require.Positive(t, took)
}

func TestSyncBufferConcurrent(t *testing.T) {
	var b SyncBuffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			_, _ = b.Write([]byte("x"))
		}
	}()
	for range 100 {
		_ = b.String()
	}
	<-done
	require.Len(t, b.String(), 100)
}
