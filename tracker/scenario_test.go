package tracker

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of the scenario files under testdata/")

// TestFleetScenarios runs the fleet scenarios of testdata/fleet/*.txt, in the
// style of etcd-io/raft's testdata: each case is a command line, a line
// "----", and the output expected, up to a blank line. A behaviour change
// shows as a readable diff of these files; after an intended one, run
//
//	go test ./tracker -run TestFleetScenarios -rewrite
//
// and review the diff. Lines starting with # are comments. Commands:
//
//	fleet [sub-windows=10] [min-samples=3] [min-peers=0] [share=0.25] [max-origins=256]
//	      [max-dests=4096] [max-epoch-buckets=262144] [max-buckets=33554432] [self=NAME]
//	                        a new Fleet with a local Tracker of the same window, at epoch 0
//	at epoch=E [ms=X]       move the clock to X ms into epoch E (epochs count from the
//	                        scenario's start) and slide the fleet to it
//	insert origin=O boot=B epoch=E [part=P] dest=D buckets=I:C,... [timed-out=I:C,...]
//	       [censoring-unknown] [total=T] [dest=D2 buckets=...]
//	                        insert a batch (bucket indices below 256 are the latency in ms);
//	                        timed-out, censoring-unknown and total apply to the dest before
//	record dest=D ms=M [n=N] [timed-out]
//	                        record N (default 1) samples in the local tracker, as timed-out
//	                        attempts with timed-out
//	exclude origin=O boot=B / include origin=O boot=B
//	live n=N                SetLiveMembers
//	estimate dest=D [q=Q]   the estimate and its decision input
//	view dest=D             the fleet view's buckets after the share cap
//	stats                   the counters and sizes that are not zero
//	keys                    the keys held, newest first
func TestFleetScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "fleet", "*.txt"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			runScenarioFile(t, file, &fleetScenario{})
		})
	}
}

// scenarioCase is one command and its output in a scenario file; pre holds
// the comment and blank lines before it, kept on rewrite.
type scenarioCase struct {
	pre    []string
	line   int
	cmd    string
	output string
}

func parseScenarios(t *testing.T, file string) (cases []scenarioCase, tail []string) {
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var pre []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			pre = append(pre, l)
			continue
		}
		c := scenarioCase{pre: pre, line: i + 1, cmd: l}
		pre = nil
		i++
		require.Less(t, i, len(lines), "%s:%d: no ---- after the command", file, c.line)
		require.Equal(t, "----", lines[i], "%s:%d: the line after a command must be ----", file, c.line)
		var out []string
		for i+1 < len(lines) && lines[i+1] != "" {
			i++
			out = append(out, lines[i])
		}
		c.output = strings.Join(out, "\n")
		cases = append(cases, c)
	}
	return cases, pre
}

// scenarioRunner runs one command and returns its output.
type scenarioRunner interface {
	run(t *testing.T, cmd string, args scenarioArgs) string
}

func runScenarioFile(t *testing.T, file string, r scenarioRunner) {
	cases, tail := parseScenarios(t, file)
	var sb strings.Builder
	for _, c := range cases {
		name, args := parseCommand(t, c.cmd)
		got := strings.TrimRight(r.run(t, name, args), "\n")
		if *rewrite {
			for _, l := range c.pre {
				sb.WriteString(l + "\n")
			}
			fmt.Fprintf(&sb, "%s\n----\n%s\n", c.cmd, got)
			continue
		}
		require.Equal(t, c.output, got, "%s:%d: %s", file, c.line, c.cmd)
	}
	if *rewrite {
		for _, l := range tail {
			sb.WriteString(l + "\n")
		}
		require.NoError(t, os.WriteFile(file, []byte(sb.String()), 0o644))
	}
}

// scenarioArgs are a command's key=value arguments in order (keys repeat:
// dest=a buckets=... dest=b buckets=...); a bare word is a key with value "".
type scenarioArgs []scenarioArg

type scenarioArg struct{ key, val string }

func parseCommand(t *testing.T, line string) (string, scenarioArgs) {
	f := strings.Fields(line)
	var args scenarioArgs
	for _, w := range f[1:] {
		k, v, _ := strings.Cut(w, "=")
		args = append(args, scenarioArg{k, v})
	}
	return f[0], args
}

func (a scenarioArgs) str(key, def string) string {
	for _, x := range a {
		if x.key == key {
			return x.val
		}
	}
	return def
}

func (a scenarioArgs) has(key string) bool {
	return slices.ContainsFunc(a, func(x scenarioArg) bool { return x.key == key })
}

func (a scenarioArgs) int(t *testing.T, key string, def int64) int64 {
	s := a.str(key, "")
	if s == "" {
		return def
	}
	v, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err, "%s=%s", key, s)
	return v
}

