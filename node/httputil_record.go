package node

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"

	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// Limits of POST /v1/record: the rules of the package doc's HTTP section.
const (
	maxRecordBody    = 1 << 20 // bytes
	maxRecordSamples = 10_000
	maxDestLen       = 256 // bytes
	// maxNumberLen bounds the text of a latency_ms number (a float64
	// needs at most 24 characters; longer numbers are refused, not read).
	maxNumberLen = 1000
)

// Sample is one latency observation of POST /v1/record.
type Sample struct {
	// Dest is the destination: non-empty UTF-8 of at most 256 bytes.
	Dest string
	// LatencyMs is the latency in milliseconds: finite and >= 0.
	LatencyMs float64
	// TimedOut is the optional "timed_out": the attempt was ended by the
	// caller's timeout at LatencyMs, a censored sample (the latency was at
	// least that).
	TimedOut bool
	// Failed is the optional "failed": the transport failed fast (refused,
	// reset). It is not a latency sample: latency_ms may then be omitted,
	// and is ignored. A sample cannot be both timed out and failed.
	Failed bool
}

// Outcome is the attempt outcome the sample reports: timeout.Failed,
// timeout.TimedOut, else timeout.Completed.
func (s Sample) Outcome() timeout.Outcome {
	switch {
	case s.Failed:
		return timeout.Failed
	case s.TimedOut:
		return timeout.TimedOut
	}
	return timeout.Completed
}

// errBodyTooLarge marks a body over maxRecordBody; the handler answers 413.
var errBodyTooLarge = errors.New("body exceeds 1 MiB")

// errNotRecordShape prefixes the errors of a body that is not JSON or not
// an object.
const errNotRecordShape = `body is not a JSON object of the form {"samples":[...]}`

// The fields of a sample. A new optional field is a constant here, a case
// in sampleField and one in recordDecoder.sample.
const (
	fieldUnknown = iota
	fieldDest
	fieldLatency
	fieldTimedOut
	fieldFailed
)

// maxKeyLen is the longest object key decoded; longer keys are unknown.
const maxKeyLen = 16

func sampleField(key []byte) int {
	switch string(key) {
	case "dest":
		return fieldDest
	case "latency_ms":
		return fieldLatency
	case "timed_out":
		return fieldTimedOut
	case "failed":
		return fieldFailed
	}
	return fieldUnknown
}

// fieldNames are the JSON names of the fields, for errors.
var fieldNames = [...]string{fieldDest: "dest", fieldLatency: "latency_ms", fieldTimedOut: "timed_out", fieldFailed: "failed"}

// scanners are the pooled stream scanners of POST /v1/record: one per
// request in flight, 8 KiB each.
var scanners = sync.Pool{New: func() any { return newJSONScanner(8 << 10) }}

// decodeRecord reads and validates a POST /v1/record body as a stream: it
// stops reading at the first rule broken (a sample 10 001 included) and
// returns that problem, naming the sample's index; otherwise it returns
// every sample. Nothing is returned (so nothing is recorded) when any
// sample is invalid. Field names are matched exactly; a known field given
// twice is an error; unknown fields are skipped; null is a missing field.
// Memory is bounded by the samples kept (at most 10 000) and a fixed
// buffer, whatever the body.
func decodeRecord(r io.Reader) ([]Sample, error) {
	s := scanners.Get().(*jsonScanner)
	s.reset(r, maxRecordBody)
	d := recordDecoder{s: s}
	out, err := d.decode()
	s.reset(nil, 0)
	scanners.Put(s)
	if err == nil {
		return out, nil
	}
	var se *jsonSyntaxError
	var re *jsonReadError
	switch {
	case errors.As(err, &re):
		var mbe *http.MaxBytesError
		if errors.As(re.err, &mbe) || re.err == errJSONTooLarge {
			return nil, errBodyTooLarge
		}
		return nil, fmt.Errorf("reading body: %w", re.err)
	case errors.As(err, &se):
		return nil, fmt.Errorf("%s: %w", errNotRecordShape, err)
	}
	return nil, err
}

// recordDecoder is the state of one body's decoding.
type recordDecoder struct {
	s      *jsonScanner
	out    []Sample
	last   string            // the previous sample's dest, shared
	intern map[string]string // the dests seen, once there are two
}

func (d *recordDecoder) decode() ([]Sample, error) {
	s := d.s
	c, err := s.next()
	if err != nil {
		return nil, err
	}
	if c != '{' {
		return nil, s.unexpected(c, "'{'")
	}
	seen := false
	if c, err = s.next(); err != nil {
		return nil, err
	}
	for c != '}' {
		key, err := s.memberKey(c)
		if err != nil {
			return nil, err
		}
		isSamples := string(key) == "samples"
		if err := s.expect(':'); err != nil {
			return nil, err
		}
		if c, err = s.next(); err != nil {
			return nil, err
		}
		switch {
		case isSamples && seen:
			return nil, errors.New(`duplicate field "samples"`)
		case isSamples:
			seen = true
			if err := d.samples(c); err != nil {
				return nil, err
			}
		default:
			if err := s.skipValue(c, 1); err != nil {
				return nil, err
			}
		}
		if c, err = s.afterMember(); err != nil {
			return nil, err
		}
	}
	if err := s.atEnd(); err != nil {
		return nil, err
	}
	if !seen {
		return nil, errors.New(`missing field "samples"`)
	}
	return d.out, nil
}

