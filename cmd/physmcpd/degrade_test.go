//go:build !lite

package main

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"go.bug.st/serial"

	"github.com/physmcp/physmcpd/internal/modbusfault"
)

// rtuManifest is the example with its RS-485 bus real, on port, and the
// other buses simulated.
func rtuManifest(t *testing.T, port string) string {
	t.Helper()
	b, err := os.ReadFile(serveExampleManifest)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for old, new := range map[string]string{
		"port: /dev/serial/by-id/usb-FTDI_FT232R_USB_UART_A10K1234-if00-port0":                           "port: " + port,
		"    rs485:\n      direction: auto\n    simulated: true\n    simulation:\n      latency_ms: 5\n": "",
		"    simulation:\n      initial: 18\n":                                                           "",
		"    simulation:\n      initial: 45\n      noise: 0.2\n":                                         "",
		"    simulation:\n      initial: 1234.56\n":                                                      "",
	} {
		if strings.Count(text, old) != 1 {
			t.Fatalf("the example manifest changed: %q", old)
		}
		text = strings.Replace(text, old, new, 1)
	}
	path := filepath.Join(t.TempDir(), "rtu.manifest.yml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// answer calls a tool and decodes its JSON answer.
func answer(t *testing.T, c *client.Client, tool string, args map[string]any) map[string]any {
	t.Helper()
	res, err := callTool(t, c, tool, args)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(res.Content[0].(mcp.TextContent).Text), &out); err != nil {
		t.Fatalf("%s: %v: %+v", tool, err, res)
	}
	return out
}

// blocked returns can_do's answer for tool: its permission and reason.
func blocked(t *testing.T, c *client.Client, tags []any, value any, tool string) (permission, reason string) {
	t.Helper()
	rep := answer(t, c, "can_do", map[string]any{"intent": map[string]any{"semantic_tags": tags, "action": "set", "value": value}})
	for _, list := range []string{"candidates", "blocked"} {
		items, _ := rep[list].([]any)
		for _, it := range items {
			m, _ := it.(map[string]any)
			if m["capability"] == tool {
				p, _ := m["permission"].(string)
				r, _ := m["reason"].(string)
				return p, r
			}
		}
	}
	t.Fatalf("can_do does not name %s: %v", tool, rep)
	return "", ""
}

func float32Regs(f float32) [2]uint16 {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], math.Float32bits(f))
	return [2]uint16{binary.BigEndian.Uint16(b[:2]), binary.BigEndian.Uint16(b[2:])}
}

