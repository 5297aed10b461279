package timeout

import (
	"encoding/json"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

func TestParseBackoffIntervalAccepts(t *testing.T) {
	tests := []struct {
		in       string
		min, max int64 // ms
	}{
		{"10ms..1s", 10, 1000},
		{"250ms..1m", 250, 60_000},
		{"0.5s..1min", 500, 60_000},
		{"0.5s..1.5s", 500, 1500},
		{"  10ms .. 1s  ", 10, 1000},
		{"\t10 ms\n..\n1 s ", 10, 1000},
		{"500 milliseconds..2 minutes", 500, 120_000},
		{"100ms..100ms", 100, 100},
		{"1h..3d", 3_600_000, 259_200_000},
		{"1ms..4294967295ms", 1, 4_294_967_295},
		{"4294967295ms..4294967295ms", 4_294_967_295, 4_294_967_295},
		// Every unit designator.
		{"1000000ns..1s", 1, 1000},
		{"1000000nsec..1s", 1, 1000},
		{"1000000nsecs..1s", 1, 1000},
		{"1000000nano..1s", 1, 1000},
		{"1000000nanos..1s", 1, 1000},
		{"1000000nanosecond..1s", 1, 1000},
		{"1000000nanoseconds..1s", 1, 1000},
		{"1000us..1s", 1, 1000},
		{"1000usec..1s", 1, 1000},
		{"1000usecs..1s", 1, 1000},
		{"1000micro..1s", 1, 1000},
		{"1000micros..1s", 1, 1000},
		{"1000microsecond..1s", 1, 1000},
		{"1000microseconds..1s", 1, 1000},
		{"1000\u00b5s..1s", 1, 1000},
		{"1000\u00b5sec..1s", 1, 1000},
		{"1000\u00b5secs..1s", 1, 1000},
		{"1000\u03bcs..1s", 1, 1000},
		{"1000\u03bcsec..1s", 1, 1000},
		{"1000\u03bcsecs..1s", 1, 1000},
		{"7ms..1s", 7, 1000},
		{"7msec..1s", 7, 1000},
		{"7msecs..1s", 7, 1000},
		{"7milli..1s", 7, 1000},
		{"7millis..1s", 7, 1000},
		{"7millisecond..1s", 7, 1000},
		{"7milliseconds..1s", 7, 1000},
		{"1ms..2s", 1, 2000},
		{"1ms..2sec", 1, 2000},
		{"1ms..2secs", 1, 2000},
		{"1ms..2second", 1, 2000},
		{"1ms..2seconds", 1, 2000},
		{"1ms..2m", 1, 120_000},
		{"1ms..2min", 1, 120_000},
		{"1ms..2mins", 1, 120_000},
		{"1ms..2minute", 1, 120_000},
		{"1ms..2minutes", 1, 120_000},
		{"1ms..2h", 1, 7_200_000},
		{"1ms..2hr", 1, 7_200_000},
		{"1ms..2hrs", 1, 7_200_000},
		{"1ms..2hour", 1, 7_200_000},
		{"1ms..2hours", 1, 7_200_000},
		{"1ms..2d", 1, 172_800_000},
		{"1ms..2day", 1, 172_800_000},
		{"1ms..2days", 1, 172_800_000},
		// Numbers: fractions, signs, trailing and leading dots.
		{"+1ms..+.5s", 1, 500},
		{"1.ms..1.s", 1, 1000},
		// Rounding half away from zero.
		{"2.5ms..1s", 3, 1000},
		{"2.4999ms..1s", 2, 1000},
		{"500us..1s", 1, 1000},
		{"1499us..1s", 1, 1000},
		{"1500us..1s", 2, 1000},
		{"0.0005s..1s", 1, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			b, err := ParseBackoffInterval(tt.in)
			require.NoError(t, err)
			require.Equal(t, BackoffInterval{Min: ms(tt.min), Max: ms(tt.max)}, b)
			require.NoError(t, b.Validate())
		})
	}
}

func TestParseSplitsAtFirstSeparator(t *testing.T) {
	// "1s...5s": min "1s", max ".5s" = 500ms, so min > max.
	_, err := ParseBackoffInterval("1s...5s")
	require.ErrorIs(t, err, ErrMinExceedsMax)
	require.EqualError(t, err, "min timeout (1000ms) exceeds max timeout (500ms)")
	// "1ms...5s": max ".5s".
	b, err := ParseBackoffInterval("1ms...5s")
	require.NoError(t, err)
	require.Equal(t, BackoffInterval{Min: ms(1), Max: ms(500)}, b)
	// "1ms..2s..3s": max "2s..3s" has the number "2" and unit "s..3s".
	_, err = ParseBackoffInterval("1ms..2s..3s")
	require.EqualError(t, err, "invalid max timeout: unknown unit: s..3s")
}

