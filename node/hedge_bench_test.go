package node

import (
	"context"
	"testing"
	"time"
)

// BenchmarkDoHedged is DoHedged over three replicas with an fn that answers
// at once (no hedge is sent): the ordering by fleet median, the hedge delay,
// one attempt's decision, context and goroutine, the call's timer and
// channel. Beside it, Do on one of them, and two naive ways: a bare loop
// over the replicas under a fixed context.WithTimeout each (no hedge,
// ordering, budget or learning), and racing them (fn on a goroutine per
// call, the caller waiting on a channel).
func BenchmarkDoHedged(b *testing.B) {
	n, dests := benchNode(b)
	replicas := dests[:3]
	ctx := context.Background()
	noop := func(context.Context, string) error { return nil }
	b.Run("DoHedged", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := n.DoHedged(ctx, replicas, 1, noop); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Do", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := n.Do(ctx, replicas[0], 1, func(ctx context.Context) error { return noop(ctx, replicas[0]) }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("naive loop", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var err error
			for _, r := range replicas {
				cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				err = noop(cctx, r)
				cancel()
				if err == nil {
					break
				}
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("naive goroutine race", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			done := make(chan error, len(replicas))
			cctx, cancel := context.WithCancel(ctx)
			go func() { done <- noop(cctx, replicas[0]) }()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			cancel()
		}
	})
}
