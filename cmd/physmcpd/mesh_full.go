//go:build !lite

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/mesh"
	"github.com/physmcp/physmcpd/meshroute"
)

// meshNode is this node's part in the mesh: its keyring, the can_do
// router and the quorum the engine counts on, and the membership once
// joined.
type meshNode struct {
	keys  [][]byte
	route *meshroute.Router
}

// meshFor prepares a mesh node when the manifest enables the mesh (nil,
// nil when not) and gives the engine its quorum: it asks peers as this
// device, with credentials signed by the mesh keyring. The membership
// joins later (join), once the HTTP listener is up. A peer's request in
// another node's name is logged and, when a trail is kept, audited.
func meshFor(m *manifest.Manifest, opts *engine.Options, dur *durable, logger *slog.Logger) (*meshNode, error) {
	ms := meshOf(m)
	if ms == nil {
		return nil, nil
	}
	keys, err := ms.LoadKeys(m.File)
	if err != nil {
		return nil, fmt.Errorf("network.mesh.key_file: %v", err)
	}
	cfg := meshroute.Config{Logger: logger}
	if dur.trail != nil {
		cfg.Audit = func(ev meshroute.Refusal) {
			if err := dur.trail.Append(ev); err != nil {
				logger.Error("a refused mesh request was not recorded in the audit trail", "err", err)
			}
		}
	}
	r := meshroute.New(meshroute.NewHTTPAsker(m.Device.ID, keys), cfg)
	opts.Quorum = r.Quorum(m.Device.ID, keys)
	return &meshNode{keys: keys, route: r}, nil
}

// join joins the mesh (nil, nil without one) and gives the router the
// membership. It runs once the HTTP listener is up, because a node's
// metadata carries its MCP endpoint: the listener's address, or
// network.mesh.advertise_address when it listens on every interface.
func (n *meshNode) join(m *manifest.Manifest, profile string, roles mesh.Roles, ln net.Addr, scheme string, logger *slog.Logger) (*mesh.Mesh, error) {
	if n == nil {
		return nil, nil
	}
	ms := meshOf(m)
	endpoint, err := endpointURL(scheme, ln, ms.AdvertiseAddress)
	if err != nil {
		return nil, err
	}
	zone := ""
	if loc := m.Device.Location; loc != nil {
		zone = loc.Zone
	}
	mm, err := mesh.Start(mesh.Config{
		DeviceID: m.Device.ID, Zone: zone, Profile: profile, Endpoint: endpoint,
		CapsHash: mesh.Describe(m, profile, roles).CapsHash, Tags: mesh.Digest(mesh.MatchWords(m)),
		BindAddr: ms.Bind(), BindPort: ms.Port(), AdvertiseAddr: ms.AdvertiseAddress,
		SeedPeers: ms.SeedPeers, MaxPeers: ms.Peers(), HeartbeatInterval: ms.HeartbeatInterval(),
		MDNS: ms.MDNSEnabled(), Keys: n.keys, Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	n.route.SetMembers(mm)
	return mm, nil
}

// router is the can_do router, nil without a mesh.
func (n *meshNode) router() *meshroute.Router {
	if n == nil {
		return nil
	}
	return n.route
}

// endpointURL is where peers call this node's MCP endpoint.
func endpointURL(scheme string, ln net.Addr, advertise string) (string, error) {
	tcp, ok := ln.(*net.TCPAddr)
	if !ok {
		return "", fmt.Errorf("mesh: the HTTP listener %s is not TCP", ln)
	}
	host := tcp.IP.String()
	if tcp.IP.IsUnspecified() {
		if advertise == "" {
			return "", errors.New("network.mesh.advertise_address: --http listens on every interface, so name the address peers should call this node at")
		}
		host = advertise
	}
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(tcp.Port)), Path: mcpserver.EndpointPath}
	return u.String(), nil
}

// meshMethods are PhysMCP's extension methods on the MCP endpoint. With the
// mesh off (ms nil) physmcp/manifest still answers and the others say so.
// A vote runs the quorum checks it names with check (this node's policy).
func meshMethods(m *manifest.Manifest, profile string, roles mesh.Roles, ms *mesh.Mesh, router *meshroute.Router, check meshroute.Check) map[string]mcpserver.Method {
	doc := mesh.Describe(m, profile, roles)
	off := map[string]any{"enabled": false, "partition_state": mesh.PartitionNone}
	return map[string]mcpserver.Method{
		meshroute.VoteMethod: func(ctx context.Context, params json.RawMessage) (any, error) {
			if router == nil {
				return nil, errors.New("this node is not in a mesh")
			}
			// A request with a field this node does not know is refused:
			// confirming without what it asks for would be a silent yes.
			var req meshroute.VoteRequest
			dec := json.NewDecoder(bytes.NewReader(params))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				return nil, fmt.Errorf("params: %v", err)
			}
			return router.Answer(ctx, req, check)
		},
		"physmcp/manifest": func(context.Context, json.RawMessage) (any, error) { return doc, nil },
		"physmcp/mesh_status": func(context.Context, json.RawMessage) (any, error) {
			if ms == nil {
				return off, nil
			}
			return ms.Status(), nil
		},
		"physmcp/list_peers": func(context.Context, json.RawMessage) (any, error) {
			if ms == nil {
				return listPeers{Peers: []mesh.Peer{}}, nil
			}
			self := ms.Self()
			return listPeers{Self: &self, Peers: ms.Peers()}, nil
		},
	}
}

// listPeers is physmcp/list_peers' answer: this node and the peers it knows,
// dead and departed ones included (for ten minutes) with their state.
type listPeers struct {
	Self  *mesh.Peer  `json:"self,omitempty"`
	Peers []mesh.Peer `json:"peers"`
}
