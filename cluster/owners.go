package cluster

import (
	"cmp"
	"slices"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// Owners is who owns each destination under destination-owned aggregation
// (protocol v2): for every destination, min(A, peers) distinct peers (by
// -name), the first of which publishes its aggregate and the second of
// which cross-checks it and takes over.
//
// The assignment is rendezvous hashing with bounded load: each
// destination ranks the peers by a hash of (peer, destination) and takes
// the highest-ranked peers that still have room. Destinations are placed
// in a fixed order (by their own hash), rank by rank, so that no peer is
// the first owner of more than ⌈1.25·D/N⌉ destinations nor owns more than
// ⌈1.25·A·D/N⌉ in all (D destinations, N peers): the busiest publisher
// sends little more than the mean. Given the same peers and destinations,
// every node computes the same owners; when a peer leaves, the
// destinations it owned go to the next peers in their ranking, and the
// bound moves few others.
type Owners struct {
	peers  []string
	byDest map[string][]int32
	load   []int32
}

// AssignOwners returns the owners of dests among peers (peer names; order
// and repeats do not matter) with a owners per destination (at least 1,
// at most len(peers)). With no peer, every destination has none.
func AssignOwners(peers, dests []string, a int) *Owners {
	peers = slices.Compact(slices.Sorted(slices.Values(peers)))
	dests = slices.Compact(slices.Sorted(slices.Values(dests)))
	o := &Owners{peers: peers, byDest: make(map[string][]int32, len(dests)), load: make([]int32, len(peers))}
	n := len(peers)
	if n == 0 || len(dests) == 0 {
		return o
	}
	a = min(max(a, 1), n)
	capFirst := int32((5*len(dests) + 4*n - 1) / (4 * n)) // ⌈1.25·D/N⌉
	capAll := int32((5*a*len(dests) + 4*n - 1) / (4 * n)) // ⌈1.25·A·D/N⌉
	ph := make([]uint64, n)
	for i, p := range peers {
		ph[i] = tracker.NameHash(p)
	}
	type dh struct {
		name string
		h    uint64
	}
	order := make([]dh, len(dests))
	for i, d := range dests {
		order[i] = dh{d, tracker.NameHash(d)}
	}
	slices.SortFunc(order, func(x, y dh) int { return cmp.Or(cmp.Compare(x.h, y.h), cmp.Compare(x.name, y.name)) })
	first := make([]int32, n)
	owners := make([]int32, len(dests)*a)
	scores := make([]uint64, n)
	for k, d := range order {
		o.byDest[d.name] = owners[k*a : k*a : (k+1)*a]
	}
	for r := range a {
		for _, d := range order {
			for i := range scores {
				scores[i] = rendezvous(ph[i], d.h)
			}
			got := o.byDest[d.name]
			pick := -1
			for try := 0; try < 2 && pick < 0; try++ { // the second try ignores the bounds
				best := uint64(0)
				for i, s := range scores {
					if slices.Contains(got, int32(i)) || pick >= 0 && s <= best {
						continue
					}
					if try == 0 && (o.load[i] >= capAll || r == 0 && first[i] >= capFirst) {
						continue
					}
					pick, best = i, s
				}
			}
			o.byDest[d.name] = append(got, int32(pick))
			o.load[pick]++
			if r == 0 {
				first[pick]++
			}
		}
	}
	return o
}

// rendezvous is the score of a peer (hash hp) for a destination (hash hd).
func rendezvous(hp, hd uint64) uint64 {
	z := hp ^ (hd * 0x9e3779b97f4a7c15)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Of returns dest's owners, first owner first, or nil for a destination
// that was not assigned. The slice must not be modified.
func (o *Owners) Of(dest string) []string {
	ix := o.byDest[dest]
	if len(ix) == 0 {
		return nil
	}
	out := make([]string, len(ix))
	for k, i := range ix {
		out[k] = o.peers[i]
	}
	return out
}

// Rank returns the rank (0 for the first owner) of peer among dest's
// owners, or -1 when it is not one.
func (o *Owners) Rank(dest, peer string) int {
	for k, i := range o.byDest[dest] {
		if o.peers[i] == peer {
			return k
		}
	}
	return -1
}

// Load returns how many destinations peer owns, at any rank.
func (o *Owners) Load(peer string) int {
	if i, ok := slices.BinarySearch(o.peers, peer); ok {
		return int(o.load[i])
	}
	return 0
}

// Dests returns the destinations assigned, sorted.
func (o *Owners) Dests() []string {
	out := make([]string, 0, len(o.byDest))
	for d := range o.byDest {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}
