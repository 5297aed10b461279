package tracker

import "time"

// Quantiles under censoring. A timed-out or superseded attempt is a
// sample at its timeout or elapsed time that is also censored: its latency
// was above that. As a plain quantile counts it at that value, a replica
// whose attempts are mostly cut short (a demoted replica that mostly gets
// hedges, which lose after a few milliseconds) shows quantiles far below
// its true ones. The Kaplan–Meier estimator treats censored samples as
// what they are (right-censored), over the view's buckets: per bucket i,
// d_i samples completed there (H_i − C_i) out of n_i at risk (every
// sample, completed or censored, in buckets >= i), and the survival after
// bucket i is S_i = Π_{j<=i} (1 − d_j/n_j). The q-quantile is the first
// bucket where S falls to 1 − q or below. With nothing censored S_i is the
// share of samples above bucket i, so the quantile is the plain one's
// bucket (rank ⌈q·N⌉), exactly.

// Survival is a view's quantile estimated under right-censoring: the
// Kaplan–Meier estimator over the view's buckets, timed-out and superseded
// samples counted as censored at their bucket. With nothing censored it is
// exactly the view's quantile at the same q (QuantileMillis's bucket
// rule); the timeout's quantile is never computed this way (it keeps seed
// parity). A view whose censoring is unknown (it holds a batch from a peer
// that sends no censored counts) gives the plain quantile, as its timeouts
// do. At q = 0.5 it is the median replicas are ordered by (Fleet.Median);
// at 1 − HedgeBudget the hedge delay's quantile (Fleet.Survival).
type Survival struct {
	// Millis is the quantile, the highest equivalent value of the first
	// bucket at which the survival function falls to 1 − q or below; 0
	// when Above or when the view is empty.
	Millis uint64
	// Samples is the view's sample count, censored ones included; 0: the
	// view is empty and there is no quantile.
	Samples uint64
	// Above reports that the survival function never falls to 1 − q: so
	// much of the view is censored above its completed samples that the
	// quantile is above the highest completed latency, by how much
	// unknown.
	Above bool
}

// survivalQuantile returns the index of the bucket holding h's
// Kaplan–Meier q-quantile with c as its censored counts (C <= H bucket by
// bucket), and false when the survival function never falls to 1 − q (or
// h is empty). q is in (0, 1]. With nothing censored it is quantileIndex
// itself (the walk's answer then, from whichever end is nearer); else
// survivalWalk.
func survivalQuantile(h *hist, c *sparseSum, q float64) (int, bool) {
	if len(c.idx) == 0 {
		return h.quantileIndex(q)
	}
	return survivalWalk(h, c, q)
}

// survivalWalk is survivalQuantile for any c (with nothing censored it
// ends at quantileIndex(q): TestSurvivalQuantilePlain checks it).
//
// It walks up from the bottom keeping n, the samples at risk, and lim, the
// most samples that may remain (completed ones above i, plus those
// censored at i) for S_i <= 1 − q: with nothing censored below, lim =
// N·(1 − q), whose integer part is N − rank(q, N) exactly, so the answer
// is the plain quantile's bucket (rank ⌈q·N⌉, as quantileIndex rounds it).
// Each censored bucket i scales lim by n_{i+1}/(n_{i+1} + C_i): S_i =
// w·(n_i − d_i) with w = S_{i−1}/n_i the KM mass per sample at risk, and
// w grows by (n_{i+1} + C_i)/n_{i+1} past i. Between censored buckets
// whole blocks whose remainder stays above lim are skipped, as the plain
// quantile skips them; so it costs that walk plus a step per censored
// bucket below the quantile, and allocates nothing.
func survivalWalk(h *hist, c *sparseSum, q float64) (int, bool) {
	if h.total == 0 {
		return 0, false
	}
	n := h.total // at risk at bucket i: samples in buckets >= i
	// N·(1 − q) as N − rank plus the fraction rank rounded q·N up by (both
	// exact in float64): an integer remainder is <= lim exactly when it is
	// <= N − rank, the plain quantile's rule, whatever q's rounding.
	r := rank(q, n)
	lim := float64(n-r) + (float64(r) - q*float64(n))
	k := 0 // next censored entry
	nc := len(h.counts)
	if len(c.idx) > 0 {
		nc = int(c.idx[0])
	}
	for i := 0; i <= h.hi; {
		if i < nc {
			// Nothing censored at i: S_i <= 1 − q when n − H_i <= lim.
			if i&blockMask == 0 && i+blockMask < nc {
				if s := h.blocks[i>>blockShift]; float64(n-s) > lim {
					n -= s
					i += blockSize
					continue
				}
			}
			if hc := h.counts[i]; hc > 0 {
				if float64(n-hc) <= lim {
					return i, true
				}
				n -= hc
			}
			i++
			continue
		}
		// A censored bucket: d = H − C completed, C censored at i.
		hc, cc := h.counts[i], c.n[k]
		if hc > cc && float64(n-hc+cc) <= lim {
			return i, true
		}
		if n -= hc; n == 0 {
			return 0, false
		}
		lim *= float64(n) / float64(n+cc)
		if k++; k < len(c.idx) {
			nc = int(c.idx[k])
		} else {
			nc = len(h.counts)
		}
		i++
	}
	return 0, false
}

