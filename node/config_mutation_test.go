package node

import (
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/internal/fielderr"
)

// TestConfigValidateEdges pins the edges of -hedge-budget ([0, 0.5], both
// ends in) and that an error of a setting without a flag carries no flag
// prefix.
func TestConfigValidateEdges(t *testing.T) {
	for _, b := range []float64{0, 0.5} {
		c := DefaultConfig()
		c.HedgeBudget = b
		require.NoError(t, c.Validate(), "%v", b)
	}
	for _, b := range []float64{-0.1, 0.5000001, math.NaN()} {
		c := DefaultConfig()
		c.HedgeBudget = b
		require.EqualError(t, c.Validate(), "-hedge-budget: must be in [0, 0.5], got "+fmt.Sprint(b))
	}
	c := DefaultConfig()
	c.Fleet.MaxOrigins = 0
	require.EqualError(t, c.Validate(), "tracker: MaxOrigins must be in 1..4096, got 0")
}

// TestExposureNamesTheAddress pins the address the exposure error names:
// the bound one when it is not loopback, whatever -advertise says; the
// advertised one when only that is exposed.
func TestExposureNamesTheAddress(t *testing.T) {
	c := DefaultConfig()
	c.Cluster.Bind, c.Cluster.Advertise = "0.0.0.0:7946", "127.0.0.1:7946"
	require.EqualError(t, c.Validate(), "gossip address 0.0.0.0:7946 is not loopback and gossip would be unencrypted: add -secret-key-file (make a key with 'atnode keygen -o FILE'), or -insecure")
	c.Cluster.Bind, c.Cluster.Advertise = "127.0.0.1:7946", "10.1.2.3:7946"
	require.EqualError(t, c.Validate(), "gossip address 10.1.2.3:7946 is not loopback and gossip would be unencrypted: add -secret-key-file (make a key with 'atnode keygen -o FILE'), or -insecure")
	c = DefaultConfig()
	c.HTTP = "0.0.0.0:8080"
	require.EqualError(t, c.Validate(), "HTTP address 0.0.0.0:8080 is not loopback and has no token: add -http-token-file, or -insecure")
}

// TestFlaggedNeedsAYAMLKey: a field without a yaml key (or with "-") has
// no flag to name, so its error goes out as it is.
func TestFlaggedNeedsAYAMLKey(t *testing.T) {
	type s struct {
		NoTag  int
		Hidden int `yaml:"-"`
		Inline int `yaml:",inline"`
		Named  int `yaml:"named_key"`
	}
	for field, want := range map[string]string{"NoTag": "x: bad", "Hidden": "x: bad", "Inline": "x: bad", "Named": "-named-key: x: bad"} {
		e := fielderr.Errorf(field, "x: bad")
		require.EqualError(t, flagged(reflect.TypeFor[s](), e), want, field)
	}
}
