package tracker

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestShardTableMatchesMap inserts and deletes entries of a shard's open
// addressing table at random, with hashes of few distinct values so that
// keys share hashes, probes collide and wrap around the table, and
// compares every lookup, present keys and absent ones, with a map.
func TestShardTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		hashOf := func(k int) uint64 { return uint64((k*7)%(3+round)) << 6 } // shard bits zero
		var sh syncShard[int]
		want := map[int]*entry[int]{}
		for range 2000 {
			k := rng.IntN(64)
			if en, ok := want[k]; ok {
				if rng.IntN(2) == 0 {
					sh.del(en)
					delete(want, k)
				}
			} else {
				en := &entry[int]{key: k, hash: hashOf(k)}
				sh.put(en)
				want[k] = en
			}
			require.Equal(t, int64(len(want)), sh.n.Load())
			require.LessOrEqual(t, 2*len(want), len(sh.slots))
			for k := range 64 {
				require.True(t, sh.get(hashOf(k), k) == want[k], "round %d key %d", round, k)
			}
		}
		n := 0
		sh.each(func(en *entry[int]) {
			require.True(t, want[en.key] == en)
			n++
		})
		require.Equal(t, len(want), n)
	}
}
