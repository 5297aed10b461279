package tracker

import (
	"errors"
	"flag"
	"math"

	"github.com/adaptivetimeout/adaptivetimeout/internal/fielderr"
)

// FleetConfig configures a Fleet. The zero value is not valid; start from
// DefaultFleetConfig.
//
// Memory: a Fleet holds every accepted batch of the last N+3 epochs (the
// view's N−1 plus the two older and two newer epochs it accepts) and one
// dense histogram per destination. At the default layout (1280 counts) that
// is about 11 KiB per destination, plus the sparse counts of each (origin,
// destination, epoch): 8 bytes per non-empty bucket and about 110 bytes of
// bookkeeping plus the destination's name (BenchmarkFleetMemory measures
// 718 B per (origin, destination, epoch) at 75 buckets each). So memory is
// bounded by
//
//	  MaxDestinations·11 KiB                                   dense views
//	+ 8 B·min(MaxBuckets, MaxOrigins·(N+3)·MaxEpochBuckets)    buckets
//	+ MaxOrigins·(N+3)·MaxDestinations·(110 B + name)          entries
//	+ 4·MaxOrigins·(100 B + name)                              exclusions
//
// and in practice scales with origins × destinations × buckets actually
// seen. At the defaults (N = 10) one member holds at most 13·2^18 buckets
// (26 MiB) and the fleet at most 2^25 buckets (256 MiB); a busy fleet of
// 100 nodes × 100 destinations × ~100 buckets holds 13 M buckets (~115 MiB
// with bookkeeping).
//
// The YAML keys and flags (RegisterFlags) are atnode's `min_peers`
// (-min-peers) and `max_origin_share` (-max-origin-share); the other fields
// are set in code (a node sets Tracker and Self from its own settings).
type FleetConfig struct {
	// Tracker is the local tracker's configuration: the window and its
	// sub-windows define the epoch grid and the view, MinSamples the trust
	// threshold, and MaxTrackableLatency the histogram layout every accepted
	// batch must carry. Default DefaultConfig(). Its MaxDestinations is not
	// used by the Fleet (see MaxDestinations below).
	Tracker Config `yaml:"-"`

	// Self is this node's peer name (its -name). Its batches are never
	// evicted by the MaxOrigins cap. Default "" (no protection).
	Self string `yaml:"-"`

	// MinPeers is how many distinct peers (self included) must contribute
	// samples to a destination before its fleet view is trusted. 0 means
	// auto: min(3, members alive or suspect, self included), as last given
	// to SetLiveMembers. Default 0. Cost: none; a larger value makes small
	// clusters fall back to the local view.
	MinPeers int `yaml:"min_peers"`

	// MaxOriginShare is the largest share of a destination's fleet view
	// samples one peer may hold once at least 4 peers contribute. The cap
	// applies to every peer above the share, not only the largest: each
	// such peer is scaled to the same level, chosen so that each holds
	// MaxOriginShare of the capped total (when the share is below 1/peers,
	// every peer is capped to the smallest peer's count). A capped peer's
	// buckets are all scaled by the same factor: its cumulative counts are
	// multiplied by level/count and rounded down, so its total is rounded
	// down once (not once per bucket) and its tail buckets, mostly holding
	// one sample each, keep their share instead of vanishing. In (0, 1]; 0
	// disables the cap. Default 0.25. Cost: when the cap bites, the first query after each
	// change of that destination rebuilds a capped copy of its histogram
	// (about 1–3 µs at the default layout, plus a merge of the capped peer's
	// N−1 sub-windows); otherwise nothing.
	MaxOriginShare float64 `yaml:"max_origin_share"`

	// MaxOrigins bounds the members (peer name + boot ID) whose batches are
	// held, 1..4096. A new member beyond it evicts the member with the oldest
	// newest batch (excluded members first, never Self), or is refused when
	// every held member is at least as recent. Default 256. Scaling: set it to
	// at least 2 × the cluster size so restarts (a new boot ID per restart)
	// never evict live data.
	MaxOrigins int `yaml:"-"`

	// MaxEpochBuckets bounds the sparse (non-empty) buckets one member may
	// send for one epoch, over all its parts, >= 1, censored counts
	// (DestCounts.TimedOut entries) included; a batch beyond it is refused
	// as InsertTooLarge (CutMostSamples cuts a sealed sub-window to it).
	// Default 262144 (2^18): 26 × a busy node's epoch (100 destinations × ~100 non-empty buckets), 4096 destinations
	// × 64 buckets, or 204 destinations with every bucket of the default
	// layout. Cost: 8 bytes per bucket held, for N+3 epochs: a hostile
	// member holds at most (N+3)·MaxEpochBuckets·8 B (26 MiB at the
	// defaults), where it could hold 4096 full destinations (5 M buckets,
	// 40 MiB) per epoch. A node must not seal more than this per epoch (its own
	// fleet and its peers would refuse it).
	MaxEpochBuckets int `yaml:"-"`

	// MaxBuckets bounds the sparse buckets held over all batches (censored
	// counts included), >= 1; a
	// batch that would go beyond it is refused as InsertBucketsCapped (held
	// batches are never dropped for it). Default 2^25 (256 MiB of buckets),
	// enough for the default MaxOrigins (256) nodes × 100 destinations ×
	// 100 buckets × 13 epochs. Scaling: origins × destinations × non-empty
	// buckets per destination × (N+3), with headroom.
	MaxBuckets int `yaml:"-"`

	// MaxDestinations bounds the destinations with a fleet view, >= 1, and
	// the destinations one origin may send per epoch. A new destination
	// beyond it evicts a destination with at most one peer in its view
	// (none first, then one; the least recently inserted of those), so one
	// peer sending junk names cannot evict a destination several peers
	// report; when every held destination has two or more, the new one is
	// not counted (FleetStats.DestinationsRefused). An evicted or refused
	// destination's counts in already-held batches stay out of its view
	// until they expire (its view restarts from new batches). Default 4096,
	// which is also the largest batch the codec accepts. Cost: ~11 KiB per
	// destination.
	MaxDestinations int `yaml:"-"`
}