// A USB serial adapter not yet enumerated at boot: the rest of the device
// serves at once, the adapter's capabilities are unavailable and say why,
// nothing is written, and they come good within 3 s of the port appearing,
// their safe state written first.
func TestServeWithMissingSerialAdapter(t *testing.T) {
	port := filepath.Join(t.TempDir(), "ttyUSB0") // a /dev/serial/by-id link, not there yet
	clientIn, serverOut := io.Pipe()
	serverIn, clientOut := io.Pipe()
	t.Cleanup(func() { clientOut.Close() })
	started := time.Now()
	// --trust-clock: the machine running the test may not be NTP-synchronised.
	logs := serveInProcess(t, []string{"--manifest", rtuManifest(t, port), "--policy", serveExamplePolicy, "--state-dir", t.TempDir(), "--stdio", "--trust-clock"}, serverIn, serverOut)
	c := dialMCP(t, transport.NewIO(clientIn, clientOut, io.NopCloser(strings.NewReader(""))))

	if r := answer(t, c, "read_air_temperature", nil); r["quality"] != "good" {
		t.Errorf("the I2C sensor does not serve: %v", r)
	}
	r := answer(t, c, "read_heater_flow_temperature", nil)
	if detail, _ := r["detail"].(string); r["quality"] != "error" || !strings.Contains(detail, port+": no such file or directory") {
		t.Errorf("read on the missing adapter: %v", r)
	}
	if p, reason := blocked(t, c, []any{"heater"}, 20.0, "do_heater_setpoint"); p != "source_unreachable" || !strings.Contains(reason, "bus rs485 not open") {
		t.Errorf("can_do: %s %q", p, reason)
	}
	if d := answer(t, c, "do_heater_setpoint", map[string]any{"value": 20.0, "idempotency_key": "k1"}); d["status"] == "success" || d["permission"] != "source_unreachable" {
		t.Errorf("do_ on the missing adapter: %v", d)
	}

	dev := modbusfault.StartRTU(t)
	for i, reg := range float32Regs(45) {
		dev.Set(modbusfault.InputRegisters, 2+uint16(i), reg)
	}
	// The port appears during the retries' longest wait (after 0.25, 0.5,
	// 1 and 2 s, the next attempts are 2 s apart): retry_wait below shows
	// it. Load only delays the attempts, which leaves the wait no longer.
	time.Sleep(time.Until(started.Add(5 * time.Second)))
	if err := os.Symlink(dev.Path(), port); err != nil {
		t.Fatal(err)
	}
	appeared := time.Now()
	for answer(t, c, "read_heater_flow_temperature", nil)["quality"] != "good" {
		if time.Since(appeared) > 20*time.Second {
			t.Fatalf("not good 20 s after the port appeared; logs:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("good %v after the port appeared", time.Since(appeared).Round(time.Millisecond))
	// What the daemon controls of that delay is its wait between attempts,
	// at most 2 s (the wall clock adds the host's load).
	if m := openedRE.FindStringSubmatch(logs.String()); m == nil {
		t.Errorf("no 'bus rs485 opened' line with its retry_wait:\n%s", logs.String())
	} else if wait, err := time.ParseDuration(m[1]); err != nil || wait > 2*time.Second {
		t.Errorf("the port was found %s after an attempt, want at most 2s", m[1])
	}
	if got := [2]uint16{dev.Value(modbusfault.HoldingRegisters, 0), dev.Value(modbusfault.HoldingRegisters, 1)}; got != float32Regs(12) {
		t.Errorf("setpoint registers %04x once opened, want the safe value 12 (%04x)", got, float32Regs(12))
	}
	if r := answer(t, c, "read_heater_setpoint", nil); r["quality"] != "good" || r["value"] != 12.0 {
		t.Errorf("read_heater_setpoint: %v", r)
	}
	l := logs.String()
	if strings.Count(l, "bus rs485 unavailable") != 1 || strings.Count(l, `msg="bus rs485 opened"`) != 1 || strings.Contains(l, "still unavailable") {
		t.Errorf("want one line per state change:\n%s", l)
	}
}

// openedRE is the retry_wait of the log line of a bus that opened late.
var openedRE = regexp.MustCompile(`msg="bus rs485 opened" attempts=\d+ retry_wait=(\S+)`)

func TestServeStrictStart(t *testing.T) {
	port := filepath.Join(t.TempDir(), "ttyUSB0")
	var stderr serveLogBuffer
	code := run([]string{"serve", "--manifest", rtuManifest(t, port), "--policy", serveExamplePolicy, "--state-dir", t.TempDir(), "--stdio", "--strict-start"},
		io.Discard, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "bus rs485 (modbus-rtu)") || !strings.Contains(stderr.String(), port+": no such file or directory") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr.String())
	}
}

// serialClient serves the example (Full, simulated) on one end of a pty pair
// with policy and connects to the other end.
func serialClient(t *testing.T, policy string) *client.Client {
	t.Helper()
	server, proxy := socatPtyPair(t)
	serveInProcess(t, []string{"--manifest", serveExampleManifest, "--policy", policy, "--simulate", "--serial", server, "--baud", "9600"}, nil, io.Discard)
	port, err := serial.Open(proxy, &serial.Mode{BaudRate: 9600})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { port.Close() })
	return dialMCP(t, transport.NewIO(port, portCloser{port}, io.NopCloser(strings.NewReader(""))))
}

// Whoever is on the serial wire is a viewer unless the policy says otherwise,
// although the example gives local (stdio) callers operator.
func TestSerialPeerIsAViewer(t *testing.T) {
	c := serialClient(t, serveExamplePolicy)
	if r := answer(t, c, "read_heater_setpoint", nil); r["quality"] != "good" {
		t.Errorf("read: %v", r)
	}
	if p, reason := blocked(t, c, []any{"heater"}, 20.0, "do_heater_setpoint"); p != "permission_insufficient" || !strings.Contains(reason, "role viewer") {
		t.Errorf("can_do: %s %q", p, reason)
	}
	if res, err := callTool(t, c, "do_heater_setpoint", map[string]any{"value": 20.0, "idempotency_key": "k1"}); err == nil && !res.IsError {
		t.Errorf("do_ answered a viewer: %+v", res)
	}
	if r := answer(t, c, "read_heater_setpoint", nil); r["value"] != 12.0 {
		t.Errorf("the setpoint moved from its safe value: %v", r)
	}

	policy, err := os.ReadFile(serveExamplePolicy)
	if err != nil {
		t.Fatal(err)
	}
	raised := filepath.Join(t.TempDir(), "serial.policy.yml")
	text := strings.Replace(string(policy), "  local_role: operator\n", "  local_role: operator\n  serial_role: operator\n", 1)
	if err := os.WriteFile(raised, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	c = serialClient(t, raised)
	// (the start-up safe state put the setpoint under its cooldown; the fan was already safe)
	if d := answer(t, c, "do_vent_fan", map[string]any{"value": true, "idempotency_key": "k1"}); d["status"] != "success" {
		t.Errorf("do_ with serial_role operator: %v", d)
	}
}

// READY=1 means every transport is open: a serial line that cannot be opened
// is an exit, never a ready service.
func TestNotReadyWithoutTheSerialLine(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	var stderr serveLogBuffer
	missing := filepath.Join(t.TempDir(), "ttyAMA0")
	if code := run([]string{"serve", "--manifest", serveExampleManifest, "--policy", serveExamplePolicy, "--simulate", "--serial", missing}, io.Discard, &stderr); code != 1 {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
	conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	buf := make([]byte, 64)
	if n, err := conn.Read(buf); err == nil {
		t.Errorf("sent %q before the serial line was open", buf[:n])
	}
}
