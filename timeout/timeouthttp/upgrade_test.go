package timeouthttp

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/internal/policytest"
	"github.com/adaptivetimeout/adaptivetimeout/timeout"
)

// echoUpgrade switches a request asking for the "echo" protocol to it: a
// 101, then every byte the client sends comes back, until it closes.
func echoUpgrade(w http.ResponseWriter, r *http.Request) {
	if !upgrading(r) || r.Header.Get("Upgrade") != "echo" {
		http.Error(w, "upgrade to echo only", http.StatusBadRequest)
		return
	}
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
	if rw.Flush() != nil {
		return
	}
	_, _ = io.Copy(conn, rw) // rw's reader first: it may hold bytes already sent
}

func upgradeRequest(t *testing.T, ctx context.Context, u string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	require.NoError(t, err)
	req.Header.Set("Connection", "keep-alive, Upgrade")
	req.Header.Set("Upgrade", "echo")
	return req
}

// TestProtocolUpgrade: a 101 completes at its response headers and its
// connection is the caller's, untouched: it still carries traffic after
// the attempt's context has ended, and closing it observes nothing more.
func TestProtocolUpgrade(t *testing.T) {
	srv, host := server(t, echoUpgrade)
	p := policy(host, 50*time.Millisecond)
	base := &spy{base: srv.Client().Transport}
	c := &http.Client{Transport: stepped(t, base, p, 7*time.Millisecond)}

	resp, err := c.Do(upgradeRequest(t, context.Background(), srv.URL))
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	conn, ok := resp.Body.(io.ReadWriteCloser)
	require.True(t, ok, "the body of a 101 is the connection, %T", resp.Body)
	want := []obs{{Dest: host, Attempt: 1, Outcome: timeout.Completed, Elapsed: 7 * time.Millisecond}}
	require.Equal(t, want, p.Observed(), "completed at the headers (clock reads: start, headers)")

	// The attempt's context is released with the handshake, not cut by the
	// timeout later (its cause would be ErrTimeout then).
	ctx := base.last()
	select {
	case <-ctx.Done():
	default:
		t.Fatal("the attempt's context outlives the handshake")
	}
	require.ErrorIs(t, context.Cause(ctx), context.Canceled)
	require.False(t, errors.Is(context.Cause(ctx), ErrTimeout))

	for _, msg := range []string{"ping\n", "pong\n"} {
		_, err = io.WriteString(conn, msg)
		require.NoError(t, err)
		line, err := bufio.NewReader(io.LimitReader(conn, int64(len(msg)))).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, msg, line, "the upgraded connection carries traffic")
	}
	require.NoError(t, conn.Close())
	require.Equal(t, want, p.Observed(), "observed once")
}

// TestUpgradingRequests: what asks to switch protocols, and such a
// request is neither probed nor hedged.
func TestUpgradingRequests(t *testing.T) {
	for _, tc := range []struct {
		connection, upgrade string
		want                bool
	}{
		{"Upgrade", "websocket", true},
		{"keep-alive, upgrade", "h2c", true},
		{"keep-alive,UPGRADE ", "echo", true},
		{"Upgrade", "", false},
		{"", "websocket", false},
		{"keep-alive, upgraded", "websocket", false},
	} {
		req, err := http.NewRequest(http.MethodGet, "http://h/", nil)
		require.NoError(t, err)
		if tc.connection != "" {
			req.Header.Set("Connection", tc.connection)
		}
		if tc.upgrade != "" {
			req.Header.Set("Upgrade", tc.upgrade)
		}
		require.Equal(t, tc.want, upgrading(req), "Connection %q, Upgrade %q", tc.connection, tc.upgrade)
	}

	t.Run("no shadow probe", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := probing() // 100 ms to "h", a 1 s probe on offer
			tr := newTransport(t, Options{Base: &slowBase{delay: time.Hour}, Policy: p})
			_, err := tr.RoundTrip(upgradeRequest(t, t.Context(), "http://h/"))
			require.ErrorIs(t, err, ErrTimeout)
			synctest.Wait()
			require.Zero(t, p.Probes(), "the probe stays on offer")
			require.Equal(t, []obs{{Dest: "h", Attempt: 1, Outcome: timeout.TimedOut, Elapsed: 100 * time.Millisecond}}, p.Observed())
		})
	})

	t.Run("no hedge", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, _ := policytest.Hedging(t) // hedge delay 21 ms
			seq := &policytest.Seq{Delays: []time.Duration{100 * time.Millisecond, 5 * time.Millisecond}}
			rt := newTransport(t, Options{Base: seqBase{seq}, Policy: p, Hedge: true})
			resp, err := rt.RoundTrip(upgradeRequest(t, t.Context(), "http://h/"))
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			require.NoError(t, resp.Body.Close())
			synctest.Wait()
			require.Len(t, seq.Causes(), 1, "one attempt")
		})
	})
}
