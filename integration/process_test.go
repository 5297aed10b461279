package integration

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/cluster"
	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// membershipWait bounds the waits for memberlist's news in the process
// tests. The agents run memberlist's LAN timing: a member that misses every
// UDP broadcast of a join learns it at the next push/pull or seed re-join
// (each every 30 s), and a killed member is declared dead after 4–24 s of
// suspicion. Typically each wait takes a few seconds (see the test log).
const membershipWait = 75 * time.Second

// agentTracker is the tracker configuration of the agents' flags.
func agentTracker(t testing.TB) tracker.Config {
	c := tracker.DefaultConfig()
	var err error
	c.Window, err = time.ParseDuration(agentWindow)
	require.NoError(t, err)
	sw, err := time.ParseDuration(agentSubWindow)
	require.NoError(t, err)
	c.SubWindows = int(c.Window / sw)
	return c
}

// feedAgent posts count samples per destination of testDests to a, drawn
// for origin index i (fractions of a millisecond included: the agent
// truncates them), in one request in the middle of an epoch, adds them to u
// under a.name, and returns the epoch they were recorded in.
func feedAgent(t *testing.T, cfg tracker.Config, u *union, a *agent, i int, seed uint64, count int) int64 {
	t.Helper()
	draw := latencies(seed, count)
	var samples []sample
	for _, d := range testDests {
		ms := draw(i, d)
		for k, v := range ms {
			samples = append(samples, sample{Dest: d, LatencyMs: float64(v) + 0.25*float64(k%4)})
		}
		u.add(a.name, d, ms...)
	}
	for {
		now := time.Now()
		if now.Sub(cfg.EpochStart(cfg.Epoch(now))) < cfg.SubWindow()/2 {
			break
		}
		time.Sleep(cfg.EpochStart(cfg.Epoch(now) + 1).Sub(now))
	}
	e := cfg.Epoch(time.Now())
	a.record(t, samples)
	require.Equal(t, e, cfg.Epoch(time.Now()), "the POST crossed an epoch boundary")
	return e
}

// agentsMatch reports whether every agent's /v1/estimate of every
// destination of u is the exact union's at every checked quantile, from
// the fleet view, with peers peers.
func agentsMatch(t testing.TB, agents []*agent, u *union, peers int) (bool, string) {
	for _, a := range agents {
		for _, d := range u.dests() {
			for _, q := range quantiles {
				e := a.estimate(t, d, q)
				want := u.quantile(t, d, q)
				switch {
				case e.FleetValueMs == nil || *e.FleetValueMs != want:
					return false, fmt.Sprintf("%s %s q=%v: fleet_value_ms %v, want %d", a.name, d, q, deref(e.FleetValueMs), want)
				case e.Samples != u.total(d) || e.Peers != peers:
					return false, fmt.Sprintf("%s %s: samples %d peers %d, want %d and %d", a.name, d, e.Samples, e.Peers, u.total(d), peers)
				case e.Source != "fleet" || e.ValueMs == nil || *e.ValueMs != want || !e.Trusted:
					return false, fmt.Sprintf("%s %s: source %s value_ms %v trusted %v", a.name, d, e.Source, deref(e.ValueMs), e.Trusted)
				}
			}
		}
	}
	return true, ""
}

