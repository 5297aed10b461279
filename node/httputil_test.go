package node

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecodeRecord(t *testing.T) {
	long := strings.Repeat("x", 257)
	many := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"samples":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"dest":"d","latency_ms":1}`)
		}
		b.WriteString(`]}`)
		return b.String()
	}
	tests := []struct {
		name, body string
		want       []Sample
		err        string
	}{
		{name: "one", body: `{"samples":[{"dest":"db-1","latency_ms":12.5}]}`, want: []Sample{{Dest: "db-1", LatencyMs: 12.5}}},
		{name: "unknown fields ignored", body: `{"x":1,"samples":[{"dest":"a","latency_ms":0,"extra":true}]}`, want: []Sample{{Dest: "a", LatencyMs: 0}}},
		{name: "huge latency kept for clamping", body: `{"samples":[{"dest":"a","latency_ms":1e300}]}`, want: []Sample{{Dest: "a", LatencyMs: 1e300}}},
		{name: "256-byte dest", body: `{"samples":[{"dest":"` + long[:256] + `","latency_ms":1}]}`, want: []Sample{{Dest: long[:256], LatencyMs: 1}}},
		{name: "max samples", body: many(10000)},
		{name: "not json", body: `{`, err: "not a JSON object"},
		{name: "not an object", body: `[]`, err: "not a JSON object"},
		{name: "missing samples", body: `{}`, err: `missing field "samples"`},
		{name: "null samples", body: `{"samples":null}`, err: `missing field "samples"`},
		{name: "empty samples", body: `{"samples":[]}`, err: "want 1..10000 samples, got 0"},
		{name: "too many samples", body: many(10001), err: "want 1..10000 samples, got more than 10000"},
		{name: "missing dest", body: `{"samples":[{"latency_ms":1}]}`, err: `samples[0]: missing field "dest"`},
		{name: "missing latency", body: `{"samples":[{"dest":"a","latency_ms":1},{"dest":"a"}]}`, err: `samples[1]: missing field "latency_ms"`},
		{name: "null latency", body: `{"samples":[{"dest":"a","latency_ms":null}]}`, err: `samples[0]: missing field "latency_ms"`},
		{name: "empty dest", body: `{"samples":[{"dest":"","latency_ms":1}]}`, err: `samples[0]: "dest" must not be empty`},
		{name: "long dest", body: `{"samples":[{"dest":"` + long + `","latency_ms":1}]}`, err: `samples[0]: "dest" is 257 bytes, more than 256`},
		{name: "dest not string", body: `{"samples":[{"dest":7,"latency_ms":1}]}`, err: `samples[0]: "dest" must be a string`},
		{name: "dest invalid utf8", body: "{\"samples\":[{\"dest\":\"a\xff\",\"latency_ms\":1}]}", err: `samples[0]: "dest" is not valid UTF-8`},
		{name: "dest lone surrogate", body: `{"samples":[{"dest":"a\ud800","latency_ms":1}]}`, err: `samples[0]: "dest" is not valid UTF-8`},
		{name: "dest lone high surrogate at the end", body: `{"samples":[{"dest":"\uD83D","latency_ms":1}]}`, err: `samples[0]: "dest" is not valid UTF-8`},
		{name: "dest high surrogate then a letter", body: `{"samples":[{"dest":"\ud83dx","latency_ms":1}]}`, err: `samples[0]: "dest" is not valid UTF-8`},
		{name: "dest two high surrogates", body: `{"samples":[{"dest":"\ud83d\ud83d\ude00","latency_ms":1}]}`, err: `samples[0]: "dest" is not valid UTF-8`},
		{name: "dest lone low surrogate", body: `{"samples":[{"dest":"\udc00a","latency_ms":1}]}`, err: `samples[0]: "dest" is not valid UTF-8`},
		{name: "dest invalid UTF-8 in the second sample", body: "{\"samples\":[{\"dest\":\"ok\",\"latency_ms\":1},{\"dest\":\"\xed\xa0\x80\",\"latency_ms\":1}]}", err: `samples[1]: "dest" is not valid UTF-8`},
		{name: "dest literal U+FFFD", body: `{"samples":[{"dest":"a` + "\uFFFD" + `b","latency_ms":1}]}`, want: []Sample{{Dest: "a\uFFFDb", LatencyMs: 1}}},
		{name: "dest escaped U+FFFD", body: `{"samples":[{"dest":"a\ufffd","latency_ms":1}]}`, want: []Sample{{Dest: "a\uFFFD", LatencyMs: 1}}},
		{name: "dest surrogate pair", body: `{"samples":[{"dest":"\ud83d\ude00 \uD83D\uDE00","latency_ms":1}]}`, want: []Sample{{Dest: "😀 😀", LatencyMs: 1}}},
		{name: "dest escaped backslash before u", body: `{"samples":[{"dest":"a\\ud800","latency_ms":1}]}`, want: []Sample{{Dest: `a\ud800`, LatencyMs: 1}}},
		{name: "negative latency", body: `{"samples":[{"dest":"a","latency_ms":-0.5}]}`, err: `samples[0]: "latency_ms" must be a finite number >= 0, got -0.5`},
		{name: "latency string", body: `{"samples":[{"dest":"a","latency_ms":"5"}]}`, err: `samples[0]: "latency_ms" must be a number`},
		{name: "latency overflow", body: `{"samples":[{"dest":"a","latency_ms":1e400}]}`, err: `samples[0]: "latency_ms" 1e400 is out of range`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeRecord(strings.NewReader(tc.body))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.Nil(t, got)
				return
			}
			require.NoError(t, err)
			if tc.want != nil {
				require.Equal(t, tc.want, got)
			}
		})
	}
}

func TestDecodeRecordBodyLimit(t *testing.T) {
	pad := strings.Repeat(" ", maxRecordBody)
	_, err := decodeRecord(strings.NewReader(`{"samples":[{"dest":"a","latency_ms":1}]}` + pad))
	require.ErrorIs(t, err, errBodyTooLarge)

	// Through http.MaxBytesReader, as a handler would read it.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/record", strings.NewReader(pad+"x"))
	_, err = decodeRecord(http.MaxBytesReader(rec, req.Body, maxRecordBody))
	require.ErrorIs(t, err, errBodyTooLarge)
}

func TestRequireToken(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	for _, tc := range []struct {
		name, token, header string
		want                int
	}{
		{"disabled", "", "", 200},
		{"right", "s3cret", "Bearer s3cret", 200},
		{"missing", "s3cret", "", 401},
		{"wrong", "s3cret", "Bearer nope", 401},
		{"wrong scheme", "s3cret", "Basic s3cret", 401},
		{"prefix only", "s3cret", "Bearer s3cre", 401},
		{"scheme lower case", "s3cret", "bearer s3cret", 200},
		{"scheme upper case", "s3cret", "BEARER s3cret", 200},
		{"scheme mixed case", "s3cret", "bEaReR s3cret", 200},
		{"token case matters", "s3cret", "Bearer S3CRET", 401},
		{"no space", "s3cret", "Bearers3cret", 401},
		{"two spaces", "s3cret", "Bearer  s3cret", 401},
		{"token only", "s3cret", "s3cret", 401},
		{"scheme only", "s3cret", "Bearer", 401},
		{"other scheme with the token", "s3cret", "Beare s3cret", 401},
		{"token with a trailing space", "s3cret", "Bearer s3cret ", 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/v1/record", nil)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			requireToken(tc.token, ok).ServeHTTP(rec, req)
			require.Equal(t, tc.want, rec.Code)
			if tc.want == 401 {
				require.JSONEq(t, `{"error":"missing or wrong bearer token"}`, rec.Body.String())
			}
		})
	}
}