func TestParseBackoffIntervalErrors(t *testing.T) {
	long := "1" + strings.Repeat("0", 400)
	tests := []struct {
		in       string
		sentinel error
		text     string
	}{
		{"", ErrEmpty, "empty input"},
		{" \t\n ", ErrEmpty, "empty input"},
		{"10ms", ErrMissingSeparator, "missing '..' range separator"},
		{"10ms.1s", ErrMissingSeparator, "missing '..' range separator"},
		{"..", ErrInvalidMin, "invalid min timeout: empty duration string"},
		{"..1s", ErrInvalidMin, "invalid min timeout: empty duration string"},
		{"  ..1s", ErrInvalidMin, "invalid min timeout: empty duration string"},
		{"1s..", ErrInvalidMax, "invalid max timeout: empty duration string"},
		{"1s..  ", ErrInvalidMax, "invalid max timeout: empty duration string"},
		// Number: empty prefix reports the whole trimmed text.
		{"abc..1s", ErrInvalidMin, "invalid min timeout: invalid number: abc"},
		{" ms ..1s", ErrInvalidMin, "invalid min timeout: invalid number: ms"},
		{"10ms..abc", ErrInvalidMax, "invalid max timeout: invalid number: abc"},
		{"1s..x 1s", ErrInvalidMax, "invalid max timeout: invalid number: x 1s"},
		// Number: not a float reports the number part.
		{"1.2.3ms..1s", ErrInvalidMin, "invalid min timeout: invalid number: 1.2.3"},
		{"+-1ms..1s", ErrInvalidMin, "invalid min timeout: invalid number: +-1"},
		{"1-2ms..1s", ErrInvalidMin, "invalid min timeout: invalid number: 1-2"},
		{"+ms..1s", ErrInvalidMin, "invalid min timeout: invalid number: +"},
		{"1ms..-s", ErrInvalidMax, "invalid max timeout: invalid number: -"},
		// The number is checked before the unit (ParseBackoffInterval's order;
		// the Rust crate checks for a missing unit first, which differs only on
		// inputs wrong in both ways).
		{"1.2.3..1s", ErrInvalidMin, "invalid min timeout: invalid number: 1.2.3"},
		{"1ms..+", ErrInvalidMax, "invalid max timeout: invalid number: +"},
		// Unit.
		{"42..1s", ErrInvalidMin, "invalid min timeout: unknown unit: missing unit suffix"},
		{"1s..42", ErrInvalidMax, "invalid max timeout: unknown unit: missing unit suffix"},
		{"1.5..1s", ErrInvalidMin, "invalid min timeout: unknown unit: missing unit suffix"},
		{"10xyz..1s", ErrInvalidMin, "invalid min timeout: unknown unit: xyz"},
		{"10 M s..1s", ErrInvalidMin, "invalid min timeout: unknown unit: M s"},
		{"10MS..1s", ErrInvalidMin, "invalid min timeout: unknown unit: MS"},
		{"1ms..1S", ErrInvalidMax, "invalid max timeout: unknown unit: S"},
		{"1ms..1 Seconds", ErrInvalidMax, "invalid max timeout: unknown unit: Seconds"},
		{"1e3ms..1s", ErrInvalidMin, "invalid min timeout: unknown unit: e3ms"},
		{"1ms..1w", ErrInvalidMax, "invalid max timeout: unknown unit: w"},
		{"1ms..1 0s", ErrInvalidMax, "invalid max timeout: unknown unit: 0s"},
		// Truncation to 0 ms (negatives included) reports the trimmed text.
		{"1ns..1s", ErrInvalidMin, "invalid min timeout: duration '1ns' truncates to 0ms"},
		{" 499 us ..1s", ErrInvalidMin, "invalid min timeout: duration '499 us' truncates to 0ms"},
		{"0.4ms..1s", ErrInvalidMin, "invalid min timeout: duration '0.4ms' truncates to 0ms"},
		{"-5ms..1s", ErrInvalidMin, "invalid min timeout: duration '-5ms' truncates to 0ms"},
		{"1ms..-1h", ErrInvalidMax, "invalid max timeout: duration '-1h' truncates to 0ms"},
		// Both sides are parsed before the range checks.
		{"0..abc", ErrInvalidMax, "invalid max timeout: invalid number: abc"},
		{"10s..1ns", ErrInvalidMax, "invalid max timeout: duration '1ns' truncates to 0ms"},
		// Zero.
		{"0..1s", ErrZeroMin, "min timeout must be > 0"},
		{"0ms..1s", ErrZeroMin, "min timeout must be > 0"},
		{"-0ms..1s", ErrZeroMin, "min timeout must be > 0"},
		{"0.0s..1s", ErrZeroMin, "min timeout must be > 0"},
		{"0..0", ErrZeroMin, "min timeout must be > 0"},
		{"1s..0", ErrZeroMax, "max timeout must be > 0"},
		{"1s..0h", ErrZeroMax, "max timeout must be > 0"},
		{"0." + strings.Repeat("0", 400) + "1s..1s", ErrZeroMin, "min timeout must be > 0"},
		// Order before overflow.
		{"10s..1s", ErrMinExceedsMax, "min timeout (10000ms) exceeds max timeout (1000ms)"},
		{"100d..1s", ErrMinExceedsMax, "min timeout (8640000000ms) exceeds max timeout (1000ms)"},
		// Overflow, min first.
		{"4294967296ms..4294967296ms", ErrMinOverflow, "min timeout (4294967296ms) exceeds 4294967295ms"},
		{"50d..60d", ErrMinOverflow, "min timeout (4320000000ms) exceeds 4294967295ms"},
		{"1ms..4294967296ms", ErrMaxOverflow, "max timeout (4294967296ms) exceeds 4294967295ms"},
		{"1ms..50d", ErrMaxOverflow, "max timeout (4320000000ms) exceeds 4294967295ms"},
		// Saturation at 2^64−1 ms.
		{"1ms..1e", ErrInvalidMax, "invalid max timeout: unknown unit: e"},
		{"1ms.." + long + "d", ErrMaxOverflow, "max timeout (18446744073709551615ms) exceeds 4294967295ms"},
		{"1ms..300000000000000000000ms", ErrMaxOverflow, "max timeout (18446744073709551615ms) exceeds 4294967295ms"},
		{long + "ns.." + long + "ns", ErrMinOverflow, "min timeout (18446744073709551615ms) exceeds 4294967295ms"},
	}
	sentinels := []error{ErrEmpty, ErrMissingSeparator, ErrInvalidMin, ErrInvalidMax, ErrZeroMin,
		ErrZeroMax, ErrMinOverflow, ErrMaxOverflow, ErrMinExceedsMax, ErrNotWholeMillis}
	for _, tt := range tests {
		name := tt.in
		if len(name) > 40 {
			name = name[:40]
		}
		t.Run(name, func(t *testing.T) {
			b, err := ParseBackoffInterval(tt.in)
			require.Zero(t, b)
			require.EqualError(t, err, tt.text)
			var pe *ParseError
			require.ErrorAs(t, err, &pe)
			for _, s := range sentinels {
				require.Equal(t, s == tt.sentinel, errors.Is(err, s), "errors.Is(err, %v)", s)
			}
		})
	}
}

