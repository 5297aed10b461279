package sim

import (
	"math"
	"slices"
	"time"
)

// The per-client hedge, modelled on bhope/hedge's defaults (its README and
// source). Its transport keeps, per target host, a request counter and a
// latency sketch (DDSketch, 1 % relative accuracy) over two windows that a
// ticker started with the sketch (at the host's first request) rotates
// every 30 s, so a quantile reads the last 30 to 60 s and nothing older:
// with no call for 60 s the sketch is empty. Each round trip (RoundTrip:
// a request, or a caller's retry) counts one request; the first 20 hedge
// after a fixed 10 ms warm-up delay, as does a round trip finding the
// sketch empty; otherwise the delay is the sketch's quantile (the bucket
// holding the ⌈q·n⌉-th value, at its midpoint: with fewer than 1/(1 − q)
// values, their maximum), at least 1 ms. A round trip sends at most one
// hedge and returns its first result, an error too, cancelling the other
// attempt; the sketch learns the time from the round trip's start to that
// result (the first byte of the winner, or the error). One token bucket
// per transport refills at budget × the estimated request rate per second
// (100 unless WithEstimatedRPS), holds twice that (at least one token) and
// starts full; a hedge it refuses leaves the round trip waiting for its
// first attempt. The bucket counts time, not calls: at the default rate a
// client calling twice a second may hedge every request. Here the replica
// set is one host to it (a name behind a balancer), so one counter and one
// sketch cover the set, and its hedge goes to the next replica in the
// fleet's order.

// bhope/hedge's defaults.
const (
	clientWarmupRequests = 20
	clientWarmupDelay    = 10 * time.Millisecond
	clientMinDelay       = time.Millisecond
	clientRotate         = 30 * time.Second
	clientDefaultRPS     = 100
	clientDefaultBudget  = 0.1
	clientAccuracy       = 0.01
)

// clientSketch is a client's own latency sketch: log-spaced buckets of
// relative accuracy clientAccuracy over two windows rotating every
// clientRotate of simulated time.
type clientSketch struct {
	cur, prev map[int]uint32
	n         uint64        // round trips seen (for the warm-up)
	born      time.Duration // when the sketch was made: its ticker's start
	alive     bool          // born is set
	epoch     int64         // index of the rotation period cur belongs to
	keys      []int
}

func newClientSketch() *clientSketch {
	return &clientSketch{cur: map[int]uint32{}, prev: map[int]uint32{}}
}

var clientLogGamma = math.Log((1 + clientAccuracy) / (1 - clientAccuracy))

// rotate brings the windows to elapsed time at, the first call making the
// sketch (its ticker starts then).
func (c *clientSketch) rotate(at time.Duration) {
	if !c.alive {
		c.born, c.alive = at, true
	}
	e := int64((at - c.born) / clientRotate)
	switch {
	case e == c.epoch:
		return
	case e == c.epoch+1:
		c.prev, c.cur = c.cur, map[int]uint32{}
	default:
		c.prev, c.cur = map[int]uint32{}, map[int]uint32{}
	}
	c.epoch = e
}

// add records latency d at elapsed time at.
func (c *clientSketch) add(d time.Duration, at time.Duration) {
	if d <= 0 {
		return
	}
	c.rotate(at)
	c.cur[int(math.Ceil(math.Log(float64(d))/clientLogGamma))]++
}

// quantile returns the q-quantile of both windows (the bucket holding the
// ⌈q·n⌉-th value, at its geometric midpoint), false when they are empty.
func (c *clientSketch) quantile(q float64, at time.Duration) (time.Duration, bool) {
	c.rotate(at)
	c.keys = c.keys[:0]
	var n uint64
	for _, m := range []map[int]uint32{c.prev, c.cur} {
		for k, v := range m {
			n += uint64(v)
			c.keys = append(c.keys, k)
		}
	}
	if n == 0 {
		return 0, false
	}
	slices.Sort(c.keys)
	c.keys = slices.Compact(c.keys)
	rank := uint64(math.Ceil(q * float64(n)))
	var cum uint64
	for _, k := range c.keys {
		cum += uint64(c.prev[k]) + uint64(c.cur[k])
		if cum >= rank {
			return time.Duration(math.Exp((float64(k) - 0.5) * clientLogGamma)), true
		}
	}
	return 0, false
}

// count returns the values the sketch holds at elapsed time at.
func (c *clientSketch) count(at time.Duration) int {
	c.rotate(at)
	var n uint32
	for _, m := range []map[int]uint32{c.prev, c.cur} {
		for _, v := range m {
			n += v
		}
	}
	return int(n)
}

// delay returns the hedge delay of the client's next round trip at elapsed
// time at, counting it toward the warm-up.
func (c *clientSketch) delay(q float64, at time.Duration) time.Duration {
	c.rotate(at)
	c.n++
	d := clientWarmupDelay
	if c.n > clientWarmupRequests {
		if v, ok := c.quantile(q, at); ok && v > 0 {
			d = v
		}
	}
	return max(d, clientMinDelay)
}

// clientBucket is the per-client token bucket: rate tokens per second of
// simulated time, at most burst, starting full.
type clientBucket struct {
	rate, burst, tokens float64
	last                time.Duration
}

func newClientBucket(budget, rps float64) *clientBucket {
	rate := rps * budget
	burst := max(2*rate, 1)
	return &clientBucket{rate: rate, burst: burst, tokens: burst}
}

// spend takes a token at elapsed time at, false when there is none.
func (b *clientBucket) spend(at time.Duration) bool {
	if at > b.last {
		b.tokens = min(b.burst, b.tokens+(at-b.last).Seconds()*b.rate)
		b.last = at
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
