package testutil

import (
	"bytes"
	"fmt"
)

// Member is one entry of GET /v1/members as a client reads it. Tests that
// drive a node from outside (a subprocess, an agent over HTTP) decode into
// it rather than into the node's own types, so a change of the JSON fails
// them.
type Member struct {
	Name   string `json:"name"`
	Member string `json:"member"`
	Addr   string `json:"addr"`
	State  string `json:"state"`
	BootID string `json:"boot_id"`
}

// Estimate is GET /v1/estimate as a client reads it (see Member).
type Estimate struct {
	Dest           string   `json:"dest"`
	Quantile       float64  `json:"quantile"`
	Source         string   `json:"source"`
	ValueMs        *uint64  `json:"value_ms"`
	FleetValueMs   *uint64  `json:"fleet_value_ms"`
	LocalValueMs   *uint64  `json:"local_value_ms"`
	Samples        uint64   `json:"samples"`
	LocalSamples   uint64   `json:"local_samples"`
	Peers          int      `json:"peers"`
	EffectivePeers float64  `json:"effective_peers"`
	StalenessMs    *float64 `json:"staleness_ms"`
	Trusted        bool     `json:"trusted"`
}

// RecordBody is an honest POST /v1/record body of n samples over 8
// destinations (db-0 … db-7), latencies of 1 to 300 ms with a fraction, as
// clients send them: what node's record benchmarks decode and the load
// command sends.
func RecordBody(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"samples":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"dest":"db-%d","latency_ms":%d.%d}`, i%8, 1+i%300, i%10)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}