func TestBackoffIntervalString(t *testing.T) {
	tests := []struct {
		b    BackoffInterval
		want string
	}{
		{BackoffInterval{ms(10), ms(60_000)}, "10ms..1m"},
		{BackoffInterval{ms(250), ms(60_000)}, "250ms..1m"},
		{BackoffInterval{ms(500), ms(1500)}, "500ms..1500ms"},
		{BackoffInterval{ms(1000), ms(3_600_000)}, "1s..1h"},
		{BackoffInterval{ms(100), ms(86_400_000)}, "100ms..1d"},
		{BackoffInterval{ms(90_000), ms(5_400_000)}, "90s..90m"},
		{BackoffInterval{ms(129_600_000), ms(172_800_000)}, "36h..2d"},
		{BackoffInterval{ms(1), ms(4_294_967_295)}, "1ms..4294967295ms"},
		{BackoffInterval{ms(61_001), ms(86_400_001)}, "61001ms..86400001ms"},
		// Values the parser never makes still print, and exactly.
		{BackoffInterval{}, "0ms..0ms"},
		{BackoffInterval{ms(-2000), 1500 * time.Microsecond}, "-2s..1500000ns"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			require.Equal(t, tt.want, tt.b.String())
			text, err := tt.b.MarshalText()
			require.NoError(t, err)
			require.Equal(t, tt.want, string(text))
			if tt.b.Validate() == nil {
				back, err := ParseBackoffInterval(tt.want)
				require.NoError(t, err)
				require.Equal(t, tt.b, back)
			}
		})
	}
}

