//go:build !lite

package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/mcpserver"
)

const siteDir = "../../examples/site"

// serveHTTPInProcess runs serve with args on a free loopback port until the
// test ends and returns the server's base URL.
func serveHTTPInProcess(t *testing.T, args ...string) string {
	t.Helper()
	cfg, code := parseServe(append(args, "--http", "127.0.0.1:0"), io.Discard)
	if code >= 0 {
		t.Fatalf("parse %v: exit %d", args, code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &serveLogBuffer{}
	exit := make(chan int, 1)
	go func() { exit <- serve(ctx, cfg, strings.NewReader(""), io.Discard, logs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-exit:
		case <-time.After(10 * time.Second):
			t.Error("serve did not stop")
		}
		if t.Failed() {
			t.Logf("aggregator log:\n%s", logs.String())
		}
	})
	listening := regexp.MustCompile(`url=(http://[^/\s]+)`)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if m := listening.FindStringSubmatch(logs.String()); m != nil {
			return m[1]
		}
		select {
		case code := <-exit:
			t.Fatalf("serve exit %d:\n%s", code, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not start: %s", logs.String())
		}
	}
}

// The site example: an aggregator over three devices (real processes on
// loopback) serves their tools in groups by zone and the site's can_do at
// /mcp; every endpoint passes lint --strict; a do_ is routed to the device
// that owns it with the caller's key; a lost device shows up as blocked
// candidates, not as errors.
func TestAggregatorOverThreeDevices(t *testing.T) {
	full := buildBinary(t, "")
	dir := t.TempDir()
	urls := map[string]string{}
	var irrigation, pump *os.Process
	pumpState := filepath.Join(dir, "pump-state")
	for _, d := range []string{"climate", "irrigation", "pump"} {
		args := []string{"--manifest", filepath.Join(siteDir, d, "physmcp.manifest.yml"), "--policy", filepath.Join(siteDir, d, "physmcp.policy.yml")}
		if d == "pump" {
			args = append(args, "--state-dir", pumpState) // its audit trail shows what it did
		}
		url, cmd := startHTTPSource(t, full, args...)
		urls[d] = url
		switch d {
		case "irrigation":
			irrigation = cmd.Process
		case "pump":
			pump = cmd.Process
		}
	}
	example, err := os.ReadFile(filepath.Join(siteDir, "aggregator", "physmcp.manifest.yml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(example)
	for d, port := range map[string]string{"climate": "8771", "irrigation": "8772", "pump": "8773"} {
		text = strings.Replace(text, "http://127.0.0.1:"+port+"/mcp", urls[d], 1)
	}
	token, _ := filepath.Abs(filepath.Join(siteDir, "aggregator", "device.token"))
	text = strings.ReplaceAll(text, "token_file: device.token", "token_file: "+token)
	aggManifest := writeFile(t, dir, "aggregator.yml", text)
	base := serveHTTPInProcess(t, "--manifest", aggManifest, "--policy", filepath.Join(siteDir, "aggregator", "physmcp.policy.yml"), "--simulate")

	paths := []string{mcpserver.EndpointPath}
	for _, g := range []string{"greenhouse_a", "greenhouse_b", "plant_room"} {
		paths = append(paths, mcpserver.GroupPath(g))
	}
	for _, p := range paths {
		var out bytes.Buffer
		code := runLint([]string{"--strict", "--url", base + p, "--header", "Authorization: Bearer " + operatorToken}, &out, &out)
		if code != 0 || !strings.Contains(out.String(), "static + live") || !strings.Contains(out.String(), "0 error(s), 0 warning(s)") {
			t.Errorf("lint --strict --url %s: exit %d:\n%s", p, code, out.String())
		}
	}

	site := dialMCP(t, mustHTTP(t, base+mcpserver.EndpointPath))
	intent := map[string]any{"intent": map[string]any{"semantic_tags": []string{"pump", "speed"}, "action": "set", "value": 1800}}
	report := toolJSON(t, site, "can_do", intent)
	cand := findEntry(report["candidates"], "do_circulation_pump_speed")
	if cand == nil || cand["permission"] != "allowed" || cand["endpoint"] != "/mcp/plant_room" {
		t.Fatalf("site can_do: %v; want do_circulation_pump_speed allowed on /mcp/plant_room", report)
	}
	if from, _ := cand["adopted_from"].(map[string]any); from["source_address"] != urls["pump"] || from["source_protocol"] != "http" {
		t.Errorf("adopted_from %v, want the pump device %s", from, urls["pump"])
	}

	const key = "0d6f1c3e-5b8a-4e2f-9c7d-3a1b2c4d5e6f"
	plant := dialMCP(t, mustHTTP(t, base+"/mcp/plant_room"))
	do := map[string]any{"value": 1800, "idempotency_key": key}
	if got := toolJSON(t, plant, "do_circulation_pump_speed", do); got["status"] != "success" || got["applied_value"] != 1800.0 {
		t.Fatalf("do through the aggregator: %v", got)
	}
	if got := toolJSON(t, dialMCP(t, mustHTTP(t, urls["pump"])), "read_circulation_pump_speed", nil); got["value"] != 1800.0 {
		t.Errorf("the pump device reads %v after the aggregator's do, want 1800", got)
	}
	if got := toolJSON(t, dialMCP(t, mustHTTP(t, urls["climate"])), "read_vent_fan", nil); got["value"] != false {
		t.Errorf("the climate device reads %v; nothing was sent to it", got)
	}
	toolJSON(t, dialMCP(t, mustHTTP(t, urls["pump"])), "do_circulation_pump_speed", do) // the device itself, same key
	if got := auditOutcomes(t, pumpState, "do_circulation_pump_speed"); got[engine.OutcomeApplied] != 1 || got[engine.OutcomeReplayed] != 1 || got["key "+key] != 2 {
		t.Errorf("the pump's audit trail: %v; want one applied write with the caller's key, then the same key replayed", got)
	}

	irrigation.Kill()
	report = toolJSON(t, site, "can_do", map[string]any{"intent": map[string]any{"semantic_tags": []string{"irrigation", "valve"}, "action": "set", "value": true}})
	blocked := findEntry(report["blocked"], "do_irrigation_valve")
	if blocked == nil || blocked["permission"] != "source_unreachable" || !strings.HasPrefix(blocked["reason"].(string), "device_offline: ") ||
		blocked["endpoint"] != "/mcp/greenhouse_b" || report["feasible"] != false {
		t.Errorf("site can_do after losing the irrigation device: %v; want do_irrigation_valve blocked as device_offline", report)
	}
	if cand := findEntry(report["candidates"], "do_vent_fan"); cand != nil {
		t.Errorf("the climate device's fan matched an irrigation intent: %v", cand)
	}

	// A device that hangs (stopped, its socket open) holds the site's
	// can_do up for no longer than the assessment budget.
	if err := pump.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer pump.Signal(syscall.SIGCONT)
	start := time.Now()
	report = toolJSON(t, site, "can_do", intent)
	took := time.Since(start)
	t.Logf("site can_do with the pump device hung: %v", took.Round(time.Millisecond))
	if took > engine.AssessBudget+300*time.Millisecond {
		t.Errorf("site can_do took %v with the pump hung; want at most the %v budget plus scheduling", took, engine.AssessBudget)
	}
	if b := findEntry(report["blocked"], "do_circulation_pump_speed"); b == nil || b["permission"] != "source_unreachable" {
		t.Errorf("site can_do with the pump hung: %v; want do_circulation_pump_speed blocked source_unreachable", report)
	}
}

// findEntry is the can_do candidate or blocked entry for tool, or nil.
func findEntry(list any, tool string) map[string]any {
	entries, _ := list.([]any)
	for _, e := range entries {
		if m, _ := e.(map[string]any); m["capability"] == tool {
			return m
		}
	}
	return nil
}
