package sim

import (
	"errors"
	"math"
	"math/rand/v2"
	"time"
)

// NetworkConfig models the links between simulated nodes. Every message is a
// memberlist SendReliable: a TCP stream per message.
type NetworkConfig struct {
	// LatencyMedian is the median one-way latency of a link. Each ordered
	// pair of nodes gets its own fixed base latency, drawn once (lognormal
	// with LatencySigma, clamped to [LatencyMin, LatencyMax]); each message
	// then varies by ±10 %. Default 500µs.
	LatencyMedian time.Duration
	// LatencySigma is the lognormal shape of the per-link base latencies.
	// Default 0.5.
	LatencySigma float64
	// LatencyMin and LatencyMax clamp the per-link base latency.
	// Defaults 200µs and 2ms.
	LatencyMin, LatencyMax time.Duration
	// HandshakeTrips is how many one-way trips a reliable send's connect
	// costs before its payload leaves (TCP connect: 2); the send holds one
	// of the sender's workers meanwhile. Default 2.
	HandshakeTrips int
	// Loss is the probability that a message is lost (its connection fails).
	// Its bytes still count at the sender. Default 0.
	Loss float64
	// EgressBytesPerSecond is each node's sending rate: messages leave a node
	// one after the other, each taking size/rate. Default 125e6 (1 Gbit/s).
	EgressBytesPerSecond float64
}

// DefaultNetworkConfig returns a LAN: 0.2–2 ms links around 500 µs, no loss,
// 1 Gbit/s per node.
func DefaultNetworkConfig() NetworkConfig {
	return NetworkConfig{
		LatencyMedian:        500 * time.Microsecond,
		LatencySigma:         0.5,
		LatencyMin:           200 * time.Microsecond,
		LatencyMax:           2 * time.Millisecond,
		HandshakeTrips:       2,
		EgressBytesPerSecond: 125e6,
	}
}

// Validate reports every problem with c, joined.
func (c NetworkConfig) Validate() error {
	var errs []error
	if c.LatencyMedian <= 0 || c.LatencyMin <= 0 || c.LatencyMax < c.LatencyMin {
		errs = append(errs, errors.New("sim: network latencies must be > 0 with LatencyMin <= LatencyMax"))
	}
	if !(c.LatencySigma >= 0) || math.IsInf(c.LatencySigma, 0) {
		errs = append(errs, errors.New("sim: LatencySigma must be finite and >= 0"))
	}
	if c.HandshakeTrips < 0 {
		errs = append(errs, errors.New("sim: HandshakeTrips must be >= 0"))
	}
	if !(c.Loss >= 0 && c.Loss < 1) {
		errs = append(errs, errors.New("sim: Loss must be in [0, 1)"))
	}
	if !(c.EgressBytesPerSecond > 0) || math.IsInf(c.EgressBytesPerSecond, 0) {
		errs = append(errs, errors.New("sim: EgressBytesPerSecond must be finite and > 0"))
	}
	return errors.Join(errs...)
}

// network computes message delivery times and losses. It keeps no per-link
// state: a link's base latency is a hash of (seed, from, to).
type network struct {
	cfg  NetworkConfig
	seed uint64
	rng  *rand.Rand
}

// linkLatency is the fixed base one-way latency from one node to another.
func (n *network) linkLatency(from, to int32) time.Duration {
	h := splitmix64(n.seed ^ uint64(from)<<32 ^ uint64(uint32(to)))
	// Two uniforms from the hash, Box-Muller to a standard normal.
	u1 := (float64(h>>11) + 0.5) / (1 << 53)
	u2 := float64(splitmix64(h)>>11) / (1 << 53)
	z := math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
	d := time.Duration(float64(n.cfg.LatencyMedian) * math.Exp(n.cfg.LatencySigma*z))
	return min(max(d, n.cfg.LatencyMin), n.cfg.LatencyMax)
}

// transit returns, for one reliable send from one node to another, how
// long its connect takes (the handshake trips), how long the payload takes
// to arrive once it has left the sender, and whether it is lost. Every
// trip of one send varies by the same ±10 %.
func (n *network) transit(from, to int32) (handshake, trip time.Duration, lost bool) {
	base := n.linkLatency(from, to)
	trip = time.Duration(float64(base) * (0.9 + 0.2*n.rng.Float64()))
	handshake = trip * time.Duration(n.cfg.HandshakeTrips)
	lost = n.cfg.Loss > 0 && n.rng.Float64() < n.cfg.Loss
	return handshake, trip, lost
}

// serialize is how long size bytes occupy the sender's link.
func (n *network) serialize(size int) time.Duration {
	return time.Duration(float64(size) / n.cfg.EgressBytesPerSecond * 1e9)
}
