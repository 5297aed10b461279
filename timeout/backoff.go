package timeout

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// MaxBackoffMillis is the largest bound a BackoffInterval may hold, in
// milliseconds: 2^32−1 ms, about 49.7 days.
const MaxBackoffMillis = math.MaxUint32

// BackoffInterval is the floor (Min) and ceiling (Max) of every timeout the
// package selects. Both are whole milliseconds in [1 ms, MaxBackoffMillis ms]
// with Min <= Max; Validate checks that.
//
// Its text form is "<min>..<max>", for example "250ms..1m" or "0.5s..2 minutes"
// (see ParseBackoffInterval). It implements encoding.TextMarshaler and
// encoding.TextUnmarshaler, so JSON, YAML and flag.TextVar read and write that
// form. The zero value is not a valid interval.
type BackoffInterval struct {
	Min, Max time.Duration
}

// Sentinel errors of ParseBackoffInterval and BackoffInterval.Validate. The
// errors returned are *ParseError values, which match these with errors.Is.
var (
	ErrEmpty            = errors.New("empty input")
	ErrMissingSeparator = errors.New("missing '..' range separator")
	ErrInvalidMin       = errors.New("invalid min timeout")
	ErrInvalidMax       = errors.New("invalid max timeout")
	ErrZeroMin          = errors.New("min timeout must be > 0")
	ErrZeroMax          = errors.New("max timeout must be > 0")
	ErrMinOverflow      = errors.New("min timeout exceeds 4294967295ms")
	ErrMaxOverflow      = errors.New("max timeout exceeds 4294967295ms")
	ErrMinExceedsMax    = errors.New("min timeout exceeds max timeout")
	// ErrNotWholeMillis is returned only by Validate: parsing always yields
	// whole milliseconds.
	ErrNotWholeMillis = errors.New("timeout is not a whole number of milliseconds")
)

// ParseError describes why a BackoffInterval string (or value, for Validate)
// is invalid. Err is one of the package's sentinels and errors.Is matches it.
type ParseError struct {
	// Err is the sentinel: ErrEmpty, ErrMissingSeparator, ErrInvalidMin,
	// ErrInvalidMax, ErrZeroMin, ErrZeroMax, ErrMinOverflow, ErrMaxOverflow,
	// ErrMinExceedsMax or ErrNotWholeMillis.
	Err error
	// Detail is, for ErrInvalidMin and ErrInvalidMax, what is wrong with that
	// duration: "empty duration string", "invalid number: <s>",
	// "unknown unit: <unit>" or "duration '<s>' truncates to 0ms".
	// For ErrNotWholeMillis it names the bound and its value.
	Detail string
	// Min and Max are the parsed bounds in milliseconds, set for
	// ErrMinOverflow, ErrMaxOverflow and ErrMinExceedsMax.
	Min, Max uint64
}

// Error returns the exact texts of the Rust crate's grammar, for example
// "invalid min timeout: unknown unit: xs" or
// "min timeout (2000ms) exceeds max timeout (1000ms)".
func (e *ParseError) Error() string {
	switch e.Err {
	case ErrInvalidMin:
		return "invalid min timeout: " + e.Detail
	case ErrInvalidMax:
		return "invalid max timeout: " + e.Detail
	case ErrMinOverflow:
		return "min timeout (" + strconv.FormatUint(e.Min, 10) + "ms) exceeds 4294967295ms"
	case ErrMaxOverflow:
		return "max timeout (" + strconv.FormatUint(e.Max, 10) + "ms) exceeds 4294967295ms"
	case ErrMinExceedsMax:
		return "min timeout (" + strconv.FormatUint(e.Min, 10) + "ms) exceeds max timeout (" +
			strconv.FormatUint(e.Max, 10) + "ms)"
	case ErrNotWholeMillis:
		return e.Detail + " is not a whole number of milliseconds"
	case nil:
		return "invalid backoff interval"
	default:
		return e.Err.Error()
	}
}

// Unwrap returns the sentinel, so errors.Is(err, ErrZeroMin) works.
func (e *ParseError) Unwrap() error { return e.Err }

