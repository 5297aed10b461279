package node

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Limits of POST /v1/record (DESIGN.md section 7).
const (
	maxRecordBody    = 1 << 20 // bytes
	maxRecordSamples = 10_000
	maxDestLen       = 256 // bytes
)

// errorBody is every error response: {"error": "..."} with a 4xx or 5xx status.
type errorBody struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // error texts quote ">=" as is
	_ = enc.Encode(v)        // the client went away; nothing left to tell it
}

func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, errorBody{Error: fmt.Sprintf(format, args...)})
}

// Sample is one latency observation of POST /v1/record.
type Sample struct {
	Dest      string
	LatencyMs float64
}

// rawSample keeps the fields' raw JSON so that a missing field, a wrong type
// and invalid UTF-8 can each be told apart and named.
type rawSample struct {
	Dest      json.RawMessage `json:"dest"`
	LatencyMs json.RawMessage `json:"latency_ms"`
}

type recordRequest struct {
	Samples *[]rawSample `json:"samples"`
}

// errBodyTooLarge marks a body over maxRecordBody; the handler answers 413.
var errBodyTooLarge = errors.New("body exceeds 1 MiB")

// decodeRecord reads and validates a POST /v1/record body. It returns every
// sample, or the first problem found naming the sample's index; nothing is
// returned (so nothing is recorded) when any sample is invalid.
func decodeRecord(r io.Reader) ([]Sample, error) {
	body, err := io.ReadAll(io.LimitReader(r, maxRecordBody+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, errBodyTooLarge
		}
		return nil, fmt.Errorf("reading body: %w", err)
	}
	if len(body) > maxRecordBody {
		return nil, errBodyTooLarge
	}
	var req recordRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("body is not a JSON object of the form {\"samples\":[...]}: %v", err)
	}
	if req.Samples == nil {
		return nil, errors.New(`missing field "samples"`)
	}
	raw := *req.Samples
	if len(raw) == 0 || len(raw) > maxRecordSamples {
		return nil, fmt.Errorf("samples: want 1..%d samples, got %d", maxRecordSamples, len(raw))
	}
	out := make([]Sample, len(raw))
	for i, rs := range raw {
		s, err := rs.validate()
		if err != nil {
			return nil, fmt.Errorf("samples[%d]: %w", i, err)
		}
		out[i] = s
	}
	return out, nil
}

func (rs rawSample) validate() (Sample, error) {
	if isMissing(rs.Dest) {
		return Sample{}, errors.New(`missing field "dest"`)
	}
	if isMissing(rs.LatencyMs) {
		return Sample{}, errors.New(`missing field "latency_ms"`)
	}
	// encoding/json replaces invalid UTF-8 and lone surrogate escapes with
	// U+FFFD, so both are checked in the raw JSON; a U+FFFD written as such
	// (or as \ufffd) is a valid character and is kept.
	if !utf8.Valid(rs.Dest) || hasLoneSurrogate(rs.Dest) {
		return Sample{}, errors.New(`"dest" is not valid UTF-8`)
	}
	var s Sample
	if err := json.Unmarshal(rs.Dest, &s.Dest); err != nil {
		return Sample{}, errors.New(`"dest" must be a string`)
	}
	switch {
	case s.Dest == "":
		return Sample{}, errors.New(`"dest" must not be empty`)
	case len(s.Dest) > maxDestLen:
		return Sample{}, fmt.Errorf(`"dest" is %d bytes, more than %d`, len(s.Dest), maxDestLen)
	}
	if err := json.Unmarshal(rs.LatencyMs, &s.LatencyMs); err != nil {
		return Sample{}, errors.New(`"latency_ms" must be a number`)
	}
	if math.IsNaN(s.LatencyMs) || math.IsInf(s.LatencyMs, 0) || s.LatencyMs < 0 {
		return Sample{}, fmt.Errorf(`"latency_ms" must be a finite number >= 0, got %v`, s.LatencyMs)
	}
	return s, nil
}

// hasLoneSurrogate reports whether the raw JSON string lit holds a \uXXXX
// escape of a UTF-16 surrogate that is not part of a high-low pair: such an
// escape stands for no character (it is not UTF-8 once decoded). lit is
// valid UTF-8; a non-string lit has no escapes outside strings to find.
func hasLoneSurrogate(lit []byte) bool {
	for i := 0; i < len(lit); i++ {
		if lit[i] != '\\' {
			continue
		}
		i++ // the escaped byte
		if i >= len(lit) || lit[i] != 'u' {
			continue
		}
		r, ok := hex4(lit[i+1:])
		if !ok {
			continue // malformed: json.Unmarshal refuses it
		}
		i += 4
		switch {
		case utf16.IsSurrogate(r) && r < 0xdc00: // high: a low escape must follow
			if len(lit) > i+2 && lit[i+1] == '\\' && lit[i+2] == 'u' {
				if lo, ok := hex4(lit[i+3:]); ok && lo >= 0xdc00 && lo <= 0xdfff {
					i += 6
					continue
				}
			}
			return true
		case utf16.IsSurrogate(r): // low without a high before it
			return true
		}
	}
	return false
}

// hex4 decodes the 4 hex digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// isMissing reports a field that was absent or JSON null.
func isMissing(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// requireToken wraps h so that it answers 401 unless the request carries
// "Authorization: Bearer <token>". The scheme is matched without regard to
// case (RFC 9110 section 11.1: "bearer" and "BEARER" are Bearer too); the
// token is compared in constant time. An empty token disables the check.
func requireToken(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="atnode"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		h.ServeHTTP(w, r)
	})
}
