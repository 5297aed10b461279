package cluster

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLoadKeyFileRules: a key file is a regular file of at most 64 KiB.
// What is refused matches ErrKeyFile (atnode exits 2: fix the file); what
// cannot be read does not (exit 1).
func TestLoadKeyFileRules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, err := GenerateKey()
	require.NoError(t, err)
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	// A valid key padded with comments up to exactly the limit is fine.
	pad := MaxKeyFileBytes - len(key) - 2
	atLimit := write("limit.key", "#"+strings.Repeat("x", pad-1)+"\n"+key+"\n")
	fi, err := os.Stat(atLimit)
	require.NoError(t, err)
	require.EqualValues(t, MaxKeyFileBytes, fi.Size())
	tests := []struct {
		name     string
		path     string
		refused  bool // matches ErrKeyFile
		unread   bool // fails without matching ErrKeyFile
		contains string
	}{
		{name: "good", path: write("good.key", key+"\n")},
		{name: "at 64 KiB", path: atLimit},
		{name: "over 64 KiB", path: write("big.key", key+"\n"+strings.Repeat("#", MaxKeyFileBytes)+"\n"), refused: true, contains: "at most 65536"},
		{name: "directory", path: dir, refused: true, contains: "not a regular file (a directory)"},
		{name: "missing", path: filepath.Join(dir, "none.key"), unread: true, contains: "no such file"},
		{name: "bad contents", path: write("bad.key", "nope\n"), refused: true, contains: "line 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys, err := LoadKeyFile(tt.path)
			switch {
			case tt.refused:
				require.ErrorIs(t, err, ErrKeyFile)
				require.ErrorContains(t, err, tt.contains)
			case tt.unread:
				require.Error(t, err)
				require.NotErrorIs(t, err, ErrKeyFile)
				require.ErrorContains(t, err, tt.contains)
			default:
				require.NoError(t, err)
				require.Len(t, keys, 1)
			}
		})
	}
}

func TestKeyFingerprint(t *testing.T) {
	t.Parallel()
	a, b := bytes.Repeat([]byte{1}, KeySize), bytes.Repeat([]byte{2}, KeySize)
	require.Len(t, KeyFingerprint(a), 8)
	require.Equal(t, KeyFingerprint(a), KeyFingerprint(bytes.Clone(a)))
	require.NotEqual(t, KeyFingerprint(a), KeyFingerprint(b))
}

// TestReloadLogLine: the reload's log line says whether the primary key
// changed and names keys by fingerprint only.
func TestReloadLogLine(t *testing.T) {
	t.Parallel()
	k1, k2 := bytes.Repeat([]byte{1}, KeySize), bytes.Repeat([]byte{2}, KeySize)
	kr, err := newKeyring([][]byte{k1})
	require.NoError(t, err)
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, nil))

	ch, err := applyKeys(kr, [][]byte{k1, k2})
	require.NoError(t, err)
	l.Info(ch.message(), ch.logArgs(2)...)
	ch, err = applyKeys(kr, [][]byte{k2, k1})
	require.NoError(t, err)
	l.Info(ch.message(), ch.logArgs(2)...)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	require.Contains(t, lines[0], `msg="cluster: keys reloaded: the primary key is unchanged" keys=2 added=1 removed=0 primary=`+KeyFingerprint(k1))
	require.NotContains(t, lines[0], "previous_primary")
	require.Contains(t, lines[1], fmt.Sprintf(`msg="cluster: keys reloaded: the primary key changed" keys=2 added=0 removed=0 primary=%s previous_primary=%s`,
		KeyFingerprint(k2), KeyFingerprint(k1)))
	for _, k := range [][]byte{k1, k2} {
		require.NotContains(t, buf.String(), base64.StdEncoding.EncodeToString(k), "never a key")
	}
}

// multiErr is what memberlist's Join returns (hashicorp/go-multierror):
// its text spreads over several lines.
type multiErr []error

func (m multiErr) Error() string {
	return fmt.Sprintf("%d error occurred:\n\t* %v\n\n", len(m), m[0])
}
func (m multiErr) WrappedErrors() []error { return m }

// TestJoinErrorOneLine: a join refused for a wrong key is logged as one
// readable line, not memberlist's multi-line text.
func TestJoinErrorOneLine(t *testing.T) {
	t.Parallel()
	err := multiErr{fmt.Errorf("Failed to join 127.0.0.1:7946: No installed keys could decrypt the message")}
	require.Contains(t, err.Error(), "\n")
	require.Equal(t, "Failed to join 127.0.0.1:7946: No installed keys could decrypt the message", errText(err))
	require.Equal(t, "a; b c", errText(errors.Join(errors.New("a"), errors.New("b\n\tc"))))

	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Warn("cluster: seed join failed; will retry", "err", errText(err))
	require.Equal(t, 1, strings.Count(buf.String(), "\n"))
	require.NotContains(t, buf.String(), `\n`)
}
