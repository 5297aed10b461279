package tracker

import (
	"slices"
	"time"
)

// Keys returns the keys of every batch held (for an anti-entropy digest),
// newest epochs first, then by origin, boot and part.
func (f *Fleet) Keys(now time.Time) []BatchKey {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slide(now)
	keys := make([]BatchKey, 0, f.batches)
	for _, m := range f.members {
		for _, me := range m.epochs {
			for _, hb := range me.parts {
				keys = append(keys, hb.key)
			}
		}
	}
	slices.SortFunc(keys, CompareNewestFirst)
	return keys
}

// Missing returns the keys of theirs (a peer's digest) that this fleet does
// not hold and would accept now (epoch in [E−N−1, E+1]), without repeats,
// newest epochs first: what to pull from that peer.
func (f *Fleet) Missing(theirs []BatchKey, now time.Time) []BatchKey {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slide(now)
	var out []BatchKey
	for _, k := range theirs {
		if k.Epoch < f.epoch-f.n-1 || k.Epoch > f.epoch+1 {
			continue
		}
		if f.held(k) == nil {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, CompareNewestFirst)
	return slices.Compact(out)
}

// Lookup returns the batch held under k, to serve a peer's pull. Its
// destinations are sorted by name. Its Dests are a new slice, but their
// buckets share the Fleet's memory, which is never written again once
// stored: they must not be modified, and they may be read (encoded) after
// Lookup returns, concurrently with other calls.
func (f *Fleet) Lookup(k BatchKey) (Batch, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	hb := f.held(k)
	if hb == nil {
		return Batch{}, false
	}
	return hb.batch(f.geo.layout), true
}

// held returns the batch held under k, or nil.
func (f *Fleet) held(k BatchKey) *heldBatch {
	m := f.members[memberKey{k.Origin, k.Boot}]
	if m == nil {
		return nil
	}
	me := m.epochs[k.Epoch]
	if me == nil {
		return nil
	}
	return me.parts[k.Part]
}
