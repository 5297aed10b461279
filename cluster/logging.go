package cluster

import (
	"bytes"
	"context"
	"log"
	"log/slog"
)

// memberlistLog returns a *log.Logger for memberlist whose lines go to l at
// the level of their "[DEBUG]", "[INFO]", "[WARN]" or "[ERR]" prefix
// (unprefixed lines at info), without the prefix and without memberlist's
// "memberlist: " tag; records carry component=memberlist.
func memberlistLog(l *slog.Logger) *log.Logger {
	return log.New(&logWriter{l: l.With("component", "memberlist")}, "", 0)
}

type logWriter struct{ l *slog.Logger }

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
	if w.l.Enabled(context.Background(), level) {
		w.l.Log(context.Background(), level, msg)
	}
	return len(p), nil
}
