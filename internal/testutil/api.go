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
