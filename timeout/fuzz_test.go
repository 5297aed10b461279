package timeout

import (
	"errors"
	"strings"
	"testing"
	"unicode"
)

// FuzzParseBackoffInterval checks that parsing never panics, that every error
// is a *ParseError matching exactly one sentinel, and that every accepted
// string is valid, matches the JSON Schema pattern (for ASCII white space)
// and re-parses from its String() to the same value. Seeds are in
// testdata/fuzz/FuzzParseBackoffInterval.
func FuzzParseBackoffInterval(f *testing.F) {
	f.Add("250ms..1m")
	f.Add("10 milliseconds .. 1.5 hours")
	_, re := loadSchema(f)
	sentinels := []error{ErrEmpty, ErrMissingSeparator, ErrInvalidMin, ErrInvalidMax, ErrZeroMin,
		ErrZeroMax, ErrMinOverflow, ErrMaxOverflow, ErrMinExceedsMax}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBackoffInterval(s)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("%q: error %T is not a *ParseError", s, err)
			}
			n := 0
			for _, se := range sentinels {
				if errors.Is(err, se) {
					n++
				}
			}
			if n != 1 || err.Error() == "" {
				t.Fatalf("%q: error %q matches %d sentinels", s, err, n)
			}
			if b != (BackoffInterval{}) {
				t.Fatalf("%q: error with a non-zero value %v", s, b)
			}
			return
		}
		if err := b.Validate(); err != nil {
			t.Fatalf("%q parsed to %v, which does not validate: %v", s, b, err)
		}
		back, err := ParseBackoffInterval(b.String())
		if err != nil || back != b {
			t.Fatalf("%q parsed to %v; its String %q re-parsed to %v, %v", s, b, b.String(), back, err)
		}
		var u BackoffInterval
		text, _ := b.MarshalText()
		if err := u.UnmarshalText(text); err != nil || u != b {
			t.Fatalf("%q: text round trip gave %v, %v", s, u, err)
		}
		if onlyASCIISpace(s) && !re.MatchString(s) {
			t.Fatalf("%q is accepted but does not match the JSON Schema pattern", s)
		}
	})
}

// onlyASCIISpace reports whether every white space rune in s is one that
// both ECMA-262's and RE2's \s match.
func onlyASCIISpace(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) && !strings.ContainsRune(" \t\n\f\r", r)
	})
}