func deref(p *uint64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

// membersByState returns what a lists, member name → state.
func membersByState(t testing.TB, a *agent) map[string]string {
	out := map[string]string{}
	for _, m := range a.members(t) {
		out[m.Member] = m.State
	}
	return out
}

// aliveExactly reports whether every agent of from lists exactly the
// member names want as alive.
func aliveExactly(t testing.TB, from []*agent, want []string) (bool, string) {
	want = slices.Sorted(slices.Values(want))
	for _, a := range from {
		var got []string
		for m, st := range membersByState(t, a) {
			if st == "alive" {
				got = append(got, m)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return false, fmt.Sprintf("%s lists %v alive, want %v", a.name, got, want)
		}
	}
	return true, ""
}

// TestAgents runs the operator's scenario on five atnode processes on
// loopback, with encryption and a label, fed over HTTP:
//
//  1. every agent's estimate is the exact union of all samples, 5 peers;
//  2. kill -9 of one agent: it is listed dead everywhere and the others'
//     estimates become the exact union of the four survivors, 4 peers;
//  3. restarted (a new boot ID, new ports), it rejoins, catches up on the
//     survivors' window by bulk sync, and its new samples reach everyone;
//  4. an agent with another key cannot join;
//  5. a hostile member with the right key sends garbage and decode bombs to
//     every agent: they stay up, bounded in memory, with unchanged
//     estimates, and their rejection counters explain every refusal.
func TestAgents(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := keygen(t, dir, "cluster.key")
	const label = "integration"
	secure := []string{"-secret-key-file", key, "-label", label}

	start := time.Now()
	a0 := startAgent(t, "a0", secure...)
	agents := []*agent{a0}
	for i := 1; i < 5; i++ {
		agents = append(agents, startAgent(t, fmt.Sprintf("a%d", i), append(secure, "-join", a0.gossip)...))
	}
	members := func(as []*agent) []string {
		var out []string
		for _, a := range as {
			out = append(out, a.self(t).Member)
		}
		return out
	}
	took := eventuallyWithin(t, membershipWait, "every agent lists the five alive", func() (bool, string) { return aliveExactly(t, agents, members(agents)) })
	t.Logf("5 agents started and agreed on membership in %v (%v after agreeing)", time.Since(start), took)

	cfg := agentTracker(t)
	u := newUnion(cfg)
	epochs := map[string]int64{}
	for i, a := range agents {
		epochs[a.name] = feedAgent(t, cfg, u, a, i, 1, 60)
	}
	took = eventually(t, "every estimate is the exact union, 5 peers", func() (bool, string) { return agentsMatch(t, agents, u, 5) })
	t.Logf("exact union on all 5 agents %v after the last POST", took)
	for _, a := range agents {
		s := a.gossipStats(t)
		// A digest or pull from a member this agent did not list alive
		// yet (a joiner heard from before its join reached here) or
		// falsely declared dead under load is refused as unknown_sender;
		// the exact union above shows nothing was lost. Nothing else is
		// refused.
		delete(s.Rejected, cluster.RejectUnknownSender)
		require.Empty(t, s.Rejected, "%s refused nothing", a.name)
		if s.MessagesIn["aggregates"]+s.MessagesIn["packed_aggregates"] == 0 { // protocol v1: every batch everywhere (see requireStoredOnce)
			require.Equal(t, uint64(4), s.Outcomes["new"], "%s: one batch from each peer", a.name)
		}
	}

	// 2. kill -9.
	victim := agents[2]
	victimMember := victim.self(t).Member
	survivors := slices.Delete(slices.Clone(agents), 2, 3)
	victim.kill()
	survivorUnion := u.only(names2(survivors)...)
	took = eventuallyWithin(t, membershipWait, "the killed agent is dead in every view", func() (bool, string) {
		for _, a := range survivors {
			if st := membersByState(t, a)[victimMember]; st != "dead" {
				return false, fmt.Sprintf("%s lists %s as %q", a.name, victimMember, st)
			}
		}
		return agentsMatch(t, survivors, survivorUnion, 4)
	})
	t.Logf("kill -9: listed dead and excluded everywhere %v after the kill", took)

	// 3. restart under the same name: a new member, catching up.
	reborn := startAgent(t, victim.name, append(secure, "-join", a0.gossip+","+agents[1].gossip)...)
	rebornSelf := reborn.self(t)
	require.NotEqual(t, victimMember, rebornSelf.Member, "a restart is a new boot")
	fleet := append(slices.Clone(survivors), reborn)
	restarted := time.Now()
	took = eventuallyWithin(t, membershipWait, "the restarted agent rejoined and caught up", func() (bool, string) {
		if ok, why := aliveExactly(t, fleet, members(fleet)); !ok {
			return false, why
		}
		if st := membersByState(t, reborn)[victimMember]; st == "alive" {
			return false, "the restarted agent lists its old boot alive"
		}
		return agentsMatch(t, []*agent{reborn}, survivorUnion, 4)
	})
	t.Logf("restart: rejoined and caught up on the survivors' window %v after start", took)
	if rs := reborn.gossipStats(t); rs.MessagesIn["aggregates"]+rs.MessagesIn["packed_aggregates"] == 0 { // protocol v1
		require.GreaterOrEqual(t, rs.Repairs, uint64(4), "the survivors' batches came by bulk sync")
	} // on v2 the survivors' view came as aggregates: one per destination and epoch, pushed or pulled

	u2 := survivorUnion.only(names2(survivors)...)
	epochs[reborn.name] = feedAgent(t, cfg, u2, reborn, 5, 2, 60)
	took = eventually(t, "the restarted agent's new samples reach everyone", func() (bool, string) { return agentsMatch(t, fleet, u2, 5) })
	t.Logf("restart: exact union with its new samples on all 5 %v after the POST (%v after the restart)", took, time.Since(restarted))

	// 4. another key cannot join.
	intruder := startAgent(t, "intruder", "-secret-key-file", keygen(t, dir, "other.key"), "-label", label, "-join", a0.gossip)
	eventually(t, "the intruder's join failed", func() (bool, string) {
		return strings.Contains(intruder.stderr.String(), "seed join failed"), "no failed join logged yet"
	})
	eventually(t, "the seed logged that it could not decrypt the intruder", func() (bool, string) {
		return strings.Contains(strings.ToLower(a0.stderr.String()), "decrypt"), "nothing logged yet"
	})
	intruderSelf := intruder.self(t).Member
	require.Equal(t, []string{intruderSelf}, slices.Collect(maps.Keys(membersByState(t, intruder))), "the intruder is alone")
	for _, a := range fleet {
		_, listed := membersByState(t, a)[intruderSelf]
		require.False(t, listed, "%s lists the intruder", a.name)
	}
	ok, why := agentsMatch(t, fleet, u2, 5)
	require.True(t, ok, why)
	intruder.kill()

	// 5. a hostile member.
	attackAgents(t, key, label, fleet, u2, epochs)
}

func names2(as []*agent) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.name)
	}
	return out
}