// ParseBackoffInterval parses "<min>..<max>" into a BackoffInterval.
//
// The grammar is the Rust crate adaptive-timeout's. The input is trimmed and
// split at the first "..". Each side is trimmed and is either exactly "0" or
// a number (the longest prefix of the characters 0-9 . - +, parsed as a
// float) followed, after optional spaces, by a case-sensitive unit:
//
//	ns nsec nsecs nano nanos nanosecond nanoseconds
//	us usec usecs micro micros microsecond microseconds µs µsec µsecs (µ U+00B5 or U+03BC)
//	ms msec msecs milli millis millisecond milliseconds
//	s sec secs second seconds
//	m min mins minute minutes
//	h hr hrs hour hours
//	d day days
//
// A duration is rounded half away from zero to whole milliseconds, saturating
// at 0 and 2^64−1; a non-zero number that rounds to 0 ms is an error. Both
// sides are parsed before the range checks, which run in this order: min 0,
// max 0, min > max, min > 2^32−1 ms, max > 2^32−1 ms.
//
// Errors are *ParseError values matching the Err* sentinels.
func ParseBackoffInterval(s string) (BackoffInterval, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return BackoffInterval{}, &ParseError{Err: ErrEmpty}
	}
	minText, maxText, ok := strings.Cut(s, "..")
	if !ok {
		return BackoffInterval{}, &ParseError{Err: ErrMissingSeparator}
	}
	minMS, detail := parseDurationMillis(minText)
	if detail != "" {
		return BackoffInterval{}, &ParseError{Err: ErrInvalidMin, Detail: detail}
	}
	maxMS, detail := parseDurationMillis(maxText)
	if detail != "" {
		return BackoffInterval{}, &ParseError{Err: ErrInvalidMax, Detail: detail}
	}
	if err := checkRange(minMS, maxMS); err != nil {
		return BackoffInterval{}, err
	}
	return BackoffInterval{
		Min: time.Duration(minMS) * time.Millisecond,
		Max: time.Duration(maxMS) * time.Millisecond,
	}, nil
}

// checkRange applies the range checks in their specified order.
func checkRange(minMS, maxMS uint64) error {
	switch {
	case minMS == 0:
		return &ParseError{Err: ErrZeroMin}
	case maxMS == 0:
		return &ParseError{Err: ErrZeroMax}
	case minMS > maxMS:
		return &ParseError{Err: ErrMinExceedsMax, Min: minMS, Max: maxMS}
	case minMS > MaxBackoffMillis:
		return &ParseError{Err: ErrMinOverflow, Min: minMS, Max: maxMS}
	case maxMS > MaxBackoffMillis:
		return &ParseError{Err: ErrMaxOverflow, Min: minMS, Max: maxMS}
	}
	return nil
}

// unitNanos maps every accepted unit designator to its length in nanoseconds.
var unitNanos = map[string]float64{
	"ns": 1, "nsec": 1, "nsecs": 1, "nano": 1, "nanos": 1, "nanosecond": 1, "nanoseconds": 1,

	"us": 1e3, "usec": 1e3, "usecs": 1e3, "micro": 1e3, "micros": 1e3,
	"microsecond": 1e3, "microseconds": 1e3,
	"\u00b5s": 1e3, "\u00b5sec": 1e3, "\u00b5secs": 1e3,
	"\u03bcs": 1e3, "\u03bcsec": 1e3, "\u03bcsecs": 1e3,

	"ms": 1e6, "msec": 1e6, "msecs": 1e6, "milli": 1e6, "millis": 1e6,
	"millisecond": 1e6, "milliseconds": 1e6,

	"s": 1e9, "sec": 1e9, "secs": 1e9, "second": 1e9, "seconds": 1e9,

	"m": 60e9, "min": 60e9, "mins": 60e9, "minute": 60e9, "minutes": 60e9,

	"h": 3600e9, "hr": 3600e9, "hrs": 3600e9, "hour": 3600e9, "hours": 3600e9,

	"d": 86400e9, "day": 86400e9, "days": 86400e9,
}

