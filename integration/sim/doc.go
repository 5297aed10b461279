// Package sim is a seeded, deterministic discrete-event simulator of an
// adaptivetimeout cluster, for measuring what cannot be measured on one
// machine: how the fleet view scales to hundreds or thousands of nodes, and
// whether fleet-wide adaptive timeouts decide better than fixed or local ones.
//
// Like hashicorp/serf's coordinate package, it pairs the pure cores (package
// cluster's Protocol, tracker's Tracker and Fleet, codec's encoder and
// decoder, timeout's Select and Decider) with simulation helpers whose
// tests assert accuracy.
//
// # What is simulated
//
// A Sim holds N nodes on a simulated network (NetworkConfig: a fixed
// lognormal latency per link, 0.2–2 ms, TCP handshake trips, loss, and each
// node's sending link as a FIFO at a set rate; bytes are counted at the
// sender). Every node runs the real dissemination protocol,
// cluster.Protocol, configured by cluster.Gossip: its schedule (seal at
// the epoch boundary plus the node's jitter, anti-entropy rounds, bulk
// sync), its random streams, its seals, digests, pulls and answers are the
// code that ships, and every message is its real encoding. shell.go is
// only what a shell owns: each node's protocol ticked at the time its Next
// asks for, and per-member send queues served by a few workers (a member
// whose send fails or stalls backed off, its stalled sends set aside,
// expired messages and a dead member's dropped, as in package cluster),
// with each SendReliable a connect and a payload on the simulated
// network. A member can be killed (Sim.Kill, ScaleConfig.KillOwners), and
// the others list it dead after a detection delay. A killed member can
// restart (Sim.Restart): it comes back under the same name with a new
// boot ID, empty stores (a new tracker and fleet view, or a new shared
// store) and a new Protocol; every member up lists the new boot alive at
// once, and the old one dead after the detection delay (still alive
// before, if the restart is quicker). A member can join late (Config.LateJoins): it starts at its
// time as a restarted one does. Messages on their way to a boot that is
// gone are lost, and a boot records only the epochs that start after it
// did. The network can be cut into groups (Sim.Partition, Cut): messages
// between them are lost (both ways, or one way), and each side's member
// lists list the other sides' members dead once the cut has lasted the
// detection delay, or never (a cut the membership probes do not see);
// Sim.Heal lets messages pass again, and sides that listed each other
// dead list each other alive again a merge delay later, with the same
// boots and a new Since, as memberlist does.
//
// To fit 1000 nodes in memory, only observers (Config.Observers) run a real
// Tracker and have a real tracker.Fleet as their cluster.Store. Every other
// node's Store (store.go) holds a bit per (epoch, origin, part) over
// immutable batches shared by the whole simulation, and answers the
// Protocol's Insert, Keys, Missing and Lookup as a Fleet would
// (TestSharedStoreMatchesFleet); its own batches are sealed by the real
// tracker on a private scratch time line (Workload).
//
// # Experiments
//
// RunScale measures convergence (seal until every node holds the batch),
// bandwidth per node, memory per node, and the error of the fleet's and one
// node's P99.99 against the exact quantile of known distributions (Dist).
// RunChurn restarts an owner (back before or after the others list it
// dead) or joins a member late, and measures how long until every other
// observer's view of the destinations it owns, and its own view of every
// destination, is again the exact merge of what the origins sealed, in
// every epoch to the end, and what its own view holds after 1 s and in
// the next two epochs. RunPartition cuts the cluster in two for a while
// and measures each side's views during the cut against the exact merge
// of what that side can see, and after the heal how long until every view
// is the exact merge of every origin's records again.
// RunDecision compares timeout policies side by side in one run (fixed,
// local adaptive, fleet adaptive with and without the local guard, and the
// failure-aware rule with shadow and with caller probes, which is each
// simulated node's timeout.Decider over its fleet view: the code that
// ships) on spurious timeouts, how fast a timeout follows a step change,
// and the failure scenarios: a dead peer, hanging requests, slow requests
// and a tight start. RunHedge compares hedging policies on replicas that
// stall (no hedging, fixed delays, per-client quantiles, and node.DoHedged's
// rule through its pure parts in package timeout) as time to a successful
// answer. ScaleTable, ChurnTable, PartitionTable, DecisionTable,
// FailureTable and HedgeTable format the results as markdown.
//
// # Time, randomness and concurrency
//
// Time is simulated: an event heap ordered by (time, scheduling order), and
// the simulated clock passed as a time.Time (Sim.Now) into every protocol,
// tracker, fleet and timeout call. Time zero is the start of an epoch on the
// tracker's grid. All randomness comes from math/rand/v2 PCG generators
// derived from Config.Seed and the nodes' boot IDs, so a seed fixes every
// event, byte and result; Progress lines and Wall figures are the only
// wall-clock readings.
//
// A Sim is not safe for concurrent use. Within Run it receives deliveries
// that fall within the shortest connect time of each other on up to
// GOMAXPROCS goroutines (each node's in order, one node per goroutine),
// then applies their results in event order, so the outcome does not
// depend on GOMAXPROCS; the goroutines end before Run returns. Receiving
// is most of the cost: each Protocol decodes every batch it receives, N²
// decodes per epoch.
package sim
