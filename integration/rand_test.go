package integration

import "math/rand/v2"

// newRand returns a seeded generator: every random choice in these tests
// is reproducible.
func newRand(a, b uint64) *rand.Rand { return rand.New(rand.NewPCG(a, b)) }
