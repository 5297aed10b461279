package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// MemberName returns the memberlist member name of peer name at bootID:
// name, "-", and the low 32 bits of bootID as 8 lowercase hex digits. The
// full 64-bit bootID travels in the member's metadata; the 32 bits in the
// name only make it unique per process start (two starts of one peer
// collide with probability 2⁻³²), so a restarted node never takes over the
// name, and with it the state, of its previous run.
func MemberName(name string, bootID uint64) string {
	const hexDigits = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(name) + 9)
	b.WriteString(name)
	b.WriteByte('-')
	for shift := 28; shift >= 0; shift -= 4 {
		b.WriteByte(hexDigits[bootID>>shift&0xf])
	}
	return b.String()
}

// State is a member's state as this node sees it.
type State uint8

// The states. memberlist v0.7.0 tells delegates about joins, updates and
// deaths but not suspicion, and the State field of the nodes it lists is
// never set (its own record of a node keeps the state in a field that
// shadows it), so a suspect member is reported as StateAlive until it is
// declared dead or refutes.
const (
	StateAlive State = iota
	StateSuspect
	StateDead
	StateLeft
)

var stateNames = [...]string{"alive", "suspect", "dead", "left"}

// String returns "alive", "suspect", "dead" or "left".
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// MarshalText returns String, so JSON carries the name.
func (s State) MarshalText() ([]byte, error) {
	if int(s) >= len(stateNames) {
		return nil, fmt.Errorf("cluster: invalid state %d", s)
	}
	return []byte(stateNames[s]), nil
}

