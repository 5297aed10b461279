package memtransport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Errors returned by transports. Dial errors wrap them, so callers can match
// with errors.Is.
var (
	// ErrClosed is returned by operations on a transport after Shutdown.
	ErrClosed = errors.New("memtransport: transport is shut down")
	// ErrRefused is returned by a dial to an address with no live transport.
	ErrRefused = errors.New("memtransport: connection refused")
	// ErrUnreachable is returned by a dial across a partition, to or from a
	// crashed node, or when the destination's accept queue is full; and by
	// stream reads and writes once the link is cut.
	ErrUnreachable = errors.New("memtransport: host unreachable")
	// ErrAddrInUse is returned by NewTransportAt for an address in use.
	ErrAddrInUse = errors.New("memtransport: address in use")
)

// Port is the port every transport's address uses.
const Port = 7946

const (
	packetQueue   = 4096            // packets buffered per transport; more are dropped, like a full socket buffer
	acceptQueue   = 64              // streams waiting for memberlist to accept; more are refused
	replayTimeout = 5 * time.Second // longest a duplicated stream's replay waits for its reader
)

// Faults are the faults applied to every packet and stream the network
// carries. The zero value delivers every packet once, at once, and every
// stream intact.
type Faults struct {
	// Drop is the probability in [0, 1] that a packet is lost.
	Drop float64
	// Duplicate is the probability in [0, 1] that a delivered packet is
	// delivered a second time (each copy gets its own delay).
	Duplicate float64
	// Delay is added to every packet and every dial.
	Delay time.Duration
	// Jitter adds a uniform extra delay in [0, Jitter) to every packet and dial.
	Jitter time.Duration
	// StreamDrop is the probability in [0, 1] that a dialled stream is
	// silently lost: the dial succeeds and every write reports success, but
	// the destination never sees the stream, and reads return io.EOF (a
	// connection reset after the sender's last write). memberlist's
	// SendReliable then returns nil for a message that never arrives.
	StreamDrop float64
	// StreamDuplicate is the probability in [0, 1] that a dialled stream is
	// delivered twice: when the dialler closes it, the bytes it wrote are
	// replayed to the destination in a second stream (a retried request).
	// Close waits for the destination to read the replay (at most
	// replayTimeout); what the destination writes back is discarded.
	StreamDuplicate float64
}

// Stats counts what the network did. All counts are cumulative.
type Stats struct {
	PacketsSent       uint64 // WriteTo calls on live transports
	PacketsDelivered  uint64 // copies put on a destination's packet channel
	PacketsDropped    uint64 // lost to Drop, a cut link, a crash, an unknown address or a full queue
	PacketsDuplicated uint64 // extra copies scheduled by Duplicate
	StreamsOpened     uint64 // successful dials, dropped ones included
	StreamsFailed     uint64 // dials that returned an error
	StreamsDropped    uint64 // dials answered with a black hole (StreamDrop)
	StreamsDuplicated uint64 // streams whose bytes were replayed in a second stream (StreamDuplicate)
	StreamsStalled    uint64 // dials to a stalled address: accepted, never read (Network.Stall)
}

// Network connects the transports it creates. Create it with [New]; the zero
// value is not usable.
type Network struct {
	mu       sync.Mutex
	rng      *rand.Rand
	faults   Faults
	nodes    map[string]*Transport // by address, live (not shut down) only
	cut      map[[2]string]struct{}
	stalled  map[string]struct{} // addresses whose incoming streams are never read
	next     int
	pending  map[*delivery]struct{}
	wg       sync.WaitGroup // delayed deliveries whose callback is running or will run
	stats    Stats
	isClosed bool
}

type delivery struct {
	timer    *time.Timer
	from, to string
}

// New returns an empty network whose random faults are drawn from a
// generator seeded with seed, so a run with the same seed and the same
// sequence of sends makes the same choices.
func New(seed uint64) *Network {
	return &Network{
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		nodes:   make(map[string]*Transport),
		cut:     make(map[[2]string]struct{}),
		stalled: make(map[string]struct{}),
		pending: make(map[*delivery]struct{}),
	}
}

// NewTransport returns a transport with a fresh address.
func (n *Network) NewTransport() *Transport {
	n.mu.Lock()
	defer n.mu.Unlock()
	for {
		n.next++
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(n.next >> 8), byte(n.next)}), Port).String()
		if _, used := n.nodes[addr]; !used {
			return n.newTransportLocked(addr)
		}
	}
}

// NewTransports returns k transports with fresh addresses: a cluster's
// members, the first one's address the seed of the others.
func (n *Network) NewTransports(k int) []*Transport {
	trs := make([]*Transport, k)
	for i := range trs {
		trs[i] = n.NewTransport()
	}
	return trs
}

// NewTransportAt returns a transport at addr ("ip:port"), for example to
// restart a node at the address of one that was shut down. It fails if a
// live transport holds addr.
func (n *Network) NewTransportAt(addr string) (*Transport, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("memtransport: %w", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, used := n.nodes[ap.String()]; used {
		return nil, fmt.Errorf("%w: %s", ErrAddrInUse, addr)
	}
	return n.newTransportLocked(ap.String()), nil
}

func (n *Network) newTransportLocked(addr string) *Transport {
	ap := netip.MustParseAddrPort(addr)
	t := &Transport{
		net:      n,
		addr:     addr,
		ip:       net.IP(ap.Addr().AsSlice()),
		port:     int(ap.Port()),
		packetCh: make(chan *memberlist.Packet, packetQueue),
		streamCh: make(chan net.Conn, acceptQueue),
		conns:    make(map[*conn]struct{}),
		done:     make(chan struct{}),
	}
	n.nodes[addr] = t
	return t
}

// SetFaults replaces the packet faults.
func (n *Network) SetFaults(f Faults) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults = f
}