func (a scenarioArgs) float(t *testing.T, key string, def float64) float64 {
	s := a.str(key, "")
	if s == "" {
		return def
	}
	v, err := strconv.ParseFloat(s, 64)
	require.NoError(t, err, "%s=%s", key, s)
	return v
}

// parseBuckets reads "I:C,I:C" (or "" for none).
func parseBuckets(t *testing.T, s string) []Bucket {
	var out []Bucket
	for p := range strings.SplitSeq(s, ",") {
		if p == "" {
			continue
		}
		i, c, ok := strings.Cut(p, ":")
		require.True(t, ok, "bucket %q is not index:count", p)
		iv, err := strconv.ParseUint(i, 10, 16)
		require.NoError(t, err)
		cv, err := strconv.ParseUint(c, 10, 32)
		require.NoError(t, err)
		out = append(out, Bucket{Index: uint16(iv), Count: uint32(cv)})
	}
	return out
}

func formatBuckets(bs []Bucket) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = fmt.Sprintf("%d:%d", b.Index, b.Count)
	}
	return strings.Join(parts, ",")
}

// scenarioBase is the epoch scenario epochs count from.
const scenarioBase = testE

// fleetScenario is the state of a fleet scenario file.
type fleetScenario struct {
	cfg   FleetConfig
	f     *Fleet
	local *Tracker[string]
	now   time.Time
}

func (s *fleetScenario) run(t *testing.T, cmd string, a scenarioArgs) string {
	if cmd != "fleet" {
		require.NotNil(t, s.f, "the first command must be fleet")
	}
	switch cmd {
	case "fleet":
		c := DefaultFleetConfig()
		c.Tracker.SubWindows = int(a.int(t, "sub-windows", int64(c.Tracker.SubWindows)))
		c.Tracker.Window = time.Duration(c.Tracker.SubWindows) * 6 * time.Second
		c.Tracker.MinSamples = uint32(a.int(t, "min-samples", int64(c.Tracker.MinSamples)))
		c.MinPeers = int(a.int(t, "min-peers", int64(c.MinPeers)))
		c.MaxOriginShare = a.float(t, "share", c.MaxOriginShare)
		c.MaxOrigins = int(a.int(t, "max-origins", int64(c.MaxOrigins)))
		c.MaxDestinations = int(a.int(t, "max-dests", int64(c.MaxDestinations)))
		c.MaxEpochBuckets = int(a.int(t, "max-epoch-buckets", int64(c.MaxEpochBuckets)))
		c.MaxBuckets = int(a.int(t, "max-buckets", int64(c.MaxBuckets)))
		c.Self = a.str("self", "")
		local, err := New[string](c.Tracker)
		require.NoError(t, err)
		s.cfg, s.local, s.f = c, local, newTestFleet(t, c, local)
		s.now = c.Tracker.EpochStart(scenarioBase)
		s.f.Advance(s.now)
		return "ok"
	case "at":
		e := a.int(t, "epoch", 0)
		s.now = fleetAt(s.cfg, scenarioBase+e, a.int(t, "ms", 0))
		s.f.Advance(s.now)
		return fmt.Sprintf("epoch %d", s.f.epoch-scenarioBase)
	case "insert":
		b := Batch{
			Key: BatchKey{
				Origin: a.str("origin", ""), Boot: uint64(a.int(t, "boot", 1)),
				Epoch: scenarioBase + a.int(t, "epoch", 0), Part: uint16(a.int(t, "part", 0)),
			},
			Layout: s.cfg.Tracker.Layout(),
		}
		for _, x := range a {
			switch x.key {
			case "dest":
				b.Dests = append(b.Dests, DestCounts{Dest: x.val})
			case "buckets":
				d := &b.Dests[len(b.Dests)-1]
				d.Buckets = parseBuckets(t, x.val)
				for _, bk := range d.Buckets {
					d.Total += uint64(bk.Count)
				}
			case "timed-out":
				b.Dests[len(b.Dests)-1].TimedOut = parseBuckets(t, x.val)
			case "censoring-unknown":
				b.Dests[len(b.Dests)-1].CensoringUnknown = true
			case "total":
				v, err := strconv.ParseUint(x.val, 10, 64)
				require.NoError(t, err)
				b.Dests[len(b.Dests)-1].Total = v
			}
		}
		o := s.f.Insert(b, s.now)
		checkInvariants(t, s.f)
		return o.String()
	case "record":
		for range a.int(t, "n", 1) {
			if a.has("timed-out") {
				s.local.RecordTimeoutMillis(a.str("dest", ""), uint64(a.int(t, "ms", 0)), s.now)
			} else {
				s.local.RecordMillis(a.str("dest", ""), uint64(a.int(t, "ms", 0)), s.now)
			}
		}
		return "ok"
	case "exclude", "include":
		if cmd == "exclude" {
			s.f.Exclude(a.str("origin", ""), uint64(a.int(t, "boot", 1)), s.now)
		} else {
			s.f.Include(a.str("origin", ""), uint64(a.int(t, "boot", 1)), s.now)
		}
		checkInvariants(t, s.f)
		return "ok"
	case "live":
		s.f.SetLiveMembers(int(a.int(t, "n", 1)))
		return fmt.Sprintf("min-peers %d", s.f.MinPeers())
	case "estimate":
		e, err := s.f.Estimate(a.str("dest", ""), a.float(t, "q", 0.99), s.now)
		if err != nil {
			return "error: " + err.Error()
		}
		return formatEstimate(e)
	case "view":
		counts := s.f.ViewCounts(a.str("dest", ""), s.now)
		if counts == nil {
			return "empty"
		}
		var bs []Bucket
		for i, c := range counts {
			if c > 0 {
				bs = append(bs, Bucket{Index: uint16(i), Count: uint32(c)})
			}
		}
		return formatBuckets(bs)
	case "stats":
		return formatFleetStats(s.f.Stats())
	case "keys":
		var lines []string
		for _, k := range s.f.Keys(s.now) {
			b, _ := s.f.Lookup(k)
			var ds []string
			for _, d := range b.Dests {
				switch {
				case len(d.TimedOut) > 0:
					ds = append(ds, fmt.Sprintf("%s[%s timed-out %s]", d.Dest, formatBuckets(d.Buckets), formatBuckets(d.TimedOut)))
				case d.CensoringUnknown:
					ds = append(ds, fmt.Sprintf("%s[%s censoring-unknown]", d.Dest, formatBuckets(d.Buckets)))
				default:
					ds = append(ds, fmt.Sprintf("%s[%s]", d.Dest, formatBuckets(d.Buckets)))
				}
			}
			lines = append(lines, fmt.Sprintf("%s/%d@%d.%d %s", k.Origin, k.Boot, k.Epoch-scenarioBase, k.Part, strings.Join(ds, " ")))
		}
		if len(lines) == 0 {
			return "none"
		}
		return strings.Join(lines, "\n")
	}
	t.Fatalf("unknown command %q", cmd)
	return ""
}

