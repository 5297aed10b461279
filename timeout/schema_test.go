package timeout

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

type jsonSchema struct {
	Schema      string   `json:"$schema"`
	Type        string   `json:"type"`
	Pattern     string   `json:"pattern"`
	Examples    []string `json:"examples"`
	Default     string   `json:"default"`
	Description string   `json:"description"`
}

func loadSchema(t testing.TB) (jsonSchema, *regexp.Regexp) {
	t.Helper()
	var s jsonSchema
	require.NoError(t, json.Unmarshal([]byte(BackoffIntervalJSONSchema()), &s))
	// The pattern uses only syntax that ECMA-262 and RE2 read alike.
	return s, regexp.MustCompile(s.Pattern)
}

func TestJSONSchema(t *testing.T) {
	s, re := loadSchema(t)
	require.Equal(t, "string", s.Type)
	require.NotEmpty(t, s.Description)
	require.Equal(t, DefaultConfig().Backoff.String(), s.Default)
	require.NotEmpty(t, s.Examples)
	for _, ex := range append(s.Examples, s.Default) {
		t.Run("example "+ex, func(t *testing.T) {
			_, err := ParseBackoffInterval(ex)
			require.NoError(t, err)
			require.Regexp(t, re, ex)
		})
	}
}

func TestJSONSchemaPattern(t *testing.T) {
	_, re := loadSchema(t)
	accept := []string{
		"250ms..1m", " 10 ms .. 60 s ", "0.5s..5m", "+1ms..+.5s", "1.ms..2.s", "1ms...5s",
		"1000\u00b5s..1s", "1000\u03bcsecs..1s", "1 nanosecond..2 days", "7 millis..3 hrs",
		"5 mins..1 hour", "1d..2days", "1ns..1s", // the pattern cannot see that 1ns rounds to 0
	}
	reject := []string{
		"", "..", "10ms", "10ms..", "..1s", "1s..2", "1..2s", "abc..1s", "1s..1w", "10MS..1s",
		"-5ms..1s", "1e3ms..1s", "1.2.3ms..1s", "1ms..2s..3s", "1 s.. 2 s x", "1ms. .2s",
	}
	for _, s := range accept {
		require.Regexp(t, re, s)
	}
	for _, s := range reject {
		require.NotRegexp(t, re, s)
	}
}