// parseDurationMillis parses one side of the range. It returns the whole
// milliseconds, or a non-empty detail text naming the problem.
func parseDurationMillis(s string) (uint64, string) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, "empty duration string"
	}
	if s == "0" {
		return 0, ""
	}
	end := 0
	for end < len(s) && isNumberByte(s[end]) {
		end++
	}
	number, unit := s[:end], strings.TrimSpace(s[end:])
	if number == "" {
		return 0, "invalid number: " + s
	}
	value, err := strconv.ParseFloat(number, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		// ErrRange only reports ±Inf for a long digit string; like Rust's
		// f64 parsing we keep the infinity, which saturates below.
		return 0, "invalid number: " + number
	}
	if unit == "" {
		return 0, "unknown unit: missing unit suffix"
	}
	nanos, ok := unitNanos[unit]
	if !ok {
		return 0, "unknown unit: " + unit
	}
	ms := saturatingUint64(math.Round(value * nanos / 1e6))
	if ms == 0 && value != 0 {
		return 0, "duration '" + s + "' truncates to 0ms"
	}
	return ms, ""
}

func isNumberByte(c byte) bool {
	return '0' <= c && c <= '9' || c == '.' || c == '-' || c == '+'
}

// saturatingUint64 converts x to uint64 truncating toward zero; NaN and
// negative values give 0, values at or above 2^64 give 2^64−1.
func saturatingUint64(x float64) uint64 {
	switch {
	case !(x > 0): // NaN, ±0 and negatives
		return 0
	case x >= 1<<64:
		return math.MaxUint64
	default:
		return uint64(x)
	}
}

// String formats b as "<min>..<max>", each bound in the largest unit that
// holds it exactly among d, h, m, s and ms ("10ms..1m", "250ms..1m",
// "1s..1d"); 0 prints as "0ms". A bound that is not a whole number of
// milliseconds (only possible for values not made by the parser) prints in
// ns. For every valid b, ParseBackoffInterval(b.String()) returns b.
func (b BackoffInterval) String() string {
	buf := make([]byte, 0, 24)
	buf = appendDuration(buf, b.Min)
	buf = append(buf, ".."...)
	buf = appendDuration(buf, b.Max)
	return string(buf)
}

func appendDuration(buf []byte, d time.Duration) []byte {
	if d%time.Millisecond != 0 {
		buf = strconv.AppendInt(buf, int64(d), 10)
		return append(buf, "ns"...)
	}
	ms := int64(d / time.Millisecond)
	if ms == 0 {
		return append(buf, "0ms"...)
	}
	for _, u := range [...]struct {
		ms   int64
		name string
	}{{86_400_000, "d"}, {3_600_000, "h"}, {60_000, "m"}, {1_000, "s"}} {
		if ms%u.ms == 0 {
			buf = strconv.AppendInt(buf, ms/u.ms, 10)
			return append(buf, u.name...)
		}
	}
	buf = strconv.AppendInt(buf, ms, 10)
	return append(buf, "ms"...)
}

// MarshalText returns String(). It never fails, even for an invalid b.
func (b BackoffInterval) MarshalText() ([]byte, error) {
	return []byte(b.String()), nil
}

// UnmarshalText parses p with ParseBackoffInterval. On error b is unchanged.
func (b *BackoffInterval) UnmarshalText(p []byte) error {
	v, err := ParseBackoffInterval(string(p))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// Validate reports whether b could have come from ParseBackoffInterval: Min
// and Max positive whole milliseconds, Min <= Max, both <= 2^32−1 ms. It
// returns the first problem as a *ParseError, checked in the parser's order
// (a bound below 1 ms is ErrZeroMin or ErrZeroMax; a fractional millisecond is
// ErrNotWholeMillis).
func (b BackoffInterval) Validate() error {
	switch {
	case b.Min < time.Millisecond:
		return &ParseError{Err: ErrZeroMin}
	case b.Max < time.Millisecond:
		return &ParseError{Err: ErrZeroMax}
	case b.Min%time.Millisecond != 0:
		return &ParseError{Err: ErrNotWholeMillis, Detail: "min timeout (" + b.Min.String() + ")"}
	case b.Max%time.Millisecond != 0:
		return &ParseError{Err: ErrNotWholeMillis, Detail: "max timeout (" + b.Max.String() + ")"}
	}
	return checkRange(uint64(b.Min/time.Millisecond), uint64(b.Max/time.Millisecond))
}