func optMillis(v uint64, ok bool) string {
	if !ok {
		return "none"
	}
	return strconv.FormatUint(v, 10)
}

// formatEstimate prints an estimate on three lines: the views, the
// censored counts, then the decision input.
func formatEstimate(e Estimate) string {
	st := "none"
	if e.HasStaleness {
		st = e.Staleness.String()
	}
	dv, ok := e.DecisionValue()
	return fmt.Sprintf("source=%s value=%s fleet=%s local=%s samples=%d local-samples=%d peers=%d eff=%.2f staleness=%s\n"+
		"censored=%d local-censored=%d max-completed=%s failing=%v\n"+
		"decision value=%s source=%s guarded=%v q=%d",
		e.Source, optMillis(e.ValueMillis, e.Trusted()), optMillis(e.FleetValueMillis, e.HasFleetValue),
		optMillis(e.LocalValueMillis, e.HasLocalValue), e.Samples, e.LocalSamples, e.Peers, e.EffectivePeers, st,
		e.Censored, e.LocalCensored, optMillis(e.MaxCompletedMillis, e.HasMaxCompleted), e.Failing,
		optMillis(dv, ok), e.DecisionSource(), e.Decision.Guarded, e.DecisionQuantileMillis())
}

func formatFleetStats(s FleetStats) string {
	var parts []string
	for o := InsertOutcome(0); o < numInsertOutcomes; o++ {
		if n := s.Inserts[o]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", o, n))
		}
	}
	line1 := "inserts " + strings.Join(parts, " ")
	parts = nil
	for _, c := range []struct {
		name string
		n    uint64
	}{
		{"expired", s.Expired}, {"origins-evicted", s.OriginsEvicted}, {"dests-evicted", s.DestinationsEvicted},
		{"dests-refused", s.DestinationsRefused}, {"exclusions-evicted", s.ExclusionsEvicted},
	} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", c.name, c.n))
		}
	}
	line2 := fmt.Sprintf("members=%d excluded=%d peers=%d dests=%d batches=%d buckets=%d",
		s.Members, s.Excluded, s.Peers, s.Destinations, s.Batches, s.Buckets)
	if len(parts) > 0 {
		line2 = strings.Join(parts, " ") + "\n" + line2
	}
	return line1 + "\n" + line2
}
