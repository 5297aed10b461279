package sim

import (
	"fmt"
	"strings"
	"time"
)

// DecisionTable formats results as markdown: the original scenario's
// columns (the stall, step, rare and dead destinations).
func DecisionTable(rs []DecisionResult) string {
	var b strings.Builder
	b.WriteString("| policy | spurious timeouts, all | stall dest | rare callers | step dest, 30 s after step | mean timeout, stall dest | step followed after (p50 / max) | wait per request to dead peer |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		follow := fmt.Sprintf("%v / %v", r.FollowP50.Round(10*time.Millisecond), r.FollowMax.Round(10*time.Millisecond))
		switch {
		case r.FollowNever > 0 && r.FollowP50 == 0 && r.FollowMax == 0:
			follow = "never"
		case r.FollowNever > 0:
			follow += fmt.Sprintf(" (%d nodes never)", r.FollowNever)
		}
		fmt.Fprintf(&b, "| %s | %.4f %% | %.4f %% | %.3f %% | %.3f %% | %v | %s | %v |\n",
			r.Policy, 100*r.Spurious, 100*r.SpuriousStall, 100*r.SpuriousRare, 100*r.SpuriousStep,
			r.MeanTimeoutStall.Round(time.Millisecond), follow, roundWait(r.DeadWaitMean))
	}
	return b.String()
}

// FailureTable formats results as markdown: the failure scenarios (a dead
// peer, hanging requests, slow requests, a tight start, the step), each
// with the wait per request or per hung request, the requests our timeout
// failed, and the probes.
func FailureTable(rs []DecisionResult) string {
	var b strings.Builder
	b.WriteString("| policy | dead peer: wait per request | 1 % hang: wait per hung request | 1 % hang: failed by our timeout | 0.05 % hang: wait per hung request | 1 % slow: failed by our timeout | 1 % slow: wait per request | tight start: failed by our timeout | tight start: recovered after | step: failed by our timeout | probes (dead / 1 % hang / tight) |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		sc := r.Scenarios
		tight := roundWait(r.TightRecovered)
		if r.TightNever > 0 {
			tight = fmt.Sprintf("%v (%d nodes never)", tight, r.TightNever)
		}
		fmt.Fprintf(&b, "| %s | %v | %v | %.3f %% | %v | %.3f %% | %v | %.2f %% | %s | %.3f %% | %d / %d / %d |\n",
			r.Policy, roundWait(sc[DestDead].WaitMean()), roundWait(sc[DestHang].HungWaitMean()),
			100*sc[DestHang].SpuriousRate(), roundWait(sc[DestHangRare].HungWaitMean()),
			100*sc[DestSlow].SpuriousRate(), roundWait(sc[DestSlow].WaitMean()),
			100*sc[DestTight].SpuriousRate(), tight, 100*sc[DestStep].SpuriousRate(),
			sc[DestDead].Probes, sc[DestHang].Probes, sc[DestTight].Probes)
	}
	return b.String()
}

// roundWait rounds a wait for a table: to the millisecond below 10 s, to
// 0.1 s above.
func roundWait(d time.Duration) string {
	if d >= 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}