// samples reads the samples array, whose first byte c was consumed.
func (d *recordDecoder) samples(c byte) error {
	s := d.s
	switch c {
	case 'n':
		if err := s.literal("ull"); err != nil {
			return err
		}
		return errors.New(`missing field "samples"`)
	case '[':
	default:
		return errors.New(`"samples" must be an array`)
	}
	c, err := s.next()
	if err != nil {
		return err
	}
	if c == ']' {
		return fmt.Errorf("samples: want 1..%d samples, got 0", maxRecordSamples)
	}
	d.out = make([]Sample, 0, 16)
	for i := 0; ; i++ {
		if i == maxRecordSamples {
			return fmt.Errorf("samples: want 1..%d samples, got more than %d", maxRecordSamples, maxRecordSamples)
		}
		if c != '{' {
			return fmt.Errorf("samples[%d]: must be an object", i)
		}
		smp, err := d.sample()
		if err != nil {
			var se *jsonSyntaxError
			var re *jsonReadError
			if errors.As(err, &se) || errors.As(err, &re) {
				return err
			}
			return fmt.Errorf("samples[%d]: %w", i, err)
		}
		d.out = append(d.out, smp)
		if c, err = s.next(); err != nil {
			return err
		}
		switch c {
		case ',':
			if c, err = s.next(); err != nil {
				return err
			}
			if c == ']' {
				return s.unexpected(c, "a value after ','")
			}
		case ']':
			return nil
		default:
			return s.unexpected(c, "',' or ']'")
		}
	}
}

// sample reads one sample object, whose '{' was consumed.
func (d *recordDecoder) sample() (Sample, error) {
	s := d.s
	var smp Sample
	var seen [len(fieldNames)]bool
	var have [len(fieldNames)]bool // seen and not null
	c, err := s.next()
	if err != nil {
		return smp, err
	}
	for c != '}' {
		key, err := s.memberKey(c)
		if err != nil {
			return smp, err
		}
		f := sampleField(key)
		if err := s.expect(':'); err != nil {
			return smp, err
		}
		if c, err = s.next(); err != nil {
			return smp, err
		}
		if f != fieldUnknown {
			if seen[f] {
				return smp, fmt.Errorf("duplicate field %q", fieldNames[f])
			}
			seen[f] = true
			if c == 'n' {
				if err := s.literal("ull"); err != nil {
					return smp, err
				}
			} else {
				have[f] = true
			}
		}
		switch {
		case f == fieldUnknown:
			err = s.skipValue(c, 3)
		case !have[f]: // null: as if absent
		case f == fieldDest:
			smp.Dest, err = d.dest(c)
		case f == fieldLatency:
			smp.LatencyMs, err = d.latency(c)
		case f == fieldTimedOut:
			smp.TimedOut, err = d.boolean(c, f)
		case f == fieldFailed:
			smp.Failed, err = d.boolean(c, f)
		}
		if err != nil {
			return smp, err
		}
		if c, err = s.afterMember(); err != nil {
			return smp, err
		}
	}
	switch {
	case !have[fieldDest]:
		return smp, errors.New(`missing field "dest"`)
	case smp.Failed && smp.TimedOut:
		return smp, errors.New(`"timed_out" and "failed" cannot both be true`)
	case !have[fieldLatency] && !smp.Failed:
		return smp, errors.New(`missing field "latency_ms"`)
	}
	return smp, nil
}

// dest reads a dest value whose first byte c was consumed; consecutive
// and repeated names share one string.
func (d *recordDecoder) dest(c byte) (string, error) {
	if c != '"' {
		return "", errors.New(`"dest" must be a string`)
	}
	b, info, err := d.s.readString(maxDestLen)
	switch {
	case err != nil:
		return "", err
	case info.bad:
		return "", errors.New(`"dest" is not valid UTF-8`)
	case info.n == 0:
		return "", errors.New(`"dest" must not be empty`)
	case info.n > maxDestLen:
		return "", fmt.Errorf(`"dest" is %d bytes, more than %d`, info.n, maxDestLen)
	}
	switch {
	case string(b) == d.last:
	case d.intern != nil:
		v, ok := d.intern[string(b)]
		if !ok {
			v = string(b)
			d.intern[v] = v
		}
		d.last = v
	case d.last == "":
		d.last = string(b)
	default:
		v := string(b)
		d.intern = map[string]string{d.last: d.last, v: v}
		d.last = v
	}
	return d.last, nil
}

// latency reads a latency_ms value whose first byte c was consumed.
func (d *recordDecoder) latency(c byte) (float64, error) {
	if c != '-' && (c < '0' || c > '9') {
		return 0, errors.New(`"latency_ms" must be a number`)
	}
	text, long, err := d.s.number(c, true, maxNumberLen)
	switch {
	case err != nil:
		return 0, err
	case long:
		return 0, fmt.Errorf(`"latency_ms" must be a number of at most %d characters`, maxNumberLen)
	}
	v, err := strconv.ParseFloat(string(text), 64)
	switch {
	case err != nil: // out of range, as encoding/json refuses it
		return 0, fmt.Errorf(`"latency_ms" %s is out of range`, text)
	case math.IsNaN(v) || math.IsInf(v, 0) || v < 0:
		return 0, fmt.Errorf(`"latency_ms" must be a finite number >= 0, got %v`, v)
	}
	return v, nil
}

// boolean reads the value of field f, true or false, whose first byte c
// was consumed.
func (d *recordDecoder) boolean(c byte, f int) (bool, error) {
	switch c {
	case 't':
		return true, d.s.literal("rue")
	case 'f':
		return false, d.s.literal("alse")
	}
	return false, fmt.Errorf("%q must be true or false", fieldNames[f])
}
