package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"unicode/utf16"
	"unicode/utf8"
)

// rawSample keeps the fields' raw JSON so that a missing field, a wrong type
// and invalid UTF-8 can each be told apart and named.
type rawSample struct {
	Dest      json.RawMessage `json:"dest"`
	LatencyMs json.RawMessage `json:"latency_ms"`
	TimedOut  json.RawMessage `json:"timed_out"`
	Failed    json.RawMessage `json:"failed"`
}

type recordRequest struct {
	Samples *[]rawSample `json:"samples"`
}

// decodeRecordNaive is the naive decoder of POST /v1/record bodies that
// decodeRecord replaced, kept as the reference of its tests and the
// alternative of its benchmarks: it reads the whole body, unmarshals every
// sample's raw fields with encoding/json, then validates them. It applies
// the same rules, but encoding/json matches field names without regard to
// case and keeps the last of duplicate fields, and it holds every sample
// of the body at once (~35 MB for 1 MiB of {} objects).
func decodeRecordNaive(r io.Reader) ([]Sample, error) {
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
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		dst  *bool
	}{{"timed_out", rs.TimedOut, &s.TimedOut}, {"failed", rs.Failed, &s.Failed}} {
		if !isMissing(f.raw) && json.Unmarshal(f.raw, f.dst) != nil {
			return Sample{}, fmt.Errorf("%q must be true or false", f.name)
		}
	}
	switch {
	case s.TimedOut && s.Failed:
		return Sample{}, errors.New(`"timed_out" and "failed" cannot both be true`)
	case isMissing(rs.LatencyMs) && s.Failed: // a failed attempt needs no latency
		return s, nil
	case isMissing(rs.LatencyMs):
		return Sample{}, errors.New(`missing field "latency_ms"`)
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

// isMissing reports a field that was absent or JSON null.
func isMissing(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}
