//go:build !lite

package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"go.bug.st/serial"

	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/mesh"
)

// protocolsRig is the store rig's device with network.protocols written as
// protocols (flow YAML, on line 4 of m.yml; "" leaves the key out).
func protocolsRig(t *testing.T, protocols string) storeRig {
	t.Helper()
	r := newStoreRig(t, storeRigPolicy)
	text := storeRigManifest
	if protocols != "" {
		text = strings.Replace(text, "buses:\n", "network:\n  protocols: "+protocols+"\nbuses:\n", 1)
	}
	if err := os.WriteFile(r.manifest, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return r
}

// A manifest that names a way to reach the device serve does not serve, or
// leaves out the one it serves, stops serve before any bus is touched (the
// rig drives its safe value at start-up, so a write would show it), naming
// the manifest's line and the flag.
func TestServeRefusesProtocolsItDoesNotServe(t *testing.T) {
	cases := []struct {
		name, protocols string
		flags           []string
		want            []string
	}{
		{"ip declared, stdio served", "[{type: ip, mcp_port: 8765}]", []string{"--stdio"},
			[]string{"network.protocols[0].type: ip, but serve was started with --stdio: MCP over IP is streamable HTTP: serve with --http ADDR"}},
		{"ip declared, stdio by default", "[{type: ip}]", nil,
			[]string{"network.protocols[0].type: ip, but serve was started with --stdio (the default"}},
		{"ip declared, serial served", "[{type: ip}]", []string{"--serial", "/dev/physmcp-test-no-such-port"},
			[]string{"network.protocols[0].type: ip, but serve was started with --serial /dev/physmcp-test-no-such-port",
				"network.protocols: serve was started with --serial /dev/physmcp-test-no-such-port, which no entry declares: add {type: serial, role: native}"}},
		{"lora declared, HTTP served", "[{type: ip, mcp_port: 8765}, {type: lora}]", []string{"--http", "127.0.0.1:0"},
			[]string{"network.protocols[1].type: lora, but serve was started with --http 127.0.0.1:0: lora is served on a serial line (a radio modem for lora and ble): serve with --serial PORT",
				"warning: network.protocols[0].mcp_port: 8765, but serve listens on a port the system picks"}},
		{"none declared, HTTP served", "[]", []string{"--http", "127.0.0.1:0"},
			[]string{"network.protocols: serve was started with --http 127.0.0.1:0, which no entry declares: add {type: ip, role: native}"}},
		{"none declared, HTTP served on a port", "[]", []string{"--http", "127.0.0.1:1"},
			[]string{"network.protocols: serve was started with --http 127.0.0.1:1, which no entry declares: add {type: ip, mcp_port: 1, role: native}"}},
		{"serial declared, HTTP served", "[{type: serial, address: /dev/ttyS0, role: lite}]", []string{"--http", "127.0.0.1:0"},
			[]string{"network.protocols[0].type: serial, but serve was started with --http 127.0.0.1:0",
				"network.protocols: serve was started with --http 127.0.0.1:0, which no entry declares"}},
		{"role of another profile", "[{type: ip, role: lite}]", []string{"--http", "127.0.0.1:0"},
			[]string{"network.protocols[0].role: lite, but serve serves the full profile (--profile, else the manifest's profile), which is reached as role native: write role: native"}},
		{"proxy role on the lite profile", "[{type: serial, role: proxy}]", []string{"--serial", "/dev/physmcp-test-no-such-port", "--profile", "lite"},
			[]string{"network.protocols[0].role: proxy, but serve serves the lite profile (--profile, else the manifest's profile), which is reached as role lite"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := protocolsRig(t, c.protocols)
			code, stderr := serveOnce(t, append([]string{"--manifest", r.manifest, "--policy", r.policy, "--simulate", "--state-dir", filepath.Join(r.dir, "state")}, c.flags...))
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, stderr)
			}
			for _, want := range c.want {
				i := slices.IndexFunc(strings.Split(stderr, "\n"), func(l string) bool { return strings.Contains(l, want) })
				if i < 0 {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				} else if line := strings.Split(stderr, "\n")[i]; !strings.HasPrefix(line, r.manifest+":4:") {
					t.Errorf("%q does not name %s line 4", line, r.manifest)
				}
			}
			if n := r.writes(t); n != 0 {
				t.Errorf("%d writes reached the bus before serve stopped", n)
			}
		})
	}
}

