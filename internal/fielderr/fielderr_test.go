package fielderr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFieldAndLeaves(t *testing.T) {
	sentinel := errors.New("q: must be in (0, 1]")
	a := Errorf("Quantile", "%w, got %v", sentinel, 2)
	b := errors.New("plain")
	c := New("Window", errors.New("w: must be > 0"))
	err := errors.Join(a, errors.Join(b, fmt.Errorf("wrapped: %w", c)))

	require.Equal(t, "q: must be in (0, 1], got 2", a.Error())
	require.ErrorIs(t, err, sentinel)
	require.Equal(t, "Quantile", Field(a))
	require.Equal(t, "", Field(b))
	require.Equal(t, "Window", Field(fmt.Errorf("wrapped: %w", c)))

	leaves := Leaves(err)
	require.Len(t, leaves, 3)
	require.Equal(t, []string{"Quantile", "", "Window"}, []string{Field(leaves[0]), Field(leaves[1]), Field(leaves[2])})
	require.Nil(t, Leaves(nil))
	require.Equal(t, []error{b}, Leaves(b))
}
