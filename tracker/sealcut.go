package tracker

import (
	"cmp"
	"slices"
)

// CutMostSamples returns dests (a sealed sub-window, sorted by Dest) cut to
// what one member may send for one epoch: at most maxDests destinations
// holding at most maxBuckets buckets in all, counting Buckets and TimedOut
// entries as the fleet does (a Fleet's MaxDestinations and MaxEpochBuckets;
// a value < 1 means no cap). It keeps the destinations with
// the most samples, never the first by name: taken in order of Total,
// descending (ties by name), each destination is kept if its buckets still
// fit, until maxDests are kept. The kept destinations stay in dests' order;
// dropped is how many were left out. When everything fits, dests itself is
// returned.
func CutMostSamples(dests []DestCounts, maxDests, maxBuckets int) (kept []DestCounts, dropped int) {
	if maxDests < 1 {
		maxDests = len(dests)
	}
	buckets := 0
	for i := range dests {
		buckets += len(dests[i].Buckets) + len(dests[i].TimedOut)
	}
	if len(dests) <= maxDests && (maxBuckets < 1 || buckets <= maxBuckets) {
		return dests, 0
	}
	order := make([]int, len(dests))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(dests[b].Total, dests[a].Total) })
	keep := make([]bool, len(dests))
	n, held := 0, 0
	for _, i := range order {
		if n == maxDests {
			break
		}
		if nb := len(dests[i].Buckets) + len(dests[i].TimedOut); maxBuckets < 1 || held+nb <= maxBuckets {
			keep[i] = true
			n++
			held += nb
		}
	}
	kept = make([]DestCounts, 0, n)
	for i, k := range keep {
		if k {
			kept = append(kept, dests[i])
		}
	}
	return kept, len(dests) - n
}