// serveOnce runs serve with args until it stops by itself, or for 10 s
// (a serve that should have refused to start), and returns its exit code
// and stderr.
func serveOnce(t *testing.T, args []string) (int, string) {
	t.Helper()
	logs := &serveLogBuffer{}
	cfg, code := parseServe(args, logs)
	if code >= 0 {
		t.Fatalf("parse %v: exit %d: %s", args, code, logs.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code = serve(ctx, cfg, strings.NewReader(""), io.Discard, logs)
	if ctx.Err() != nil {
		t.Errorf("serve ran until the test stopped it")
	}
	return code, logs.String()
}

// physmcp/manifest shows the protocols as the manifest declares them once
// serve has held them to its flags, and without the key, what serve serves.
func TestPhysmcpManifestProtocolsAreWhatIsServed(t *testing.T) {
	cases := []struct {
		name, protocols string
		want            func(port int) []mesh.DocumentProtocol
		warning         string
	}{
		{"absent: what is served", "", func(port int) []mesh.DocumentProtocol {
			return []mesh.DocumentProtocol{{Type: "ip", Address: "127.0.0.1", MCPPort: port, Role: "native"}}
		}, ""},
		{"declared: as written", "[{type: ip, address: greenhouse-01.example, mcp_port: 443, role: native}]", func(int) []mesh.DocumentProtocol {
			return []mesh.DocumentProtocol{{Type: "ip", Address: "greenhouse-01.example", MCPPort: 443, Role: "native"}}
		}, "warning: network.protocols[0].mcp_port: 443, but serve listens on a port the system picks (--http 127.0.0.1:0): right only if a port mapping or reverse proxy forwards port 443 to it"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := protocolsRig(t, c.protocols)
			url, _, logs, _ := serveInBackground(t, []string{"--manifest", r.manifest, "--policy", r.policy, "--simulate", "--http", "127.0.0.1:0", "--state-dir", filepath.Join(r.dir, "state")})
			_, portText, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(url, "http://127.0.0.1"), mcpserver.EndpointPath), ":")
			port, err := strconv.Atoi(portText)
			if err != nil {
				t.Fatalf("%s: %v", url, err)
			}
			var doc mesh.Document
			if err := (rpcClient{url: url, http: &http.Client{Timeout: 5 * time.Second}}).call("physmcp/manifest", &doc); err != nil {
				t.Fatal(err)
			}
			if want := c.want(port); !slices.Equal(doc.Device.Protocols, want) {
				t.Errorf("protocols %+v, want %+v", doc.Device.Protocols, want)
			}
			if c.warning != "" && !strings.Contains(logs.String(), r.manifest+":4:") {
				t.Errorf("log lacks a finding at %s line 4:\n%s", r.manifest, logs.String())
			}
			if !strings.Contains(logs.String(), c.warning) || c.warning == "" && strings.Contains(logs.String(), "network.protocols") {
				t.Errorf("log lacks %q (or has another finding):\n%s", c.warning, logs.String())
			}
		})
	}
}

// A LoRa link is a radio modem on the serial line serve serves: declared as
// lora, --serial serves MCP on the line.
func TestServeSerialDeclaredAsLora(t *testing.T) {
	server, client := socatPtyPair(t)
	r := protocolsRig(t, "[{type: lora, address: 0x2601a3f1, role: native}]")
	logs := serveInProcess(t, []string{"--manifest", r.manifest, "--policy", r.policy, "--simulate", "--serial", server, "--state-dir", filepath.Join(r.dir, "state")}, nil, io.Discard)
	port, err := serial.Open(client, &serial.Mode{BaudRate: 115200})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { port.Close() })
	c := dialMCP(t, transport.NewIO(port, portCloser{port}, io.NopCloser(strings.NewReader(""))))
	if _, err := callTool(t, c, "can_do", map[string]any{"intent": map[string]any{"semantic_tags": []any{"flow"}, "action": "write"}}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "network.protocols") {
		t.Errorf("a finding about network.protocols:\n%s", logs.String())
	}
}
