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
