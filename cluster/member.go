package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
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
	// destination-owned aggregation).
	Protocol uint8 `json:"protocol"`
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

// Metadata (memberlist NodeMeta) layout, version 1, 10 + len(name) bytes:
//
//	[0]     version = 1
//	[1:9]   bootID, big-endian
//	[9]     flags: bit 0 = leaving (set by Close just before the leave); other bits 0
//	[10:]   name, UTF-8
//
// The leaving flag exists because memberlist v0.7.0 cannot tell its event
// delegate whether a member left or died: the *Node given to NotifyLeave
// carries Node.State, which memberlist never updates (its nodeState.State
// field shadows it). So Close first re-advertises this member with the flag
// (memberlist's UpdateNode) and then leaves; a member whose last metadata
// had the flag is reported as left, any other as dead.
const (
	metaVersion   = 1
	metaHeaderLen = 10
	flagLeaving   = 1
)

var errBadMeta = errors.New("cluster: malformed member metadata")

func encodeMeta(name string, boot uint64, leaving bool) []byte {
	b := make([]byte, metaHeaderLen, metaHeaderLen+len(name))
	b[0] = metaVersion
	binary.BigEndian.PutUint64(b[1:9], boot)
	if leaving {
		b[9] = flagLeaving
	}
	return append(b, name...)
}

// decodeMeta checks meta strictly and against the member name it came with.
func decodeMeta(member string, meta []byte) (name string, boot uint64, leaving bool, err error) {
	if len(meta) < metaHeaderLen || meta[0] != metaVersion || meta[9]&^flagLeaving != 0 {
		return "", 0, false, errBadMeta
	}
	boot = binary.BigEndian.Uint64(meta[1:9])
	name = string(meta[metaHeaderLen:])
	if validName(name) != nil || MemberName(name, boot) != member {
		return "", 0, false, errBadMeta
	}
	return name, boot, meta[9]&flagLeaving != 0, nil
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
