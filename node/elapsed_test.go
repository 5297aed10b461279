package node

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSinceIsSub compares since with Time.Sub over pairs of times with and
// without monotonic readings, in different locations, close together and
// far apart: near the 290-year bound, where Sub saturates, and at the ends
// of time.Time's range. (Two readings with monotonic clocks differ from
// their wall clocks' difference only when the wall clock was stepped
// between them, which a test cannot make: since leaves those to Sub.)
func TestSinceIsSub(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 1))
	east := time.FixedZone("east", 5*3600)
	mono := time.Now()
	const year = 365 * 24 * time.Hour
	pick := func(base time.Time) time.Time {
		var d time.Duration
		switch rng.IntN(4) {
		case 0:
			d = time.Duration(rng.Int64N(int64(time.Second)))
		case 1:
			d = time.Duration(rng.Int64N(int64(280 * year)))
		case 2:
			d = 290*year + time.Duration(rng.Int64N(int64(2*year)))
		default:
			d = time.Duration(rng.Int64())
		}
		if rng.IntN(2) == 0 {
			d = -d
		}
		tm := base.Add(d)
		switch rng.IntN(3) {
		case 0:
			tm = tm.Round(0) // no monotonic reading
		case 1:
			tm = tm.In(east)
		}
		return tm
	}
	wall := time.Unix(1_700_000_000, 0)
	ends := []time.Time{
		time.Unix(math.MinInt64/2, 0), time.Unix(math.MaxInt64/2, 999_999_999),
		time.Time{}, time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
	}
	for i := range 20000 {
		base := mono
		if i%2 == 0 {
			base = wall
		}
		a, b := pick(base), pick(base)
		if i%100 == 0 {
			a = ends[rng.IntN(len(ends))]
		}
		require.Equal(t, a.Sub(b), since(a, b), "%v − %v", a, b)
		require.Equal(t, b.Sub(a), since(b, a), "%v − %v", b, a)
	}
}
