package cluster

import (
	"context"
	"log/slog"
	mrand "math/rand/v2"
	"net/netip"
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

// joinSeed joins one seed. It returns the refusal's text when the seed
// refused this member for its settings (see judge), "" otherwise; a
// refusal while running (a re-join) is a config_mismatch warning.
func (c *Cluster) joinSeed(ml *memberlist.Memberlist, seed string, initial bool) string {
	c.stats.joins.Add(1)
	start := time.Now()
	_, err := ml.Join([]string{seed})
	if err != nil {
		c.stats.joinFails.Add(1)
		if r := refusal(err); r != "" {
			r = "seed " + seed + ": " + r
			if !initial {
				now := time.Now()
				c.warn.set("seed/"+seed, Warning{Kind: WarnConfigMismatch, Message: "join refused by " + r}, now, now.Add(mismatchRetention))
			}
			return r
		}
		level := slog.LevelDebug
		if initial {
			level = slog.LevelWarn
		}
		c.log.Log(context.Background(), level, "cluster: seed join failed; will retry",
			"seed", seed, "err", errText(err), "retry_every", c.cfg.Timing.RejoinInterval)
		return ""
	}
	c.log.Debug("cluster: joined seed", "seed", seed, "took", time.Since(start))
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
