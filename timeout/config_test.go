package timeout

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	require.Equal(t, Config{
		Backoff:      BackoffInterval{Min: 250 * time.Millisecond, Max: time.Minute},
		Quantile:     0.9999,
		SafetyFactor: 2.0,
	}, c)
	require.NoError(t, c.Validate())
	require.Equal(t, "250ms..1m", c.Backoff.String())
}

// requireInvalid checks a Validate error: none when text is empty, else
// one that reads text and matches every sentinel of wants.
func requireInvalid(t *testing.T, err error, text string, wants ...error) {
	t.Helper()
	if text == "" {
		require.NoError(t, err)
		return
	}
	require.EqualError(t, err, text)
	for _, w := range wants {
		require.ErrorIs(t, err, w)
	}
}

func TestConfigValidate(t *testing.T) {
	valid := DefaultConfig()
	with := func(f func(*Config)) Config { c := valid; f(&c); return c }
	tests := []struct {
		name  string
		c     Config
		wants []error // every sentinel the joined error must match
		text  string
	}{
		{"default", valid, nil, ""},
		{"quantile 1", with(func(c *Config) { c.Quantile = 1 }), nil, ""},
		{"tiny quantile", with(func(c *Config) { c.Quantile = math.SmallestNonzeroFloat64 }), nil, ""},
		{"tiny safety", with(func(c *Config) { c.SafetyFactor = 1e-9 }), nil, ""},
		{"quantile 0", with(func(c *Config) { c.Quantile = 0 }), []error{ErrQuantile},
			"timeout: quantile must be in (0, 1], got 0"},
		{"quantile > 1", with(func(c *Config) { c.Quantile = 1.0001 }), []error{ErrQuantile},
			"timeout: quantile must be in (0, 1], got 1.0001"},
		{"quantile NaN", with(func(c *Config) { c.Quantile = math.NaN() }), []error{ErrQuantile},
			"timeout: quantile must be in (0, 1], got NaN"},
		{"safety 0", with(func(c *Config) { c.SafetyFactor = 0 }), []error{ErrSafetyFactor},
			"timeout: safety factor must be finite and > 0, got 0"},
		{"safety negative", with(func(c *Config) { c.SafetyFactor = -1 }), []error{ErrSafetyFactor},
			"timeout: safety factor must be finite and > 0, got -1"},
		{"safety +Inf", with(func(c *Config) { c.SafetyFactor = math.Inf(1) }), []error{ErrSafetyFactor},
			"timeout: safety factor must be finite and > 0, got +Inf"},
		{"safety NaN", with(func(c *Config) { c.SafetyFactor = math.NaN() }), []error{ErrSafetyFactor},
			"timeout: safety factor must be finite and > 0, got NaN"},
		{"backoff", with(func(c *Config) { c.Backoff.Min = 2 * time.Minute }), []error{ErrMinExceedsMax},
			`timeout: backoff "2m..1m": min timeout (120000ms) exceeds max timeout (60000ms)`},
		{"all three", Config{}, []error{ErrZeroMin, ErrQuantile, ErrSafetyFactor},
			"timeout: backoff \"0ms..0ms\": min timeout must be > 0\n" +
				"timeout: quantile must be in (0, 1], got 0\n" +
				"timeout: safety factor must be finite and > 0, got 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			requireInvalid(t, err, tt.text, tt.wants...)
			if err != nil && !errors.Is(err, ErrZeroMin) && !errors.Is(err, ErrMinExceedsMax) {
				var pe *ParseError
				require.False(t, errors.As(err, &pe))
			}
		})
	}
}

func TestExponentialBackoff(t *testing.T) {
	def := DefaultConfig() // 250ms..1m
	wide := DefaultConfig()
	wide.Backoff = BackoffInterval{Min: time.Millisecond, Max: MaxBackoffMillis * time.Millisecond}
	inverted := DefaultConfig() // does not validate: the ceiling wins
	inverted.Backoff = BackoffInterval{Min: 10 * time.Millisecond, Max: 5 * time.Millisecond}
	huge := DefaultConfig() // does not validate: floor·2^20 would overflow 2^52 ms but not uint64
	huge.Backoff = BackoffInterval{Min: math.MaxInt64, Max: math.MaxInt64}
	tests := []struct {
		name    string
		c       Config
		attempt int
		want    uint64
	}{
		{"min int", def, math.MinInt, 250},
		{"negative", def, -1, 250},
		{"zero", def, 0, 250},
		{"first", def, 1, 250},
		{"second", def, 2, 500},
		{"third", def, 3, 1000},
		{"eighth", def, 8, 32_000},
		{"ninth capped by ceiling", def, 9, 60_000},
		{"max int", def, math.MaxInt, 60_000},
		{"exponent 19", wide, 20, 1 << 19},
		{"exponent 20", wide, 21, 1 << 20},
		{"exponent capped at 20", wide, 22, 1 << 20},
		{"exponent capped at 20, max int", wide, math.MaxInt, 1 << 20},
		{"inverted", inverted, 1, 5},
		{"huge floor", huge, 21, uint64(math.MaxInt64 / int64(time.Millisecond))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, tt.c.ExponentialBackoffMillis(tt.attempt))
			require.Equal(t, time.Duration(tt.want)*time.Millisecond, tt.c.ExponentialBackoff(tt.attempt))
		})
	}
}

func TestSaturatingHelpers(t *testing.T) {
	require.Equal(t, uint64(math.MaxUint64), saturatingShift(math.MaxUint64>>3+1, 3))
	require.Equal(t, uint64(math.MaxUint64)-7, saturatingShift(math.MaxUint64>>3, 3))
	require.Equal(t, uint64(0), saturatingShift(0, 20))
	for _, tt := range []struct {
		x    float64
		want uint64
	}{
		{math.NaN(), 0}, {math.Inf(-1), 0}, {-1, 0}, {math.Copysign(0, -1), 0}, {0.999, 0},
		{1.999, 1}, {1 << 63, 1 << 63}, {math.Nextafter(1<<64, 0), math.MaxUint64 - 2047},
		{1 << 64, math.MaxUint64}, {math.Inf(1), math.MaxUint64},
	} {
		require.Equal(t, tt.want, saturatingUint64(tt.x), "x=%v", tt.x)
	}
}
