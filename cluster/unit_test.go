package cluster

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := DefaultConfig()
	ok.Name = "db-1"
	tests := []struct {
		name  string
		edit  func(*Config)
		wants []string // substrings of the joined error; none = valid
	}{
		{"defaults with a name", func(*Config) {}, nil},
		{"port 0 and advertise", func(c *Config) { c.Bind, c.Advertise = "127.0.0.1:0", "10.1.2.3:0" }, nil},
		{"ipv6", func(c *Config) { c.Bind = "[::1]:7946" }, nil},
		{"no name", func(c *Config) { c.Name = "" }, []string{"name is empty"}},
		{"long name", func(c *Config) { c.Name = strings.Repeat("x", 257) }, []string{"257 bytes"}},
		{"247-byte name", func(c *Config) { c.Name = strings.Repeat("x", 247) }, nil},
		{"248-byte name, even without a Store", func(c *Config) { c.Name = strings.Repeat("x", 248) }, []string{"is 248 bytes, at most 247"}},
		{"control char", func(c *Config) { c.Name = "a\nb" }, []string{"unprintable"}},
		{"hostname bind", func(c *Config) { c.Bind = "localhost:7946" }, []string{"bind", "IP address"}},
		{"bad port", func(c *Config) { c.Bind = "127.0.0.1:70000" }, []string{"port"}},
		{"custom transport ignores bind", func(c *Config) { c.Bind = "nonsense"; c.Transport = &memberlist.NetTransport{} }, nil},
		{"bad seed", func(c *Config) { c.Seeds = []string{"10.0.0.1"} }, []string{`seed: want host:port, got "10.0.0.1"`}},
		{"seed without host", func(c *Config) { c.Seeds = []string{":7946"} }, []string{`host of ":7946" must not be empty`}},
		{"long label", func(c *Config) { c.Label = strings.Repeat("l", 256) }, []string{"label is 256 bytes"}},
		{"all problems joined", func(c *Config) {
			c.Timing.ProbeInterval = 0
			c.Timing.SuspicionMult = 0
			c.Timing.RejoinJitter = 1
			c.Limits = Limits{}
		}, []string{"probe interval must be > 0", "suspicion mult", "rejoin jitter", "event queue", "message queue", "max message bytes"}},
		{"probe timeout above interval", func(c *Config) { c.Timing.ProbeTimeout = 2 * time.Second }, []string{"exceeds probe interval"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			err := c.Validate()
			if tt.wants == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tt.wants {
				require.ErrorContains(t, err, w)
			}
			require.True(t, strings.HasPrefix(err.Error(), "cluster: "), err.Error())
		})
	}
	_, err := New(Config{})
	require.Error(t, err, "New validates")
}

func TestParseKeys(t *testing.T) {
	t.Parallel()
	k1 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	k2 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32))
	short := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, 16))
	tests := []struct {
		name  string
		file  string
		want  [][]byte
		wants []string
	}{
		{"one", k1 + "\n", [][]byte{bytes.Repeat([]byte{1}, 32)}, nil},
		{"order kept, blanks and spaces", "\n  " + k2 + " \r\n\n\t" + k1, [][]byte{bytes.Repeat([]byte{2}, 32), bytes.Repeat([]byte{1}, 32)}, nil},
		{"comment and duplicate", "# rotated\n" + k1 + "\n" + k1, [][]byte{bytes.Repeat([]byte{1}, 32)}, nil},
		{"empty", "\n \n", nil, []string{"no keys"}},
		{"bad base64", k1 + "\nnot-base64!\n", nil, []string{"line 2", "not standard base64"}},
		{"url alphabet", strings.NewReplacer("+", "-", "/", "_").Replace(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 32))), nil, []string{"line 1"}},
		{"wrong size", k1 + "\n\n" + short, nil, []string{"line 3", "16 bytes, want 32"}},
		{"every bad line named", "x\ny\n", nil, []string{"line 1", "line 2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseKeys([]byte(tt.file))
			if tt.wants == nil {
				require.NoError(t, err)
				require.Equal(t, tt.want, got)
				return
			}
			require.ErrorIs(t, err, ErrKeyFile)
			for _, w := range tt.wants {
				require.ErrorContains(t, err, w)
			}
			require.NotContains(t, err.Error(), k1, "errors never echo key material")
			require.NotContains(t, err.Error(), "\n", "one line")

			// From a file: the same problems after the path, one prefix.
			path := filepath.Join(t.TempDir(), "cluster.key")
			require.NoError(t, os.WriteFile(path, []byte(tt.file), 0o600))
			_, ferr := LoadKeyFile(path)
			require.ErrorIs(t, ferr, ErrKeyFile)
			require.Equal(t, strings.Replace(err.Error(), "cluster: bad key file:", "cluster: bad key file "+path+":", 1), ferr.Error())
		})
	}
}

