package cluster

import (
	"fmt"
	"log/slog"
	"os"
)

func warnKeyFileMode(l *slog.Logger, path string) {
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		l.Warn("cluster: key file is readable by group or others", "path", path, "mode", fi.Mode().Perm())
	}
}

// Encrypted reports whether gossip is encrypted (a key file is set).
func (c *Cluster) Encrypted() bool { return c.keys != nil }

// ReloadKeys re-reads the key file and applies it to the live keyring:
// keys new in the file are added, the file's first key becomes the one
// that encrypts, and keys no longer in the file are removed. On any error
// the keyring is left as it was. For rotation without losing messages,
// change the file in three steps, reloading every member after each:
// add the new key second; move it first; remove the old one.
func (c *Cluster) ReloadKeys() error {
	if c.cfg.KeyFile == "" || c.keys == nil {
		return ErrNoKeyFile
	}
	keys, err := LoadKeyFile(c.cfg.KeyFile)
	if err != nil {
		return err
	}
	c.keyMu.Lock()
	defer c.keyMu.Unlock()
	ch, err := applyKeys(c.keys, keys)
	if err != nil {
		return fmt.Errorf("cluster: apply keys: %w", err)
	}
	c.log.Info(ch.message(), ch.logArgs(len(keys))...)
	return nil
}
