// Package integration holds the project's end-to-end tests; it has no API.
//
// These kinds of test live here:
//
//   - Fault tests (faults_test.go, skew_test.go, flood_test.go) run whole
//     nodes (package node) in one process on the in-memory transport
//     (internal/memtransport): message loss, duplication and reordering, a
//     partition and its heal, clock skew within and beyond the accepted
//     epochs, and a flooding peer. Each checks what must hold — usually
//     that every node's fleet view is bucket for bucket the exact union of
//     the samples fed — and that the gossip counters account for every
//     message lost or refused.
//   - Warning tests (warnings_test.go), in process too: a clone with a live
//     node's name reported by both, a node whose clock is 20 s behind
//     reported on itself and on its peers, a node with another sub-window
//     refused at join.
//   - Process tests (process_test.go) build the atnode binary once and run
//     five agents on loopback over real UDP and TCP, with encryption and a
//     label, fed over the HTTP API: exact union, kill -9 and restart, a
//     node with the wrong key, and a hostile memberlist member
//     (hostile_test.go). TestAgentHostileHTTP (hostile_http_test.go) runs
//     one agent against hostile HTTP clients: 1 MiB junk bodies, stalled
//     bodies, connections over the cap, foreign pages.
//   - An opt-in scale run (ATNODE_LONG=1, long_test.go): 50 nodes on real
//     loopback sockets, reporting seal-to-convergence time and gossip bytes
//     per node per second.
//
// TestImportBoundaries (imports_test.go) pins the dependency rules of
// docs/design.md, Dependency direction: which project packages each may
// import, who may import memberlist, Prometheus, grpc-go and failsafe-go,
// and that tracker, timeout and codec do no I/O.
//
// The simulator for hundreds of nodes is the subpackage sim. The command
// in load measures the HTTP sidecar on one core (go run, never in CI).
//
// # Time
//
// Every test polls with a deadline; none sleeps to assert. The in-process
// tests use 500 ms sub-windows so that an epoch seals and spreads within a
// second, and a window (127.5 s) longer than all the waits an epoch they
// record must outlast; a node's clock is skewed through node.Config.Clock,
// and held in its epoch while the test records, so that a recording a
// loaded machine stalls still falls into one epoch. Their failure detector
// is slower than cluster.FastTiming's, which declared live members dead
// on a loaded machine. The process tests use 120 s / 1 s.
package integration
