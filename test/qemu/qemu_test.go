// Package qemu runs the release binaries for the Raspberry Pi targets under
// qemu-user: the GOARM=6 build on an ARM1176 (Pi Zero/1) and the arm64 build,
// each serving the example device over stdio to an MCP client.
package qemu

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/internal/syncbuf"
	"github.com/physmcp/physmcpd/internal/testenv"
)

const (
	repo     = "../.."
	manifest = repo + "/examples/physmcp.manifest.yml"
	policy   = repo + "/examples/physmcp.policy.yml"
	version  = "qemu-user-test"
)

// need finds a tool, skipping (or failing on CI) when it is missing.
func need(t *testing.T, tool, install string) string {
	t.Helper()
	path, err := exec.LookPath(tool)
	if err == nil {
		return path
	}
	testenv.Missing(t, "%s is missing: %s (.ci/setup.d/50-qemu.sh installs it)", tool, install)
	return ""
}

// build runs build.sh for the targets into a temporary directory.
func build(t *testing.T, targets ...string) string {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command("./build.sh", targets...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "OUT="+out, "VERSION="+version)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build.sh %v: %v\n%s", targets, err, b)
	}
	return out
}

func TestArmBinariesServeTheExampleUnderQemuUser(t *testing.T) {
	armQemu := need(t, "qemu-arm-static", "apt-get install qemu-user-static")
	arm64Qemu := need(t, "qemu-aarch64-static", "apt-get install qemu-user-static")
	dist := build(t, "armv6", "arm64")
	for _, tc := range []struct {
		name   string
		cmd    []string
		target string
	}{
		{"armv6 on arm1176", []string{armQemu, "-cpu", "arm1176", filepath.Join(dist, "physmcpd-armv6")}, "linux/arm GOARM=6"},
		{"arm64", []string{arm64Qemu, filepath.Join(dist, "physmcpd-arm64")}, "linux/arm64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := exec.Command(tc.cmd[0], append(tc.cmd[1:], "version")...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "physmcpd "+version+" ("+tc.target) {
				t.Fatalf("version: %v: %q", err, out)
			}
			args := append(tc.cmd[1:], "serve", "--manifest", manifest, "--policy", policy, "--simulate", "--stdio", "--log-level", "warn")
			// A server that exits early shows only as "transport closed"
			// to the client: its stderr says why.
			var stderr syncbuf.Buffer
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("physmcpd's stderr:\n%s", stderr.String())
				}
			})
			exercise(t, transport.NewStdioWithOptions(tc.cmd[0], nil, args, transport.WithCommandStderrWriter(&stderr)))
		})
	}
}

// exercise runs the agent loop against the example: list, read, can_do, do, read back.
func exercise(t *testing.T, tr *transport.Stdio) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := client.NewClient(tr)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "qemu-user-test", Version: "0"}
	info, err := c.Initialize(ctx, init)
	if err != nil {
		t.Fatal(err)
	}
	if info.ServerInfo.Version != version {
		t.Errorf("serverInfo.version %q, want the stamped %q", info.ServerInfo.Version, version)
	}
	list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Tools) != 8 {
		t.Errorf("%d tools, want 8 (7 capabilities + can_do)", len(list.Tools))
	}
	body := func(tool string, args map[string]any) map[string]any {
		t.Helper()
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = tool, args
		res, err := c.CallTool(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		var b map[string]any
		if err := json.Unmarshal([]byte(res.Content[0].(mcp.TextContent).Text), &b); err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		if res.IsError {
			t.Fatalf("%s: error result %v", tool, b)
		}
		return b
	}
	if r := body("read_air_temperature", nil); r["quality"] != "good" {
		t.Errorf("read_air_temperature: %v", r)
	}
	// The safe state written at start-up starts the setpoint's cooldown:
	// wait for the time can_do gives, as an agent would.
	intent := map[string]any{"intent": map[string]any{"semantic_tags": []any{"heating", "setpoint"}, "action": "set", "value": 22.5}}
	rep := body("can_do", intent)
	if blocked, _ := rep["blocked"].([]any); len(blocked) == 1 {
		b := blocked[0].(map[string]any)
		clears, err := time.Parse(time.RFC3339Nano, fmt.Sprint(b["clears_at"]))
		if b["permission"] != "cooldown_active" || err != nil {
			t.Fatalf("can_do blocks do_heater_setpoint for another reason: %v", b)
		}
		time.Sleep(time.Until(clears) + 100*time.Millisecond)
		rep = body("can_do", intent)
	}
	if cands, _ := rep["candidates"].([]any); len(cands) != 1 || !strings.Contains(mustJSON(cands), "do_heater_setpoint") {
		t.Errorf("can_do does not offer do_heater_setpoint: %v", rep)
	}
	if d := body("do_heater_setpoint", map[string]any{"value": 22.5, "idempotency_key": "qemu-user-1"}); d["status"] != "success" || d["previous_value"] != 12.0 {
		t.Errorf("do_heater_setpoint: %v", d)
	}
	if r := body("read_heater_setpoint", nil); r["value"] != 22.5 || r["quality"] != "good" {
		t.Errorf("read back: %v, want 22.5", r)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
