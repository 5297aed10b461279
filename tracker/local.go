package tracker

import (
	"fmt"
	"time"
)

// LocalEstimate returns the estimate of quantile q of dest that t's window
// alone backs, with the same decision input a Fleet gives (Estimate.Decision,
// Failing): what a process without a fleet decides on, for instance a
// timeout policy over one SyncTracker. Source is SourceLocal when the window
// holds at least max(MinSamples, 1) samples, else SourceNone; the fleet
// fields are zero. It rotates t to now like a query and never creates dest.
// q must be in (0, 1] (else ErrQuantile).
//
// Like SealedSubWindow it is a function rather than a method, because the
// tracker types have exactly the methods their contract lists.
func LocalEstimate[T interface {
	*Tracker[string] | *SyncTracker[string]
}](t T, dest string, q float64, now time.Time) (e Estimate, err error) {
	e.Dest, e.Quantile = dest, q
	if !(q > 0 && q <= 1) {
		return e, fmt.Errorf("tracker: %w, got %v", ErrQuantile, q)
	}
	var v viewFacts
	var minSamples uint64
	switch t := any(t).(type) {
	case *Tracker[string]:
		t.localView(dest, q, now, &v)
		minSamples = t.s.minSamples
	case *SyncTracker[string]:
		t.localView(dest, q, now, &v)
		minSamples = t.s.minSamples
	}
	e.localView(&v)
	decide(&e, nil, &v, false, true, false, minSamples)
	return e, nil
}
