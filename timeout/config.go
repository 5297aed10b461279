package timeout

import (
	"errors"
	"flag"
	"math"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/internal/fielderr"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// Errors of Config.Validate besides those of BackoffInterval.Validate, which
// it wraps.
var (
	// ErrQuantile is tracker.ErrQuantile (one error per meaning): Validate
	// wraps it as "timeout: quantile must be in (0, 1], got <q>".
	ErrQuantile     = tracker.ErrQuantile
	ErrSafetyFactor = errors.New("timeout: safety factor must be finite and > 0")
)

// Config sets how timeouts are selected. Build it with DefaultConfig and
// change what you need; Validate it once, then pass it by value. The YAML
// keys are the flag names (RegisterFlags) with '_' for '-'.
type Config struct {
	// Backoff is the floor and ceiling of every timeout, and the base of the
	// exponential fallback used for destinations without data.
	// Default 250ms..1m.
	Backoff BackoffInterval `json:"backoff" yaml:"backoff"`
	// Quantile is the latency quantile asked of the Estimator, in (0, 1].
	// Default 0.9999 (P99.99).
	Quantile float64 `json:"quantile" yaml:"quantile"`
	// SafetyFactor multiplies the estimated quantile; finite and > 0.
	// Default 2.0.
	SafetyFactor float64 `json:"safety_factor" yaml:"safety_factor"`
}

// DefaultConfig returns Backoff 250ms..1m, Quantile 0.9999, SafetyFactor 2.0:
// the Rust crate's defaults.
func DefaultConfig() Config {
	return Config{
		Backoff:      BackoffInterval{Min: 250 * time.Millisecond, Max: time.Minute},
		Quantile:     0.9999,
		SafetyFactor: 2.0,
	}
}

// RegisterFlags registers -backoff, -quantile and -safety-factor on fs, with
// c's current values as defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.TextVar(&c.Backoff, "backoff", c.Backoff, "timeout `floor..ceiling`, also the base of the exponential fallback, e.g. 250ms..1m")
	fs.Float64Var(&c.Quantile, "quantile", c.Quantile, "latency quantile timeouts are based on, in (0, 1]")
	fs.Float64Var(&c.SafetyFactor, "safety-factor", c.SafetyFactor, "multiplier applied to the quantile, finite and > 0")
}

// Validate returns every problem of c joined with errors.Join, or nil: the
// backoff interval must be valid (wrapping its *ParseError), 0 < Quantile <= 1,
// and SafetyFactor finite and > 0. Each problem is marked with its field
// (internal/fielderr), so that a node can name the flag that set it.
func (c Config) Validate() error {
	var errs []error
	if err := c.Backoff.Validate(); err != nil {
		errs = append(errs, fielderr.Errorf("Backoff", "timeout: backoff %q: %w", c.Backoff.String(), err))
	}
	if !(c.Quantile > 0 && c.Quantile <= 1) {
		errs = append(errs, fielderr.Errorf("Quantile", "timeout: %w, got %v", ErrQuantile, c.Quantile))
	}
	if !(c.SafetyFactor > 0) || math.IsInf(c.SafetyFactor, 1) {
		errs = append(errs, fielderr.Errorf("SafetyFactor", "%w, got %v", ErrSafetyFactor, c.SafetyFactor))
	}
	return errors.Join(errs...)
}

// maxExponent caps the doubling: attempt 21 and later use 2^20.
const maxExponent = 20

// exponent returns min(max(attempt−1, 0), 20).
func exponent(attempt int) uint {
	if attempt <= 1 {
		return 0
	}
	if attempt > maxExponent+1 {
		return maxExponent
	}
	return uint(attempt - 1)
}

// millis converts a bound to whole milliseconds; negative values give 0.
func millis(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64(d / time.Millisecond)
}

// fromMillis converts milliseconds to a Duration. Every selected value is at
// most millis(c.Backoff.Max) <= math.MaxInt64/1e6, so this cannot overflow,
// even for a Config that does not validate.
func fromMillis(ms uint64) time.Duration {
	return time.Duration(ms) * time.Millisecond
}

// ExponentialBackoffMillis returns the fallback timeout of an attempt in
// milliseconds: min(floor·2^min(max(attempt−1, 0), 20), ceiling), where floor
// and ceiling are c.Backoff's Min and Max. Attempt 1 (and anything below) is
// the first attempt.
func (c Config) ExponentialBackoffMillis(attempt int) uint64 {
	return fallbackMillis(millis(c.Backoff.Min), millis(c.Backoff.Max), exponent(attempt))
}

// ExponentialBackoff is ExponentialBackoffMillis as a time.Duration.
func (c Config) ExponentialBackoff(attempt int) time.Duration {
	return fromMillis(c.ExponentialBackoffMillis(attempt))
}

// fallbackMillis is min(floor·2^k, ceiling) with a saturating shift.
func fallbackMillis(floor, ceiling uint64, k uint) uint64 {
	return min(saturatingShift(floor, k), ceiling)
}

// saturatingShift returns v·2^k, or 2^64−1 if that overflows.
func saturatingShift(v uint64, k uint) uint64 {
	if v > math.MaxUint64>>k {
		return math.MaxUint64
	}
	return v << k
}
