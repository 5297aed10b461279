// Package netfail tells a fast transport failure from other errors, for the
// transport adapters (timeouthttp, timeoutfailsafe): an attempt that failed
// this way is observed as timeout.Failed (no latency sample, but a count
// toward the consecutive-failure detector), never as a completion.
package netfail

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"syscall"
)

// Is reports whether err says the transport failed before the destination
// could answer, or lost the connection while it did:
//
//   - no connection: any error of dialling (*net.OpError with Op "dial":
//     connection refused, host or network unreachable, the dialler's own
//     timeout), a name that does not resolve (*net.DNSError);
//   - a broken connection: reset, aborted, a broken pipe (ECONNRESET,
//     ECONNABORTED, EPIPE), or closed by the peer before the whole reply
//     arrived (io.EOF, io.ErrUnexpectedEOF);
//   - a failed TLS handshake: a peer that does not speak TLS
//     (tls.RecordHeaderError), a certificate that does not verify
//     (*tls.CertificateVerificationError), an alert from the peer.
//
// The caller rules out its own timeout and cancellation first: a dial
// cancelled by a context is also a *net.OpError with Op "dial".
func Is(err error) bool {
	return Conn(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// Conn is Is without the bare end-of-stream errors (io.EOF,
// io.ErrUnexpectedEOF): for errors of code that may return io.EOF as its
// own result (node.Do's fn), where only the network's own errors say the
// transport failed.
func Conn(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return true
	}
	if op, ok := errors.AsType[*net.OpError](err); ok && (op.Op == "dial" || op.Op == "remote error") {
		return true
	}
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return true
	}
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return true
	}
	if _, ok := errors.AsType[tls.AlertError](err); ok {
		return true
	}
	return false
}
