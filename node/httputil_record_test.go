package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// recordSeeds are bodies that reach every branch of the stream decoder:
// whitespace everywhere, escapes, unknown values of every kind, nesting,
// duplicates, truncations and trailing data.
var recordSeeds = []string{
	`{"samples":[{"dest":"db-1","latency_ms":12.5}]}`,
	" \t\r\n{ \"samples\" : [ { \"dest\" : \"a\" , \"latency_ms\" : 0 } ] } \n",
	`{"samples":[{"dest":"a","latency_ms":1},{"dest":"b","latency_ms":2},{"dest":"a","latency_ms":3}]}`,
	`{"x":{"y":[1,-2.5e-3,true,false,null,"s\"\\\/\b\f\n\r\t\u00e9",{},[]]},"samples":[{"dest":"a","latency_ms":1,"z":[[{"q":"\ud83d\ude00"}]]}],"w":"\ud800"}`,
	`{"samples":[{"latency_ms":1,"dest":"a","timed_out":true,"failed":false}]}`,
	`{"samples":[{"dest":"a","latency_ms":1,"timed_out":null,"failed":null}]}`,
	`{"samples":[{"dest":"a","latency_ms":1,"timed_out":1}]}`,
	`{"samples":[{"dest":"a","latency_ms":1,"failed":"yes"}]}`,
	`{"samples":[{"dest":"a","latency_ms":1,"timed_out":tru}]}`,
	`{"samples":[{"dest":"a","failed":true}]}`, `{"samples":[{"dest":"a","failed":true,"latency_ms":null}]}`,
	`{"samples":[{"dest":"a","failed":true,"latency_ms":-1}]}`, `{"samples":[{"dest":"a","failed":false}]}`,
	`{"samples":[{"dest":"a","latency_ms":5,"timed_out":true,"failed":true}]}`, `{"samples":[{"dest":"a","timed_out":true}]}`,
	`{"s\u0061mples":[{"d\u0065st":"\u0061","latency_ms":1}]}`,
	`{"samples":[{"dest":"a","latency_ms":1}],"samples":[]}`,
	`{"samples":[{"dest":"a","dest":"b","latency_ms":1}]}`,
	`{"Samples":[{"dest":"a","latency_ms":1}]}`,
	`{"samples":[{"DEST":"a","latency_ms":1}]}`,
	`{"samples":null}`, `{"samples":{}}`, `{"samples":1}`, `{"samples":[null]}`, `{"samples":[1]}`, `{"samples":[[]]}`,
	`{"samples":[{}]}`, `{"samples":[{},]}`, `{"samples":[{"dest":"a","latency_ms":1},]}`, `{"samples":[{"dest":"a","latency_ms":1,}]}`,
	`{"samples":[{"dest":"a" "latency_ms":1}]}`, `{"samples":[{"dest":"a","latency_ms":1}] "x":1}`,
	`{"samples":[{"dest":"a","latency_ms":1}]}x`, `{"samples":[{"dest":"a","latency_ms":1}]}{}`, `{"samples":[{"dest":"a","latency_ms":1}]} `,
	`{"samples":[{"dest":"a","latency_ms":1}]`, `{"samples":[{"dest":"a","latency_ms":`, `{"samples":[{"dest":"a`, `{"samp`, `{`, ``, ` `, `[]`, `null`, `"x"`, `{}`,
	`{"samples":[{"dest":"a","latency_ms":01}]}`, `{"samples":[{"dest":"a","latency_ms":1.}]}`, `{"samples":[{"dest":"a","latency_ms":.5}]}`,
	`{"samples":[{"dest":"a","latency_ms":-}]}`, `{"samples":[{"dest":"a","latency_ms":1e}]}`, `{"samples":[{"dest":"a","latency_ms":1e+}]}`,
	`{"samples":[{"dest":"a","latency_ms":1E+2}]}`, `{"samples":[{"dest":"a","latency_ms":-0}]}`, `{"samples":[{"dest":"a","latency_ms":-0.0e-0}]}`,
	`{"samples":[{"dest":"a","latency_ms":+1}]}`, `{"samples":[{"dest":"a","latency_ms":1e400}]}`, `{"samples":[{"dest":"a","latency_ms":1e-400}]}`,
	`{"samples":[{"dest":"a","latency_ms":-1}]}`, `{"samples":[{"dest":"a","latency_ms":NaN}]}`, `{"samples":[{"dest":"a","latency_ms":"1"}]}`,
	`{"samples":[{"dest":"a","latency_ms":true}]}`, `{"samples":[{"dest":"a","latency_ms":{}}]}`, `{"samples":[{"dest":"a","latency_ms":null}]}`,
	`{"samples":[{"dest":null,"latency_ms":1}]}`, `{"samples":[{"dest":7,"latency_ms":1}]}`, `{"samples":[{"dest":"","latency_ms":1}]}`,
	`{"samples":[{"dest":"\x","latency_ms":1}]}`, `{"samples":[{"dest":"\u12","latency_ms":1}]}`, `{"samples":[{"dest":"\u12G4","latency_ms":1}]}`,
	"{\"samples\":[{\"dest\":\"a\tb\",\"latency_ms\":1}]}", "{\"samples\":[{\"dest\":\"a\xffb\",\"latency_ms\":1}]}",
	"{\"samples\":[{\"dest\":\"\xed\xa0\x80\",\"latency_ms\":1}]}", "{\"samples\":[{\"dest\":\"\xe2\x82\",\"latency_ms\":1}]}",
	"{\"samples\":[{\"dest\":\"é€😀\",\"latency_ms\":1}]}", "{\"samples\":[{\"dest\":\"ok\",\"latency_ms\":1,\"x\":\"\xff\"}]}",
	`{"samples":[{"dest":"\ud83d\ude00","latency_ms":1}]}`, `{"samples":[{"dest":"\ud83d","latency_ms":1}]}`, `{"samples":[{"dest":"\ude00","latency_ms":1}]}`,
	`{"samples":[{"dest":"\ud83d\u0041","latency_ms":1}]}`, `{"samples":[{"dest":"\ud83dx","latency_ms":1}]}`, `{"samples":[{"dest":"\\ud83d","latency_ms":1}]}`,
	`{"samples":[{"dest":"\u0000","latency_ms":1}]}`, `{"samples":[{"dest":"\ufffd","latency_ms":1}]}`,
	`{"samples":[{"dest":"` + strings.Repeat("x", 256) + `","latency_ms":1}]}`,
	`{"samples":[{"dest":"` + strings.Repeat("x", 257) + `","latency_ms":1}]}`,
	`{"samples":[{"dest":"` + strings.Repeat("é", 128) + `","latency_ms":1}]}`,
	`{"samples":[{"dest":"` + strings.Repeat("é", 128) + `x","latency_ms":1}]}`,
	`{"samples":[{"dest":"` + strings.Repeat(`\u00e9`, 129) + `","latency_ms":1}]}`,
	`{"samples":[{"dest":"` + strings.Repeat("x", 300) + "\xff" + `","latency_ms":1}]}`,
	`{"samples":[{"dest":"a","latency_ms":1,"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}]}`,
	`{"samples":[{"dest":"a","latency_ms":1,"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 99) + `}]}`,
	`{"samples":[{"dest":"a","latency_ms":1,"x":[1 2]}]}`, `{"samples":[{"dest":"a","latency_ms":1,"x":{"a" 1}}]}`,
	`{"samples":[{"dest":"a","latency_ms":1,"x":{1:2}}]}`, `{"samples":[{"dest":"a","latency_ms":1,"x":[,]}]}`,
	`{"samples":[{"dest":"a","latency_ms":1,"x":nul}]}`, `{"samples":[{"dest":"a","latency_ms":1,"x":falsey}]}`,
	`{"samples":[{"dest":"a","latency_ms":1,"x":"` + strings.Repeat("y", 20000) + `"}]}`,
	`{"samples":[{"dest":"a","latency_ms":1` + strings.Repeat(" ", 20000) + `}]}`,
	`{"samples":[{"dest":"a","latency_ms":0.` + strings.Repeat("1", 900) + `}]}`,
}

// naiveQuirk reports whether decodeRecordNaive decides body by a leniency
// of encoding/json the stream decoder does not share on purpose: an object
// key equal to a field name only without regard to case, or a field name
// given twice in one object. Bodies that are not JSON have no quirk.
func naiveQuirk(body []byte) bool {
	names := []string{"samples", "dest", "latency_ms", "timed_out", "failed"}
	dec := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		obj     bool
		wantKey bool
		keys    map[string]bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.obj && top.wantKey {
			if k, ok := tok.(string); ok {
				for _, n := range names {
					if strings.EqualFold(k, n) && (k != n || top.keys[k]) {
						return true
					}
				}
				top.keys[k] = true
				top.wantKey = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{obj: true, wantKey: true, keys: map[string]bool{}})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 && stack[len(stack)-1].obj {
			stack[len(stack)-1].wantKey = true // a member value ended
		}
	}
}

// checkAgainstNaive requires decodeRecord to accept exactly what the naive
// decoder accepts, with the same samples, unless the body has a naiveQuirk,
// and to decide the same, error text included, when the body arrives one
// byte per read.
func checkAgainstNaive(t *testing.T, body []byte) {
	t.Helper()
	got, err := decodeRecord(bytes.NewReader(body))
	if err != nil {
		require.Nil(t, got)
	}
	one, oneErr := decodeRecord(iotest.OneByteReader(bytes.NewReader(body)))
	require.Equal(t, got, one, "one byte per read: %q", body)
	require.Equal(t, fmt.Sprint(err), fmt.Sprint(oneErr), "one byte per read: %q", body)
	if naiveQuirk(body) {
		return
	}
	want, wantErr := decodeRecordNaive(bytes.NewReader(body))
	require.Equal(t, wantErr == nil, err == nil, "%q: stream %v, naive %v", body, err, wantErr)
	require.Equal(t, want, got, "%q", body)
}

func TestDecodeRecordMatchesNaive(t *testing.T) {
	for i, b := range recordSeeds {
		t.Run(fmt.Sprint(i), func(t *testing.T) { checkAgainstNaive(t, []byte(b)) })
	}
	// Random mutations of the seeds: truncated, a byte changed, a byte
	// inserted, two seeds spliced.
	rng := rand.New(rand.NewPCG(20, 25))
	for range 1500 {
		b := []byte(recordSeeds[rng.IntN(len(recordSeeds))])
		if len(b) == 0 {
			continue
		}
		const alphabet = "{}[]:,\"\\ u0123456789abcdefnrt.-+eE\xff\xc3"
		switch i := rng.IntN(len(b)); rng.IntN(4) {
		case 0:
			b = b[:i]
		case 1:
			b[i] = alphabet[rng.IntN(len(alphabet))]
		case 2:
			b = append(b[:i:i], append([]byte{alphabet[rng.IntN(len(alphabet))]}, b[i:]...)...)
		case 3:
			o := recordSeeds[rng.IntN(len(recordSeeds))]
			b = append(b[:i:i], o[rng.IntN(len(o)+1):]...)
		}
		checkAgainstNaive(t, b)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	for _, b := range recordSeeds {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkAgainstNaive(t, body) })
}

func TestDecodeRecordChoices(t *testing.T) {
	// What the stream decoder decides unlike encoding/json, on purpose.
	for _, tc := range []struct{ body, err string }{
		{`{"samples":[{"dest":"a","latency_ms":1}],"samples":[{"dest":"a","latency_ms":1}]}`, `duplicate field "samples"`},
		{`{"samples":[{"dest":"a","dest":"b","latency_ms":1}]}`, `samples[0]: duplicate field "dest"`},
		{`{"samples":[{"dest":"a","latency_ms":null,"latency_ms":1}]}`, `samples[0]: duplicate field "latency_ms"`},
		{`{"Samples":[{"dest":"a","latency_ms":1}]}`, `missing field "samples"`},
		{`{"samples":[{"Dest":"a","latency_ms":1}]}`, `samples[0]: missing field "dest"`},
		{`{"samples":[{"dest":"a","latency_ms":0.` + strings.Repeat("1", 1000) + `}]}`, `"latency_ms" must be a number of at most 1000 characters`},
		{`{"samples":[{"dest":"a","latency_ms":1,"timed_out":1}]}`, `samples[0]: "timed_out" must be true or false`},
		{`{"samples":[{"dest":"a","latency_ms":1,"failed":"yes"}]}`, `samples[0]: "failed" must be true or false`},
		{`{"samples":[{"dest":"a","latency_ms":1,"timed_out":true,"failed":true}]}`, `samples[0]: "timed_out" and "failed" cannot both be true`},
		{`{"samples":[{"dest":"a","timed_out":true}]}`, `samples[0]: missing field "latency_ms"`},
		{`{"samples":[{"dest":"a","failed":true,"latency_ms":-1}]}`, `samples[0]: "latency_ms" must be a finite number >= 0, got -1`},
		{`{"samples":[1]}`, `samples[0]: must be an object`},
		{`{"samples":{}}`, `"samples" must be an array`},
		{`{"samples":[{"dest":"a","latency_ms":1}]}x`, `invalid character 'x', want the end of the input after the top-level value at byte 41`},
		{`{"samples":[{"dest":"a","latency_ms":01}]}`, `invalid character '1', want ',' or '}' at byte 38`},
	} {
		_, err := decodeRecord(strings.NewReader(tc.body))
		require.ErrorContains(t, err, tc.err, tc.body)
	}
	got, err := decodeRecord(strings.NewReader(`{"samples":[{"dest":"a","latency_ms":1,"timed_out":true},{"dest":"a","latency_ms":2,"failed":true,"timed_out":false},{"dest":"a","failed":true}]}`))
	require.NoError(t, err)
	require.Equal(t, []Sample{{Dest: "a", LatencyMs: 1, TimedOut: true}, {Dest: "a", LatencyMs: 2, Failed: true}, {Dest: "a", Failed: true}}, got)
	require.Equal(t, []timeout.Outcome{timeout.TimedOut, timeout.Failed, timeout.Failed}, []timeout.Outcome{got[0].Outcome(), got[1].Outcome(), got[2].Outcome()})
	require.Equal(t, timeout.Completed, Sample{Dest: "a"}.Outcome())
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestDecodeRecordStopsEarly checks that decoding stops reading at the
// first rule broken: the body of 349 520 empty objects after its first,
// a body of 20 000 samples after sample 10 001.
func TestDecodeRecordStopsEarly(t *testing.T) {
	cr := &countingReader{r: bytes.NewReader(hostileBody())}
	_, err := decodeRecord(cr)
	require.EqualError(t, err, `samples[0]: missing field "dest"`)
	require.LessOrEqual(t, cr.n, 8<<10, "one buffer read of 1 MiB")

	body := testutil.RecordBody(20_000)
	cut := bytes.Index(body, []byte(`{"dest"`)) // sample 0
	for range 10_000 {
		cut += bytes.Index(body[cut+1:], []byte(`{"dest"`)) + 1
	}
	cr = &countingReader{r: bytes.NewReader(body)}
	_, err = decodeRecord(cr)
	require.EqualError(t, err, "samples: want 1..10000 samples, got more than 10000")
	require.Less(t, cr.n, cut+8<<10, "read up to sample 10 001 (at byte %d) and one buffer more", cut)

}

// TestDecodeRecordLongStrings checks strings longer than the buffer: an
// unknown field's value, and a dest counted but not kept.
func TestDecodeRecordLongStrings(t *testing.T) {
	long := strings.Repeat("é", 50_000)
	got, err := decodeRecord(strings.NewReader(`{"samples":[{"x":"` + long + `","dest":"a","latency_ms":1}]}`))
	require.NoError(t, err)
	require.Equal(t, []Sample{{Dest: "a", LatencyMs: 1}}, got)
	_, err = decodeRecord(strings.NewReader(`{"samples":[{"dest":"` + long + `","latency_ms":1}]}`))
	require.EqualError(t, err, `samples[0]: "dest" is 100000 bytes, more than 256`)
}
