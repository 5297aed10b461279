package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeKeys writes a key file with the given keys, one per line, mode 0600.
func writeKeys(t *testing.T, path string, keys ...string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(keys, "\n")+"\n"), 0o600))
}

func newKey(t *testing.T) string {
	t.Helper()
	k, err := GenerateKey()
	require.NoError(t, err)
	return k
}

// loopConfig is a config for a real-socket member on 127.0.0.1, port 0.
func loopConfig(t *testing.T, name, label string, keys []string, seeds ...string) Config {
	cfg := DefaultConfig()
	cfg.Name = name
	cfg.Bind = "127.0.0.1:0"
	cfg.Seeds = seeds
	cfg.Label = label
	cfg.Timing = FastTiming()
	cfg.Logger = testLogger(t).With("node", name)
	if keys != nil {
		cfg.KeyFile = filepath.Join(t.TempDir(), "keys")
		writeKeys(t, cfg.KeyFile, keys...)
	}
	return cfg
}

func TestLoopbackKeyAndLabel(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	first := startNode(t, loopConfig(t, "a", "prod", []string{key}))
	seed := first.Addr().String()
	require.NotZero(t, first.Addr().Port(), "port 0 is replaced by the bound port")
	require.Equal(t, first.Addr(), first.AdvertiseAddr())
	require.True(t, first.Encrypted())
	nodes := []*node{first,
		startNode(t, loopConfig(t, "b", "prod", []string{key}, seed)),
		startNode(t, loopConfig(t, "c", "prod", []string{key}, seed)),
	}
	took := eventually(t, "3 encrypted members converge", func() bool { return sees(nodes, names(nodes)...) })
	t.Logf("loopback join with key and label: 3 members in %v", took)

	outsiders := []struct {
		name string
		cfg  Config
		warn string // the outsider's config_mismatch warning; "" none
	}{
		{"wrong key", loopConfig(t, "evil", "prod", []string{newKey(t)}, seed),
			"seed " + seed + ": its gossip keys and this node's (-secret-key-file) share none"},
		{"wrong label", loopConfig(t, "evil", "staging", []string{key}, seed), ""},
		{"no key", loopConfig(t, "evil", "prod", nil, seed),
			"seed " + seed + ": it encrypts gossip and this node has no -secret-key-file"},
		{"no label", loopConfig(t, "evil", "", []string{key}, seed), ""},
	}
	for _, o := range outsiders {
		t.Run(o.name, func(t *testing.T) {
			evil := startNode(t, o.cfg)
			// Start joined synchronously and failed; wait for one more
			// failed re-join so gossip had time to leak, then look.
			require.Equal(t, uint64(1), evil.Stats().JoinFailures)
			eventually(t, "a re-join fails too", func() bool { return evil.Stats().JoinFailures >= 2 })
			require.Equal(t, uint64(evil.Stats().JoinAttempts), evil.Stats().JoinFailures)
			require.Equal(t, []string{evil.MemberName()}, upMembers(evil.Cluster))
			require.True(t, sees(nodes, names(nodes)...), "the cluster never lists the outsider")
			t.Logf("outsider's warnings: %v", evil.Warnings())
			if o.warn == "" {
				require.Empty(t, warningsButClock(evil.Cluster))
			} else {
				require.True(t, hasWarning(evil.Cluster, WarnConfigMismatch, o.warn), "%v", evil.Warnings())
			}
			if o.name == "wrong key" {
				// The key file mended and reloaded: the next re-join gets
				// in, and the warning goes.
				writeKeys(t, o.cfg.KeyFile, key)
				require.NoError(t, evil.ReloadKeys())
				eventually(t, "the mended outsider joins", func() bool { return len(upMembers(evil.Cluster)) == len(nodes)+1 })
				require.Empty(t, warningsButClock(evil.Cluster))
			}
			require.NoError(t, evil.Close())
		})
	}
}

func TestLoopbackKeyRotation(t *testing.T) {
	t.Parallel()
	oldKey, newK := newKey(t), newKey(t)
	first := startNode(t, loopConfig(t, "a", "rot", []string{oldKey}))
	seed := first.Addr().String()
	nodes := []*node{first,
		startNode(t, loopConfig(t, "b", "rot", []string{oldKey}, seed)),
		startNode(t, loopConfig(t, "c", "rot", []string{oldKey}, seed)),
	}
	eventually(t, "join", func() bool { return sees(nodes, names(nodes)...) })

	steps := []struct {
		what string
		keys []string
	}{
		{"add the new key", []string{oldKey, newK}},
		{"encrypt with the new key", []string{newK, oldKey}},
		{"remove the old key", []string{newK}},
	}
	for _, s := range steps {
		for _, n := range nodes {
			writeKeys(t, n.cfg.KeyFile, s.keys...)
			require.NoError(t, n.ReloadKeys(), s.what)
			require.Len(t, n.keys.GetKeys(), len(s.keys))
		}
		// Still one cluster: a message goes through, and nobody died.
		require.NoError(t, nodes[2].SendReliable(nodes[0].MemberName(), []byte(s.what)))
		eventually(t, "message after "+s.what, func() bool {
			msgs := nodes[0].rec.messages()
			return len(msgs) > 0 && string(msgs[len(msgs)-1]) == s.what
		})
		require.True(t, sees(nodes, names(nodes)...), s.what)
	}
	for _, n := range nodes {
		require.False(t, n.rec.has(EventDead, nodes[0].MemberName()))
	}

	stale := startNode(t, loopConfig(t, "stale", "rot", []string{oldKey}, seed))
	require.Equal(t, uint64(1), stale.Stats().JoinFailures, "the old key no longer gets in")
	require.NoError(t, stale.Close())
	fresh := startNode(t, loopConfig(t, "fresh", "rot", []string{newK}, seed))
	all := append(nodes, fresh)
	took := eventually(t, "a member with only the new key joins", func() bool { return sees(all, names(all)...) })
	t.Logf("after rotation: new-key member joined in %v", took)

	// A bad file is refused and the keyring is kept.
	writeKeys(t, nodes[1].cfg.KeyFile, "not base64!")
	err := nodes[1].ReloadKeys()
	require.ErrorIs(t, err, ErrKeyFile)
	require.ErrorContains(t, err, "line 1")
	require.Len(t, nodes[1].keys.GetKeys(), 1)
}

func TestReloadKeysWithoutKeyFile(t *testing.T) {
	t.Parallel()
	n := startNode(t, loopConfig(t, "plain", "", nil))
	require.ErrorIs(t, n.ReloadKeys(), ErrNoKeyFile)
	require.False(t, n.Encrypted())
}
