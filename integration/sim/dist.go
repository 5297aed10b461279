package sim

import (
	"math"
	"math/rand/v2"
)

// Dist is a destination's latency distribution: lognormal with the given
// median and shape, and optionally a slow mode (a stall) in which a request
// takes StallFactor times as long. Its quantiles are known exactly (Quantile),
// which is what the simulator's error figures are measured against.
//
// The zero value is not useful: MedianMillis must be > 0.
type Dist struct {
	// MedianMillis is the median of the normal mode, in milliseconds.
	MedianMillis float64
	// Sigma is the standard deviation of the log of the latency (the
	// lognormal shape); 0 makes the normal mode a constant.
	Sigma float64
	// StallProb is the probability that a request stalls, in [0, 1).
	StallProb float64
	// StallFactor multiplies a stalled request's latency; ignored when
	// StallProb is 0.
	StallFactor float64
}

// SampleMillis draws one latency in milliseconds (not truncated).
func (d Dist) SampleMillis(r *rand.Rand) float64 {
	v := d.MedianMillis * math.Exp(d.Sigma*r.NormFloat64())
	if d.StallProb > 0 && r.Float64() < d.StallProb {
		v *= d.StallFactor
	}
	return v
}

// CDF returns P(latency <= x) for x in milliseconds.
func (d Dist) CDF(x float64) float64 {
	if x <= 0 {
		return 0
	}
	c := lognormalCDF(x, d.MedianMillis, d.Sigma)
	if d.StallProb > 0 {
		c = (1-d.StallProb)*c + d.StallProb*lognormalCDF(x, d.MedianMillis*d.StallFactor, d.Sigma)
	}
	return c
}

// Quantile returns the exact q-quantile of the distribution in milliseconds
// (continuous, not truncated), for 0 < q < 1.
func (d Dist) Quantile(q float64) float64 {
	if d.StallProb == 0 {
		return d.MedianMillis * math.Exp(d.Sigma*math.Sqrt2*math.Erfinv(2*q-1))
	}
	lo, hi := 0.0, d.MedianMillis
	for d.CDF(hi) < q {
		hi *= 2
	}
	for range 200 {
		mid := (lo + hi) / 2
		if d.CDF(mid) < q {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// TrueQuantileMillis is the q-quantile of the latencies as a tracker records
// them (truncated to whole milliseconds): floor(Quantile(q)). The tracker's
// answer for an exact sample is at most one histogram bucket (about 1 %) above
// it.
func (d Dist) TrueQuantileMillis(q float64) uint64 {
	return uint64(math.Floor(d.Quantile(q)))
}

func lognormalCDF(x, median, sigma float64) float64 {
	if sigma == 0 {
		if x >= median {
			return 1
		}
		return 0
	}
	return 0.5 * math.Erfc(-math.Log(x/median)/(sigma*math.Sqrt2))
}

// splitmix64 mixes x into a well-spread 64-bit value; it derives independent,
// deterministic seeds for per-link and per-(node, epoch) random streams.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// newRand returns a PCG generator seeded from seed and stream.
func newRand(seed, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(splitmix64(seed), splitmix64(stream^0x5851f42d4c957f2d)))
}
