package tracker

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFleetConcurrent inserts from several goroutines while others read
// estimates, and checks the end state equals a Fleet fed the same batches
// from one goroutine.
func TestFleetConcurrent(t *testing.T) {
	cfg := DefaultFleetConfig()
	cfg.Self = "n0"
	local, err := NewSync[string](cfg.Tracker)
	require.NoError(t, err)
	sf, err := NewFleet(cfg, local)
	require.NoError(t, err)
	plain, err := NewFleet(cfg, local)
	require.NoError(t, err)

	now := time.UnixMilli(1_700_000_000_000)
	e := cfg.Tracker.Epoch(now)
	var batches []Batch
	for o := range 8 {
		for ep := e - 5; ep < e; ep++ {
			batches = append(batches, Batch{
				Key:    BatchKey{Origin: string(rune('a' + o)), Boot: uint64(o + 1), Epoch: ep},
				Layout: cfg.Tracker.Layout(),
				Dests: []DestCounts{
					{Dest: "db", Total: uint64(10 + o), Buckets: []Bucket{{Index: uint16(o), Count: uint32(10 + o)}}},
				},
			})
		}
	}
	for _, b := range batches {
		plain.Insert(b, now)
	}

	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < len(batches); i += 4 {
				sf.Insert(batches[i], now)
			}
		})
		wg.Go(func() {
			for range 200 {
				_, err := sf.Estimate("db", 0.99, now)
				require.NoError(t, err)
				sf.QuantileMillis("db", 0.99, now)
				sf.Lookup(BatchKey{Origin: "a", Boot: 1, Epoch: e - 1})
				sf.Stats()
				sf.Keys(now)
			}
		})
	}
	wg.Wait()

	want, err := plain.Estimate("db", 0.99, now)
	require.NoError(t, err)
	got, err := sf.Estimate("db", 0.99, now)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, plain.ViewCounts("db", now), sf.ViewCounts("db", now))
	require.Equal(t, plain.Keys(now), sf.Keys(now))
	require.Equal(t, plain.Stats(), sf.Stats())
}
