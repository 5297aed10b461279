package cluster

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// Clock skew. Every message a protocol sends carries its clock (codec's
// sent_at: its now, in Unix ms), and every message received from a member
// up gives a one-way sample of that member's clock against this node's:
// sent_at − the receipt time. Transit (and, for a batch, the send queue)
// biases a sample by its delay, a few milliseconds on a LAN, so a peer
// looks slightly behind; a quarter sub-window (1.5 s at the defaults) is
// far above that. A peer's offset is the median of its last clockSamples
// samples younger than clockSampleAge (at least minClockSamples of them),
// robust to a message that waited in a queue.
//
// The fleet's time is the median clock: the median of every clock this
// node sees, its own (offset 0) and its peers'. This node is skewed when
// it is more than a quarter sub-window off that median, and so is a peer;
// with one bad clock among three or more nodes the median is the good
// ones' time, so only the bad one is reported, on itself and on every
// peer. A verdict waits for two peers' offsets. With two nodes nobody can
// tell which clock is wrong: each reports the difference, on itself.
const (
	clockSamples    = 15
	minClockSamples = 3
	clockSampleAge  = 2 * time.Minute
)

// clockSample is one one-way sample of a peer's clock.
type clockSample struct {
	offset int64 // the peer's clock minus this node's, ms: sent_at − receipt time
	at     int64 // receipt time on this node's clock, Unix ms
}

// peerClock is what this node knows of one member's clock.
type peerClock struct {
	samples [clockSamples]clockSample
	n, next int
	// refusedAt is when this node last refused one of its batches for
	// its epoch, and refusedAs the reason (stale_epoch, future_epoch).
	refusedAt time.Time
	refusedAs string
}

func (pc *peerClock) add(s clockSample) {
	pc.samples[pc.next] = s
	pc.next = (pc.next + 1) % clockSamples
	pc.n = min(pc.n+1, clockSamples)
}

// offset returns the median offset of the samples received at or after
// since (Unix ms), if there are at least minClockSamples of them. buf is
// scratch space.
func (pc *peerClock) offset(since int64, buf []int64) (int64, bool) {
	buf = buf[:0]
	for _, s := range pc.samples[:pc.n] {
		if s.at >= since {
			buf = append(buf, s.offset)
		}
	}
	if len(buf) < minClockSamples {
		return 0, false
	}
	return median(buf), true
}

// median returns the median of xs (the mean of the middle two for an even
// count), sorting xs in place; xs must not be empty.
func median(xs []int64) int64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	a, b := xs[n/2-1], xs[n/2]
	return a/2 + b/2 + (a%2+b%2)/2 // no overflow
}

// clockOf returns the clock record of member, made on first use, or nil
// when member is this node or not up (so records exist only for members).
func (p *Protocol) clockOf(member string) *peerClock {
	if member == p.self || !p.up(member) {
		return nil
	}
	pc := p.clocks[member]
	if pc == nil {
		pc = &peerClock{}
		p.clocks[member] = pc
	}
	return pc
}

// observeClock records the sent_at of a message from member received at
// now; 0 (not carried, or a forwarded batch) and clocks before 1970 are
// not samples.
func (p *Protocol) observeClock(member string, sentAt int64, now time.Time) {
	at := now.UnixMilli()
	if sentAt <= 0 || at < 0 {
		return
	}
	if pc := p.clockOf(member); pc != nil {
		pc.add(clockSample{offset: sentAt - at, at: at}) // both >= 0: no overflow
	}
}

// observeBatchEpoch records what a batch's epoch (v1), or a v2 record's,
// said about the clocks: this node refusing a peer's batches as
// future_epoch is its clock behind (or theirs ahead); accepting them is
// the grids agreeing. A record comes from its origin, so a refusal is
// also held against that peer.
func (p *Protocol) observeBatchEpoch(k tracker.BatchKey, o tracker.InsertOutcome, reject string, now time.Time) {
	if p.observeEpoch(o, now) {
		if pc := p.clockOf(MemberName(k.Origin, k.Boot)); pc != nil {
			pc.refusedAt, pc.refusedAs = now, reject
		}
	}
}

// observeEpoch records what an epoch received said about this node's
// clock (see observeBatchEpoch), and reports whether it was refused for
// the epoch. An aggregate's epoch is the fleet's, whoever relayed it: its
// refusal counts against this node's clock only.
func (p *Protocol) observeEpoch(o tracker.InsertOutcome, now time.Time) (refused bool) {
	switch o {
	case tracker.InsertNew, tracker.InsertDuplicate, tracker.InsertSuperseded:
		p.acceptedAt = now
	case tracker.InsertTooNew:
		p.futureAt = now
		return true
	case tracker.InsertTooOld:
		p.staleAt = now
		return true
	}
	return false
}

// clockMillis is now as sent_at: Unix ms, 0 (none) before 1970.
func clockMillis(now time.Time) int64 { return max(now.UnixMilli(), 0) }

