package tracker

import (
	"cmp"
	"slices"
	"strings"
)

// The orderings the package sorts and searches by, one helper each.

// CompareNewestFirst orders batch keys newest epoch first, then by origin,
// boot and part: the order of Fleet.Keys and Fleet.Missing, and of a digest
// or a pull a shell builds from them.
func CompareNewestFirst(a, b BatchKey) int {
	return cmp.Or(
		cmp.Compare(b.Epoch, a.Epoch),
		cmp.Compare(a.Origin, b.Origin),
		cmp.Compare(a.Boot, b.Boot),
		cmp.Compare(a.Part, b.Part),
	)
}

// compareMembers orders members by peer name, then boot: how the fleet
// breaks ties between eviction victims, so the choice is deterministic.
func compareMembers(a, b memberKey) int {
	return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.boot, b.boot))
}

// compareDests orders a sub-window's destinations by name: the canonical
// order of SealedSubWindow and of a held batch.
func compareDests(a, b DestCounts) int { return compareDestPtrs(&a, &b) }

// compareDestPtrs is compareDests without copying the DestCounts (80
// bytes each): for sorts of indices into a slice of them.
func compareDestPtrs(a, b *DestCounts) int { return strings.Compare(a.Dest, b.Dest) }

// findDest returns the index of dest in a held batch's destinations ds,
// sorted by name as compareDests orders them, and whether it is there.
func findDest(ds []heldDest, dest string) (int, bool) {
	return slices.BinarySearchFunc(ds, dest, func(hd heldDest, name string) int {
		return strings.Compare(hd.name, name)
	})
}
