package cluster

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/memberlist"
)

// KeySize is the size of a gossip key in bytes (AES-256).
const KeySize = 32

// ErrKeyFile is matched (errors.Is) by every error about a key file's
// contents.
var ErrKeyFile = errors.New("cluster: bad key file")

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
// (never its contents).
func ParseKeys(data []byte) ([][]byte, error) {
	var keys [][]byte
	var errs []error
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%w: line %d: not standard base64 (%v)", ErrKeyFile, i+1, err))
		case len(k) != KeySize:
			errs = append(errs, fmt.Errorf("%w: line %d: key is %d bytes, want %d", ErrKeyFile, i+1, len(k), KeySize))
		default:
			dup := false
			for _, o := range keys {
				dup = dup || bytes.Equal(o, k)
			}
			if !dup {
				keys = append(keys, k)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no keys", ErrKeyFile)
	}
	return keys, nil
}

// LoadKeyFile reads and parses the key file at path (see ParseKeys).
// Errors name the path.
func LoadKeyFile(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster: key file: %w", err)
	}
	keys, err := ParseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("cluster: key file %s: %w", path, err)
	}
	return keys, nil
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
func applyKeys(kr *memberlist.Keyring, want [][]byte) (added, removed int, err error) {
	has := func(set [][]byte, k []byte) bool {
		for _, o := range set {
			if bytes.Equal(o, k) {
				return true
			}
		}
		return false
	}
	before := append([][]byte(nil), kr.GetKeys()...)
	for _, k := range want {
		if !has(before, k) {
			added++
		}
		if err := kr.AddKey(k); err != nil {
			return 0, 0, err
		}
	}
	for i := len(want) - 1; i >= 0; i-- {
		if err := kr.UseKey(want[i]); err != nil {
			return 0, 0, err
		}
	}
	now := append([][]byte(nil), kr.GetKeys()...)
	for i := len(now) - 1; i >= len(want); i-- {
		if err := kr.RemoveKey(now[i]); err != nil {
			return 0, 0, err
		}
		removed++
	}
	return added, removed, nil
}
