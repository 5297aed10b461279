package node

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"
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

// refuseDrain and refuseDrainBytes bound what a refusal still reads of
// the request's body after its answer: reading what the client sends on
// lets it read the answer (a connection closed with bytes unread is reset,
// and the reset can destroy the answer before the client reads it). 2 s
// lets a client still sending a 1 MiB body finish on a loaded machine (50
// at once under the race detector did not within 250 ms); a client that
// stalls holds its connection, one of HTTPServerConfig.MaxConnections, no
// longer than that.
const (
	refuseDrain      = 2 * time.Second
	refuseDrainBytes = maxRecordBody
)

// refuse answers an error without reading the request's body first: the
// answer is written at once, the connection is closed after it, and in
// between the rest of the body is read and dropped for at most refuseDrain
// and refuseDrainBytes. A request without a body keeps its connection.
func refuse(w http.ResponseWriter, r *http.Request, status int, format string, args ...any) {
	hasBody := r.ContentLength != 0 // a declared body, or a chunked one (-1)
	if hasBody {
		w.Header().Set("Connection", "close")
	}
	writeError(w, status, format, args...)
	if !hasBody {
		return
	}
	rc := http.NewResponseController(w)
	if rc.Flush() == nil && rc.SetReadDeadline(time.Now().Add(refuseDrain)) == nil { // a recorder has no deadline: nothing to drain
		_, _ = io.CopyN(io.Discard, r.Body, refuseDrainBytes)
	}
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
			refuse(w, r, http.StatusUnauthorized, "missing or wrong bearer token") // before the body
			return
		}
		h.ServeHTTP(w, r)
	})
}

// requireJSON wraps h so that a POST answers 415 unless its Content-Type
// is application/json (parameters such as charset allowed): a web page
// can send text/plain to any address without asking, never JSON.
func requireJSON(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			ct := r.Header.Get("Content-Type")
			if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
				w.Header().Set("Accept-Post", "application/json")
				refuse(w, r, http.StatusUnsupportedMediaType, "Content-Type must be application/json, got %q", ct)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// checkLoopbackRequest refuses, for a request received on a loopback
// address, a Host that is not a loopback IP or localhost (any port) and an
// Origin that is not the request's own: a web page on this machine, even
// through a DNS name rebound to 127.0.0.1, cannot use the API. Requests
// received elsewhere, or handed to the handler without a connection, are
// not checked.
func checkLoopbackRequest(r *http.Request) error {
	la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || !isLoopbackAddr(la) {
		return nil
	}
	if r.Host != "" && !isLoopbackHost(r.Host) {
		return fmt.Errorf("request Host %q is not a loopback address or localhost, and this API is served on loopback: use 127.0.0.1, [::1] or localhost", r.Host)
	}
	if origins, ok := r.Header["Origin"]; ok {
		scheme := "http://"
		if r.TLS != nil {
			scheme = "https://"
		}
		own := scheme + r.Host
		if len(origins) != 1 || !strings.EqualFold(origins[0], own) {
			return fmt.Errorf("request Origin %q is not this server's own (%s)", strings.Join(origins, ", "), own)
		}
	}
	return nil
}

func isLoopbackAddr(a net.Addr) bool {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.IsLoopback()
	}
	ap, err := netip.ParseAddrPort(a.String())
	return err == nil && ap.Addr().IsLoopback()
}

// isLoopbackHost reports whether a Host header names a loopback IP or
// localhost, with or without a port.
func isLoopbackHost(h string) bool {
	host := h
	if hh, _, err := net.SplitHostPort(h); err == nil {
		host = hh
	} else {
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// maxQueryParams is the most query parameters a request may carry.
const maxQueryParams = 10_000

// strictQuery parses r's query: a malformed one (a bad %-escape, a
// semicolon separator, more than maxQueryParams parameters) and one with a
// parameter not in known are errors, never silently shortened or ignored.
func strictQuery(r *http.Request, known ...string) (url.Values, error) {
	raw := r.URL.RawQuery
	if raw != "" && strings.Count(raw, "&")+1 > maxQueryParams {
		return nil, fmt.Errorf("query has more than %d parameters", maxQueryParams)
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, fmt.Errorf("malformed query: %v", err)
	}
	var unknown []string
	for k := range q {
		if !slices.Contains(known, k) {
			unknown = append(unknown, fmt.Sprintf("%q", k))
		}
	}
	if len(unknown) == 0 {
		return q, nil
	}
	slices.Sort(unknown)
	what := "unknown query parameter " + unknown[0]
	if len(unknown) > 1 {
		const shown = 5
		what = "unknown query parameters " + strings.Join(unknown[:min(len(unknown), shown)], ", ")
		if len(unknown) > shown {
			what += fmt.Sprintf(" and %d more", len(unknown)-shown)
		}
	}
	takes := "none"
	if len(known) > 0 {
		takes = strings.Join(known, ", ")
	}
	return nil, fmt.Errorf("%s: %s takes %s", what, r.URL.Path, takes)
}
