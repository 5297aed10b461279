package cluster

import (
	"cmp"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
)

// The kinds of Warning: the operator mistakes a node says out loud.
const (
	// WarnConfigMismatch: a member advertised a window, sub-window or
	// histogram layout other than this node's and was refused (at join,
	// or as a member), or a seed refused this node for the same reason;
	// or a seed's or member's gossip encryption differs from this node's
	// (no key in common, or a key on one side only), so that joins with
	// it fail until a key file is fixed and reloaded.
	WarnConfigMismatch = "config_mismatch"
	// WarnNameConflict: two live processes (distinct boot IDs, both
	// answering) use one peer name; only one of them counts in the fleet
	// views. A restart, whose old boot is dead, left or silent, is not one.
	WarnNameConflict = "name_conflict"
	// WarnClockSkew: this node's clock, or a peer's, is more than a quarter
	// sub-window off its peers' median.
	WarnClockSkew = "clock_skew"
)

// WarningKinds returns every kind of Warning, in the order Warnings sorts
// them.
func WarningKinds() []string {
	return []string{WarnConfigMismatch, WarnNameConflict, WarnClockSkew}
}

// Warning is one operator mistake this node sees now: a row of
// /v1/status's "warnings".
type Warning struct {
	Kind    string `json:"kind"`    // one of WarningKinds
	Message string `json:"message"` // what is wrong, naming the members and settings involved
}

// warnings is the table of current warnings. Each has a key (its kind and
// subject: a member, a peer name, this node), so that a warning whose text
// changes (a skew estimate that moves) is the same warning; a key that
// appears is a warning raised, counted and logged once.
type warnings struct {
	log *slog.Logger

	mu      sync.Mutex
	current map[string]warnEntry // kind + "\x00" + subject → entry
	raised  map[string]uint64    // kind → times raised
}

type warnEntry struct {
	w       Warning
	expires time.Time // zero: until replaced
}

func newWarnings(l *slog.Logger) *warnings {
	return &warnings{log: l, current: map[string]warnEntry{}, raised: map[string]uint64{}}
}

func warnKey(kind, subject string) string { return kind + "\x00" + subject }

// maxWarningsPerKind bounds the table: members refused for their
// settings are remembered for minutes, and a flood of them (each alive
// message can name a new member) must not grow it without end. Beyond it,
// the warning of that kind that expires first makes room.
const maxWarningsPerKind = 64

// setLocked adds or updates one warning, counting and logging it when it
// is new.
func (t *warnings) setLocked(key string, w Warning, now, expires time.Time) {
	if e, ok := t.current[key]; !ok || e.expired(now) {
		t.raised[w.Kind]++
		t.log.Warn("cluster: "+w.Message, "warning", w.Kind)
		if !ok {
			t.makeRoomLocked(w.Kind)
		}
	}
	t.current[key] = warnEntry{w: w, expires: expires}
}

// makeRoomLocked drops the warning of kind that expires first (one
// without expiry last) when kind holds maxWarningsPerKind.
func (t *warnings) makeRoomLocked(kind string) {
	n, victim := 0, ""
	var first time.Time
	for k, e := range t.current {
		if e.w.Kind != kind {
			continue
		}
		n++
		if at := e.expires; victim == "" || (!at.IsZero() && (first.IsZero() || at.Before(first))) {
			victim, first = k, at
		}
	}
	if n >= maxWarningsPerKind {
		delete(t.current, victim)
	}
}

func (e warnEntry) expired(now time.Time) bool { return !e.expires.IsZero() && !now.Before(e.expires) }

// set adds or refreshes the warning of subject, kept until expires.
func (t *warnings) set(subject string, w Warning, now, expires time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.setLocked(warnKey(w.Kind, subject), w, now, expires)
}

// drop removes the warning of kind and subject, if any.
func (t *warnings) drop(kind, subject string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.current, warnKey(kind, subject))
}

// replace makes ws, by subject, the warnings of kind: those of kind not in
// ws are gone.
func (t *warnings) replace(kind string, ws map[string]Warning, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, e := range t.current {
		if e.w.Kind == kind {
			if _, keep := ws[k[len(kind)+1:]]; !keep {
				delete(t.current, k)
			}
		}
	}
	for subject, w := range ws {
		w.Kind = kind
		t.setLocked(warnKey(kind, subject), w, now, time.Time{})
	}
}

// list returns the warnings current at now, by kind (WarningKinds' order)
// then message; never nil.
func (t *warnings) list(now time.Time) []Warning {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := []Warning{}
	for k, e := range t.current {
		if e.expired(now) {
			delete(t.current, k)
			continue
		}
		out = append(out, e.w)
	}
	order := WarningKinds()
	slices.SortFunc(out, func(a, b Warning) int {
		return cmp.Or(cmp.Compare(slices.Index(order, a.Kind), slices.Index(order, b.Kind)), cmp.Compare(a.Message, b.Message))
	})
	return out
}

// raisedCounts returns the times each kind was raised, every kind present.
func (t *warnings) raisedCounts() map[string]uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := maps.Clone(t.raised)
	for _, k := range WarningKinds() {
		out[k] += 0
	}
	return out
}

// Warnings returns the operator mistakes this node sees now, sorted by kind
// (config_mismatch, name_conflict, clock_skew) then message; empty, never
// nil, when there are none. See WarnConfigMismatch, WarnNameConflict and
// WarnClockSkew; each raised warning is also logged once, at warn level.
func (c *Cluster) Warnings() []Warning { return c.warn.list(time.Now()) }

// WarningsRaised returns how many times each kind of warning was raised
// (a warning that appears; one that stays and changes its text counts
// once), every kind present.
func (c *Cluster) WarningsRaised() map[string]uint64 { return c.warn.raisedCounts() }
