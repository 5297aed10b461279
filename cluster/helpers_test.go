package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/adaptivetimeout/adaptivetimeout/internal/memtransport"
	"github.com/adaptivetimeout/adaptivetimeout/internal/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testLogger is testutil.Logger.
func testLogger(t *testing.T) *slog.Logger { return testutil.Logger(t) }

// eventually is testutil.Eventually.
func eventually(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	return testutil.Eventually(t, what, cond)
}

// recorder keeps the events a cluster delivered.
type recorder struct {
	mu     sync.Mutex
	events []Event
	msgs   [][]byte
}

func (r *recorder) onEvent(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) onMessage(b []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, b)
}

// has reports whether an event of typ for member was delivered.
func (r *recorder) has(typ EventType, member string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.events, func(e Event) bool {
		return e.Type == typ && e.Member.Member == member
	})
}

// allHave reports whether every node of ns was delivered an event of typ
// for each of members.
func allHave(ns []*node, typ EventType, members ...string) bool {
	for _, n := range ns {
		for _, m := range members {
			if !n.rec.has(typ, m) {
				return false
			}
		}
	}
	return true
}

func (r *recorder) messages() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

// node is a cluster under test with its recorder.
type node struct {
	*Cluster
	rec *recorder
	tr  *memtransport.Transport
}

// memConfig is a config for a member on the in-memory network.
func memConfig(t *testing.T, name string, boot uint64, tr *memtransport.Transport, seeds ...string) Config {
	cfg := DefaultConfig()
	cfg.Name = name
	cfg.BootID = boot
	cfg.Transport = tr
	cfg.Seeds = seeds
	cfg.Timing = FastTiming()
	cfg.Logger = testLogger(t).With("node", name)
	return cfg
}

// startNode creates and starts a member; it is closed at cleanup.
func startNode(t *testing.T, cfg Config) *node {
	t.Helper()
	rec := &recorder{}
	cfg.OnEvent = rec.onEvent
	cfg.OnMessage = rec.onMessage
	c, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() { _ = c.Close() })
	tr, _ := cfg.Transport.(*memtransport.Transport)
	return &node{Cluster: c, rec: rec, tr: tr}
}

// newNetwork returns a fresh in-memory network of seed, closed when t
// ends.
func newNetwork(t *testing.T, seed uint64) *memtransport.Network {
	nw := memtransport.New(seed)
	t.Cleanup(nw.Close)
	return nw
}

// memCluster starts n members named n0.. on a fresh network; every member
// has n0 as its seed. Boot IDs are fixed so runs are reproducible.
func memCluster(t *testing.T, seed uint64, n int) (*memtransport.Network, []*node) {
	t.Helper()
	nw := newNetwork(t, seed)
	var nodes []*node
	trs := nw.NewTransports(n)
	for i, tr := range trs {
		nodes = append(nodes, startNode(t, memConfig(t, fmt.Sprintf("n%d", i), uint64(0xb0070000+i), tr, trs[0].Addr())))
	}
	return nw, nodes
}

// alive returns the member names a node lists as up.
func upMembers(c *Cluster) []string {
	var out []string
	for _, m := range c.Members() {
		if m.State.Up() {
			out = append(out, m.Member)
		}
	}
	return out
}

// member is a test's cluster member: node and gnode, which embed *Cluster
// and run on a memtransport network.
type member interface {
	MemberName() string
	Members() []Member
	transport() *memtransport.Transport
}

func (n *node) transport() *memtransport.Transport  { return n.tr }
func (n *gnode) transport() *memtransport.Transport { return n.tr }

// sees reports whether every member of from lists exactly want as up.
func sees[M member](from []M, want ...string) bool {
	return listsWhere(from, want, func(m Member) bool { return m.State.Up() })
}

// lists reports whether every member of from lists exactly want, in any
// state.
func lists[M member](from []M, want []string) bool {
	return listsWhere(from, want, func(Member) bool { return true })
}

// listsWhere reports whether the members every member of from lists for
// which keep holds are exactly want.
func listsWhere[M member](from []M, want []string, keep func(Member) bool) bool {
	want = slices.Sorted(slices.Values(want))
	for _, n := range from {
		var got []string
		for _, m := range n.Members() {
			if keep(m) {
				got = append(got, m.Member)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return false
		}
	}
	return true
}

// names returns the member names of ms.
func names[M member](ms []M) []string {
	var out []string
	for _, n := range ms {
		out = append(out, n.MemberName())
	}
	return out
}

// partition cuts nw between the members of a and those of b.
func partition[M member](nw *memtransport.Network, a, b []M) {
	addrs := func(ms []M) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.transport().Addr())
		}
		return out
	}
	nw.Partition(addrs(a), addrs(b))
}