func TestBackoffIntervalValidate(t *testing.T) {
	tests := []struct {
		name     string
		b        BackoffInterval
		sentinel error
		text     string
	}{
		{"default", DefaultConfig().Backoff, nil, ""},
		{"1ms..max", BackoffInterval{ms(1), ms(MaxBackoffMillis)}, nil, ""},
		{"zero", BackoffInterval{}, ErrZeroMin, "min timeout must be > 0"},
		{"sub-ms min", BackoffInterval{999 * time.Microsecond, ms(5)}, ErrZeroMin, "min timeout must be > 0"},
		{"negative min", BackoffInterval{-ms(5), ms(5)}, ErrZeroMin, "min timeout must be > 0"},
		{"zero max", BackoffInterval{ms(5), 0}, ErrZeroMax, "max timeout must be > 0"},
		{"fractional min", BackoffInterval{1500 * time.Microsecond, ms(5)}, ErrNotWholeMillis,
			"min timeout (1.5ms) is not a whole number of milliseconds"},
		{"fractional max", BackoffInterval{ms(1), 5*time.Millisecond + 1}, ErrNotWholeMillis,
			"max timeout (5.000001ms) is not a whole number of milliseconds"},
		{"min > max", BackoffInterval{ms(6), ms(5)}, ErrMinExceedsMax, "min timeout (6ms) exceeds max timeout (5ms)"},
		{"min overflow", BackoffInterval{ms(MaxBackoffMillis + 1), ms(MaxBackoffMillis + 2)}, ErrMinOverflow,
			"min timeout (4294967296ms) exceeds 4294967295ms"},
		{"max overflow", BackoffInterval{ms(1), ms(MaxBackoffMillis + 1)}, ErrMaxOverflow,
			"max timeout (4294967296ms) exceeds 4294967295ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireInvalid(t, tt.b.Validate(), tt.text, tt.sentinel)
		})
	}
}

func TestBackoffIntervalEncodings(t *testing.T) {
	type doc struct {
		Backoff BackoffInterval `json:"backoff" yaml:"backoff"`
	}
	want := doc{BackoffInterval{ms(250), ms(60_000)}}

	t.Run("json", func(t *testing.T) {
		out, err := json.Marshal(want)
		require.NoError(t, err)
		require.JSONEq(t, `{"backoff":"250ms..1m"}`, string(out))
		var got doc
		require.NoError(t, json.Unmarshal([]byte(`{"backoff":"250 ms .. 60s"}`), &got))
		require.Equal(t, want, got)
		err = json.Unmarshal([]byte(`{"backoff":"1s..0"}`), &got)
		require.ErrorIs(t, err, ErrZeroMax)
		require.Equal(t, want, got, "a failed unmarshal leaves the value unchanged")
	})
	t.Run("yaml", func(t *testing.T) {
		out, err := yaml.Marshal(want)
		require.NoError(t, err)
		require.Equal(t, "backoff: 250ms..1m\n", string(out))
		var got doc
		require.NoError(t, yaml.Unmarshal([]byte("backoff: 0.25s..1 minute\n"), &got))
		require.Equal(t, want, got)
		require.ErrorIs(t, yaml.Unmarshal([]byte("backoff: 1s\n"), &got), ErrMissingSeparator)
	})
	t.Run("flag.TextVar", func(t *testing.T) {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(new(strings.Builder))
		var b BackoffInterval
		fs.TextVar(&b, "backoff", DefaultConfig().Backoff, "timeout floor..ceiling")
		require.Equal(t, DefaultConfig().Backoff, b)
		require.NoError(t, fs.Parse([]string{"-backoff", "10ms..5s"}))
		require.Equal(t, BackoffInterval{ms(10), ms(5000)}, b)
		require.Equal(t, "10ms..5s", fs.Lookup("backoff").Value.String())
		// flag does not wrap the error, so only its text survives.
		require.ErrorContains(t, fs.Parse([]string{"-backoff", "5s..10ms"}),
			"min timeout (5000ms) exceeds max timeout (10ms)")
	})
}
