package integration

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// union is the reference a test checks fleet views against: every sample
// it fed, per destination and origin, in whole milliseconds. Its bucket
// counts come from hdrhistogram-go (whose layout the tracker shares) and
// its quantiles from a tracker.Tracker fed every sample at one instant, so
// neither depends on the fleet code under test. Not safe for concurrent
// use.
type union struct {
	cfg     tracker.Config
	samples map[string]map[string][]uint64 // dest → origin → ms
}

func newUnion(cfg tracker.Config) *union {
	return &union{cfg: cfg, samples: map[string]map[string][]uint64{}}
}

func (u *union) add(origin, dest string, ms ...uint64) {
	m := u.samples[dest]
	if m == nil {
		m = map[string][]uint64{}
		u.samples[dest] = m
	}
	m[origin] = append(m[origin], ms...)
}

// dests returns the destinations fed, sorted.
func (u *union) dests() []string { return slices.Sorted(maps.Keys(u.samples)) }

// clamp is the tracker's clamp to MaxTrackableLatency.
func (u *union) clamp(ms uint64) uint64 {
	return min(ms, uint64(u.cfg.MaxTrackableLatency/time.Millisecond))
}

// originCounts returns origin's samples of dest as dense counts in the
// tracker's layout.
func (u *union) originCounts(dest, origin string) []uint64 {
	l := u.cfg.Layout()
	h := hdrhistogram.New(l.Lowest, l.Highest, l.SignificantDigits)
	for _, ms := range u.samples[dest][origin] {
		if err := h.RecordValue(int64(u.clamp(ms))); err != nil {
			panic(err) // cannot happen: clamped to the highest trackable value
		}
	}
	out := make([]uint64, l.CountsLen())
	for i, c := range h.Export().Counts {
		out[i] = uint64(c)
	}
	return out
}

// counts returns the exact union of dest's samples as dense counts in the
// tracker's layout, or nil when there are none (as Fleet.ViewCounts).
func (u *union) counts(dest string) []uint64 {
	var out []uint64
	for origin := range u.samples[dest] {
		c := u.originCounts(dest, origin)
		if out == nil {
			out = c
			continue
		}
		for i := range out {
			out[i] += c[i]
		}
	}
	return out
}

// total returns the number of dest's samples.
func (u *union) total(dest string) uint64 {
	var n uint64
	for _, s := range u.samples[dest] {
		n += uint64(len(s))
	}
	return n
}

// quantile returns quantile q of the union of dest's samples by the
// tracker's bucket rule.
func (u *union) quantile(t testing.TB, dest string, q float64) uint64 {
	t.Helper()
	cfg := u.cfg
	cfg.MinSamples = 1
	ref, err := tracker.New[string](cfg)
	require.NoError(t, err)
	at := time.Unix(1_000_000, 0)
	for _, s := range u.samples[dest] {
		for _, ms := range s {
			ref.RecordMillis(dest, ms, at)
		}
	}
	v, ok := ref.QuantileMillis(dest, q, at)
	require.True(t, ok, "no samples of %s", dest)
	return v
}

// quantiles are the quantiles every exact-union check compares.
var quantiles = []float64{0.5, 0.9, 0.99, 0.9999, 1}

// checkEstimate compares an estimate with the union's: the fleet value at
// each of quantiles, the sample count and the peer count.
func checkEstimate(t testing.TB, u *union, dest string, est func(q float64) (tracker.Estimate, error), peers int) (bool, string) {
	for _, q := range quantiles {
		e, err := est(q)
		if err != nil {
			return false, err.Error()
		}
		want := u.quantile(t, dest, q)
		switch {
		case !e.HasFleetValue || e.FleetValueMillis != want:
			return false, fmt.Sprintf("%s q=%v: fleet value %d (has %v), want %d", dest, q, e.FleetValueMillis, e.HasFleetValue, want)
		case e.Samples != u.total(dest):
			return false, fmt.Sprintf("%s: %d samples, want %d", dest, e.Samples, u.total(dest))
		case e.Peers != peers:
			return false, fmt.Sprintf("%s: %d peers, want %d", dest, e.Peers, peers)
		case e.Source != tracker.SourceFleet || e.ValueMillis != want:
			return false, fmt.Sprintf("%s: source %s value %d, want fleet %d", dest, e.Source, e.ValueMillis, want)
		}
	}
	return true, ""
}

// only returns the union of the samples of the given origins alone.
func (u *union) only(origins ...string) *union {
	out := newUnion(u.cfg)
	for dest, m := range u.samples {
		for _, o := range origins {
			if s, ok := m[o]; ok {
				out.add(o, dest, s...)
			}
		}
	}
	return out
}
