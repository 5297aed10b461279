package tracker

import (
	"slices"
	"time"
)

// maybeForget drops a member that holds no batch. Its exclusion, if any,
// stays in f.excluded until it expires.
func (f *Fleet) maybeForget(m *fleetMember) {
	if len(m.epochs) == 0 {
		f.dropMember(m)
	}
}

func (f *Fleet) dropMember(m *fleetMember) {
	for ep, me := range m.epochs {
		for _, hb := range me.parts {
			if !m.excluded {
				f.uncount(m, hb, ep, f.inView(ep))
			}
			f.batches--
			f.buckets -= hb.buckets
		}
	}
	delete(f.members, m.key)
	if ep, ok := f.excluded[m.key]; ok && ep+1 < f.epoch-f.n-1 {
		delete(f.excluded, m.key) // held it alone past its expiry
	}
	p := m.peer
	p.members = slices.DeleteFunc(p.members, func(x *fleetMember) bool { return x == m })
	if len(p.members) == 0 {
		delete(f.peers, p.name)
	}
}

func (f *Fleet) member(k memberKey) *fleetMember {
	_, excl := f.excluded[k]
	m := &fleetMember{key: k, excluded: excl, epochs: make(map[int64]*memberEpoch)}
	p := f.peers[k.name]
	if p == nil {
		p = &fleetPeer{name: k.name}
		f.peers[k.name] = p
	}
	m.peer = p
	p.members = append(p.members, m)
	f.members[k] = m
	return m
}

// evictMember makes room for a new member whose first batch has epoch ep:
// it evicts an excluded member (its exclusion stays remembered, so its
// batches never count if delivered again), else the member with the oldest
// newest batch, that is older than ep (never one of Self's members). Ties
// break by name and boot, so the choice is deterministic.
func (f *Fleet) evictMember(ep int64) bool {
	var victim *fleetMember
	var vExcl bool
	var vNewest int64
	for _, m := range f.members {
		if m.key.name == f.cfg.Self && f.cfg.Self != "" {
			continue
		}
		newest := int64(minEpoch)
		for e := range m.epochs {
			newest = max(newest, e)
		}
		if !m.excluded && newest >= ep {
			continue
		}
		better := victim == nil ||
			(m.excluded && !vExcl) ||
			(m.excluded == vExcl && (newest < vNewest || newest == vNewest &&
				compareMembers(m.key, victim.key) < 0))
		if better {
			victim, vExcl, vNewest = m, m.excluded, newest
		}
	}
	if victim == nil {
		return false
	}
	f.dropMember(victim)
	f.stats.OriginsEvicted++
	return true
}

const minEpoch = -1 << 63

// Exclude removes member (name, boot) from every view at once, as when
// membership declares it dead; its batches are kept until they age out, so
// a refuted death (Include) costs nothing. Batches that arrive for it later
// are stored but not counted.
//
// The exclusion is remembered apart from the batches and the MaxOrigins cap,
// known member or not, until Include, or until the member holds no batch and
// any batch it sent before E+2 (E the epoch of the last Exclude) is refused
// as too old: so a dead member whose batches the MaxOrigins cap evicted is
// still not counted when they are delivered again. At most 4·MaxOrigins
// exclusions are remembered; beyond, the one excluded longest ago is
// forgotten with its member's batches (counted in
// FleetStats.ExclusionsEvicted), and that member's batches would count if
// delivered again.
func (f *Fleet) Exclude(name string, boot uint64, now time.Time) {
	f.lockChange(now)
	defer f.unlockChange()
	k := memberKey{name, boot}
	if _, ok := f.excluded[k]; !ok && len(f.excluded) >= f.maxExclusions() {
		f.evictExclusion()
	}
	f.excluded[k] = f.epoch
	m := f.members[k]
	if m == nil || m.excluded {
		return
	}
	m.excluded = true
	for ep, me := range m.epochs {
		for _, hb := range me.parts {
			f.uncount(m, hb, ep, f.inView(ep))
		}
	}
}

// maxExclusions bounds f.excluded: 4·MaxOrigins records of about 100 bytes
// plus the name.
func (f *Fleet) maxExclusions() int { return 4 * f.cfg.MaxOrigins }

// evictExclusion forgets the exclusion made longest ago (ties by name and
// boot) and drops its member's batches, which were not counted.
func (f *Fleet) evictExclusion() {
	var victim memberKey
	vEpoch, found := int64(0), false
	for k, ep := range f.excluded {
		if !found || ep < vEpoch || ep == vEpoch && compareMembers(k, victim) < 0 {
			victim, vEpoch, found = k, ep, true
		}
	}
	if !found {
		return
	}
	delete(f.excluded, victim)
	if m := f.members[victim]; m != nil {
		f.dropMember(m)
	}
	f.stats.ExclusionsEvicted++
}

// Include counts member (name, boot) in the views again, as when it refuted
// its death, and forgets its exclusion. A member not excluded is left as is.
func (f *Fleet) Include(name string, boot uint64, now time.Time) {
	f.lockChange(now)
	defer f.unlockChange()
	k := memberKey{name, boot}
	delete(f.excluded, k)
	m := f.members[k]
	if m == nil || !m.excluded {
		return
	}
	m.excluded = false
	for ep, me := range m.epochs {
		for _, hb := range me.parts {
			f.count(m, hb, ep, f.inView(ep))
		}
	}
	f.maybeForget(m)
}
