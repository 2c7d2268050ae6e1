//go:build !lite

package main

import (
	"net"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/profiles"
)

// describedManifest is m as physmcp/manifest describes it. When m declares
// no network.protocols, the entry is the one serve serves: ip at the HTTP
// listener's port, with its address (the mesh's advertise_address when it
// listens on every interface, else none), so clients are told what is
// served, never a default. Declared entries checkProtocols held to serve's
// flags are shown as written.
func describedManifest(m *manifest.Manifest, prof profiles.Profile, ln net.Addr) *manifest.Manifest {
	if m.Network != nil && m.Network.At.Has("protocols") {
		return m
	}
	tcp, ok := ln.(*net.TCPAddr)
	if !ok {
		return m
	}
	p := &manifest.Protocol{Type: "ip", MCPPort: tcp.Port, Role: protocolRoles[prof.Name]}
	var network manifest.Network
	if m.Network != nil {
		network = *m.Network
	}
	switch {
	case !tcp.IP.IsUnspecified():
		p.Address = tcp.IP.String()
	case network.Mesh != nil:
		p.Address = network.Mesh.AdvertiseAddress
	}
	network.Protocols = []*manifest.Protocol{p}
	described := *m
	described.Network = &network
	return &described
}
