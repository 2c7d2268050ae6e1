package mesh

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/mdns"
)

// MDNSService is the DNS-SD service type physmcpd advertises and browses
// (in the local. domain). The SRV record points at the MCP endpoint's port;
// the TXT record says the rest (see txtRecord).
const MDNSService = "_physmcp._tcp"

// mdnsBrowseTimeout is how long one browse listens for answers.
const mdnsBrowseTimeout = 750 * time.Millisecond

// keyIDs names the keys of a keyring without revealing them: the first 4
// bytes of SHA-256("physmcp mesh key " + key), in hex; "open" without keys.
// mDNS answers carry them so that a node only joins nodes that share a key.
func keyIDs(keys [][]byte) []string {
	if len(keys) == 0 {
		return []string{"open"}
	}
	var ids []string
	for _, k := range keys {
		sum := sha256.Sum256(append([]byte("physmcp mesh key "), k...))
		ids = append(ids, hex.EncodeToString(sum[:4]))
	}
	return ids
}

// txtRecord is the TXT record of this node's service instance:
//
//	v=1            layout version
//	node=ID        the node id (the device id)
//	gossip=PORT    the gossip port (UDP and TCP) at the advertised address
//	mesh=ID,ID     the key ids of its keyring (keyIDs), or "open"
//	path=/mcp      the MCP endpoint's path, when it serves one
func (m *Mesh) txtRecord(gossipPort int, path string) []string {
	txt := []string{"v=1", "node=" + m.cfg.NodeID, "gossip=" + strconv.Itoa(gossipPort), "mesh=" + strings.Join(m.ids, ",")}
	if path != "" {
		txt = append(txt, "path="+path)
	}
	return txt
}

// startMDNS advertises this node. mDNS is a convenience: when the host has
// no multicast (some containers) the node says so and goes on with seed
// peers and gossip.
func (m *Mesh) startMDNS() {
	local := m.ml.LocalNode()
	port, path := int(local.Port), ""
	if u, err := url.Parse(m.cfg.Endpoint); err == nil && u.Host != "" {
		if p, err := strconv.Atoi(u.Port()); err == nil {
			port, path = p, u.Path
		}
	}
	host := m.cfg.NodeID + ".local."
	svc, err := mdns.NewMDNSService(m.cfg.NodeID, MDNSService, "local.", host, port, []net.IP{local.Addr},
		m.txtRecord(int(local.Port), path))
	if err == nil {
		m.mdns, err = mdns.NewServer(&mdns.Config{Zone: svc, Logger: m.mdnsLogger()})
	}
	if err != nil {
		m.mdnsS = "unavailable"
		m.log.Warn("mesh: mDNS unavailable; discovery by seed peers and gossip only", "err", err)
		return
	}
	m.mdnsS = "on"
}

func (m *Mesh) mdnsLogger() *log.Logger { return log.New(&levelWriter{log: m.log}, "", 0) }

// browse asks mDNS for _physmcp._tcp and returns the gossip addresses of the
// nodes that share a key with this one, other than this node.
func (m *Mesh) browse() []string {
	entries := make(chan *mdns.ServiceEntry, 64)
	params := mdns.DefaultParams(MDNSService)
	params.Entries = entries
	params.Timeout = mdnsBrowseTimeout
	params.Logger = log.New(io.Discard, "", 0) // a host without IPv6 multicast says so on every browse
	ctx, cancel := context.WithTimeout(context.Background(), 2*mdnsBrowseTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- mdns.QueryContext(ctx, params); close(entries) }()
	var addrs []string
	for e := range entries {
		if a, ok := m.gossipAddr(e); ok {
			addrs = append(addrs, a)
		}
	}
	if err := <-done; err != nil {
		m.log.Debug("mesh: mDNS browse", "err", err)
	}
	return addrs
}

// gossipAddr reads a browse answer; ok is false for this node, a node of
// another mesh or an answer that is not physmcpd's.
func (m *Mesh) gossipAddr(e *mdns.ServiceEntry) (string, bool) {
	fields := map[string]string{}
	for _, f := range e.InfoFields {
		if k, v, ok := strings.Cut(f, "="); ok {
			fields[k] = v
		}
	}
	if fields["v"] != "1" || fields["node"] == "" || fields["node"] == m.cfg.NodeID {
		return "", false
	}
	if !slices.ContainsFunc(strings.Split(fields["mesh"], ","), func(id string) bool { return slices.Contains(m.ids, id) }) {
		return "", false
	}
	port, err := strconv.Atoi(fields["gossip"])
	if err != nil || port < 1 || port > 65535 {
		return "", false
	}
	ip := e.AddrV4
	if ip == nil && e.AddrV6IPAddr != nil {
		ip = e.AddrV6IPAddr.IP
	}
	if ip == nil {
		return "", false
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(port)), true
}
