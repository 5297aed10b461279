package sim

import (
	"container/heap"
	"runtime"
	"testing"
	"time"
)

// boxedQueue is the naive alternative to eventQueue: container/heap, which
// boxes every pushed and popped event in an interface.
type boxedQueue []event

func (q boxedQueue) Len() int           { return len(q) }
func (q boxedQueue) Less(i, j int) bool { return less(&q[i], &q[j]) }
func (q boxedQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *boxedQueue) Push(x any)        { *q = append(*q, x.(event)) }
func (q *boxedQueue) Pop() any {
	old := *q
	ev := old[len(old)-1]
	*q = old[:len(old)-1]
	return ev
}

// BenchmarkEventQueue pushes and pops one event on a queue holding 100 000
// (a 300-node seal burst), with the hand-written heap and with container/heap.
func BenchmarkEventQueue(b *testing.B) {
	const size = 100_000
	b.Run("eventQueue", func(b *testing.B) {
		var q eventQueue
		r := newRand(1, 1)
		for range size {
			q.push(event{at: time.Duration(r.Int64N(1e9))})
		}
		b.ReportAllocs()
		for b.Loop() {
			ev := q.pop()
			ev.at += time.Duration(r.Int64N(1e9))
			q.push(ev)
		}
	})
	b.Run("container/heap", func(b *testing.B) {
		var q boxedQueue
		r := newRand(1, 1)
		var seq uint64
		for range size {
			seq++
			heap.Push(&q, event{at: time.Duration(r.Int64N(1e9)), seq: seq})
		}
		b.ReportAllocs()
		for b.Loop() {
			ev := heap.Pop(&q).(event)
			ev.at += time.Duration(r.Int64N(1e9))
			seq++
			ev.seq = seq
			heap.Push(&q, ev)
		}
	})
}

// BenchmarkScaleEpoch is one simulated epoch of a 100-node cluster with
// 100 destinations (about 40 000 events, 10 000 batch decodes), the unit
// the sweep's run time scales with (×N² for pushes). "parallel" receives
// bursts of deliveries on GOMAXPROCS goroutines, "sequential" (the naive
// alternative) one by one; both give the same events.
func BenchmarkScaleEpoch(b *testing.B) {
	for _, bc := range []struct {
		name    string
		workers int
	}{{"sequential", 1}, {"parallel", runtime.GOMAXPROCS(0)}} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := DefaultConfig(100)
			cfg.Workload = newScaleWorkload(1, ScaleDests(1, 100), 60)
			s, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			s.workers = bc.workers
			sw := cfg.Tracker.SubWindow()
			at := 3 * sw
			if err := s.Run(at); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				at += sw
				if err := s.Run(at); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