// clockWarnings returns the clock_skew warnings at now, by subject: "self"
// when this node's clock is more than a quarter sub-window off its peers'
// median, and "peer/<member>" for each peer that far off the median of
// everyone else (see the comment at the top of this file).
func (p *Protocol) clockWarnings(now time.Time) map[string]Warning {
	since := now.UnixMilli() - clockSampleAge.Milliseconds()
	var members []string
	var offs []int64
	buf := make([]int64, 0, clockSamples)
	for _, m := range p.peers {
		if pc := p.clocks[m]; pc != nil {
			if off, ok := pc.offset(since, buf); ok {
				members, offs = append(members, m), append(offs, off)
			}
		}
	}
	// A verdict needs two peers' clocks (one, when there is only one).
	if len(offs) == 0 || len(offs) < min(2, len(p.peers)) {
		return nil
	}
	limit := p.cfg.Tracker.SubWindow().Milliseconds() / 4
	out := map[string]Warning{}
	if len(p.peers) == 1 {
		if abs64(offs[0]) > limit {
			out["self"] = Warning{Kind: WarnClockSkew, Message: p.pairSkewText(members[0], -offs[0], now)}
		}
		return out
	}
	fleet := median(append([]int64{0}, offs...)) // this node's clock, and its peers'
	if abs64(fleet) > limit {
		out["self"] = Warning{Kind: WarnClockSkew, Message: p.selfSkewText(-fleet, len(offs), now)}
	}
	for i, m := range members {
		if d := offs[i] - fleet; abs64(d) > limit {
			out["peer/"+m] = Warning{Kind: WarnClockSkew, Message: p.peerSkewText(m, d, now)}
		}
	}
	return out
}

func (p *Protocol) selfSkewText(skew int64, peers int, now time.Time) string {
	s := fmt.Sprintf("this node's clock is %s %s its peers' median (%d peers)", approx(skew), aheadBehind(skew), peers)
	return s + p.futureText(skew, now)
}

func (p *Protocol) pairSkewText(member string, skew int64, now time.Time) string {
	s := fmt.Sprintf("this node's clock is %s %s that of its only peer, %s (with two nodes either may be wrong)",
		approx(skew), aheadBehind(skew), p.peerName(member))
	return s + p.futureText(skew, now)
}

// futureText says what a skewed clock costs when this node refused peer
// batches (v2: records and aggregates) for their epochs lately (within a
// window): as future_epoch when it is behind, as stale_epoch when it is
// ahead.
func (p *Protocol) futureText(skew int64, now time.Time) string {
	recent := func(t time.Time) bool { return !t.IsZero() && now.Sub(t) < p.cfg.Tracker.Window }
	refusedAt, why := p.futureAt, RejectFutureEpoch
	if skew > 0 {
		refusedAt, why = p.staleAt, RejectStaleEpoch
	}
	some, all, left := "some of their batches", "every peer batch", "its own data only"
	if p.v2.on {
		some, all, left = "some of their records and aggregates", "all their records and aggregates", "none of their data"
	}
	switch {
	case !recent(refusedAt):
		return ""
	case recent(p.acceptedAt):
		return ": it refuses " + some + " as " + why
	}
	return ": it refuses " + all + " as " + why + ", so its fleet view holds " + left
}

// peerName is "n4 (member n4-00180005)".
func (p *Protocol) peerName(member string) string {
	if i, ok := p.byMember[member]; ok {
		return fmt.Sprintf("%s (member %s)", p.members[i].Name, member)
	}
	return member
}

func (p *Protocol) peerSkewText(member string, skew int64, now time.Time) string {
	s := fmt.Sprintf("the clock of peer %s is %s %s its peers' median", p.peerName(member), approx(skew), aheadBehind(skew))
	if pc := p.clocks[member]; pc != nil && !pc.refusedAt.IsZero() && now.Sub(pc.refusedAt) < p.cfg.Tracker.Window {
		what := "batches"
		if p.v2.on {
			what = "records"
		}
		s += ": this node refuses its " + what + " as " + pc.refusedAs
	}
	return s
}

func aheadBehind(skew int64) string {
	if skew < 0 {
		return "behind"
	}
	return "ahead of"
}

func abs64(v int64) int64 {
	if v < 0 {
		if v == math.MinInt64 {
			return math.MaxInt64
		}
		return -v
	}
	return v
}

// approx writes a skew of ms milliseconds roughly: "~850ms", "~2.1s",
// "~20s", "~1h0m0s"; beyond a century (a hostile or broken clock), a
// century.
func approx(ms int64) string {
	const century = 100 * 365 * 24 * time.Hour
	d := time.Duration(min(abs64(ms), century.Milliseconds())) * time.Millisecond
	switch {
	case d < time.Second:
		d = d.Round(10 * time.Millisecond)
	case d < 10*time.Second:
		d = d.Round(100 * time.Millisecond)
	default:
		d = d.Round(time.Second)
	}
	return "~" + d.String()
}
