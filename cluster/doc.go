// Package cluster is this process's membership in the gossip cluster, and
// the only package that imports hashicorp/memberlist.
//
// A [Cluster] is made from a [Config] with [New] and joined with
// [Cluster.Start]. Its member name is [MemberName](Config.Name, BootID):
// the peer name plus the low 32 bits of a boot ID that is random per
// process start, so a restarted process is a new member (the old one goes
// dead) while staying the same peer. The full boot ID travels in memberlist's
// node metadata, which is kept small (version, boot ID, a leaving flag,
// name): histogram data never rides metadata, broadcasts or push/pull
// state. Start joins every seed and re-joins them every
// Timing.RejoinInterval with jitter, because memberlist alone never merges
// the two sides of a healed partition.
//
// Membership: [Cluster.Members] lists every member known, itself included,
// with its state (alive, suspect, dead, left) for GET /v1/members;
// [Cluster.NumAlive] counts members alive or suspect; Config.OnEvent
// receives [Event]s (join, update, dead, left) in order. memberlist calls
// its event delegate under its own lock, so the callback only copies the
// node into the member table and a bounded queue; a goroutine of the
// cluster delivers. memberlist v0.7.0 exposes neither suspicion nor (through
// Node.State) the difference between dead and left; the leave is therefore
// announced in the metadata before [Cluster.Close] leaves.
//
// Messages: [Cluster.SendReliable] sends a payload to one member over a
// stream; Config.OnMessage receives them from a bounded queue (overflow is
// dropped and counted in [Stats]). The dissemination of sealed histogram
// batches is built on these two.
//
// Security: with Config.KeyFile set, all gossip is encrypted with
// AES-256-GCM (memberlist's keyring; see [ParseKeys] for the file format)
// and unencrypted gossip is refused; Config.Label is sent in front of every
// packet and stream and authenticated when encrypted. A member with another
// key or label cannot join. [Cluster.ReloadKeys] applies a changed key file
// to the live keyring (for SIGHUP rotation); [GenerateKey] makes a key.
//
// memberlist's log lines go to Config.Logger at their own level
// (component=memberlist).
//
// # Concurrency
//
// Every method of Cluster is safe for concurrent use. Handlers run on the
// cluster's goroutines, one event and one message at a time; they may call
// any method except Close. Close leaves (bounded by Timing.LeaveTimeout),
// shuts memberlist down, and waits for every goroutine the cluster started.
//
// # Time
//
// This is the shell: memberlist's timers and the re-join timer use the wall
// clock, configured by [Timing] ([DefaultTiming] for real networks,
// [FastTiming] for tests and loopback demos). Member.Since is wall-clock.
// Tests run whole clusters in one process on internal/memtransport, an
// in-memory transport that drops, delays, duplicates, partitions and crashes.
package cluster
