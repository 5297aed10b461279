package cluster

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"strings"
	"sync/atomic"
)

// memberlistLog returns a *log.Logger for memberlist whose lines go to l at
// the level of their "[DEBUG]", "[INFO]", "[WARN]" or "[ERR]" prefix
// (unprefixed lines at info), without the prefix and without memberlist's
// "memberlist: " tag; records carry component=memberlist.
//
// Once leaving is set, memberlist's complaints about its own sockets being
// closed under it ("use of closed network connection") are expected
// shutdown noise and go to debug, and so are its failure detector's
// verdicts on others and the sends that fed them (a probe cut short by
// this node's own shutdown, "Suspect a-… has failed, no acks received"
// logged after "cluster: closed", says nothing of a).
func memberlistLog(l *slog.Logger, leaving *atomic.Bool) *log.Logger {
	return log.New(&logWriter{l: l.With("component", "memberlist"), leaving: leaving}, "", 0)
}

type logWriter struct {
	l       *slog.Logger
	leaving *atomic.Bool
}

var levelPrefixes = []struct {
	prefix string
	level  slog.Level
}{
	{"[DEBUG]", slog.LevelDebug},
	{"[TRACE]", slog.LevelDebug},
	{"[INFO]", slog.LevelInfo},
	{"[WARN]", slog.LevelWarn},
	{"[ERR]", slog.LevelError},
	{"[ERROR]", slog.LevelError},
}

// parseLogLine splits one memberlist log line into its level and message.
func parseLogLine(p []byte) (slog.Level, string) {
	line := bytes.TrimSpace(p)
	level := slog.LevelInfo
	for _, lp := range levelPrefixes {
		if rest, ok := bytes.CutPrefix(line, []byte(lp.prefix)); ok {
			level, line = lp.level, bytes.TrimSpace(rest)
			break
		}
	}
	line, _ = bytes.CutPrefix(line, []byte("memberlist: "))
	return level, string(line)
}

// Write logs one line; log.Logger calls it once per line.
func (w *logWriter) Write(p []byte) (int, error) {
	level, msg := parseLogLine(p)
	if level > slog.LevelDebug && w.leaving != nil && w.leaving.Load() && shutdownNoise(msg) {
		level = slog.LevelDebug
	}
	if w.l.Enabled(context.Background(), level) {
		w.l.Log(context.Background(), level, msg)
	}
	return len(p), nil
}

// shutdownNoise reports whether memberlist's line msg is expected while
// this node leaves: its sockets closed under it, or a failure detector's
// verdict (or a probe's or gossip's send) that the shutdown cut short.
func shutdownNoise(msg string) bool {
	for _, s := range [...]string{
		"use of closed network connection",
		"has failed, no acks received",
		"as failed, suspect timeout reached",
		"Failed to send",
		"Failed fallback TCP ping",
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// errText is err's text for one log record: the errors a hashicorp
// multierror (what memberlist's Join returns) or errors.Join holds, joined
// by "; ", on one line. memberlist's own text ("1 error occurred:\n\t* ...")
// spreads one failure (say, a peer with another key) over several lines.
func errText(err error) string {
	var parts []error
	switch e := err.(type) {
	case interface{ WrappedErrors() []error }:
		parts = e.WrappedErrors()
	case interface{ Unwrap() []error }:
		parts = e.Unwrap()
	}
	if len(parts) == 0 {
		return strings.Join(strings.Fields(err.Error()), " ")
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		texts = append(texts, errText(p))
	}
	return strings.Join(texts, "; ")
}
