package cluster

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/adaptivetimeout/adaptivetimeout/internal/smallfile"
)

// KeySize is the size of a gossip key in bytes (AES-256).
const KeySize = 32

// ErrKeyFile is matched (errors.Is) by every error about a key file that
// was read but refused: its contents, its type (not a regular file) or its
// size (over MaxKeyFileBytes). An error that does not match it means the
// file could not be read at all (missing, no permission, a read that did not
// finish within KeyFileTimeout).
var ErrKeyFile = errors.New("cluster: bad key file")

// Limits of a key file: it must be a regular file of at most
// MaxKeyFileBytes, read within KeyFileTimeout. A FIFO is refused without
// waiting for a writer; a read stuck on a hung mount is abandoned at the
// deadline.
const (
	MaxKeyFileBytes = 64 << 10
	KeyFileTimeout  = 5 * time.Second
)

// GenerateKey returns a new random key, base64 (standard) encoded: one line
// of a key file.
func GenerateKey() (string, error) {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		return "", fmt.Errorf("cluster: generate key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(k), nil
}

// ParseKeys parses a key file: one base64 (standard) 32-byte key per line;
// surrounding whitespace and blank lines are ignored, as are lines starting
// with '#'. The first key encrypts, all decrypt; a key repeated later is
// ignored. It fails on an empty file or any bad line, naming every bad line
// (never its contents), on one line: "cluster: bad key file: line 1: ...;
// line 3: ...".
func ParseKeys(data []byte) ([][]byte, error) {
	keys, problems := parseKeys(data)
	if problems != "" {
		return nil, fmt.Errorf("%w: %s", ErrKeyFile, problems)
	}
	return keys, nil
}

// parseKeys is ParseKeys with its problems said without the error's
// prefix, joined with "; " ("" when there is none).
func parseKeys(data []byte) ([][]byte, string) {
	var keys [][]byte
	var problems []string
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("line %d: not standard base64 (%v)", i+1, err))
		case len(k) != KeySize:
			problems = append(problems, fmt.Sprintf("line %d: key is %d bytes, want %d", i+1, len(k), KeySize))
		case !slices.ContainsFunc(keys, func(o []byte) bool { return bytes.Equal(o, k) }):
			keys = append(keys, k)
		}
	}
	switch {
	case len(problems) > 0:
		return nil, strings.Join(problems, "; ")
	case len(keys) == 0:
		return nil, "no keys"
	}
	return keys, ""
}

// LoadKeyFile reads and parses the key file at path (see ParseKeys and the
// limits above). Errors name the path, never a key: "cluster: bad key file
// PATH: line 1: ...".
func LoadKeyFile(path string) ([][]byte, error) {
	data, err := smallfile.Read(path, MaxKeyFileBytes, KeyFileTimeout)
	switch {
	case smallfile.Refused(err):
		return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
	case err != nil:
		return nil, fmt.Errorf("cluster: key file: %w", err)
	}
	keys, problems := parseKeys(data)
	if problems != "" {
		return nil, fmt.Errorf("%w %s: %s", ErrKeyFile, path, problems)
	}
	return keys, nil
}

// KeyFingerprint is a short, non-secret name for a key in logs: the first 8
// hex digits of its SHA-256. It tells keys apart without revealing them.
func KeyFingerprint(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:4])
}

// newKeyring builds a keyring whose primary is keys[0].
func newKeyring(keys [][]byte) (*memberlist.Keyring, error) {
	return memberlist.NewKeyring(keys[1:], keys[0])
}

// applyKeys makes kr hold exactly want, with want[0] primary, changing a
// live keyring safely. memberlist's Keyring.GetKeys hands out its slice
// without copying and RemoveKey shifts that slice in place, which races with
// a concurrent decryption reading it, except when the removed key is the
// last one. So: add the new keys (appends write past every reader's length),
// bring the wanted keys to the front in order with UseKey (each call builds
// a new slice), then remove the stale keys, which are now at the end, from
// the last one backwards.
//
// It reports how many keys were added and removed and the primary key
// before and after.
func applyKeys(kr *memberlist.Keyring, want [][]byte) (keyChange, error) {
	has := func(set [][]byte, k []byte) bool {
		for _, o := range set {
			if bytes.Equal(o, k) {
				return true
			}
		}
		return false
	}
	var ch keyChange
	before := append([][]byte(nil), kr.GetKeys()...)
	if len(before) > 0 {
		ch.oldPrimary = before[0]
	}
	ch.newPrimary = want[0]
	for _, k := range want {
		if !has(before, k) {
			ch.added++
		}
		if err := kr.AddKey(k); err != nil {
			return keyChange{}, err
		}
	}
	for i := len(want) - 1; i >= 0; i-- {
		if err := kr.UseKey(want[i]); err != nil {
			return keyChange{}, err
		}
	}
	now := append([][]byte(nil), kr.GetKeys()...)
	for i := len(now) - 1; i >= len(want); i-- {
		if err := kr.RemoveKey(now[i]); err != nil {
			return keyChange{}, err
		}
		ch.removed++
	}
	return ch, nil
}

// keyChange is what applyKeys did to a keyring.
type keyChange struct {
	added, removed         int
	oldPrimary, newPrimary []byte
}

// logArgs are the slog attributes of a reload: counts and the primary
// key's fingerprint (never a key).
func (ch keyChange) logArgs(keys int) []any {
	args := []any{"keys", keys, "added", ch.added, "removed", ch.removed,
		"primary", KeyFingerprint(ch.newPrimary)}
	if ch.primaryChanged() && ch.oldPrimary != nil {
		args = append(args, "previous_primary", KeyFingerprint(ch.oldPrimary))
	}
	return args
}

// primaryChanged reports whether the key that encrypts changed.
func (ch keyChange) primaryChanged() bool { return !bytes.Equal(ch.oldPrimary, ch.newPrimary) }

// message is the log message of a reload: it says whether the key that
// encrypts changed.
func (ch keyChange) message() string {
	if ch.primaryChanged() {
		return "cluster: keys reloaded: the primary key changed"
	}
	return "cluster: keys reloaded: the primary key is unchanged"
}
