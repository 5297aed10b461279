package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCutOffOwnerPullsTheGap: db's first owner a cannot be reached from
// 19 s (e3) to 41 s (e6), and no member list notices (membership probes
// pass while the protocol's streams are cut), so the owners never change
// and nobody sends the window again: the records b and c seal of e3, e4
// and e5 are lost on their way to a. After the cut the seal of e6 carries
// the manifests of e5 and e6, which bring e5 back; without more, e3 and
// e4 (10 samples) stayed missing from a's aggregates until they slid out
// of the window (one owner: every view short by them; two: the second
// owner's takeover covered them, from its failover on, in every round). a
// last heard from b and c at e2: the gap in what they sent it says what
// it lost, and it pulls those epochs. Cut off longer than the window (to
// 77 s, e12), a holds nothing of b and c any more and pulls the whole
// window; without, e4..e10 (35 of 45 samples) were missing until they slid
// out.
func TestCutOffOwnerPullsTheGap(t *testing.T) {
	for _, owners := range []int{1, 2} {
		for _, until := range []int{7, 13} {
			t.Run(fmt.Sprintf("owners=%d/cut-e3-e%d", owners, until-1), func(t *testing.T) {
				s := startScenario(t, fmt.Sprintf("init nodes=(a,b,c) v2 ae=1m bulk-peers=0 owners=%d", owners))
				var takeovers uint64
				for k := 0; k < until+3; k++ { // b and c call db in every epoch; a does not
					cut := ""
					if k >= 3 && k < until {
						cut = "a"
					}
					if k == 3 {
						runCutOff(t, s, 19*time.Second, "")
						require.Equal(t, "a", s.byName["b"].p.Owners("db", s.start.Add(s.now))[0])
					}
					// Between the first owner's publish (0.9 s) and the
					// second's failover (1.9 s), and late in the epoch.
					for _, at := range []time.Duration{1500 * time.Millisecond, 5 * time.Second} {
						runCutOff(t, s, time.Duration(k)*6*time.Second+at, cut)
						view := scenarioStep(t, s, "view dest=db")
						if k >= until {
							w := min(k, 9) // the window: e(k-9)..e(k-1)
							n := 5 * w     // 5 samples in each epoch
							want := fmt.Sprintf("a: db samples=%d peers=2 local=0\nb: db samples=%d peers=2 local=%d\nc: db samples=%d peers=2 local=%d\n", n, n, 3*w, n, 2*w)
							require.Equal(t, want, view, "view at %v", s.now)
						}
					}
					if k == until-1 {
						for _, x := range s.nodes {
							takeovers += x.p.Stats().V2.Takeovers
						}
					}
					scenarioStep(t, s, "record n=b dest=db ms=12 count=3")
					scenarioStep(t, s, "record n=c dest=db ms=40 count=2")
				}
				var after uint64
				for _, x := range s.nodes {
					after += x.p.Stats().V2.Takeovers
				}
				require.Equal(t, takeovers, after, "no takeover after the cut: a's aggregates are complete")
				t.Log(scenarioStep(t, s, "stats"))
			})
		}
	}
}
