package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// ScaleConfig configures one scale run (RunScale): N nodes recording
// latencies to D destinations whose distributions are known exactly.
type ScaleConfig struct {
	// Seed makes the run. Default 0.
	Seed uint64
	// Nodes is the cluster size N.
	Nodes int
	// Dests is the number of destinations D, each with its own lognormal
	// distribution (ScaleDests). Default 100.
	Dests int
	// RatePerNode is how many latencies each node records per second, spread
	// evenly over the destinations. Default 1000.
	RatePerNode float64
	// Observers is how many nodes keep a real fleet view. Default 2.
	Observers int
	// Epochs is how many epochs are measured after the warm-up (one full
	// window). Default 5.
	Epochs int
	// Quantile is the quantile whose error is measured. Default 0.9999.
	Quantile float64
	// Tracker, Network and Gossip are as in Config; zero values mean
	// their defaults.
	Tracker tracker.Config
	Network NetworkConfig
	Gossip  cluster.Gossip
	// RelayFrom is cluster.ProtocolConfig.RelayFrom (0: the default;
	// negative: no relays).
	RelayFrom int
	// Protocol is the dissemination protocol: 2, destination-owned
	// aggregation (the default), or 1, every node holding every origin's
	// batches (for comparison).
	Protocol int
	// KillOwners kills, 50 ms into each measured epoch, the first owner of
	// one destination (another each epoch, never an observer), before it
	// publishes; the others list it dead DetectAfter later (default 2 s,
	// about memberlist's LAN failure detection). Protocol 2 only.
	KillOwners  bool
	DetectAfter time.Duration
	// MeasureMemory measures the observers' fleet memory by difference of
	// the live heap (two forced garbage collections at the end). Do not run
	// other tests in parallel when it is set.
	MeasureMemory bool
	// Progress receives a line per simulated epoch when not nil.
	Progress func(format string, args ...any)
}

func (c *ScaleConfig) defaults() {
	orDefault(&c.Dests, 100)
	orDefault(&c.RatePerNode, 1000)
	orDefault(&c.Observers, min(2, c.Nodes))
	orDefault(&c.Epochs, 5)
	orDefault(&c.Quantile, 0.9999)
	orDefault(&c.Tracker, tracker.DefaultConfig())
	orDefault(&c.Network, DefaultNetworkConfig())
	orDefault(&c.Gossip, cluster.DefaultGossip())
	if c.Protocol != 0 {
		c.Gossip.Protocol = c.Protocol
	}
	c.Protocol = c.Gossip.Protocol
	orDefault(&c.DetectAfter, 2*time.Second)
}

// NamedDist is a destination and its latency distribution.
type NamedDist struct {
	Name string
	Dist Dist
}

// ScaleDests returns d destinations with seeded lognormal distributions:
// medians log-uniform in [2, 50] ms and shapes uniform in [0.3, 0.8], so
// their P99.99 spans roughly 5 ms to 1 s.
func ScaleDests(seed uint64, d int) []NamedDist {
	r := newRand(seed, 7)
	out := make([]NamedDist, d)
	for i := range out {
		out[i] = NamedDist{
			Name: fmt.Sprintf("d%03d", i),
			Dist: Dist{MedianMillis: 2 * math.Pow(25, r.Float64()), Sigma: 0.3 + 0.5*r.Float64()},
		}
	}
	return out
}

// scaleWorkload records, per node and epoch, RatePerNode·S/D samples per
// destination (the fraction drawn as a Bernoulli), from a random stream
// derived from (seed, node, epoch).
type scaleWorkload struct {
	seed     uint64
	dests    []NamedDist
	per      float64 // samples per destination per node per epoch
	samplers []millisSampler
}

func newScaleWorkload(seed uint64, dests []NamedDist, per float64) *scaleWorkload {
	w := &scaleWorkload{seed: seed, dests: dests, per: per}
	for _, d := range dests {
		w.samplers = append(w.samplers, newMillisSampler(d.Dist))
	}
	return w
}

func (w *scaleWorkload) Samples(node int, epoch int64, record func(string, uint64)) {
	r := newRand(w.seed, uint64(node)<<40^uint64(epoch))
	whole, frac := math.Modf(w.per)
	for i, d := range w.dests {
		k := int(whole)
		if r.Float64() < frac {
			k++
		}
		s := &w.samplers[i]
		for range k {
			record(d.Name, s.sample(r))
		}
	}
}

