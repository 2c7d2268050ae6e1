package mesh

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// memNet is an in-memory network for memberlist: datagrams go through
// buffered channels and are lost when nobody listens (as UDP's are), streams
// are net.Pipe. Inside a synctest bubble nothing on it waits for the
// kernel, so the bubble's clock runs every timer of the protocol, and how
// loaded the host is cannot change what a test sees.
type memNet struct {
	mu    sync.Mutex
	ports map[string]*memPort
	nodes []*Mesh
	deaf  map[string]bool // addresses whose datagrams are lost
}

func newMemNet() *memNet { return &memNet{ports: map[string]*memPort{}, deaf: map[string]bool{}} }

// setDeaf loses every datagram to addr (gossip, pings, acks) while deaf;
// streams (joins, full syncs, TCP pings) still reach it.
func (n *memNet) setDeaf(addr string, deaf bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.deaf[addr] = deaf
}

func (n *memNet) isDeaf(addr string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.deaf[addr]
}

// start starts a node on the network; close closes it.
func (n *memNet) start(t testing.TB, cfg Config) *Mesh {
	t.Helper()
	cfg.transport = n.port()
	m, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	n.nodes = append(n.nodes, m)
	n.mu.Unlock()
	return m
}

// startNodes starts count nodes of zone z at heartbeat hb on the network,
// each after the first seeded with it, and returns them and a function that
// starts one more the same way.
func (n *memNet) startNodes(t testing.TB, keys [][]byte, hb time.Duration, count int) (nodes []*Mesh, join func(name string) *Mesh) {
	nodes = []*Mesh{n.start(t, nodeConfig(t, "node_0", "z", keys, hb))}
	seed := nodes[0].Self().Addr
	join = func(name string) *Mesh { return n.start(t, nodeConfig(t, name, "z", keys, hb, seed)) }
	for i := 1; i < count; i++ {
		nodes = append(nodes, join(fmt.Sprintf("node_%d", i)))
	}
	return nodes, join
}

// close closes every node started on the network, then lets the probes
// under way end on their timers (up to a few heartbeats of hb): a synctest
// bubble must end with none of its goroutines left.
func (n *memNet) close(hb time.Duration) {
	n.mu.Lock()
	nodes := n.nodes
	n.mu.Unlock()
	for _, m := range nodes {
		m.Close()
	}
	time.Sleep(5 * hb)
}

// port is a new node's end of the network, at the next free address.
func (n *memNet) port() *memPort {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := &memPort{net: n, addr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: len(n.ports) + 1},
		packets: make(chan *memberlist.Packet, 1024), streams: make(chan net.Conn), down: make(chan struct{})}
	n.ports[p.addr.String()] = p
	return p
}

// find returns the port at addr, nil when none or when it is shut down.
func (n *memNet) find(addr string) *memPort {
	n.mu.Lock()
	p := n.ports[addr]
	n.mu.Unlock()
	if p == nil {
		return nil
	}
	select {
	case <-p.down:
		return nil
	default:
		return p
	}
}

var errRefused = errors.New("connection refused (memNet)")

// memPort is one node's transport on a memNet.
type memPort struct {
	net     *memNet
	addr    *net.UDPAddr
	packets chan *memberlist.Packet
	streams chan net.Conn
	down    chan struct{}
	once    sync.Once
}

var _ memberlist.NodeAwareTransport = (*memPort)(nil)

func (p *memPort) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return p.addr.IP, p.addr.Port, nil
}

func (p *memPort) WriteTo(b []byte, addr string) (time.Time, error) {
	return p.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (p *memPort) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	now := time.Now()
	if dest := p.net.find(a.Addr); dest != nil && !p.net.isDeaf(a.Addr) {
		select {
		case dest.packets <- &memberlist.Packet{Buf: bytes.Clone(b), From: p.addr, Timestamp: now}:
		default: // a full receive buffer drops it, as a socket's does
		}
	}
	return now, nil
}

func (p *memPort) PacketCh() <-chan *memberlist.Packet { return p.packets }

func (p *memPort) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return p.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (p *memPort) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	dest := p.net.find(a.Addr)
	if dest == nil {
		return nil, errRefused
	}
	mine, theirs := net.Pipe()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case dest.streams <- theirs:
		return mine, nil
	case <-dest.down:
		return nil, errRefused
	case <-t.C:
		return nil, errors.New("dial timeout (memNet)")
	}
}

func (p *memPort) StreamCh() <-chan net.Conn { return p.streams }

func (p *memPort) Shutdown() error {
	p.once.Do(func() { close(p.down) })
	return nil
}