// Partition cuts every link between addresses in different groups, both
// ways, for packets and streams; open streams across a cut break. Addresses
// in no group keep their links. Cuts add up until [Network.Heal].
func (n *Network) Partition(groups ...[]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, g := range groups {
		for _, h := range groups[i+1:] {
			for _, a := range g {
				for _, b := range h {
					if a != b {
						n.cut[pair(a, b)] = struct{}{}
					}
				}
			}
		}
	}
	n.breakConnsLocked()
}

// Heal removes every cut made by Partition. Crashed nodes stay crashed.
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
}

// Stall makes addr a peer that accepts streams and never reads them, like
// a process whose stream handler is stuck: a dial to addr succeeds, but
// the stream never reaches its memberlist, and the dialler's writes block
// until their deadline (memberlist's TCPTimeout) or until either end shuts
// down. Packets and addr's own dials are unaffected, so addr stays alive
// to the failure detector. stalled false ends the stall for later dials
// and breaks the streams stalled so far.
func (n *Network) Stall(addr string, stalled bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if stalled {
		n.stalled[addr] = struct{}{}
		return
	}
	delete(n.stalled, addr)
	for _, t := range n.nodes {
		for c := range t.conns {
			if c.stalled && (c.local.addr == addr || c.remote.addr == addr) {
				c.closeLocked()
			}
		}
	}
}

// Crash makes the transport at addr fail like a host that lost power: it
// neither sends nor receives packets (writes still report success, like
// UDP), dials to and from it fail, and its open streams break. A crashed
// transport stays crashed until it is shut down; it reports whether addr
// was live.
func (n *Network) Crash(addr string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	t, ok := n.nodes[addr]
	if !ok {
		return false
	}
	t.crashed = true
	n.breakConnsLocked()
	return true
}

// Stats returns the counts so far.
func (n *Network) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// Close stops every pending delayed delivery and waits for running ones.
// Transports keep working afterwards, without delays.
func (n *Network) Close() {
	n.mu.Lock()
	n.isClosed = true
	for d := range n.pending {
		if d.timer.Stop() {
			n.wg.Done()
		}
		delete(n.pending, d)
	}
	n.mu.Unlock()
	n.wg.Wait()
}

func pair(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// linkLocked reports whether a and b (both live transports) can talk.
func (n *Network) linkLocked(a, b *Transport) bool {
	if a == nil || b == nil || a.closed || b.closed || a.crashed || b.crashed {
		return false
	}
	if a == b {
		return true
	}
	_, cut := n.cut[pair(a.addr, b.addr)]
	return !cut
}

// breakConnsLocked closes every stream whose link is no longer up.
func (n *Network) breakConnsLocked() {
	for _, t := range n.nodes {
		for c := range t.conns {
			if !n.linkLocked(c.local, c.remote) {
				c.closeLocked()
			}
		}
	}
}

// delayLocked draws one delay from the faults.
func (n *Network) delayLocked() time.Duration {
	d := n.faults.Delay
	if n.faults.Jitter > 0 {
		d += time.Duration(n.rng.Int64N(int64(n.faults.Jitter)))
	}
	return d
}

// sendLocked carries one packet from src to the address dst.
func (n *Network) sendLocked(src *Transport, buf []byte, dst string) {
	n.stats.PacketsSent++
	to := n.nodes[dst]
	if !n.linkLocked(src, to) || (n.faults.Drop > 0 && n.rng.Float64() < n.faults.Drop) {
		n.stats.PacketsDropped++
		return
	}
	copies := 1
	if n.faults.Duplicate > 0 && n.rng.Float64() < n.faults.Duplicate {
		copies = 2
		n.stats.PacketsDuplicated++
	}
	for range copies {
		b := append([]byte(nil), buf...)
		d := n.delayLocked()
		if d <= 0 || n.isClosed {
			n.deliverLocked(src, to, b)
			continue
		}
		dl := &delivery{from: src.addr, to: to.addr}
		n.wg.Add(1)
		n.pending[dl] = struct{}{}
		dl.timer = time.AfterFunc(d, func() {
			defer n.wg.Done()
			n.mu.Lock()
			defer n.mu.Unlock()
			if _, ok := n.pending[dl]; !ok {
				return
			}
			delete(n.pending, dl)
			// The link is checked again at arrival: a packet in flight when a
			// partition starts or a node crashes is lost.
			if !n.linkLocked(src, to) {
				n.stats.PacketsDropped++
				return
			}
			n.deliverLocked(src, to, b)
		})
	}
}

func (n *Network) deliverLocked(src, to *Transport, b []byte) {
	p := &memberlist.Packet{
		Buf:       b,
		From:      &net.UDPAddr{IP: src.ip, Port: src.port},
		Timestamp: time.Now(),
	}
	select {
	case to.packetCh <- p:
		n.stats.PacketsDelivered++
	default:
		n.stats.PacketsDropped++
	}
}

// stopPendingLocked stops delayed deliveries from or to addr.
func (n *Network) stopPendingLocked(addr string) {
	for d := range n.pending {
		if d.from == addr || d.to == addr {
			if d.timer.Stop() {
				n.wg.Done()
			}
			delete(n.pending, d)
		}
	}
}