func TestGenerateKey(t *testing.T) {
	t.Parallel()
	a, err := GenerateKey()
	require.NoError(t, err)
	b, err := GenerateKey()
	require.NoError(t, err)
	require.NotEqual(t, a, b)
	keys, err := ParseKeys([]byte(a))
	require.NoError(t, err)
	require.Len(t, keys[0], KeySize)
}

func TestApplyKeys(t *testing.T) {
	t.Parallel()
	k := func(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }
	tests := []struct {
		name           string
		have, want     [][]byte
		added, remove  int
		primaryChanged bool
	}{
		{"same", [][]byte{k(1)}, [][]byte{k(1)}, 0, 0, false},
		{"add second", [][]byte{k(1)}, [][]byte{k(1), k(2)}, 1, 0, false},
		{"switch primary", [][]byte{k(1), k(2)}, [][]byte{k(2), k(1)}, 0, 0, true},
		{"remove old", [][]byte{k(2), k(1)}, [][]byte{k(2)}, 0, 1, false},
		{"replace all", [][]byte{k(1), k(2), k(3)}, [][]byte{k(4), k(5)}, 2, 3, true},
		{"reorder and drop middle", [][]byte{k(1), k(2), k(3)}, [][]byte{k(3), k(1)}, 0, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kr, err := newKeyring(tt.have)
			require.NoError(t, err)
			ch, err := applyKeys(kr, tt.want)
			require.NoError(t, err)
			require.Equal(t, tt.want, kr.GetKeys(), "exactly the wanted keys, first primary")
			require.Equal(t, tt.want[0], kr.GetPrimaryKey())
			require.Equal(t, tt.added, ch.added)
			require.Equal(t, tt.remove, ch.removed)
			require.Equal(t, tt.primaryChanged, ch.primaryChanged())
		})
	}
}

func TestParseLogLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line  string
		level slog.Level
		msg   string
	}{
		{"[DEBUG] memberlist: Stream connection from=1.2.3.4:5\n", slog.LevelDebug, "Stream connection from=1.2.3.4:5"},
		{"[INFO] memberlist: Marking x as failed", slog.LevelInfo, "Marking x as failed"},
		{"[WARN] memberlist: Refuting a suspect message (from: y)", slog.LevelWarn, "Refuting a suspect message (from: y)"},
		{"[ERR] memberlist: discarding packet with unacceptable label", slog.LevelError, "discarding packet with unacceptable label"},
		{"[ERROR] something", slog.LevelError, "something"},
		{"[ERR] Failed to shutdown transport: x", slog.LevelError, "Failed to shutdown transport: x"},
		{"no prefix at all", slog.LevelInfo, "no prefix at all"},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			level, msg := parseLogLine([]byte(tt.line))
			require.Equal(t, tt.level, level)
			require.Equal(t, tt.msg, msg)
		})
	}

	var buf bytes.Buffer
	var leaving atomic.Bool
	l := memberlistLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})), &leaving)
	l.Printf("[DEBUG] memberlist: hidden")
	l.Printf("[WARN] memberlist: shown %d", 1)
	const closedConn = "[ERR] memberlist: Error reading UDP packet: read udp 127.0.0.1:7946: use of closed network connection"
	l.Print(closedConn)
	require.NotContains(t, buf.String(), "hidden")
	require.Contains(t, buf.String(), `level=WARN msg="shown 1" component=memberlist`)
	require.Contains(t, buf.String(), "level=ERROR", "a closed socket while running is an error")

	const sendFailed = "[ERR] memberlist: Failed to send UDP ping: write udp: use of a closed transport"
	l.Print(sendFailed)
	require.Contains(t, buf.String(), "Failed to send UDP ping", "while running, a failed probe is said")

	buf.Reset()
	leaving.Store(true)
	l.Print(closedConn)
	l.Print(sendFailed)
	l.Printf("[ERR] memberlist: something else")
	require.NotContains(t, buf.String(), "closed network connection", "while leaving it is shutdown noise, at debug")
	require.NotContains(t, buf.String(), "Failed to send", "a probe cut short by the shutdown too")
	require.Contains(t, buf.String(), `level=ERROR msg="something else"`)

	// Failure verdicts on others are info while running, debug while leaving.
	var info bytes.Buffer
	var bye atomic.Bool
	li := memberlistLog(slog.New(slog.NewTextHandler(&info, &slog.HandlerOptions{Level: slog.LevelInfo})), &bye)
	li.Printf("[INFO] memberlist: Suspect a-00000001 has failed, no acks received")
	require.Contains(t, info.String(), "Suspect a-00000001 has failed")
	info.Reset()
	bye.Store(true)
	li.Printf("[INFO] memberlist: Suspect a-00000001 has failed, no acks received")
	li.Printf("[INFO] memberlist: Marking a-00000001 as failed, suspect timeout reached (0 peer confirmations)")
	require.Empty(t, info.String())
}

