package node

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
)

// TestEveryProtocolCountExported sets each count of cluster.V2Stats to a
// value of its own and checks that exactly one of protocolMetrics reads
// each: a count added to V2Stats without its metric fails here.
func TestEveryProtocolCountExported(t *testing.T) {
	var s cluster.V2Stats
	v := reflect.ValueOf(&s).Elem()
	want := make(map[float64]string, v.NumField())
	for i := range v.NumField() {
		f := v.Type().Field(i)
		require.Equal(t, reflect.Uint64, f.Type.Kind(), "V2Stats.%s", f.Name)
		v.Field(i).SetUint(uint64(i + 1))
		want[float64(i+1)] = f.Name
	}
	got := make(map[float64]int, len(protocolMetrics))
	for _, m := range protocolMetrics {
		got[m.value(&s)]++
	}
	for val, name := range want {
		require.Equal(t, 1, got[val], "metrics reading V2Stats.%s", name)
	}
	require.Len(t, protocolMetrics, len(want), "a metric reads no V2Stats count")
}
