package cluster

import (
	"context"
	"log/slog"
	mrand "math/rand/v2"
	"net/netip"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// seeds returns the configured seeds other than this member's own address.
func (c *Cluster) seeds() []string {
	var out []string
	for _, s := range c.cfg.Seeds {
		if ap, err := netip.ParseAddrPort(s); err == nil && (ap == c.adv || ap == c.bound) {
			continue
		}
		out = append(out, s)
	}
	return out
}

// joinSeed joins one seed (see pushPull) and counts the attempt.
func (c *Cluster) joinSeed(ml *memberlist.Memberlist, seed string, initial bool) (refused string, judged bool) {
	c.stats.joins.Add(1)
	refused, judged, ok := c.pushPull(ml, "seed", seed, initial)
	if !ok {
		c.stats.joinFails.Add(1)
	}
	return refused, judged
}

// pushPull joins addr (a seed, or for checkSettings a member; what says
// which): one push/pull with it. It returns the refusal's text when addr
// refused this member for its settings (see judge), or, at Start's initial
// joins, when addr's push/pull state showed other settings (see
// judgeState); "" otherwise. judged says whether addr's state carried
// settings at an initial join (compared, equal or not), ok whether the
// join succeeded without a refusal. A refusal while running (a re-join)
// is a config_mismatch warning.
func (c *Cluster) pushPull(ml *memberlist.Memberlist, what, addr string, initial bool) (refused string, judged, ok bool) {
	start := time.Now()
	if ap, perr := netip.ParseAddrPort(addr); initial && perr == nil {
		c.dial(ap)
	}
	_, err := ml.Join([]string{addr})
	if initial {
		var rs []string
		if rs, judged = c.dial(netip.AddrPort{}); err == nil && len(rs) > 0 {
			return what + " " + addr + ": " + strings.Join(rs, " and "), judged, false
		}
	}
	if err != nil {
		if k := keyMismatch(err); k != "" {
			// Not a refusal (a key reload on either side mends it, and
			// the re-joins go on), but a mistake to say.
			now := time.Now()
			c.warn.set("key/"+addr, Warning{Kind: WarnConfigMismatch, Message: what + " " + addr + ": " + k}, now, now.Add(mismatchRetention))
		}
		if r := refusal(err); r != "" {
			r = what + " " + addr + ": " + r
			if !initial {
				now := time.Now()
				c.warn.set(what+"/"+addr, Warning{Kind: WarnConfigMismatch, Message: "join refused by " + r}, now, now.Add(mismatchRetention))
			}
			return r, true, false
		}
		level := slog.LevelDebug
		if initial {
			level = slog.LevelWarn
		}
		if what == "seed" {
			c.log.Log(context.Background(), level, "cluster: seed join failed; will retry",
				"seed", addr, "err", errText(err), "retry_every", c.cfg.Timing.RejoinInterval)
		} else {
			c.log.Log(context.Background(), level, "cluster: push/pull failed", what, addr, "err", errText(err))
		}
		return "", judged, false
	}
	c.warn.drop(WarnConfigMismatch, "key/"+addr)
	c.log.Debug("cluster: joined "+what, what, addr, "took", time.Since(start))
	return "", judged, true
}

// keyMismatch says, for a failed join or push/pull, when memberlist's
// error shows that the two sides' gossip encryption differs: no key in
// common (-secret-key-file), or a key on one side only. "" otherwise; a
// -label that differs cannot be told apart from a peer that went away
// (memberlist drops such a stream without a word).
func keyMismatch(err error) string {
	switch text := errText(err); {
	case strings.Contains(text, "no installed keys could decrypt the message"):
		return "its gossip keys and this node's (-secret-key-file) share none: no installed keys could decrypt the message"
	case strings.Contains(text, "remote state is encrypted and encryption is not configured"):
		return "it encrypts gossip and this node has no -secret-key-file"
	case strings.Contains(text, "encryption is configured but remote state is not encrypted"):
		return "it does not encrypt gossip and this node has a -secret-key-file"
	}
	return ""
}

// rejoinLoop re-joins the seeds with jitter until Close. A push/pull with a
// seed that is already a member costs one stream; after a partition heals,
// it is what merges the two sides again (memberlist gossips only to members
// it believes alive and stops gossiping to dead ones after DeadRetention).
func (c *Cluster) rejoinLoop() {
	defer c.wg.Done()
	rng := mrand.New(mrand.NewPCG(c.boot, 0x5eed))
	seeds := c.seeds()
	if len(seeds) == 0 {
		<-c.stop
		return
	}
	for {
		t := time.NewTimer(c.cfg.Timing.rejoinWait(rng.Float64()))
		select {
		case <-c.stop:
			t.Stop()
			return
		case <-t.C:
		}
		c.life.RLock()
		ml, closed := c.ml, c.closed
		c.life.RUnlock()
		if closed {
			return
		}
		for _, s := range seeds {
			select {
			case <-c.stop:
				return
			default:
			}
			c.joinSeed(ml, s, false)
		}
	}
}
