package cluster

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// ErrJoinRefused reports a join that a seed refused, or that this node
// refused, because the two sides advertise different settings (window,
// sub-window or histogram layout): their batches would never count in each
// other's fleet views. Start returns it when a seed refused the initial
// join, or a seed or member of this release showed other settings (see
// checkSettings); the text names each setting that differs.
var ErrJoinRefused = errors.New("cluster: join refused")

// settings are what a member must share with the fleet to be one of it:
// the epoch grid (window and sub-window) and the histogram layout.
// Members with a Store advertise them in their metadata (version 2, once
// the cluster speaks Level2; see metaVersionFor) and in their push/pull
// state; a member whose settings differ is refused in memberlist's alive
// and merge delegates, or, when its metadata was version 1, as soon as its
// push/pull state shows them (judgeState): it is no member, since its
// batches would be refused as stale_epoch, future_epoch or decode_layout,
// its data silently lost.
type settings struct {
	window, subWindow time.Duration
	layout            tracker.Layout
}

func newSettings(c tracker.Config) settings {
	return settings{window: c.Window, subWindow: c.SubWindow(), layout: c.Layout()}
}

// difference is one setting that differs: ours, and theirs.
type difference struct {
	setting      string // as atnode names it: "-window", "-sub-window", "histogram layout"
	ours, theirs string
}

// diff lists the settings in which theirs differs from s, in a fixed order.
func (s settings) diff(theirs settings) []difference {
	var out []difference
	if s.window != theirs.window {
		out = append(out, difference{"-window", shortDuration(s.window), shortDuration(theirs.window)})
	}
	if s.subWindow != theirs.subWindow {
		out = append(out, difference{"-sub-window", shortDuration(s.subWindow), shortDuration(theirs.subWindow)})
	}
	if s.layout != theirs.layout {
		out = append(out, difference{"histogram layout", layoutText(s.layout), layoutText(theirs.layout)})
	}
	return out
}

// shortDuration writes whole seconds as "60s" rather than time's "1m0s",
// the way the flags are usually given; anything else as time does.
func shortDuration(d time.Duration) string {
	if d > 0 && d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}

func layoutText(l tracker.Layout) string {
	return fmt.Sprintf("%d..%d ms at %d significant digits", l.Lowest, l.Highest, l.SignificantDigits)
}

// joinText says how the other side's settings differ, from the joiner's
// side: "-sub-window 3s differs from the cluster's 6s".
func joinText(ds []difference) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%s %s differs from the cluster's %s", d.setting, d.ours, d.theirs)
	}
	return strings.Join(parts, " and ")
}

// memberText says how a member's settings differ, from this node's side:
// "advertises -sub-window 3s (this node's is 6s)".
func memberText(ds []difference) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%s %s (this node's is %s)", d.setting, d.theirs, d.ours)
	}
	return "advertises " + strings.Join(parts, " and ")
}

// mismatchRetention is how long a config_mismatch warning stays after the
// last refusal it reports: long enough for an operator to see the refused
// member on the dashboard after it gave up.
const mismatchRetention = 5 * time.Minute

// judge decides whether node n may be a member: a member advertising
// settings other than this node's is refused (see refuse: a config_mismatch
// warning, and the member, if this node lists it already — it joined
// while it advertised version 1 —, marked refused); one advertising none
// (version 1 metadata, or none readable) is not this node's to judge by
// its metadata (see judgeState). joining is true for memberlist's merge
// delegate (a join's push/pull), false for its alive delegate. It runs
// inside memberlist's callbacks, under its node lock: it takes only c.mu
// and the warnings' lock.
func (c *Cluster) judge(n *memberlist.Node, joining bool) error {
	if c.settings == nil || n.Name == c.self {
		return nil
	}
	m, err := decodeMeta(n.Name, n.Meta)
	if err != nil || m.settings == nil {
		return nil
	}
	ds := c.settings.diff(*m.settings)
	if len(ds) == 0 {
		return nil
	}
	_, refusal := c.refuse(n.Name, net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))), ds, joining)
	return refusal
}

// aliveDelegate is memberlist's AliveDelegate: an alive message about a
// member whose settings differ is ignored, so the member is never added
// (or updated). memberlist calls it for every alive message, this node's
// own included, with its node lock held.
type aliveDelegate struct{ c *Cluster }

func (d aliveDelegate) NotifyAlive(n *memberlist.Node) error { return d.c.judge(n, false) }

// mergeDelegate is memberlist's MergeDelegate: a join's push/pull with a
// side whose members' settings differ is cancelled on both sides. The
// joiner's Join then fails with the returned error in its text (this is
// how Start tells a refusal from an unreachable seed); the side joined
// logs memberlist's "failed push/pull merge" and reports config_mismatch.
type mergeDelegate struct{ c *Cluster }

func (d mergeDelegate) NotifyMerge(peers []*memberlist.Node) error {
	for _, n := range peers {
		if err := d.c.judge(n, true); err != nil {
			return err
		}
	}
	return nil
}

// refusal returns the text of the refusal a failed Join reports, if it was
// one (a NotifyMerge error of ours, flattened by memberlist into its own
// error text; errText separates the errors of several seeds with "; ",
// which joinText never writes), else "".
func refusal(joinErr error) string {
	prefix := ErrJoinRefused.Error() + ": "
	for part := range strings.SplitSeq(errText(joinErr), "; ") {
		if _, rest, ok := strings.Cut(part, prefix); ok {
			return rest
		}
	}
	return ""
}