// millisSampler draws a latency of a Dist in whole milliseconds as the
// tracker records it, floor(X), by inversion: floor(X) = k exactly when
// CDF(k) <= u < CDF(k+1) for u uniform, found from a guide table in a step
// or two (the ten million samples an epoch of a 1000-node run draws would
// otherwise spend most of its time in exp). The rare u beyond the table
// (above CDF(k) = 1 − 10⁻⁶) take the exact quantile.
type millisSampler struct {
	d     Dist
	cdf   []float64 // cdf[k] = P(X < k+1) = P(floor(X) <= k)
	guide []int32   // guide[j] = the smallest k with cdf[k] > j/len(guide)
}

func newMillisSampler(d Dist) millisSampler {
	s := millisSampler{d: d}
	for k := 1; ; k++ {
		c := d.CDF(float64(k))
		s.cdf = append(s.cdf, c)
		if c >= 1-1e-6 || k >= 1<<20 {
			break
		}
	}
	s.guide = make([]int32, 4096)
	k := 0
	for j := range s.guide {
		for k < len(s.cdf)-1 && s.cdf[k] <= float64(j)/float64(len(s.guide)) {
			k++
		}
		s.guide[j] = int32(k)
	}
	return s
}

func (s *millisSampler) sample(r *rand.Rand) uint64 {
	u := r.Float64()
	if u >= s.cdf[len(s.cdf)-1] {
		return uint64(s.d.Quantile(u))
	}
	k := int(s.guide[int(u*float64(len(s.guide)))])
	for s.cdf[k] <= u {
		k++
	}
	return uint64(k)
}

// ScaleResult is what one scale run measured.
type ScaleResult struct {
	Nodes, Dests int
	// Protocol is the dissemination protocol run (1 or 2).
	Protocol int
	// ConvergeP50, ConvergeP99 and ConvergeMax are the time from a
	// sub-window's seal until every node's view of it is identical, over
	// the measured epochs: under protocol 1 until every node held each
	// batch (from its seal), under protocol 2 until every live node held
	// the aggregate of each (destination, epoch) with the largest coverage
	// (from the end of the epoch).
	ConvergeP50, ConvergeP99, ConvergeMax time.Duration
	// Batches is how many batches (protocol 1) or (destination, epoch)
	// aggregates (protocol 2) the measured epochs made; Unconverged how
	// many of them were still not identical on every live node one epoch
	// after the last measured one.
	Batches, Unconverged int
	// Refused counts messages refused that the run expects (from a member
	// killed since); any other refusal fails the run. Killed is how many
	// nodes KillOwners killed.
	Refused uint64
	Killed  int
	// UnionMismatches counts, of UnionChecks (destination, measured epoch)
	// checks, the fleet views of observer 0 that were not bucket for bucket
	// the exact union of every origin's sealed counts over the view (v1's
	// fleet view with every batch arrived); UnionErrP50 and UnionErrP90 are
	// the relative errors of its fleet value against that union's.
	UnionMismatches, UnionChecks int
	UnionErrP50, UnionErrP90     float64
	// FinalMismatches counts (protocol 2), of Batches, the (destination,
	// epoch) aggregates whose largest coverage published by the end of the
	// run was not bucket for bucket that exact union (without the killed
	// origins, from when they are listed dead): what loss leaves once the
	// pulls have repaired it, 0 when every record reached an owner.
	FinalMismatches int
	// BytesPerNodeSec is the mean bytes sent per node per second, counted
	// at the sender over the measured epochs; MaxBytesPerNodeSec the busiest
	// node's; ByKind the mean split by message kind.
	BytesPerNodeSec, MaxBytesPerNodeSec float64
	ByKind                              [numMsgKinds]float64
	// Duplicates is the number of batches received, over all nodes in the
	// measured epochs, that the receiver already held (pulled while a push
	// was on its way, or pulled twice); SendDrops the messages dropped by
	// full send queues; Lost those the network dropped.
	Duplicates, SendDrops, Lost uint64
	// V2 sums what every node's protocol v2 did over the measured epochs
	// (publishes, republishes, takeovers, pulls).
	V2 cluster.V2Stats
	// BatchBytes is the mean size of one encoded batch.
	BatchBytes float64
	// HeldBytes is the encoded size of the batches node 0 holds at the end.
	HeldBytes int
	// FleetBytes is the measured live heap of one observer's fleet state:
	// its fleet view, owned records and protocol, without its local
	// tracker (0 unless MeasureMemory); LocalTrackerBytes that of its local
	// tracker, measured apart (the fleet-state target, docs/design.md, leaves it
	// out); FleetBatches the batches its fleet view holds.
	FleetBytes        float64
	LocalTrackerBytes float64
	FleetBatches      int
	// FleetErr and LocalErr are relative errors |estimate − truth| / truth of
	// the Quantile, per observer, destination and measured epoch, at the
	// median (…P50) and the 90th percentile (…P90) of those errors. The
	// fleet view is the observers' fleet value, the local view node 0's own
	// window; truth is the destination's exact quantile (Dist).
	FleetErrP50, FleetErrP90, LocalErrP50, LocalErrP90 float64
	// FleetSamples and LocalSamples are the median samples behind one
	// destination's estimate in each view.
	FleetSamples, LocalSamples uint64
	// ViewMismatches counts (destination, epoch) pairs whose fleet view was
	// not bucket-identical on every observer at measurement time.
	ViewMismatches int
	// HeapBytes is the process's live heap at the end, before releasing the
	// observers; PeakHeapBytes the largest heap seen at an epoch boundary;
	// Events the events processed; Wall the real time taken.
	HeapBytes, PeakHeapBytes uint64
	Events                   uint64
	Wall                     time.Duration
}

