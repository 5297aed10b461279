// Package cluster is this process's membership in the gossip cluster, and
// the only package that imports hashicorp/memberlist.
//
// A [Cluster] is made from a [Config] with [New] and joined with
// [Cluster.Start]. Its member name is [MemberName](Config.Name, BootID):
// the peer name plus the low 32 bits of a boot ID that is random per
// process start, so a restarted process is a new member (the old one goes
// dead) while staying the same peer. The full boot ID travels in memberlist's
// node metadata, which is kept small (version, boot ID, a leaving flag,
// name, settings): histogram data never rides metadata, broadcasts or
// push/pull state. Start joins every seed and re-joins them every
// Timing.RejoinInterval with jitter, because memberlist alone never merges
// the two sides of a healed partition.
//
// A member with a Store also advertises the settings the fleet must share
// (window, sub-window, histogram layout), and one whose settings differ is
// refused: it is no member, and Start fails with ErrJoinRefused naming
// each setting (atnode exits 1). The settings travel in version 2 of the
// metadata, judged in memberlist's alive and merge delegates, and in
// memberlist's push/pull state. Which metadata version a member advertises
// is negotiated, so that a release from before version 2 (which reads it
// as malformed) keeps counting every member during a rolling upgrade:
// version 1, the old bytes, while it knows no other member or any member
// up is of an older release; version 2 once every member up speaks
// [Level2]. Each member advertises its protocol level beside its metadata
// (memberlist's delegate protocol maximum); [ClusterLevel] is the one rule
// by which the cluster switches to what a level brings. While an older
// release is up, metadata shows nobody's settings: joiners are judged on
// the push/pull states at join (see member.go). A member advertising no
// settings (one without a Store, or of an older release) is not judged.
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
// dropped and counted in [Stats], and so are the messages still waiting
// when Close ends delivery). The dissemination of sealed histogram
// batches is built on these two.
//
// # Dissemination
//
// With Config.Store set (a *tracker.Fleet), every node converges on the
// same fleet view:
//
//   - Seal: at each epoch boundary of Config.Tracker's grid, plus a fixed
//     per-node jitter below Gossip.SealJitter (none while the node has no
//     peer: there is no burst to spread), the node calls Config.Seal for
//     the epoch that ended, cuts it to Config.SealLimits (keeping the
//     destinations with the most samples, counting the others), splits the
//     batch into parts of at most Gossip.MaxPartBytes
//     (codec.Encoder.BatchParts), inserts the parts into its own Store
//     exactly as peers decode them, and sends them to every alive member
//     with SendReliable. An empty sub-window sends nothing.
//   - Anti-entropy: every Gossip.AntiEntropyInterval (±25 %) the node
//     sends a digest of the keys it holds to one random alive member. The
//     receiver pulls what it lacks (newest epochs first, about
//     Gossip.BulkSyncBytes at a time, each key from one member at a time)
//     and, when it holds keys the sender lacks, sends its own digest back
//     (never to a member it sent a digest to within half an interval, so
//     exchanges do not ping-pong). A pull is answered with the batches,
//     newest first, within Gossip.BulkSyncBytes.
//   - Bulk sync: after Start, and whenever the node was alone, it
//     exchanges digests with Gossip.BulkSyncPeers random members at once
//     (4 × Timing.GossipInterval after members appear, so that several
//     have), and a joiner catches up on the whole window within a round
//     trip or two.
//   - Receive: messages are decoded strictly (package codec, our layout
//     only); a batch whose origin (name and boot ID) is not a current or
//     recent member, or that claims to be this process's, is refused, as
//     are digests and pulls from members not alive here. Every refusal is
//     counted by reason in [GossipStats]. Every message sent carries this
//     node's clock; every one received updates the sender's clock estimate.
//   - Membership: dead and left members, and a restarted peer's old boot
//     (of several boots of one name up, all but the one seen join last),
//     are excluded from the Store's views at once (their batches stay
//     until they age out, so a refuted death costs nothing); members alive
//     again are included; the Store's live count follows. The protocol
//     gets the member table whenever it changed (checked before each tick
//     and each message handled, so a dropped event costs nothing) and
//     re-applies it to the Store at every anti-entropy round.
//   - Sending: each member has its own FIFO with at most one send in
//     flight, served by Gossip.SendWorkers workers; at most
//     Gossip.SendQueue messages wait in all, more are dropped and counted.
//     A send holds its worker for Timing.ProbeTimeout at most; a member
//     whose send failed or ran longer is backed off until a send to it
//     succeeds: its sends hold no worker and only its newest messages
//     wait. A backed-off member's send still running after a quarter of
//     Timing.StreamTimeout (at least Timing.ProbeTimeout) is set aside (it
//     runs on) and its next message goes out as a new probe, at most 4
//     sends in flight per member, so a member reachable again gets its
//     messages within that, not when a connect that stalled before ends.
//     A slow or dead member delays only its own messages; the protocol's
//     ticks and the request path never wait for a send.
//
// Histogram payloads never ride memberlist's broadcast queue or its
// push/pull state: only SendReliable streams carry them.
//
// Every decision above — when to seal and what, the jitter, when to swap
// digests and with whom, when to bulk-sync, how to answer a digest or a
// pull, how membership maps to exclusions — lives in [Protocol], a core in
// the style of etcd's raft RawNode: no goroutines, clock or I/O, advanced
// by Tick, Receive and SetMembers, each taking the time (Tick and Receive
// return the [Message]s to send; SetMembers gives it the member table),
// with Next saying when it needs the next Tick; its
// random streams are seeded by the boot ID, so the same calls give the
// same decisions. [SyncProtocol] wraps it for concurrent use. [Cluster] is
// its shell over memberlist: one timer set to Next, the member table given
// to SetMembers whenever it changed, received messages handed to Receive,
// and the send queue. A discrete-event simulator drives the same Protocol
// by delivering each Message's Payload to Protocol.Receive of the member
// named in Message.To; a node without gossip is a SyncProtocol with no
// members, polled from its query path ([SyncProtocol.Poll]).
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
// # Mistakes said out loud
//
// [Cluster.Warnings] lists the operator mistakes this node sees now
// (/v1/status "warnings"); each is logged once when raised and counted
// ([Cluster.WarningsRaised]):
//
//   - config_mismatch: a member refused for its settings (kept for 5
//     minutes after the last refusal), or a re-join refused by a seed.
//   - name_conflict: two live processes with one peer name. The member
//     table shows a name with several boots up; so does a restart until
//     the old boot is declared dead. Each boot sharing a name is pinged
//     (only the process of that member name answers), so a restart stays
//     silent and a clone is reported within a second or two, by both
//     processes and every other node. Only one boot of a name counts in a
//     fleet view (the one this node saw join last): the warning says whose
//     data is left out.
//   - clock_skew: every gossip message carries its sender's clock (codec's
//     sent_at), a one-way sample biased by transit (a few ms); a node more
//     than a quarter sub-window off the median of the clocks it sees (its
//     own and its peers', each the median of its recent samples) is
//     reported on itself and on its peers, with what it costs (a node far
//     behind refuses every peer batch as future_epoch; on protocol v2,
//     all their records and aggregates).
//
// # Concurrency
//
// Every method of Cluster is safe for concurrent use. Handlers run on the
// cluster's goroutines, one event and one message at a time; they may call
// any method except Close. Close leaves (bounded by Timing.LeaveTimeout),
// shuts memberlist down, and waits for every goroutine the cluster started.
// No lock is held while SendReliable sends, and the shutdown closes the
// streams this member dialled and cuts its dials under way (on memberlist's
// TCP transport), so a send to a stalled member, or a send or re-join to a
// host gone silent, delays neither Close nor any other method. A Close
// while Start is still joining cuts the join under way at once; Start then
// tries no further seed and returns ErrClosed.
//
// # Time
//
// This is the shell: memberlist's timers and the re-join timer use the wall
// clock, configured by [Timing] ([DefaultTiming] for real networks,
// [FastTiming] for tests and loopback demos). Member.Since is wall-clock.
// Dissemination reads Config.Clock (default time.Now) for epochs and for
// every Store call, and waits on one real timer set to the protocol's next
// tick; [Protocol] takes time only as an argument.
// Tests run whole clusters in one process on internal/memtransport, an
// in-memory transport that drops, delays, duplicates, partitions, crashes
// and stalls.
package cluster