func TestMemberNameAndMeta(t *testing.T) {
	t.Parallel()
	require.Equal(t, "db-1-89abcdef", MemberName("db-1", 0x0123456789abcdef))
	require.Equal(t, "x-00000001", MemberName("x", 1))
	for _, boot := range []uint64{0, 0xf, 0xfedcba9876543210, math.MaxUint64, 0x00000000a0b0c0d0} {
		require.Equal(t, fmt.Sprintf("%s-%08x", "db-1", uint32(boot)), MemberName("db-1", boot), "%#x", boot)
	}

	v1 := encodeMeta("db-1", 0x0123456789abcdef, false, nil)
	require.Len(t, v1, 14)
	m, err := decodeMeta("db-1-89abcdef", v1)
	require.NoError(t, err)
	require.Equal(t, "db-1", m.name)
	require.Equal(t, uint64(0x0123456789abcdef), m.boot)
	require.False(t, m.leaving)
	require.Nil(t, m.settings, "version 1 advertises no settings")
	m, err = decodeMeta("db-1-89abcdef", encodeMeta("db-1", 0x0123456789abcdef, true, nil))
	require.NoError(t, err)
	require.True(t, m.leaving)

	// Version 2 carries the settings.
	st := newSettings(tracker.DefaultConfig())
	v2 := encodeMeta("db-1", 0x0123456789abcdef, true, &st)
	require.Equal(t, byte(2), v2[0])
	require.Equal(t, "\x01\x23\x45\x67\x89\xab\xcd\xef\x01\x04db-1", string(v2[1:15]))
	m, err = decodeMeta("db-1-89abcdef", v2)
	require.NoError(t, err)
	require.Equal(t, meta{name: "db-1", boot: 0x0123456789abcdef, leaving: true, settings: &st}, m)
	// A later revision may append fields: they are ignored.
	m, err = decodeMeta("db-1-89abcdef", append(append([]byte(nil), v2...), 7, 7, 7))
	require.NoError(t, err)
	require.Equal(t, st, *m.settings)
	long := strings.Repeat("n", MaxNameLen)
	big := settings{window: time.Duration(math.MaxInt64/int64(time.Millisecond)) * time.Millisecond, subWindow: time.Hour,
		layout: tracker.Layout{Lowest: math.MinInt64, Highest: math.MaxInt64, SignificantDigits: math.MaxInt32}}
	worst := encodeMeta(long, 1, true, &big)
	require.LessOrEqual(t, len(worst), memberlist.MetaMaxSize)
	m, err = decodeMeta(MemberName(long, 1), worst)
	require.NoError(t, err)
	require.Equal(t, big, *m.settings)

	bad := map[string][]byte{
		"empty":            nil,
		"short":            v1[:9],
		"version":          append([]byte{2}, v1[1:]...),
		"version 3":        append([]byte{3}, v2[1:]...),
		"unknown flag":     append(append(append([]byte(nil), v1[:9]...), 2), v1[10:]...),
		"name mismatch":    encodeMeta("db-2", 0x0123456789abcdef, false, nil),
		"boot mismatch":    encodeMeta("db-1", 0x0123456789abcdee, false, nil),
		"empty name":       encodeMeta("", 0x0123456789abcdef, false, nil),
		"invalid utf8":     append(append([]byte(nil), v1[:10]...), 0xff),
		"unprintable":      encodeMeta("db\x00", 0x0123456789abcdef, false, nil),
		"name too long":    encodeMeta(strings.Repeat("n", 257), 1, false, nil),
		"trailing garbage": append(append([]byte(nil), v1...), 'x'),
		"v2 unknown flag":  append(append(append([]byte(nil), v2[:9]...), 3), v2[10:]...),
		"v2 name mismatch": encodeMeta("db-2", 0x0123456789abcdef, false, &st),
		"v2 name length":   append(append(append([]byte(nil), v2[:10]...), 200), v2[11:]...),
		"v2 no name":       v2[:10],
		"v2 no settings":   v2[:15],
		"v2 cut settings":  v2[:len(v2)-1],
		"v2 varint overflow": append(append([]byte(nil), v2[:15]...),
			0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
		"v2 window overflow": append(append([]byte(nil), v2[:15]...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 1, 2, 2, 2),
	}
	for what, m := range bad {
		_, err := decodeMeta("db-1-89abcdef", m)
		require.ErrorIs(t, err, errBadMeta, what)
	}

	for member, want := range map[string]string{
		"db-1-89abcdef": "db-1", "db-1": "db-1", "a-zzzzzzzz": "a-zzzzzzzz", "-00000000": "", "plain": "plain",
	} {
		require.Equal(t, want, nameFromMember(member), member)
	}
}

func TestStateJSON(t *testing.T) {
	t.Parallel()
	m := Member{Name: "n", Member: "n-00000001", Addr: "127.0.0.1:7946", State: StateSuspect, BootID: 1}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	require.JSONEq(t, `{"name":"n","member":"n-00000001","addr":"127.0.0.1:7946","state":"suspect","boot_id":1}`, string(b))
	var back Member
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, m, back)
	for s := StateAlive; s <= StateLeft; s++ {
		var p State
		require.NoError(t, p.UnmarshalText([]byte(s.String())))
		require.Equal(t, s, p)
	}
	require.Error(t, new(State).UnmarshalText([]byte("zombie")))
	require.Equal(t, "state(9)", State(9).String())
	require.Equal(t, "left", EventLeft.String())
	require.True(t, StateSuspect.Up())
	require.False(t, StateLeft.Up())
}

func TestRejoinWait(t *testing.T) {
	t.Parallel()
	tm := Timing{RejoinInterval: 10 * time.Second, RejoinJitter: 0.2}
	require.Equal(t, 8*time.Second, tm.rejoinWait(0))
	require.Equal(t, 10*time.Second, tm.rejoinWait(0.5))
	require.InDelta(t, float64(12*time.Second), float64(tm.rejoinWait(0.999999)), float64(time.Millisecond))
	tm.RejoinJitter = 0
	require.Equal(t, 10*time.Second, tm.rejoinWait(0.9))
}
