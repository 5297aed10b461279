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
	return fmt.Sprintf("%s-%08x", name, uint32(bootID))
}

// State is a member's state as this node sees it.
type State uint8

// The states. memberlist v0.7.0 tells delegates about joins, updates and
// deaths but not suspicion (and reading it from memberlist's node list
// would race with memberlist's writes), so a suspect member is reported as
// StateAlive until it is declared dead or refutes.
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
	// Protocol is the highest dissemination protocol the member speaks, as
	// its metadata advertises (1 when it says none; ProtocolV2 for
	// destination-owned aggregation). Not in GET /v1/members, whose fields
	// are fixed.
	Protocol uint8 `json:"-"`
	// Since is when this node last saw the state change.
	Since time.Time `json:"-"`
}

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
// is what a member without dissemination (no Store) advertises, and what
// every member advertised before the settings:
//
//	[0]     version = 1
//	[1:9]   bootID, big-endian
//	[9]     flags: bit 0 = leaving (set by Close just before the leave); other bits 0
//	[10:]   name, UTF-8
//
// Version 2 adds the settings a member must share with the fleet to be
// one of it (the epoch grid and the histogram layout, see settings); a
// member with a Store advertises it:
//
//	[0]      version = 2
//	[1:9]    bootID, big-endian
//	[9]      flags, as in version 1
//	[10]     n = length of the name, 1..MaxNameLen
//	[11:11+n] name, UTF-8
//	then     window ms, sub-window ms (uvarints), layout lowest, highest
//	         (varints), significant digits (uvarint)
//	then     nothing (protocol 1), or the highest dissemination protocol
//	         the member speaks (uvarint; 2: destination-owned aggregation)
//	then     nothing, or fields of a later revision: ignored
//
// A member whose metadata carries no settings (version 1) is not judged:
// it is handled as before. A node of the release before version 2 reads
// version 2 as malformed metadata (counted, the member's boot unknown), so
// its fleet view refuses such a member's batches as unknown_origin until it
// is upgraded too; version 2 leaves room at its end so that later
// additions do not repeat that.
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
	// protocol is the dissemination protocol it advertises: 1 when it
	// says none.
	protocol uint8
}

// encodeMeta returns version 1 metadata without settings, version 2 with
// (and with the protocol when it is above 1).
func encodeMeta(name string, boot uint64, leaving bool, st *settings, protocol uint8) []byte {
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
	b = binary.AppendUvarint(b, uint64(st.layout.SignificantDigits))
	if protocol > 1 {
		b = binary.AppendUvarint(b, uint64(protocol))
	}
	return b
}

// decodeMeta checks raw strictly and against the member name it came with.
func decodeMeta(member string, raw []byte) (meta, error) {
	if len(raw) < metaHeaderLen || raw[9]&^flagLeaving != 0 {
		return meta{}, errBadMeta
	}
	m := meta{boot: binary.BigEndian.Uint64(raw[1:9]), leaving: raw[9]&flagLeaving != 0, protocol: 1}
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
		if st, rest, ok = decodeSettings(rest); !ok {
			return meta{}, errBadMeta
		}
		m.settings = &st
		if v, n := binary.Uvarint(rest); n > 0 && v >= 2 && v <= 255 {
			m.protocol = uint8(v)
		}
	default:
		return meta{}, errBadMeta
	}
	if validName(m.name) != nil || MemberName(m.name, m.boot) != member {
		return meta{}, errBadMeta
	}
	return m, nil
}

// decodeSettings reads version 2's settings and returns what follows
// them (the protocol, and a later revision's fields).
func decodeSettings(b []byte) (settings, []byte, bool) {
	var v [5]int64
	for i := range v {
		var n int
		if i == 2 || i == 3 { // layout lowest and highest are signed
			v[i], n = binary.Varint(b)
		} else {
			var u uint64
			u, n = binary.Uvarint(b)
			if u > math.MaxInt64/uint64(time.Millisecond) {
				return settings{}, nil, false
			}
			v[i] = int64(u)
		}
		if n <= 0 {
			return settings{}, nil, false
		}
		b = b[n:]
	}
	if v[4] > math.MaxInt32 {
		return settings{}, nil, false
	}
	return settings{
		window:    time.Duration(v[0]) * time.Millisecond,
		subWindow: time.Duration(v[1]) * time.Millisecond,
		layout:    tracker.Layout{Lowest: v[2], Highest: v[3], SignificantDigits: int(v[4])},
	}, b, true
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
