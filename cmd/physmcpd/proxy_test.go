//go:build !lite

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/testenv"
	"github.com/physmcp/physmcpd/mcpserver"
)

// soilNode is a Lite sensor node whose readings do not move, so that the
// proxy's answer can be compared with the node's own.
const soilNode = `physmcp_version: "0.1"
profile: lite
device: {id: soil_node_01, type: soil_sensor, location: {zone: bed_3}}
buses:
  i2c1: {type: i2c, device: "1", simulated: true}
capabilities:
  - name: soil_temperature
    kind: read
    description: Soil temperature at root depth.
    binding: {bus: i2c1, address: "0x48:reg=0x00:width=2:byte_order=big:signed=true:shift=4:scale=0.0625"}
    data_type: float
    unit: "°C"
    range: {min: -20, max: 60}
    semantic_tags: [temperature, soil]
    cache_ttl_ms: 100
    simulation: {initial: 17.25}
`

// soilProxy adopts the node's read on the serial line PORT.
const soilProxy = `physmcp_version: "0.1"
profile: proxy
device: {id: controller_01, type: greenhouse_controller, location: {zone: bed_3}}
buses:
  node: {type: mcp, port: %s, baud: 115200, timeout_ms: 1000}
capabilities:
  - name: bed_soil_temperature
    kind: read
    description: Soil temperature of the bed, from the sensor node on the serial line.
    binding: {bus: node, type: virtual, tool: read_soil_temperature}
    data_type: float
    unit: "°C"
    semantic_tags: [temperature, soil, bed]
    cache_ttl_ms: 500
    timeout_ms: 1000
`

// buildBinary builds physmcpd (with tags, e.g. lite) into a test directory.
func buildBinary(t testing.TB, tags string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "physmcpd"+strings.ReplaceAll(tags, " ", "-"))
	args := []string{"build", "-o", bin}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", args, err, out)
	}
	return bin
}

// ptyPair is a socat pseudo-terminal pair at two fixed paths that the test
// can unplug (kill) and plug back (start again at the same paths).
type ptyPair struct {
	t    testing.TB
	a, b string
	mu   sync.Mutex
	cmd  *exec.Cmd
}

func newPtyPair(t testing.TB) *ptyPair {
	if _, err := exec.LookPath("socat"); err != nil {
		testenv.Missing(t, "socat is missing: apt-get install socat (.ci/run installs it)")
	}
	dir := t.TempDir()
	p := &ptyPair{t: t, a: filepath.Join(dir, "node"), b: filepath.Join(dir, "proxy")}
	p.plug()
	t.Cleanup(p.unplug)
	return p
}

func (p *ptyPair) plug() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cmd = exec.Command("socat", "pty,raw,echo=0,link="+p.a, "pty,raw,echo=0,link="+p.b)
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, errA := os.Stat(p.a)
		_, errB := os.Stat(p.b)
		if errA == nil && errB == nil {
			return
		}
		if time.Now().After(end) {
			p.t.Fatal("socat did not create the pty pair")
		}
	}
}

func (p *ptyPair) unplug() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		// SIGTERM: socat removes its links, as the kernel removes a USB
		// adapter's device node when it is unplugged.
		p.cmd.Process.Signal(syscall.SIGTERM)
		p.cmd.Wait()
		p.cmd = nil
	}
}

// startProcess runs bin with args until the test ends, its stderr kept for failures.
func startProcess(t testing.TB, bin string, args ...string) *serveLogBuffer {
	t.Helper()
	logs, _ := startCommand(t, bin, args...)
	return logs
}

// startCommand is startProcess that also returns the process, for a test that stops it early.
func startCommand(t testing.TB, bin string, args ...string) (*serveLogBuffer, *exec.Cmd) {
	t.Helper()
	logs := &serveLogBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s %s:\n%s", filepath.Base(bin), strings.Join(args, " "), logs.String())
		}
	})
	return logs, cmd
}

