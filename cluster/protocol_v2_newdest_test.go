package cluster

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOwnerKeepsRecordsWhileNewDestinationsSpread: the owners are computed
// over the destinations each node knows, and a new one is known at first
// only by its origins and their owners. Every node calls x0..x5, c and d
// call new2 from e3 on (b owns it); in e6 b starts calling new5 and d new4
// and new6. For half a second after their seals b and d, each knowing
// some of the three, give new2 to a, while c, knowing none, keeps it at
// b; once the first aggregates of the three have spread, all give it to
// b again. b dropped its records of new2 at once when it gave it away: d
// sent them again (its owners changed twice), c never (its did not), and
// c's records of e3, e4 and e5 stayed missing from every view until they
// slid out of the window (4 of 8 samples at 47 s, none of c's; then 3
// short). An owner now keeps the records of what it gave away until they
// age out of the window.
func TestOwnerKeepsRecordsWhileNewDestinationsSpread(t *testing.T) {
	s := startScenario(t, "init nodes=(a,b,c,d) v2 ae=1m bulk-peers=0 owners=1")
	type calls struct {
		from    int
		origins []string
	}
	dests := map[string]calls{
		"new2": {3, []string{"c", "d"}},
		"new4": {6, []string{"d"}}, "new5": {6, []string{"b"}}, "new6": {6, []string{"d"}},
	}
	for i := range 6 {
		dests[fmt.Sprintf("x%d", i)] = calls{0, []string{"a", "b", "c", "d"}}
	}
	names := slices.Sorted(maps.Keys(dests))
	for k := 0; k < 12; k++ { // one sample per origin and epoch, at 5 s into it
		if k == 7 { // just after the seals of e6
			runCutOff(t, s, 42500*time.Millisecond, "")
			of := func(n string) []string { return s.byName[n].p.v2.owners.Of("new2") }
			require.Equal(t, [][]string{{"a"}, {"b"}, {"a"}}, [][]string{of("b"), of("c"), of("d")}, "new2's owners at b, c and d")
		}
		runCutOff(t, s, time.Duration(k)*6*time.Second+5*time.Second, "")
		if k == 4 {
			require.Equal(t, []string{"b"}, s.byName["c"].p.Owners("new2", s.start.Add(s.now)))
		}
		if k >= 7 {
			n := 2 * (k - 3) // new2's samples: e3..e(k-1), all in the window
			want := fmt.Sprintf("a: new2 samples=%d peers=2 local=0\nb: new2 samples=%d peers=2 local=0\nc: new2 samples=%d peers=2 local=%d\nd: new2 samples=%d peers=2 local=%d\n",
				n, n, n, n/2, n, n/2)
			require.Equal(t, want, scenarioStep(t, s, "view dest=new2"), "view at %v", s.now)
		}
		for _, d := range names {
			if k < dests[d].from {
				continue
			}
			for _, o := range dests[d].origins {
				scenarioStep(t, s, fmt.Sprintf("record n=%s dest=%s ms=12", o, d))
			}
		}
	}
}

// TestOwnerRepublishesADestinationNewToIt: new0, new1 and new2 appear in
// e2 at three origins (c calls new0 and new2, b and d new1). c, not knowing
// new1, first sends its new2 records to b, which gives new2 to a; with the
// first aggregates of new0 and new1 (18.9 s) c gives it to a too and sends
// a its records, after a's publish. a did not know new2 until then, so it
// took them for records of a destination it does not own and did not
// publish again: c's e2 record was in no view in e3 (0 of 1 samples at
// 23 s), one epoch later than a record's usual delay.
func TestOwnerRepublishesADestinationNewToIt(t *testing.T) {
	s := startScenario(t, "init nodes=(a,b,c,d) v2 ae=1m bulk-peers=0 owners=1")
	for k := 0; k < 4; k++ {
		runCutOff(t, s, time.Duration(k)*6*time.Second+5*time.Second, "")
		if k == 3 {
			require.Equal(t, "a: new2 samples=1 peers=1 local=0\nb: new2 samples=1 peers=1 local=0\nc: new2 samples=1 peers=1 local=1\nd: new2 samples=1 peers=1 local=0\n",
				scenarioStep(t, s, "view dest=new2"), "view at %v", s.now)
		}
		for i := range 6 {
			for _, o := range []string{"a", "b", "c", "d"} {
				scenarioStep(t, s, fmt.Sprintf("record n=%s dest=x%d ms=12", o, i))
			}
		}
		if k == 2 {
			for _, r := range []string{"n=c dest=new0", "n=b dest=new1", "n=d dest=new1", "n=c dest=new2"} {
				scenarioStep(t, s, "record ms=12 "+r)
			}
		}
		if k == 3 {
			require.Equal(t, []string{"a"}, s.byName["c"].p.v2.owners.Of("new2"))
		}
	}
}
