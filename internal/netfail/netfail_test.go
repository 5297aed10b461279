package netfail

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// get sends one GET through a transport of its own that keeps no
// connection, so the test leaves no goroutine behind.
func get(t *testing.T, u string) error {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// rawServer accepts connections on 127.0.0.1 and hands each to handle.
func rawServer(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			handle(c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// readRequest reads until the end of a GET's header block.
func readRequest(c net.Conn) {
	buf := make([]byte, 4096)
	var got []byte
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil || len(got) >= 4 && string(got[len(got)-4:]) == "\r\n\r\n" {
			return
		}
	}
}

func TestRealFailures(t *testing.T) {
	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		err = get(t, "http://"+addr+"/")
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
		require.True(t, Is(err), "%v", err)
	})
	for _, tc := range []struct {
		name   string
		handle func(c net.Conn) // after the request
	}{
		{"closed before the reply", func(c net.Conn) { c.Close() }},
		{"reset", func(c net.Conn) {
			_ = c.(*net.TCPConn).SetLinger(0) // close sends RST
			c.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := rawServer(t, func(c net.Conn) { readRequest(c); tc.handle(c) })
			err := get(t, "http://"+addr+"/")
			require.Error(t, err)
			require.True(t, Is(err), "%v", err)
		})
	}
	t.Run("reply cut short", func(t *testing.T) {
		addr := rawServer(t, func(c net.Conn) {
			readRequest(c)
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
			c.Close()
		})
		tr := &http.Transport{DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		require.ErrorIs(t, err, io.ErrUnexpectedEOF)
		require.True(t, Is(err))
	})
	t.Run("TLS to a plain server", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		defer srv.Close()
		err := get(t, "https://"+srv.Listener.Addr().String()+"/")
		_, ok := errors.AsType[tls.RecordHeaderError](err)
		require.True(t, ok, "%v", err)
		require.True(t, Is(err))
	})
	t.Run("certificate not trusted", func(t *testing.T) {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake error it logs is the point
		srv.StartTLS()
		defer srv.Close()
		err := get(t, srv.URL)
		_, ok := errors.AsType[*tls.CertificateVerificationError](err)
		require.True(t, ok, "%v", err)
		require.True(t, Is(err))
	})
}

func TestIs(t *testing.T) {
	dns := &net.DNSError{Err: "no such host", Name: "db-1.invalid", IsNotFound: true}
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain error", errors.New("boom"), false},
		{"canceled", context.Canceled, false},
		{"deadline", context.DeadlineExceeded, false},
		{"bad scheme", &url.Error{Op: "Get", URL: "ftp://x", Err: errors.New(`unsupported protocol scheme "ftp"`)}, false},
		{"read timeout", &net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}, false},
		{"DNS", dns, true},
		{"DNS while dialling", &net.OpError{Op: "dial", Net: "tcp", Err: dns}, true},
		{"dial timeout", &net.OpError{Op: "dial", Net: "tcp", Err: timeoutErr{}}, true},
		{"unreachable", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.EHOSTUNREACH}, true},
		{"reset on read", fmt.Errorf("wrapped: %w", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), true},
		{"broken pipe", &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}, true},
		{"remote TLS alert", &net.OpError{Op: "remote error", Err: errors.New("tls: bad certificate")}, true},
		{"QUIC TLS alert", tls.AlertError(42), true},
		{"EOF", io.EOF, true},
		{"unexpected EOF", fmt.Errorf("read body: %w", io.ErrUnexpectedEOF), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, Is(tt.err))
			eof := errors.Is(tt.err, io.EOF) || errors.Is(tt.err, io.ErrUnexpectedEOF)
			require.Equal(t, tt.want && !eof, Conn(tt.err), "Conn: Is without the bare end-of-stream errors")
		})
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
