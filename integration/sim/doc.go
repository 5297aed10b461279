// Package sim is a seeded, deterministic discrete-event simulator of an
// adaptivetimeout cluster, for measuring what cannot be measured on one
// machine: how the fleet view scales to hundreds or thousands of nodes, and
// whether fleet-wide adaptive timeouts decide better than fixed or local ones.
//
// Like hashicorp/serf's coordinate package, it pairs the pure cores (package
// tracker's Tracker and Fleet, codec's encoder and decoder, timeout's
// Select) with simulation helpers whose tests assert accuracy.
//
// # What is simulated
//
// A Sim holds N nodes on a simulated network (NetworkConfig: a fixed
// lognormal latency per link, 0.2–2 ms, TCP handshake trips, loss, and each
// node's sending link as a FIFO at a set rate; bytes are counted at the
// sender). The nodes run a model of the dissemination protocol of DESIGN.md
// section 5 (protocol.go: seal at the epoch boundary plus jitter, push to
// every member, anti-entropy digest and pull every ~2 s with one random
// member), with every message encoded by the real codec, so byte counts are
// real sizes.
//
// To fit 1000 nodes in memory, sealed batches are immutable and shared: one
// encoded copy per key, and a bit per (node, origin, epoch) says who holds
// it. Only observers (Config.Observers) run a real Tracker and Fleet, decode
// every batch they receive with the real Decoder and insert it; the other
// nodes' batches are sealed by the real tracker on a private scratch time
// line (Workload).
//
// # Experiments
//
// RunScale measures convergence (seal until every node holds the batch),
// bandwidth per node, memory per node, and the error of the fleet's and one
// node's P99.99 against the exact quantile of known distributions (Dist).
// RunDecision compares timeout policies (fixed, local adaptive, fleet
// adaptive with and without the local guard) on spurious timeouts, time
// wasted on a dead peer and how fast a timeout follows a step change.
// ScaleTable and DecisionTable format the results as markdown.
//
// # Time, randomness and concurrency
//
// Time is simulated: an event heap ordered by (time, scheduling order), and
// the simulated clock passed as a time.Time (Sim.Now) into every tracker,
// fleet and timeout call. Time zero is the start of an epoch on the tracker's
// grid. All randomness comes from math/rand/v2 PCG generators derived from
// Config.Seed, so a seed fixes every event, byte and result; Progress lines
// and Wall figures are the only wall-clock readings. A Sim is not safe for
// concurrent use and starts no goroutines.
package sim