// survival returns the Survival at q of the view h with censored counts c
// (nil: none), in g's layout; unknown: the view's censoring is unknown, so
// the plain quantile.
func survival(g *geometry, h *hist, c *sparseSum, unknown bool, q float64) Survival {
	m := Survival{Samples: h.total}
	if h.total == 0 {
		return m
	}
	if c == nil || unknown {
		c = &sparseSum{} // nothing censored: the plain quantile's bucket
	}
	i, ok := survivalQuantile(h, c, q)
	if !ok {
		m.Above = true
		return m
	}
	m.Millis = uint64(g.highestEquivalent(i))
	return m
}

// windowSurvival is the Survival at q of w in s's layout.
func (s *settings) windowSurvival(w *window, q float64) Survival {
	return survival(&s.geo, &w.sum, w.censored(), false, q)
}

// Median is Survival at q = 0.5: the censoring-aware median of dest's
// view named by view at now, what replicas are ordered by
// (timeout.OrderReplicas), beside an Estimate at q = 0.5 that names the
// deciding view.
func (f *Fleet) Median(dest string, view Source, now time.Time) Survival {
	return f.Survival(dest, view, 0.5, now)
}

// Survival returns the censoring-aware q-quantile of dest's view named by
// view at now: SourceFleet the fleet view (after the share cap, as
// Estimate reads it: the aggregate under protocol v2), SourceLocal the
// local tracker's window; the zero Survival for SourceNone, for a view
// that does not hold dest, for SourceLocal without a local tracker, or for
// q outside (0, 1]. It slides the Fleet (or rotates the local tracker) to
// now, like an estimate, and never creates dest. At q = 1 − HedgeBudget it
// is the hedge delay's quantile (timeout.HedgeDelay), with the view named
// by timeout.HedgeView of the Estimate at that q. It takes the Fleet's
// lock (the local view of a *SyncTracker only the tracker's shard lock)
// and walks the view from the bottom, without a cache.
func (f *Fleet) Survival(dest string, view Source, q float64, now time.Time) Survival {
	if !(q > 0 && q <= 1) {
		return Survival{}
	}
	switch view {
	case SourceFleet:
		f.mu.Lock()
		defer f.mu.Unlock()
		f.slide(now)
		return f.fleetSurvival(dest, q)
	case SourceLocal:
		if f.localSync != nil {
			return LocalSurvival(f.localSync, dest, q, now)
		}
		if f.localPlain != nil {
			f.mu.Lock() // a *Tracker is read under the Fleet's lock
			defer f.mu.Unlock()
			return LocalSurvival(f.localPlain, dest, q, now)
		}
	}
	return Survival{}
}

// fleetSurvival is dest's Survival at q in the fleet view; f.mu is held.
func (f *Fleet) fleetSurvival(dest string, q float64) Survival {
	if len(f.aggs) > 0 {
		if v := f.aggregateView(dest); v != nil {
			return survival(&f.geo, &v.h, &v.c, v.src.CensoringUnknown, q)
		}
	}
	d := f.dests[dest]
	if d == nil {
		return Survival{}
	}
	h, c := &d.h, &d.c
	if s := f.summary(d); s.capped {
		h, c = &s.ch, &s.cc
	}
	return survival(&f.geo, h, c, d.unknown > 0, q)
}

// LocalMedian is LocalSurvival at q = 0.5: the censoring-aware median of
// dest in t's window at now, what a process without a fleet orders
// replicas by, beside LocalEstimate at q = 0.5.
func LocalMedian[T interface {
	*Tracker[string] | *SyncTracker[string]
}](t T, dest string, now time.Time) Survival {
	return LocalSurvival(t, dest, 0.5, now)
}

// LocalSurvival returns the censoring-aware q-quantile (Survival) of dest
// in t's window at now. It rotates t to now like a query and never
// creates dest; the zero Survival when t does not hold dest or q is
// outside (0, 1].
func LocalSurvival[T interface {
	*Tracker[string] | *SyncTracker[string]
}](t T, dest string, q float64, now time.Time) Survival {
	if !(q > 0 && q <= 1) {
		return Survival{}
	}
	switch t := any(t).(type) {
	case *Tracker[string]:
		if en := t.lookup(dest, now); en != nil {
			return t.s.windowSurvival(&en.window, q)
		}
	case *SyncTracker[string]:
		var m Survival
		t.withEntry(dest, now, func(en *entry[string]) { m = t.s.windowSurvival(&en.window, q) })
		return m
	}
	return Survival{}
}