// RunScale runs one scale simulation: a warm-up of one full window, then
// cfg.Epochs measured epochs. Estimates are taken in the middle of each
// measured epoch, when the previous epoch's batches have spread.
func RunScale(cfg ScaleConfig) (ScaleResult, error) {
	cfg.defaults()
	if cfg.Nodes < 1 {
		return ScaleResult{}, errors.New("sim: Nodes must be >= 1")
	}
	wallStart := time.Now()
	dests := ScaleDests(cfg.Seed, cfg.Dests)
	sw := cfg.Tracker.SubWindow()
	w := newScaleWorkload(cfg.Seed, dests, cfg.RatePerNode*sw.Seconds()/float64(cfg.Dests))
	if cfg.KillOwners && cfg.Protocol < cluster.ProtocolV2 {
		return ScaleResult{}, errors.New("sim: KillOwners needs protocol 2")
	}
	sc := Config{
		Seed: cfg.Seed, Nodes: cfg.Nodes, Observers: cfg.Observers,
		Tracker: cfg.Tracker, Fleet: tracker.DefaultFleetConfig(),
		Network: cfg.Network, Gossip: cfg.Gossip, RelayFrom: cfg.RelayFrom,
		Workload: w, Progress: cfg.Progress,
	}
	s, err := New(sc)
	if err != nil {
		return ScaleResult{}, err
	}
	n := cfg.Tracker.SubWindows
	warm := time.Duration(n+1) * sw
	end := warm + time.Duration(cfg.Epochs)*sw
	res := ScaleResult{Nodes: cfg.Nodes, Dests: cfg.Dests, Protocol: cfg.Protocol}
	ref, err := tracker.NewFleet(tracker.DefaultFleetConfig(), nil) // the exact union's quantiles
	if err != nil {
		return res, err
	}
	var unionErr []float64
	refCov := uint32(0)

	truth := make([]uint64, len(dests))
	for i, d := range dests {
		truth[i] = d.Dist.TrueQuantileMillis(cfg.Quantile)
	}
	var fleetErr, localErr []float64
	var fleetN, localN []uint64
	measure := func(now time.Time) {
		for i, d := range dests {
			var first []uint64
			for o := range cfg.Observers {
				f := s.Fleet(o)
				est, err := f.Estimate(d.Name, cfg.Quantile, now)
				if err != nil {
					s.fail(err)
					return
				}
				if est.HasFleetValue {
					fleetErr = append(fleetErr, relErr(est.FleetValueMillis, truth[i]))
					fleetN = append(fleetN, est.Samples)
				}
				if o == 0 && est.HasLocalValue {
					localErr = append(localErr, relErr(est.LocalValueMillis, truth[i]))
					localN = append(localN, est.LocalSamples)
				}
				v := f.ViewCounts(d.Name, now)
				if o == 0 {
					first = v
					u := s.unionView(d.Name, cfg.Tracker.Epoch(now))
					res.UnionChecks++
					if !slices.Equal(u, v) {
						res.UnionMismatches++
					}
					if q, ok := unionQuantile(ref, &refCov, cfg.Tracker, d.Name, u, cfg.Quantile, now); ok && est.HasFleetValue {
						unionErr = append(unionErr, relErr(est.FleetValueMillis, q))
					}
				} else if !slices.Equal(first, v) {
					res.ViewMismatches++
				}
			}
		}
	}
	for k := range cfg.Epochs {
		s.At(warm+time.Duration(k)*sw+sw/2, measure)
		if cfg.KillOwners {
			s.At(warm+time.Duration(k)*sw+50*time.Millisecond, func(time.Time) {
				if killOwner(s, dests, k, cfg.Observers, cfg.DetectAfter) {
					res.Killed++
				}
			})
		}
	}
	if cfg.KillOwners {
		s.TrackKills()
	}
	if err := s.Run(warm); err != nil {
		return res, err
	}
	before := make([]NodeStats, cfg.Nodes)
	for i := range before {
		before[i] = s.NodeStats(i)
	}
	if err := s.Run(end); err != nil {
		return res, err
	}
	secs := (end - warm).Seconds()
	for i := range cfg.Nodes {
		st := s.NodeStats(i)
		b := float64(st.TotalBytes()-before[i].TotalBytes()) / secs
		res.BytesPerNodeSec += b / float64(cfg.Nodes)
		res.MaxBytesPerNodeSec = max(res.MaxBytesPerNodeSec, b)
		for k := range st.Bytes {
			res.ByKind[k] += float64(st.Bytes[k]-before[i].Bytes[k]) / secs / float64(cfg.Nodes)
		}
		res.Duplicates += st.Duplicates - before[i].Duplicates
		res.SendDrops += st.SendDrops - before[i].SendDrops
		res.Lost += st.Lost - before[i].Lost
		res.Refused += st.Refused - before[i].Refused
		res.V2 = addV2(res.V2, st.V2, before[i].V2)
	}
	// Give the last measured epoch's batches time to spread (not counted in
	// the bandwidth figures).
	if err := s.Run(end + sw); err != nil {
		return res, err
	}
	var took []time.Duration
	if s.v2 {
		for _, c := range s.aggregateConvergence() {
			sealAt := time.Duration(c.slot.epoch+1-s.first) * sw // the end of its epoch
			if sealAt < warm || sealAt >= end {
				continue
			}
			if !c.exact {
				res.FinalMismatches++
			}
			if c.convergedAt < 0 {
				res.Unconverged++
				continue
			}
			took = append(took, c.convergedAt-sealAt)
		}
	} else {
		for _, c := range s.Converged() {
			if c.SealAt >= warm && c.SealAt < end {
				took = append(took, c.Took)
			}
		}
		res.Unconverged = s.Unconverged(warm, end)
	}
	res.Batches = len(took) + res.Unconverged
	slices.Sort(took)
	res.ConvergeP50, res.ConvergeP99, res.ConvergeMax = pctDur(took, 0.50), pctDur(took, 0.99), pctDur(took, 1)
	slices.Sort(unionErr)
	res.UnionErrP50, res.UnionErrP90 = pct(unionErr, 0.5), pct(unionErr, 0.9)
	res.HeldBytes = s.HeldBytes(0)
	if st := s.NodeStats(0); st.Held > 0 {
		res.BatchBytes = float64(res.HeldBytes) / float64(st.Held)
	}
	slices.Sort(fleetErr)
	slices.Sort(localErr)
	res.FleetErrP50, res.FleetErrP90 = pct(fleetErr, 0.5), pct(fleetErr, 0.9)
	res.LocalErrP50, res.LocalErrP90 = pct(localErr, 0.5), pct(localErr, 0.9)
	slices.Sort(fleetN)
	slices.Sort(localN)
	if len(fleetN) > 0 {
		res.FleetSamples = fleetN[len(fleetN)/2]
	}
	if len(localN) > 0 {
		res.LocalSamples = localN[len(localN)/2]
	}
	if cfg.Observers > 0 {
		res.FleetBatches = s.Fleet(0).Stats().Batches
	}
	res.Events = s.Events()
	res.PeakHeapBytes = s.PeakHeap()
	var ms runtime.MemStats
	if cfg.MeasureMemory {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	res.HeapBytes = ms.HeapAlloc
	if cfg.MeasureMemory && cfg.Observers > 0 {
		// Measured by difference, in two steps: the fleet state, then the
		// local trackers the fleet views held.
		freed := func(before *runtime.MemStats) float64 {
			runtime.GC()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			d := 0.0
			if before.HeapAlloc > after.HeapAlloc {
				d = float64(before.HeapAlloc-after.HeapAlloc) / float64(cfg.Observers)
			}
			*before = after
			return d
		}
		s.ReleaseObserverFleets()
		res.FleetBytes = freed(&ms)
		s.ReleaseObserverTrackers()
		res.LocalTrackerBytes = freed(&ms)
	}
	runtime.KeepAlive(s)
	res.Wall = time.Since(wallStart)
	return res, nil
}

// addV2 returns sum plus (now − before), counter by counter (every
// field of cluster.V2Stats is a uint64 count).
func addV2(sum, now, before cluster.V2Stats) cluster.V2Stats {
	s, n, b := reflect.ValueOf(&sum).Elem(), reflect.ValueOf(now), reflect.ValueOf(before)
	for i := range s.NumField() {
		s.Field(i).SetUint(s.Field(i).Uint() + n.Field(i).Uint() - b.Field(i).Uint())
	}
	return sum
}

func relErr(v, truth uint64) float64 {
	if truth == 0 {
		return math.Abs(float64(v))
	}
	return math.Abs(float64(v)-float64(truth)) / float64(truth)
}

// pct returns the q-quantile of sorted xs by the nearest-rank rule, 0 if empty.
func pct(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[max(0, int(math.Ceil(q*float64(len(xs))))-1)]
}

func pctDur(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	return xs[max(0, int(math.Ceil(q*float64(len(xs))))-1)]
}

// ScaleTable formats results as a markdown table.
func ScaleTable(rs []ScaleResult) string {
	var b strings.Builder
	b.WriteString("| protocol | N | D | seal→identical p50 / p99 / max | unconverged | refused | sent KiB/s/node (mean / max) | fleet state MiB/node (measured; + local tracker) | P99.99 err vs truth, fleet p50 / p90 | local p50 / p90 | views = exact union | err vs exact union p50 / p90 | samples fleet / local | sim heap MiB | wall |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		mem := "—"
		if r.FleetBytes > 0 {
			mem = fmt.Sprintf("%.1f + %.1f", r.FleetBytes/(1<<20), r.LocalTrackerBytes/(1<<20))
		}
		fmt.Fprintf(&b, "| v%d | %d | %d | %v / %v / %v | %d/%d | %d | %.0f / %.0f | %s | %.1f %% / %.1f %% | %.1f %% / %.1f %% | %d/%d | %.2f %% / %.2f %% | %d / %d | %d | %v |\n",
			r.Protocol, r.Nodes, r.Dests, r.ConvergeP50.Round(time.Millisecond), r.ConvergeP99.Round(time.Millisecond), r.ConvergeMax.Round(time.Millisecond),
			r.Unconverged, r.Batches, r.Refused, r.BytesPerNodeSec/1024, r.MaxBytesPerNodeSec/1024, mem,
			100*r.FleetErrP50, 100*r.FleetErrP90, 100*r.LocalErrP50, 100*r.LocalErrP90,
			r.UnionChecks-r.UnionMismatches, r.UnionChecks, 100*r.UnionErrP50, 100*r.UnionErrP90,
			r.FleetSamples, r.LocalSamples, r.HeapBytes>>20, r.Wall.Round(100*time.Millisecond))
	}
	return b.String()
}

// unionQuantile returns quantile q of the dense counts u (dest's exact
// union) by the fleet's own rule, through a reader Fleet given u as an
// aggregate; false when u is empty.
func unionQuantile(ref *tracker.Fleet, cov *uint32, trk tracker.Config, dest string, u []uint64, q float64, now time.Time) (uint64, bool) {
	a := tracker.Aggregate{Dest: dest, Epoch: trk.Epoch(now) - 1, Layout: trk.Layout(), Peers: 1, Newest: trk.Epoch(now) - 1}
	for i, c := range u {
		if c > 0 {
			a.Buckets = append(a.Buckets, tracker.Bucket{Index: uint16(i), Count: uint32(c)})
			a.Total += c
		}
	}
	if a.Total == 0 {
		return 0, false
	}
	*cov++
	a.Coverage = tracker.Coverage{Records: *cov}
	if ref.InsertAggregate(a, now) != tracker.InsertNew {
		return 0, false
	}
	e, err := ref.Estimate(dest, q, now)
	if err != nil || !e.HasFleetValue {
		return 0, false
	}
	return e.FleetValueMillis, true
}

// killOwner kills the first owner (as observer 0 sees it) of the k-th
// destination that is not an observer, and reports whether it killed one.
func killOwner(s *Sim, dests []NamedDist, k, observers int, detect time.Duration) bool {
	for j := range dests {
		d := dests[(k+j)%len(dests)]
		owners := s.Owners(0, d.Name)
		if len(owners) == 0 {
			continue
		}
		var i int
		if _, err := fmt.Sscanf(owners[0], "n%04d", &i); err != nil || i < observers || s.nodes[i].dead {
			continue
		}
		s.Kill(i, detect)
		return true
	}
	return false
}
