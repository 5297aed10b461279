package tracker

import (
	"errors"
	"flag"
	"strconv"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/internal/fielderr"
)

// Config configures a Tracker or SyncTracker. The zero value is not valid;
// start from DefaultConfig.
//
// The YAML keys and flags (RegisterFlags) are those of atnode: `window`
// (-window), `min_samples` (-min-samples) and `max_destinations`
// (-max-destinations). SubWindows and MaxTrackableLatency have neither: the
// node sets the ring from its -sub-window duration, and the layout is fixed.
type Config struct {
	// Window is the whole sliding window. Default 60s.
	Window time.Duration `yaml:"window"`
	// SubWindows is the number of sub-windows in the ring, 1..255. The window
	// slides one sub-window at a time. Default 10.
	SubWindows int `yaml:"-"`
	// MinSamples is how many samples the window must hold before a quantile
	// is given. Default 3.
	MinSamples uint32 `yaml:"min_samples"`
	// MaxTrackableLatency is the largest latency kept; larger samples are
	// clamped to it. At least 2ms. Default 60s.
	MaxTrackableLatency time.Duration `yaml:"-"`
	// MaxDestinations bounds the destinations tracked: 0 means unlimited.
	// Otherwise recording a new destination when MaxDestinations are held
	// first evicts one, keeping those with the most samples in the window,
	// never choosing by recency alone: among the 16 least recently recorded
	// destinations, the one with the fewest samples goes (ties: the least
	// recently recorded), and those with more samples than it move to the
	// front of the order, so destinations with steady traffic never settle
	// where the next evictions look. A flood of new names with a sample
	// each evicts only its own kind. Cost: at most 16 destinations visited
	// per eviction (SyncTracker: plus one lock of each shard, and an
	// O(log n) re-place of each one read that was recorded since it was
	// last placed), nothing per record of a known destination. Evictions are counted
	// (TrackerStats.DestinationsEvicted). Default 0.
	MaxDestinations int `yaml:"max_destinations"`
}

// RegisterFlags registers -window, -min-samples and -max-destinations on
// fs, with c's current values as defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.Window, "window", c.Window, "sliding window the latency quantiles are taken over")
	fs.Var((*uint32Value)(&c.MinSamples), "min-samples", "`samples` a view needs before it gives a quantile (and is trusted)")
	fs.IntVar(&c.MaxDestinations, "max-destinations", c.MaxDestinations,
		"destinations tracked; recording a new one beyond it evicts one of the least recently recorded with the fewest samples; 0 = unlimited")
}

// uint32Value is a flag.Value for a uint32 (the flag package has none).
type uint32Value uint32

func (v *uint32Value) String() string { return strconv.FormatUint(uint64(*v), 10) }

func (v *uint32Value) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return errors.New("want a whole number in 0..4294967295")
	}
	*v = uint32Value(n)
	return nil
}

// evictionCandidates is how many of the least recently recorded
// destinations an eviction compares (see Config.MaxDestinations).
const evictionCandidates = 16

// DefaultConfig returns a 60s window of 10 sub-windows, MinSamples 3, and a
// 60s maximum trackable latency, with no bound on destinations.
func DefaultConfig() Config {
	return Config{
		Window:              60 * time.Second,
		SubWindows:          10,
		MinSamples:          3,
		MaxTrackableLatency: 60 * time.Second,
	}
}

// Validate reports every problem with c, joined with errors.Join. Each
// problem is marked with the field it is about (internal/fielderr), so that
// a node can name the flag that set it.
func (c Config) Validate() error {
	var errs []error
	if c.SubWindows < 1 || c.SubWindows > 255 {
		errs = append(errs, fielderr.Errorf("SubWindows", "tracker: SubWindows must be in 1..255, got %d", c.SubWindows))
	}
	if c.Window <= 0 {
		errs = append(errs, fielderr.Errorf("Window", "tracker: Window must be > 0, got %v", c.Window))
	} else if c.SubWindows >= 1 && c.Window/time.Duration(c.SubWindows) < time.Millisecond {
		errs = append(errs, fielderr.Errorf("SubWindows", "tracker: Window/SubWindows must be >= 1ms, got %v/%d", c.Window, c.SubWindows))
	}
	if c.MaxTrackableLatency < 2*time.Millisecond {
		errs = append(errs, fielderr.Errorf("MaxTrackableLatency", "tracker: MaxTrackableLatency must be >= 2ms, got %v", c.MaxTrackableLatency))
	}
	if c.MaxDestinations < 0 {
		errs = append(errs, fielderr.Errorf("MaxDestinations", "tracker: MaxDestinations must be >= 0, got %d", c.MaxDestinations))
	}
	return errors.Join(errs...)
}

// AggregateHorizon is how many epochs back a reader's view reads the
// aggregates of destination-owned aggregation (protocol v2): at epoch E,
// the newest of E−1 … E−H, and it keeps those of E−H−1 to E+1 (one more
// absorbs its clock a little behind). H is a quarter of SubWindows, at
// least 2 (the default grid's: E−1, else E−2 until it arrives): an
// aggregate that comes late (a loaded sender, queue or network) still
// gives a view, at most a quarter of the window behind, where on a grid
// of many short sub-windows the view of E−1 else E−2 alone was empty
// once aggregates came more than about one sub-window late.
func (c Config) AggregateHorizon() int64 { return int64(max(2, c.SubWindows/4)) }

// SubWindow returns the length of one sub-window, Window/SubWindows truncated
// to whole milliseconds. It is meaningful only for a valid Config.
func (c Config) SubWindow() time.Duration {
	return time.Duration(c.subWindowMillis()) * time.Millisecond
}

func (c Config) subWindowMillis() int64 {
	if c.SubWindows < 1 {
		return 0
	}
	return int64(c.Window/time.Duration(c.SubWindows)) / int64(time.Millisecond)
}

// Epoch returns the sub-window number that now falls in on the wall-clock
// grid shared by every node: floor(now.UnixMilli() / SubWindow). It is
// meaningful only for a valid Config.
func (c Config) Epoch(now time.Time) int64 {
	return floorDiv(now.UnixMilli(), c.subWindowMillis())
}

// EpochStart returns the wall-clock start of epoch e; epoch e covers
// [EpochStart(e), EpochStart(e+1)).
func (c Config) EpochStart(e int64) time.Time {
	return time.UnixMilli(e * c.subWindowMillis())
}

// Layout returns the histogram layout the tracker uses: lowest 1 ms, highest
// MaxTrackableLatency in whole ms, 2 significant digits.
func (c Config) Layout() Layout {
	return Layout{Lowest: 1, Highest: int64(c.MaxTrackableLatency / time.Millisecond), SignificantDigits: 2}
}