// Fleet limits that keep every sum exact in a uint64: at most
// maxFleetOrigins members × (255+3) epochs × maxEpochSamples samples
// is below 2^61.
const (
	maxFleetOrigins = 4096
	maxEpochSamples = 1 << 40 // samples one member may send for one epoch, over all parts
)

// DefaultFleetConfig returns the tracker's DefaultConfig, auto MinPeers,
// MaxOriginShare 0.25, MaxOrigins 256, MaxEpochBuckets 2^18, MaxBuckets
// 2^25 and MaxDestinations 4096.
func DefaultFleetConfig() FleetConfig {
	return FleetConfig{
		Tracker:         DefaultConfig(),
		MaxOriginShare:  0.25,
		MaxOrigins:      256,
		MaxEpochBuckets: 1 << 18,
		MaxBuckets:      1 << 25,
		MaxDestinations: 4096,
	}
}

// RegisterFlags registers -min-peers and -max-origin-share on fs, with c's
// current values as defaults.
func (c *FleetConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.MinPeers, "min-peers", c.MinPeers, "distinct peers the fleet view needs to be trusted; 0 = min(3, live members)")
	fs.Float64Var(&c.MaxOriginShare, "max-origin-share", c.MaxOriginShare,
		"largest share of a destination's fleet samples one peer may hold once 4 or more contribute; 0 disables")
}

// Validate reports every problem with c (its Tracker's included), joined
// with errors.Join, each marked with its field (internal/fielderr).
func (c FleetConfig) Validate() error {
	var errs []error
	if err := c.Tracker.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.MinPeers < 0 {
		errs = append(errs, fielderr.Errorf("MinPeers", "tracker: MinPeers must be >= 0, got %d", c.MinPeers))
	}
	if math.IsNaN(c.MaxOriginShare) || c.MaxOriginShare < 0 || c.MaxOriginShare > 1 {
		errs = append(errs, fielderr.Errorf("MaxOriginShare", "tracker: MaxOriginShare must be in [0, 1], got %v", c.MaxOriginShare))
	}
	if c.MaxOrigins < 1 || c.MaxOrigins > maxFleetOrigins {
		errs = append(errs, fielderr.Errorf("MaxOrigins", "tracker: MaxOrigins must be in 1..%d, got %d", maxFleetOrigins, c.MaxOrigins))
	}
	if c.MaxEpochBuckets < 1 {
		errs = append(errs, fielderr.Errorf("MaxEpochBuckets", "tracker: MaxEpochBuckets must be >= 1, got %d", c.MaxEpochBuckets))
	}
	if c.MaxBuckets < 1 {
		errs = append(errs, fielderr.Errorf("MaxBuckets", "tracker: MaxBuckets must be >= 1, got %d", c.MaxBuckets))
	}
	if c.MaxDestinations < 1 {
		errs = append(errs, fielderr.Errorf("MaxDestinations", "tracker: MaxDestinations must be >= 1, got %d", c.MaxDestinations))
	}
	return errors.Join(errs...)
}
