package tracker

import (
	"sync"
	"time"
)

// SyncFleet is a Fleet safe for concurrent use: every method takes one mutex
// around the Fleet's. The cluster inserts and serves batches through it while
// the node answers estimates; each call is short (an estimate is ~60 ns, an
// insert of a 100-destination batch ~50 µs), so one lock is enough.
type SyncFleet struct {
	mu sync.Mutex
	f  *Fleet
}

// NewSyncFleet returns a SyncFleet around NewFleet(cfg, local). local may be
// a *SyncTracker[string], a *Tracker[string] only if nothing else uses it
// concurrently, or nil for a fleet without a local view.
func NewSyncFleet(cfg FleetConfig, local localWindow) (*SyncFleet, error) {
	f, err := NewFleet(cfg, local)
	if err != nil {
		return nil, err
	}
	return &SyncFleet{f: f}, nil
}

// Config returns the configuration.
func (s *SyncFleet) Config() FleetConfig { return s.f.Config() }

// DecisionMillis is Fleet.DecisionMillis (it reads only the fixed
// configuration).
func (s *SyncFleet) DecisionMillis(e *Estimate) (ms uint64, guarded, ok bool) {
	return s.f.DecisionMillis(e)
}

// Insert is Fleet.Insert.
func (s *SyncFleet) Insert(b Batch, now time.Time) InsertOutcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.Insert(b, now)
}

// Exclude is Fleet.Exclude.
func (s *SyncFleet) Exclude(name string, boot uint64, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f.Exclude(name, boot, now)
}

// Include is Fleet.Include.
func (s *SyncFleet) Include(name string, boot uint64, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f.Include(name, boot, now)
}

// SetLiveMembers is Fleet.SetLiveMembers.
func (s *SyncFleet) SetLiveMembers(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f.SetLiveMembers(n)
}

// MinPeers is Fleet.MinPeers.
func (s *SyncFleet) MinPeers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.MinPeers()
}

// Advance is Fleet.Advance.
func (s *SyncFleet) Advance(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f.Advance(now)
}

// Keys is Fleet.Keys.
func (s *SyncFleet) Keys(now time.Time) []BatchKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.Keys(now)
}

// Missing is Fleet.Missing.
func (s *SyncFleet) Missing(theirs []BatchKey, now time.Time) []BatchKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.Missing(theirs, now)
}

// Lookup is Fleet.Lookup. The batch returned is immutable and safe to use
// after the lock is released.
func (s *SyncFleet) Lookup(k BatchKey) (Batch, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.Lookup(k)
}

// Estimate is Fleet.Estimate.
func (s *SyncFleet) Estimate(dest string, q float64, now time.Time) (Estimate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.Estimate(dest, q, now)
}

// QuantileMillis is Fleet.QuantileMillis, so a SyncFleet is a
// timeout.Estimator[string].
func (s *SyncFleet) QuantileMillis(dest string, q float64, now time.Time) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.QuantileMillis(dest, q, now)
}

// DecisionValueMillis is Fleet.DecisionValueMillis.
func (s *SyncFleet) DecisionValueMillis(dest string, q float64, now time.Time) (uint64, Source, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.DecisionValueMillis(dest, q, now)
}

// DecisionEstimator returns an estimator whose QuantileMillis is
// DecisionValueMillis's value: the input of the timeout decision after the
// local guard, for timeout.Explain and timeout.SelectQuorum.
func (s *SyncFleet) DecisionEstimator() SyncDecisionEstimator { return SyncDecisionEstimator{s} }

// SyncDecisionEstimator is SyncFleet's DecisionEstimator.
type SyncDecisionEstimator struct{ s *SyncFleet }

// QuantileMillis returns SyncFleet.DecisionValueMillis's value.
func (d SyncDecisionEstimator) QuantileMillis(dest string, q float64, now time.Time) (uint64, bool) {
	ms, _, ok := d.s.DecisionValueMillis(dest, q, now)
	return ms, ok
}

// ViewCounts is Fleet.ViewCounts.
func (s *SyncFleet) ViewCounts(dest string, now time.Time) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.ViewCounts(dest, now)
}

// Destinations is Fleet.Destinations.
func (s *SyncFleet) Destinations(now time.Time) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.Destinations(now)
}

// Stats is Fleet.Stats.
func (s *SyncFleet) Stats() FleetStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.Stats()
}
