//go:build !lite

package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"go.bug.st/serial"

	"github.com/physmcp/physmcpd/internal/testenv"
)

// keepRuntime undoes the Lite profile's GOGC and GOMAXPROCS after the test,
// so the rest of the test binary runs with its own.
func keepRuntime(t *testing.T) {
	gc, procs := debug.SetGCPercent(100), runtime.GOMAXPROCS(0)
	t.Cleanup(func() {
		debug.SetGCPercent(gc)
		runtime.GOMAXPROCS(procs)
	})
}

// liteManifest is the example with profile: lite at the top.
func liteManifest(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(serveExampleManifest)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "lite.manifest.yml")
	if err := os.WriteFile(path, append([]byte("profile: lite\n"), b...), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLiteRefusesHTTP(t *testing.T) {
	keepRuntime(t)
	for name, args := range map[string][]string{
		"flag":     {"--manifest", serveExampleManifest, "--profile", "lite"},
		"manifest": {"--manifest", liteManifest(t)},
	} {
		var stderr bytes.Buffer
		args = append(args, "--simulate", "--http", "127.0.0.1:0")
		code := run(append([]string{"serve"}, args...), io.Discard, &stderr)
		if code != 1 || !strings.Contains(stderr.String(), "the lite profile does not serve http") {
			t.Errorf("%s: exit %d, stderr %q", name, code, stderr.String())
		}
	}
}

func TestUnknownProfile(t *testing.T) {
	var stderr bytes.Buffer
	code := run([]string{"serve", "--manifest", serveExampleManifest, "--simulate", "--profile", "tiny"}, io.Discard, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), `--profile: unknown profile "tiny": want full, lite, proxy or aggregator`) {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}

// serveInProcess runs serve in-process on the given args until the test ends.
func serveInProcess(t *testing.T, args []string, stdin io.Reader, stdout io.Writer) *serveLogBuffer {
	t.Helper()
	logs := &serveLogBuffer{}
	cfg, code := parseServe(args, logs)
	if code >= 0 {
		t.Fatalf("parse %v: exit %d: %s", args, code, logs.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- serve(ctx, cfg, stdin, stdout, logs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("serve did not stop; logs:\n%s", logs.String())
		}
	})
	return logs
}

func dialMCP(t testing.TB, tr transport.Interface) *client.Client {
	t.Helper()
	c := client.NewClient(tr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "profile-test", Version: "0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func callTool(t testing.TB, c *client.Client, tool string, args map[string]any) (*mcp.CallToolResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = tool, args
	return c.CallTool(ctx, req)
}

// checkLite asserts the tool surface of the Lite example: no do_ tools, reads and can_do work.
func checkLite(t *testing.T, c *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
		if strings.HasPrefix(tool.Name, "do_") {
			t.Errorf("lite exposes %s", tool.Name)
		}
	}
	if want := "can_do read_air_temperature read_door_closed read_heater_energy read_heater_flow_temperature read_heater_setpoint"; strings.Join(names, " ") != want {
		t.Errorf("tools %v, want %s", names, want)
	}
	res, err := callTool(t, c, "read_air_temperature", nil)
	if err != nil || res.IsError {
		t.Fatalf("read: %v %+v", err, res)
	}
	if text := res.Content[0].(mcp.TextContent).Text; !strings.Contains(text, `"quality":"good"`) {
		t.Errorf("read: %s", text)
	}
	if res, err := callTool(t, c, "do_vent_fan", map[string]any{"value": true}); err == nil && !res.IsError {
		t.Errorf("do_vent_fan answered on lite: %+v", res)
	}
	res, err = callTool(t, c, "can_do", map[string]any{"intent": map[string]any{"semantic_tags": []any{"fan"}, "action": "set", "value": true}})
	if err != nil || res.IsError {
		t.Fatalf("can_do: %v %+v", err, res)
	}
	if text := res.Content[0].(mcp.TextContent).Text; strings.Contains(text, "do_vent_fan") {
		t.Errorf("can_do offers a do_ tool on lite: %s", text)
	}
}

func TestLiteServesReadsOnlyOverStdio(t *testing.T) {
	keepRuntime(t)
	clientIn, serverOut := io.Pipe()
	serverIn, clientOut := io.Pipe()
	logs := serveInProcess(t, []string{"--manifest", serveExampleManifest, "--policy", serveExamplePolicy, "--simulate", "--profile", "lite"}, serverIn, serverOut)
	t.Cleanup(func() { clientOut.Close() })
	checkLite(t, dialMCP(t, transport.NewIO(clientIn, clientOut, io.NopCloser(strings.NewReader("")))))
	if l := logs.String(); !strings.Contains(l, "profile=lite") || !strings.Contains(l, "[do_vent_fan do_heater_setpoint]") {
		t.Errorf("logs do not say what lite leaves out:\n%s", l)
	}
}

// socatPtyPair starts socat with two linked ptys and returns their paths.
func socatPtyPair(t *testing.T) (string, string) {
	t.Helper()
	socat, err := exec.LookPath("socat")
	if err != nil {
		testenv.Missing(t, "socat is missing: apt-get install socat (.ci/run installs it)")
	}
	dir := t.TempDir()
	a, b := filepath.Join(dir, "physmcpd"), filepath.Join(dir, "proxy")
	cmd := exec.Command(socat, "pty,raw,echo=0,link="+a, "pty,raw,echo=0,link="+b)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, errA := os.Stat(a)
		_, errB := os.Stat(b)
		if errA == nil && errB == nil {
			return a, b
		}
		if time.Now().After(end) {
			t.Fatal("socat did not create the pty pair")
		}
	}
}

// portCloser makes a serial port an io.WriteCloser for the client transport.
type portCloser struct{ serial.Port }

func TestLiteServesOverASerialLine(t *testing.T) {
	keepRuntime(t)
	server, proxy := socatPtyPair(t)
	serveInProcess(t, []string{"--manifest", liteManifest(t), "--policy", serveExamplePolicy, "--simulate", "--serial", server, "--baud", "9600"}, nil, io.Discard)
	port, err := serial.Open(proxy, &serial.Mode{BaudRate: 9600})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { port.Close() })
	checkLite(t, dialMCP(t, transport.NewIO(port, portCloser{port}, io.NopCloser(strings.NewReader("")))))
}

func TestValidateSaysWhatLiteLeavesOut(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"validate", "--manifest", serveExampleManifest, "--profile", "lite"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, tool := range []string{"do_vent_fan", "do_heater_setpoint"} {
		if want := "note: the lite profile serves no do_ tools; " + tool + " will not be exposed"; !strings.Contains(stdout.String(), want) {
			t.Errorf("validate --profile lite does not say %q:\n%s", want, stdout.String())
		}
	}
	stdout.Reset()
	run([]string{"validate", "--manifest", serveExampleManifest}, &stdout, &stderr)
	if strings.Contains(stdout.String(), "lite profile") {
		t.Errorf("validate without --profile talks about lite:\n%s", stdout.String())
	}
}
