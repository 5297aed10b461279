// Package memtransport is an in-memory [memberlist.Transport] with fault
// injection, for fast and deterministic cluster tests.
//
// A [Network] creates [Transport]s, each with its own address (10.0.x.y:7946,
// never bound to a socket). Packets are copied and handed to the destination's
// packet channel; streams are [net.Pipe] pairs whose ends report the two
// transports' addresses. The network can drop, duplicate and delay packets
// (probabilities drawn from a seeded generator), delay dials, cut every link
// between sets of nodes ([Network.Partition], packets and streams both),
// crash a node ([Network.Crash]: it neither sends nor receives, and its open
// streams break), and heal partitions ([Network.Heal]). Streams can be lost
// silently or delivered twice ([Faults.StreamDrop], [Faults.StreamDuplicate]):
// a message sent with memberlist's SendReliable then never arrives though the
// send succeeded, or arrives twice; dial delays reorder streams. A stalled
// address ([Network.Stall]) accepts streams and never reads them: a slow
// peer that is still alive, whose senders block until their deadline.
//
// memberlist's own MockNetwork cannot inject faults and leaks a goroutine
// after Shutdown; this package leaves none: undelayed packets are delivered
// synchronously, delayed ones by [time.AfterFunc] timers that are stopped by
// [Transport.Shutdown] and [Network.Close], and Shutdown closes every stream
// of the transport so memberlist's stream handlers return.
//
// # Concurrency
//
// Every method is safe for concurrent use. One mutex guards the whole
// network; that is plenty for tests of up to a few dozen nodes.
//
// # Time
//
// Only delays use the wall clock (timers). Packet timestamps are taken at
// delivery, as a real socket would, so memberlist's RTT estimates include the
// injected delay.
package memtransport