// UnmarshalText parses a name returned by String.
func (s *State) UnmarshalText(p []byte) error {
	for i, n := range stateNames {
		if string(p) == n {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("cluster: unknown state %q", p)
}

// Up reports whether the member counts as present: alive or suspect.
func (s State) Up() bool { return s == StateAlive || s == StateSuspect }

// Member is one entry of the member list, the row of GET /v1/members.
type Member struct {
	Name   string `json:"name"`    // peer name (-name); the same across restarts
	Member string `json:"member"`  // memberlist member name, MemberName(Name, BootID)
	Addr   string `json:"addr"`    // gossip address, "ip:port"
	State  State  `json:"state"`   // alive, suspect, dead or left
	BootID uint64 `json:"boot_id"` // random per process start
	// Since is when this node last saw the state change.
	Since time.Time `json:"-"`
	// Level is the highest protocol level the member's release speaks
	// (see CurrentLevel): Level1 for a release from before the levels, 0
	// when its metadata is not this project's (it does not count in
	// ClusterLevel).
	Level uint8 `json:"-"`
}

// Protocol levels: what a member's release can read and write. A member
// advertises its level as memberlist's delegate protocol maximum
// (memberlist.Node.DMax), which every alive message and push/pull carries
// beside the metadata; releases from before the levels leave it at 0, read
// here as Level1. memberlist refuses a push/pull in which some member's
// delegate protocol current version (DCur) lies outside the range every
// member accepts ([highest DMin, lowest DMax]); releases before the levels
// advertise 0 for all three, so every release keeps DMin and DCur at 0 and
// raises only DMax.
//
// A cluster uses what a level brings once every member up speaks it
// (ClusterLevel), and falls back at once when a member of a lower level
// appears: a release keeps writing the older encodings until then, so a
// rolling upgrade (and a downgrade) works in both directions. A later
// release that brings an encoding or protocol older ones cannot read adds
// the next level, advertises it, and uses what it brings while
// ClusterLevel(members) is at least that level.
const (
	// Level1 reads and writes version 1 metadata only: the releases
	// before the levels.
	Level1 uint8 = 1
	// Level2 also reads and writes version 2 metadata (the settings) and
	// sends its settings in memberlist's push/pull state.
	Level2 uint8 = 2
	// Level3 also runs destination-owned aggregation (dissemination
	// protocol v2, its message types): a cluster runs it while
	// ClusterLevel is at least Level3. A member of this release that
	// cannot run it (no fleet, or Gossip.Protocol 1) advertises Level2.
	Level3 uint8 = 3
	// Level4 also reads packed aggregates (codec.TypePackedAggregates)
	// and forwards aggregates as a relay: while every member up speaks
	// it, first owners send their aggregates packed, and in clusters of
	// ProtocolConfig.RelayFrom members or more through relays (see
	// Protocol). A member of this release that cannot run protocol v2
	// advertises Level2.
	Level4 uint8 = 4
	// CurrentLevel is this release's level.
	CurrentLevel = Level4
)

// ClusterLevel returns the level every member up in members speaks: the
// lowest Level of the members alive or suspect whose metadata is this
// project's (Level > 0), itself included when it is in members; 0 when
// there is none. It is the one rule by which a cluster switches to a newer
// encoding or protocol: use a feature of level k while ClusterLevel(members)
// >= k. Cluster.Members and the list given to Protocol.SetMembers carry
// each member's Level.
func ClusterLevel(members []Member) uint8 {
	var lvl uint8
	for _, m := range members {
		if m.State.Up() && m.Level > 0 && (lvl == 0 || m.Level < lvl) {
			lvl = m.Level
		}
	}
	return lvl
}

// memberLevel reads a member's level from memberlist's delegate protocol
// maximum; 0 (a release before the levels) is Level1.
func memberLevel(dmax uint8) uint8 { return max(dmax, Level1) }

// EventType says what happened to a member.
type EventType uint8

// The event types. EventSuspect is never delivered by memberlist v0.7.0
// (see StateSuspect) and is kept so consumers can handle it once it is.
const (
	EventJoin    EventType = iota // a member is alive for the first time, or again after dead/left
	EventUpdate                   // an alive member's metadata changed (not delivered for the leaving flag)
	EventSuspect                  // a member failed a probe (not delivered, see above)
	EventDead                     // a member was declared failed
	EventLeft                     // a member left gracefully
)

var eventNames = [...]string{"join", "update", "suspect", "dead", "left"}

// String returns "join", "update", "suspect", "dead" or "left".
func (e EventType) String() string {
	if int(e) < len(eventNames) {
		return eventNames[e]
	}
	return "event(" + strconv.Itoa(int(e)) + ")"
}

// Event is one membership change, with the member as it was then.
type Event struct {
	Type   EventType
	Member Member
}

// Metadata (memberlist NodeMeta) layout. Version 1, 10 + len(name) bytes,
// is what every member advertised before the settings, and exactly what the
// releases before the levels accept (they read anything else as malformed):
//
//	[0]     version = 1
//	[1:9]   bootID, big-endian
//	[9]     flags: bit 0 = leaving (set by Close just before the leave); other bits 0
//	[10:]   name, UTF-8
//
// Version 2 adds the settings a member must share with the fleet to be
// one of it (the epoch grid and the histogram layout, see settings):
//
//	[0]      version = 2
//	[1:9]    bootID, big-endian
//	[9]      flags, as in version 1
//	[10]     n = length of the name, 1..MaxNameLen
//	[11:11+n] name, UTF-8
//	then     window ms, sub-window ms (uvarints), layout lowest, highest
//	         (varints), significant digits (uvarint)
//	then     nothing, or fields of a later revision: ignored
//
// Which version a member advertises is negotiated (see metaVersionFor): a
// member with a Store advertises version 2 once it knows another member
// and every member up speaks Level2 (ClusterLevel), and version 1 — the
// old bytes exactly — before that: while it knows no other member, and
// while any member of an older release is up (or dead, for
// Timing.DeadRetention: it may be back; one that left is not). A member of an older release
// appearing makes every other member fall back to version 1 with one
// metadata update (memberlist's UpdateNode), so a node being upgraded or
// downgraded keeps counting in every view; once the last one is gone they
// switch to version 2 again. A member without a Store always advertises
// version 1. Version 2 ignores what follows its known fields, so that later
// additions can be appended within it; a member's level itself travels
// beside the metadata, in memberlist's delegate protocol version.
//
// A member advertising version 1 is not judged on its metadata. Members of
// Level2 therefore also send their settings in memberlist's push/pull state
// (delegate.LocalState: this member's version 2 metadata, whatever version
// it advertises; releases before the levels send none and ignore it), so a
// join is judged even while everyone advertises version 1 (see judgeState):
// a seed of this release refuses a joiner whose settings differ, and the
// joiner's Start fails with ErrJoinRefused. (A joiner knows nobody and
// advertises version 1, so its seed has merged it when its state is
// judged: the seed stops listing it at once, and the members the seed
// gossiped it to list it until its leave, as Start fails, reaches them.) A joiner whose seeds showed no
// settings (they are of an older release) pushes and pulls with a member
// of this release it learned from them before Start returns (see
// checkSettings). Only a joiner that reaches no member of this release at
// Start gets in unjudged while an older release is up; the others then
// judge it at their next push/pull with it (memberlist's periodic sync,
// Timing.PushPullInterval, with one random member each), and refuse it as
// a member: a config_mismatch warning, out of Members, dead to the
// protocol, so its batches leave their views. Before that its batches
// count where they are accepted: those of another sub-window or layout
// are refused anyway (stale or future epochs, decode_layout); those of
// another window alone are of the same epoch grid.
//
// The leaving flag exists because memberlist v0.7.0 cannot tell its event
// delegate whether a member left or died: the *Node given to NotifyLeave
// carries Node.State, which memberlist never updates (its nodeState.State
// field shadows it). So Close first re-advertises this member with the flag
// (memberlist's UpdateNode) and then leaves; a member whose last metadata
// had the flag is reported as left, any other as dead.
const (
	metaVersion1  = 1
	metaVersion2  = 2
	metaHeaderLen = 10
	flagLeaving   = 1
)

var errBadMeta = errors.New("cluster: malformed member metadata")

// meta is a member's decoded metadata.
type meta struct {
	name    string
	boot    uint64
	leaving bool
	// settings is what the member advertises; nil for version 1 (none).
	settings *settings
}

// encodeMeta returns version 1 metadata without settings, version 2 with.
func encodeMeta(name string, boot uint64, leaving bool, st *settings) []byte {
	b := make([]byte, metaHeaderLen, metaHeaderLen+1+len(name)+5*binary.MaxVarintLen64)
	b[0] = metaVersion1
	binary.BigEndian.PutUint64(b[1:9], boot)
	if leaving {
		b[9] = flagLeaving
	}
	if st == nil {
		return append(b, name...)
	}
	b[0] = metaVersion2
	b = append(b, byte(len(name))) // <= MaxNameLen < 256: New validated the name
	b = append(b, name...)
	b = binary.AppendUvarint(b, uint64(st.window.Milliseconds()))
	b = binary.AppendUvarint(b, uint64(st.subWindow.Milliseconds()))
	b = binary.AppendVarint(b, st.layout.Lowest)
	b = binary.AppendVarint(b, st.layout.Highest)
	return binary.AppendUvarint(b, uint64(st.layout.SignificantDigits))
}

// decodeMeta checks raw strictly and against the member name it came with.
func decodeMeta(member string, raw []byte) (meta, error) {
	m, err := decodeMetaBytes(raw)
	if err != nil || MemberName(m.name, m.boot) != member {
		return meta{}, errBadMeta
	}
	return m, nil
}

// decodeMetaBytes is decodeMeta without the member name: the name it
// returns is valid, and MemberName(name, boot) is its member name.
func decodeMetaBytes(raw []byte) (meta, error) {
	if len(raw) < metaHeaderLen || raw[9]&^flagLeaving != 0 {
		return meta{}, errBadMeta
	}
	m := meta{boot: binary.BigEndian.Uint64(raw[1:9]), leaving: raw[9]&flagLeaving != 0}
	switch raw[0] {
	case metaVersion1:
		m.name = string(raw[metaHeaderLen:])
	case metaVersion2:
		rest := raw[metaHeaderLen:]
		if len(rest) < 1 || int(rest[0]) > len(rest)-1 {
			return meta{}, errBadMeta
		}
		m.name, rest = string(rest[1:1+int(rest[0])]), rest[1+int(rest[0]):]
		var st settings
		var ok bool
		if st, ok = decodeSettings(rest); !ok {
			return meta{}, errBadMeta
		}
		m.settings = &st
	default:
		return meta{}, errBadMeta
	}
	if validName(m.name) != nil {
		return meta{}, errBadMeta
	}
	return m, nil
}

// decodeSettings reads version 2's settings; what follows them is a later
// revision's and is ignored.
func decodeSettings(b []byte) (settings, bool) {
	var v [5]int64
	for i := range v {
		var n int
		if i == 2 || i == 3 { // layout lowest and highest are signed
			v[i], n = binary.Varint(b)
		} else {
			var u uint64
			u, n = binary.Uvarint(b)
			if u > math.MaxInt64/uint64(time.Millisecond) {
				return settings{}, false
			}
			v[i] = int64(u)
		}
		if n <= 0 {
			return settings{}, false
		}
		b = b[n:]
	}
	if v[4] > math.MaxInt32 {
		return settings{}, false
	}
	return settings{
		window:    time.Duration(v[0]) * time.Millisecond,
		subWindow: time.Duration(v[1]) * time.Millisecond,
		layout:    tracker.Layout{Lowest: v[2], Highest: v[3], SignificantDigits: int(v[4])},
	}, true
}

// nameFromMember recovers the peer name from a member name when metadata is
// unusable: everything before a trailing "-xxxxxxxx", else the whole name.
func nameFromMember(member string) string {
	i := strings.LastIndexByte(member, '-')
	if i < 0 || len(member)-i-1 != 8 {
		return member
	}
	if _, err := strconv.ParseUint(member[i+1:], 16, 32); err != nil {
		return member
	}
	return member[:i]
}
