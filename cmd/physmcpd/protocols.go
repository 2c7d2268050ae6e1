package main

import (
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/physmcp/physmcpd/internal/strictyaml"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/profiles"
)

// protocolTypes are the network.protocols types each transport serves. A
// LoRa or BLE link reaches physmcpd only as a radio modem on a serial line;
// stdio reaches only the process that started serve, so it has no type and
// needs no entry.
var protocolTypes = map[profiles.Transport][]string{
	profiles.HTTP:   {"ip"},
	profiles.Serial: {"serial", "lora", "ble"},
}

// protocolRoles is the network.protocols role a node of each profile is
// reached as.
var protocolRoles = map[string]string{
	profiles.Full.Name:       "native",
	profiles.Lite.Name:       "lite",
	profiles.Proxy.Name:      "proxy",
	profiles.Aggregator.Name: "proxy", // it serves adopted tools only
}

// checkProtocols holds the manifest's network.protocols to what serve is
// about to serve, because physmcp/manifest shows them to clients as the ways
// to reach this device: an entry serve does not serve, or a transport served
// that no entry declares, is an error. Without the key there is nothing to
// hold (physmcp/manifest then reports what is served). An ip entry's
// mcp_port that differs from the port serve listens on is only a warning: a
// port mapping or a reverse proxy in front of serve, which serve cannot see,
// makes it right.
func checkProtocols(cfg serveConfig, prof profiles.Profile, m *manifest.Manifest) strictyaml.Diags {
	n := m.Network
	if n == nil || !n.At.Has("protocols") {
		return nil
	}
	t := cfg.transport()
	served, role := protocolTypes[t], protocolRoles[prof.Name]
	var diags strictyaml.Diags
	declared := false
	for i, p := range n.Protocols {
		path := fmt.Sprintf("network.protocols[%d]", i)
		if !slices.Contains(served, p.Type) {
			diags.Errorf(p.At.Of("type"), "%s.type: %s, but serve was started with %s: %s, or remove this entry "+
				"(physmcp/manifest shows it to clients as a way to reach this device)", path, p.Type, cfg.transportFlag(), serveWithHint(p.Type))
			continue
		}
		declared = true
		if p.Role != "" && p.Role != role {
			diags.Errorf(p.At.Of("role"), "%s.role: %s, but serve serves the %s profile (--profile, else the manifest's profile), "+
				"which is reached as role %s: write role: %s, or serve the profile the role names", path, p.Role, prof.Name, role, role)
		}
		if t == profiles.HTTP && p.At.Has("mcp_port") {
			if port := httpPort(cfg.httpAddr); port != p.MCPPort {
				diags.Warnf(p.At.Of("mcp_port"), "%s.mcp_port: %d, but serve listens on %s (%s): right only if a port mapping or reverse proxy forwards port %d to it",
					path, p.MCPPort, portName(port), cfg.transportFlag(), p.MCPPort)
			}
		}
	}
	if len(served) > 0 && !declared {
		diags.Errorf(n.At.Of("protocols"), "network.protocols: serve was started with %s, which no entry declares: add %s, "+
			"or remove network.protocols (physmcp/manifest then reports what serve serves)", cfg.transportFlag(), entryHint(cfg, t, role))
	}
	return diags
}

// serveWithHint says which flag serves a protocol type.
func serveWithHint(typ string) string {
	if typ == "ip" {
		return "MCP over IP is streamable HTTP: serve with --http ADDR"
	}
	return typ + " is served on a serial line (a radio modem for lora and ble): serve with --serial PORT"
}

// entryHint is the network.protocols entry that declares what t serves.
func entryHint(cfg serveConfig, t profiles.Transport, role string) string {
	if t == profiles.HTTP {
		if port := httpPort(cfg.httpAddr); port != 0 {
			return fmt.Sprintf("{type: ip, mcp_port: %d, role: %s}", port, role)
		}
		return fmt.Sprintf("{type: ip, role: %s}", role)
	}
	return fmt.Sprintf("{type: serial, role: %s} (lora or ble for a radio modem on the line)", role)
}

// transportFlag names the flag that chose the transport, for messages.
func (cfg serveConfig) transportFlag() string {
	switch {
	case cfg.httpAddr != "":
		return "--http " + cfg.httpAddr
	case cfg.serialPort != "":
		return "--serial " + cfg.serialPort
	case cfg.stdio:
		return "--stdio"
	}
	return "--stdio (the default: none of --stdio, --serial or --http was given)"
}

// httpPort is the port of a --http address parseServe accepted; 0 when the
// system picks it (or the port is a service name that does not resolve).
func httpPort(addr string) int {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, err := net.LookupPort("tcp", strings.TrimSpace(port))
	if err != nil {
		return 0
	}
	return n
}

func portName(port int) string {
	if port == 0 {
		return "a port the system picks"
	}
	return fmt.Sprintf("port %d", port)
}
