package sim

import (
	"slices"
	"strings"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// This file is what protocol v2 (destination-owned aggregation) needs of
// the simulation beyond the real protocol and stores: a table of every
// aggregate published, held once and shared, so that nodes that are not
// observers keep a pointer per (destination, epoch) rather than a copy
// (lightAggs, a cluster.AggregateStore with the Fleet's max-by rule); and
// the convergence of each (destination, epoch): the largest coverage
// published and which nodes hold it.

// aggVersion names one published aggregate.
type aggVersion struct {
	dest  string
	epoch int64
	cov   tracker.Coverage
}

// aggSlot is one (destination, epoch).
type aggSlot struct {
	dest  string
	epoch int64
}

// aggConv is the convergence of one (destination, epoch): the largest
// coverage published, the live nodes holding it, when it was first
// published and when every live node held it (-1 while not).
type aggConv struct {
	best        tracker.Coverage
	holders     bitset
	count       int
	firstAt     time.Duration
	convergedAt time.Duration
}

// aggTable holds every aggregate version published in a simulation.
type aggTable struct {
	nodes    int
	live     []bool
	nlive    int
	versions map[aggVersion]*tracker.Aggregate
	conv     map[aggSlot]*aggConv
}

func newAggTable(nodes int) *aggTable {
	t := &aggTable{nodes: nodes, live: make([]bool, nodes), nlive: nodes,
		versions: map[aggVersion]*tracker.Aggregate{}, conv: map[aggSlot]*aggConv{}}
	for i := range t.live {
		t.live[i] = true
	}
	return t
}

// register keeps a private copy of a, once per version, and returns it.
func (t *aggTable) register(a tracker.Aggregate) *tracker.Aggregate {
	k := aggVersion{a.Dest, a.Epoch, a.Coverage}
	if v := t.versions[k]; v != nil {
		return v
	}
	a.Buckets = slices.Clone(a.Buckets)
	a.TimedOut = slices.Clone(a.TimedOut)
	v := &a
	t.versions[k] = v
	return v
}

// hold records that node holds the version (dest, epoch, cov) from now on.
func (t *aggTable) hold(node int32, dest string, epoch int64, cov tracker.Coverage, now time.Duration) {
	if !t.live[node] {
		return
	}
	k := aggSlot{dest, epoch}
	c := t.conv[k]
	if c == nil {
		c = &aggConv{holders: newBitset(t.nodes), firstAt: now, convergedAt: -1}
		t.conv[k] = c
	}
	switch cmp := cov.Compare(c.best); {
	case cmp > 0:
		c.best = cov
		clear(c.holders)
		c.count, c.convergedAt = 0, -1
	case cmp < 0:
		return
	}
	if c.holders.has(int(node)) {
		return
	}
	c.holders.set(int(node))
	c.count++
	if c.count == t.nlive && c.convergedAt < 0 {
		c.convergedAt = now
	}
}

// kill takes node out of the live nodes: convergence no longer waits for
// it.
func (t *aggTable) kill(node int32, now time.Duration) {
	if !t.live[node] {
		return
	}
	t.live[node] = false
	t.nlive--
	for _, c := range t.conv {
		if c.holders.has(int(node)) {
			c.holders.clear(int(node))
			c.count--
		}
		if c.convergedAt < 0 && c.count == t.nlive {
			c.convergedAt = now
		}
	}
}

// revive counts node among the live nodes again (a restart or a late
// join): the convergence of the (destination, epoch) slots published from
// now on waits for it; those already converged stay so.
func (t *aggTable) revive(node int32) {
	if t.live[node] {
		return
	}
	t.live[node] = true
	t.nlive++
}

// expire forgets the versions and convergence of epochs before e.
func (t *aggTable) expire(e int64, fn func(k aggSlot, c *aggConv)) {
	for k, c := range t.conv {
		if k.epoch < e {
			fn(k, c)
			delete(t.conv, k)
		}
	}
	for k := range t.versions {
		if k.epoch < e {
			delete(t.versions, k)
		}
	}
}

// lightAggs is the cluster.AggregateStore of a node that is not an
// observer: per (destination, epoch), a pointer to the shared version it
// holds, with the Fleet's rules (epochs [E−3, E+1], the largest coverage
// kept, never a sum). It only accepts versions the table registered (every
// aggregate a simulation sends was registered when its publisher sent it).
type lightAggs struct {
	t    *aggTable
	trk  tracker.Config
	held map[aggSlot]*tracker.Aggregate
}

var _ cluster.AggregateStore = (*lightAggs)(nil)

func newLightAggs(t *aggTable, trk tracker.Config) *lightAggs {
	return &lightAggs{t: t, trk: trk, held: map[aggSlot]*tracker.Aggregate{}}
}

func (l *lightAggs) InsertAggregate(a tracker.Aggregate, now time.Time) tracker.InsertOutcome {
	e := l.trk.Epoch(now)
	switch {
	case a.Layout != l.trk.Layout():
		return tracker.InsertLayoutMismatch
	case a.Epoch < e-3:
		return tracker.InsertTooOld
	case a.Epoch > e+1:
		return tracker.InsertTooNew
	}
	v := l.t.versions[aggVersion{a.Dest, a.Epoch, a.Coverage}]
	if v == nil {
		return tracker.InsertMalformed // not published: a simulation bug
	}
	k := aggSlot{a.Dest, a.Epoch}
	if old := l.held[k]; old != nil {
		switch c := a.Coverage.Compare(old.Coverage); {
		case c < 0:
			return tracker.InsertSuperseded
		case c == 0:
			return tracker.InsertDuplicate
		}
	}
	l.held[k] = v
	return tracker.InsertNew
}

func (l *lightAggs) LookupAggregate(dest string, epoch int64) (tracker.Aggregate, bool) {
	if v := l.held[aggSlot{dest, epoch}]; v != nil {
		return *v, true
	}
	return tracker.Aggregate{}, false
}

func (l *lightAggs) AggregateCoverage(dest string, epoch int64) (tracker.Coverage, bool) {
	if v := l.held[aggSlot{dest, epoch}]; v != nil {
		return v.Coverage, true
	}
	return tracker.Coverage{}, false
}

func (l *lightAggs) AggregateDigests(now time.Time) []tracker.AggregateDigest {
	e := l.trk.Epoch(now)
	var gs [3]tracker.AggregateDigest
	var n [3]int
	for k, v := range l.held {
		if i := k.epoch - (e - 2); i >= 0 && i < 3 {
			s := &gs[i].Slices[tracker.AggregateSlice(k.dest)]
			s.Count++
			s.Hash ^= v.DigestHash()
			n[i]++
		}
	}
	var out []tracker.AggregateDigest
	for i := range gs {
		if n[i] > 0 {
			gs[i].Epoch = e - 2 + int64(i)
			out = append(out, gs[i])
		}
	}
	return out
}

func (l *lightAggs) AggregateEntries(epoch int64, mask uint32, now time.Time) []tracker.AggregateEntry {
	var out []tracker.AggregateEntry
	for k, v := range l.held {
		if k.epoch == epoch && mask&(1<<tracker.AggregateSlice(k.dest)) != 0 {
			out = append(out, tracker.AggregateEntry{Dest: k.dest, Epoch: epoch, Coverage: v.Coverage})
		}
	}
	slices.SortFunc(out, func(a, b tracker.AggregateEntry) int { return strings.Compare(a.Dest, b.Dest) })
	return out
}

func (l *lightAggs) AggregateDestinations(now time.Time) []string {
	var out []string
	for k := range l.held {
		out = append(out, k.dest)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// drop forgets the aggregates of epochs before e.
func (l *lightAggs) drop(e int64) {
	for k := range l.held {
		if k.epoch < e {
			delete(l.held, k)
		}
	}
}