func writeFile(t testing.TB, dir, name, text string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// proxyInProcess starts the proxy's engine from manifestPath and an mcp-go
// client on its MCP server.
func proxyInProcess(t testing.TB, manifestPath, policyPath string) (*engine.Engine, *client.Client) {
	t.Helper()
	m, p, ok := loadDevice(manifestPath, policyPath, io.Discard)
	if !ok {
		var diags strings.Builder
		loadDevice(manifestPath, policyPath, &diags)
		t.Fatalf("load %s: %s", manifestPath, diags.String())
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := startEngine(context.Background(), m, p, busOptions{adopt: true}, logger, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	s, err := mcpserver.New(e, mcpserver.Options{Caller: mcpserver.CallerFrom(engine.Caller{Identity: "local", Role: p.LocalRole()})})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewInProcessClient(s)
	if err != nil {
		t.Fatal(err)
	}
	return e, dialMCP(t, c.GetTransport())
}

// toolJSON calls a tool and decodes its structured answer.
func toolJSON(t testing.TB, c *client.Client, tool string, args map[string]any) map[string]any {
	t.Helper()
	res, err := callTool(t, c, tool, args)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var out map[string]any
	text := res.Content[0].(mcp.TextContent).Text
	if err := json.Unmarshal([]byte(text), &out); err != nil {
		t.Fatalf("%s: %v: %s", tool, err, text)
	}
	return out
}

// A Lite node (a real process) on one end of a socat pty pair is adopted by
// a proxy on the other end: the proxy's reads are the node's, can_do names
// where they come from, unplugging the pair gives stale at once and error
// one cache TTL after the line closed (timed from the unplug, on the real
// clock), and plugging it back recovers with neither daemon restarted.
func TestProxyAdoptsLiteNodeOnSerialLine(t *testing.T) {
	lite := buildBinary(t, "lite")
	dir := t.TempDir()
	nodeManifest := writeFile(t, dir, "node.yml", soilNode)
	pair := newPtyPair(t)
	nodeLog := startProcess(t, lite, "serve", "--manifest", nodeManifest, "--simulate", "--serial", pair.a)

	// The node's own answer, from a second node process on stdio.
	cmd := exec.Command(lite, "serve", "--manifest", nodeManifest, "--simulate", "--log-level", "warn")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	direct := toolJSON(t, dialMCP(t, transport.NewIO(stdout, stdin, io.NopCloser(strings.NewReader("")))), "read_soil_temperature", nil)

	// The proxy starts once the node serves its line, so that its first
	// reads do not open the breaker.
	for end := time.Now().Add(15 * time.Second); !strings.Contains(nodeLog.String(), "serving on a serial line"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the node does not serve its line:\n%s", nodeLog.String())
		}
	}
	proxyManifest := writeFile(t, dir, "proxy.yml", fmt.Sprintf(soilProxy, pair.b))
	e, c := proxyInProcess(t, proxyManifest, "")

	read := func() map[string]any { return toolJSON(t, c, "read_bed_soil_temperature", nil) }
	got := read()
	if got["quality"] != "good" || got["value"] != direct["value"] || got["unit"] != direct["unit"] || got["source"] != "soil_node_01" ||
		got["device_id"] != "controller_01" {
		t.Fatalf("through the proxy %v; the node says %v", got, direct)
	}
	if _, err := time.Parse(time.RFC3339, got["timestamp"].(string)); err != nil {
		t.Errorf("timestamp: %v", err)
	}
	report := toolJSON(t, c, "can_do", map[string]any{"intent": map[string]any{"semantic_tags": []string{"soil", "temperature"}, "action": "read"}})
	cands, _ := report["candidates"].([]any)
	if len(cands) != 1 {
		t.Fatalf("can_do: %v", report)
	}
	from, _ := cands[0].(map[string]any)["adopted_from"].(map[string]any)
	if from["source_address"] != pair.b || from["source_protocol"] != "serial" {
		t.Errorf("adopted_from %v, want the serial line %s", from, pair.b)
	}

	// Unplugged: the reading just taken is inside its TTL, yet the line
	// closing makes it stale at once; error comes one TTL after the line
	// closed, which is after the unplug began.
	ttl := e.Manifest().Capabilities[0].CacheTTL()
	got = read() // fresh in the cache
	unplugged := time.Now()
	pair.unplug()
	// slack is the polling step and a loaded machine's scheduling.
	const slack = 250 * time.Millisecond
	var staleAt, errorAt time.Duration
	for errorAt == 0 {
		got, at := read(), time.Since(unplugged)
		switch got["quality"] {
		case "good": // only until the proxy has seen the line close
			if staleAt > 0 || at > slack {
				t.Fatalf("unplugged %v ago: %v; want stale or error", at, got)
			}
		case "stale":
			if staleAt == 0 {
				staleAt = at
			}
			if got["value"] != direct["value"] || got["source"] != "soil_node_01" {
				t.Errorf("unplugged, stale: %v; want the last value", got)
			}
		case "error":
			errorAt = at
			if got["value"] != nil {
				t.Errorf("unplugged, error: %v; want no value", got)
			}
		default:
			t.Fatalf("unplugged %v ago: %v", at, got)
		}
		if at > 10*time.Second {
			t.Fatalf("unplugged for %v: still %v", at, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("unplugged: stale at %v, error at %v (cache TTL %v)", staleAt.Round(time.Millisecond), errorAt.Round(time.Millisecond), ttl)
	// Error before the TTL would be a stale window shorter than promised.
	if staleAt == 0 || staleAt > slack || errorAt < ttl || errorAt > ttl+slack {
		t.Errorf("unplugged: stale at %v, error at %v; want stale at once and error %v after the unplug", staleAt, errorAt, ttl)
	}

	pair.plug()
	plugged := time.Now()
	for got = read(); got["quality"] != "good" && time.Since(plugged) < 30*time.Second; got = read() {
		// the node reopens its line and the breaker's cool-off passes
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("plugged back: good again after %v", time.Since(plugged).Round(time.Millisecond))
	if got["quality"] != "good" || got["value"] != direct["value"] {
		t.Errorf("plugged back: %v; want good again", got)
	}
}

// pumpSource is a Full device whose every bus transaction takes 450 ms, so a
// do_ (read, write, read back) takes longer than the proxy's 1 s timeout:
// the proxy sees the write go out and no answer come back.
const pumpSource = `physmcp_version: "0.1"
device: {id: pump_skid_01, type: pump_skid, location: {zone: plant_room}}
buses:
  plc: {type: modbus-tcp, address: "127.0.0.1:1502", simulated: true, simulation: {latency_ms: 450}}
capabilities:
  - name: pump_speed
    kind: do
    description: Set the circulation pump's speed.
    binding: {bus: plc, unit: 1, table: holding, address: 0, data_type: uint16}
    data_type: float
    unit: rpm
    range: {min: 0, max: 3000}
    semantic_tags: [pump, speed]
    requires_permission: operator
    timeout_ms: 3000
    simulation: {initial: 0}
  - name: pump_speed
    kind: read
    description: The circulation pump's speed setting.
    binding: {bus: plc, unit: 1, table: holding, address: 0, data_type: uint16}
    data_type: float
    unit: rpm
    semantic_tags: [pump, speed]
    timeout_ms: 3000
audit: {enabled: true}
`

// operatorPolicy gives stdio callers and the example operator token role operator.
const operatorPolicy = `physmcp_policy_version: "0.1"
identity:
  local_role: operator
  providers:
    - type: static
      tokens:
        - {name: operator, sha256: 7b020792499cb6968089acbdd92886d4f2a5a53f3fceec8ce095c61bca288c0b, role: operator}
`

const operatorToken = "operator-example-token-do-not-use"

// pumpProxy adopts the source's do_pump_speed over HTTP.
const pumpProxy = `physmcp_version: "0.1"
profile: proxy
device: {id: plant_proxy_01, type: gateway, location: {zone: plant_room}}
buses:
  skid: {type: mcp, url: "%s", token_file: %s}
capabilities:
  - name: circulation_speed
    kind: do
    description: Set the circulation pump's speed on the pump skid.
    binding: {bus: skid, type: virtual, tool: do_pump_speed, read_tool: read_pump_speed}
    data_type: float
    unit: rpm
    range: {min: 0, max: 2500}
    semantic_tags: [pump, speed, circulation]
    requires_permission: operator
    timeout_ms: 1000
`

// startHTTPSource runs the Full binary over HTTP on a free loopback port
// and returns its endpoint URL.
func startHTTPSource(t testing.TB, bin string, args ...string) (string, *exec.Cmd) {
	t.Helper()
	logs, cmd := startCommand(t, bin, append([]string{"serve", "--simulate", "--http", "127.0.0.1:0"}, args...)...)
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, rest, ok := strings.Cut(logs.String(), "msg=listening url="); ok {
			return strings.Fields(rest)[0], cmd
		}
		if time.Now().After(end) {
			t.Fatalf("the source did not start:\n%s", logs.String())
		}
	}
}

// auditOutcomes counts the outcomes of tool's calls in a state directory's
// audit trail, by outcome and by "key " + idempotency key.
func auditOutcomes(t testing.TB, stateDir, tool string) map[string]int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(auditDir(stateDir), "*"))
	n := map[string]int{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			var e struct {
				Tool, Outcome string
				Key           string `json:"idempotency_key"`
			}
			if json.Unmarshal([]byte(line), &e) == nil && e.Tool == tool {
				n[e.Outcome]++
				n["key "+e.Key]++
			}
		}
	}
	return n
}

// An adopted do_ from a Full source, retried 20 times with one key through
// the proxy, acts once at the source, even when the proxy lost the first
// answer: the proxy settles its in-doubt write by reading the source, and
// any write it sends again carries the same key, which the source replays.
func TestProxyAdoptedDoActsOnceAtTheSource(t *testing.T) {
	full := buildBinary(t, "")
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	url, _ := startHTTPSource(t, full, "--manifest", writeFile(t, dir, "pump.yml", pumpSource),
		"--policy", writeFile(t, dir, "pump.policy.yml", operatorPolicy), "--state-dir", state)
	token := writeFile(t, dir, "token", operatorToken+"\n")
	proxyManifest := writeFile(t, dir, "proxy.yml", fmt.Sprintf(pumpProxy, url, token))
	_, c := proxyInProcess(t, proxyManifest, writeFile(t, dir, "proxy.policy.yml", operatorPolicy))

	const key = "7f9c2ba4-e88f-4c1d-9b3e-0a8d2f1c6e55"
	args := map[string]any{"value": 1200, "idempotency_key": key}
	first := toolJSON(t, c, "do_circulation_speed", args)
	if first["status"] != "failed" || first["permission"] != "source_unreachable" || !strings.Contains(first["reason"].(string), "outcome is unknown") {
		t.Fatalf("first call: %v; want the write in doubt (the source answers after the proxy's timeout)", first)
	}
	var last map[string]any
	for range 20 {
		last = toolJSON(t, c, "do_circulation_speed", args)
	}
	if last["status"] != "success" || last["applied_value"] != 1200.0 || last["idempotency_key"] != key {
		t.Errorf("after 20 retries: %v; want success at 1200", last)
	}
	// The key reached the source: asking the source itself with it replays.
	src := dialMCP(t, mustHTTP(t, url))
	if again := toolJSON(t, src, "do_pump_speed", args); again["status"] != "success" {
		t.Errorf("the source with the same key: %v", again)
	}
	got := auditOutcomes(t, state, "do_pump_speed")
	if got[engine.OutcomeApplied] != 1 || got[engine.OutcomeInDoubt] != 0 {
		t.Errorf("the source's audit trail: %v; want exactly one applied write", got)
	}
	if got["key "+key] != got[engine.OutcomeApplied]+got[engine.OutcomeReplayed]+got[engine.OutcomeConfirmed] {
		t.Errorf("the source's audit trail: %v; want every call with the caller's key", got)
	}
	if got[engine.OutcomeReplayed] < 1 {
		t.Errorf("the source's audit trail: %v; want the direct call with the key replayed", got)
	}
	t.Logf("source outcomes: %v", got)
}

func mustHTTP(t testing.TB, url string) transport.Interface {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + operatorToken}))
	if err != nil {
		t.Fatal(err)
	}
	return tr
}
