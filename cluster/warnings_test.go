package cluster

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
)

// TestWarningsTable: a warning raised is counted and logged once, however
// often it is refreshed or its text changes; it expires, and counts again
// when it comes back; replace sets a kind's warnings as a whole; the
// table holds at most maxWarningsPerKind of a kind.
func TestWarningsTable(t *testing.T) {
	t.Parallel()
	var logs testutil.SyncBuffer
	tab := newWarnings(slog.New(slog.NewTextHandler(&logs, nil)))
	t0 := time.UnixMilli(1_700_000_000_000)
	mismatch := func(msg string) Warning { return Warning{Kind: WarnConfigMismatch, Message: msg} }

	tab.set("member/x", mismatch("x differs"), t0, t0.Add(time.Minute))
	tab.set("member/x", mismatch("x differs still"), t0.Add(time.Second), t0.Add(2*time.Minute))
	require.Equal(t, []Warning{mismatch("x differs still")}, tab.list(t0.Add(time.Minute)))
	require.Equal(t, map[string]uint64{WarnConfigMismatch: 1, WarnNameConflict: 0, WarnClockSkew: 0}, tab.raisedCounts())
	require.Equal(t, 1, strings.Count(logs.String(), "level=WARN"), "logged once when raised")
	require.Empty(t, tab.list(t0.Add(2*time.Minute)), "expired")
	tab.set("member/x", mismatch("x again"), t0.Add(3*time.Minute), t0.Add(4*time.Minute))
	require.Equal(t, uint64(2), tab.raisedCounts()[WarnConfigMismatch], "back after it expired: raised again")

	now := t0.Add(3 * time.Minute)
	tab.replace(WarnClockSkew, map[string]Warning{"self": {Message: "behind"}, "peer/b": {Message: "b ahead"}}, now)
	tab.replace(WarnNameConflict, map[string]Warning{"n1": {Message: "n1 twice"}}, now)
	require.Equal(t, []Warning{mismatch("x again"), {WarnNameConflict, "n1 twice"}, {WarnClockSkew, "b ahead"}, {WarnClockSkew, "behind"}},
		tab.list(now), "by kind, then message")
	tab.replace(WarnClockSkew, map[string]Warning{"self": {Message: "still behind"}}, now)
	require.Equal(t, []Warning{mismatch("x again"), {WarnNameConflict, "n1 twice"}, {WarnClockSkew, "still behind"}}, tab.list(now))
	require.Equal(t, uint64(2), tab.raisedCounts()[WarnClockSkew], "self and peer/b, each once")

	for i := range 3 * maxWarningsPerKind {
		tab.set(fmt.Sprintf("member/m%d", i), mismatch(fmt.Sprintf("m%d", i)), now, now.Add(time.Duration(i+1)*time.Second))
	}
	n := 0
	for _, w := range tab.list(now) {
		if w.Kind == WarnConfigMismatch {
			n++
		}
	}
	require.Equal(t, maxWarningsPerKind, n, "bounded, the ones expiring first dropped")
	require.Equal(t, uint64(2+3*maxWarningsPerKind), tab.raisedCounts()[WarnConfigMismatch])
	require.Len(t, tab.list(now), maxWarningsPerKind+2)
}
