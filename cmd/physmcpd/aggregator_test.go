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

	"github.com/mark3labs/mcp-go/client"

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

// site is the site example running: its three devices (real processes on
// loopback) and an aggregator over them (in process).
type site struct {
	base      string                 // the aggregator's base URL
	urls      map[string]string      // each device's MCP endpoint, by device
	procs     map[string]*os.Process // each device's process
	pumpState string                 // the pump device's state directory (its audit trail)
}

func startSite(t *testing.T) site {
	t.Helper()
	full := buildBinary(t, "")
	dir := t.TempDir()
	s := site{urls: map[string]string{}, procs: map[string]*os.Process{}, pumpState: filepath.Join(dir, "pump-state")}
	for _, d := range []string{"climate", "irrigation", "pump"} {
		args := []string{"--manifest", filepath.Join(siteDir, d, "physmcp.manifest.yml"), "--policy", filepath.Join(siteDir, d, "physmcp.policy.yml")}
		if d == "pump" {
			args = append(args, "--state-dir", s.pumpState) // its audit trail shows what it did
		}
		url, cmd := startHTTPSource(t, full, args...)
		s.urls[d], s.procs[d] = url, cmd.Process
	}
	example, err := os.ReadFile(filepath.Join(siteDir, "aggregator", "physmcp.manifest.yml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(example)
	for d, port := range map[string]string{"climate": "8771", "irrigation": "8772", "pump": "8773"} {
		text = strings.Replace(text, "http://127.0.0.1:"+port+"/mcp", s.urls[d], 1)
	}
	token, _ := filepath.Abs(filepath.Join(siteDir, "aggregator", "device.token"))
	text = strings.ReplaceAll(text, "token_file: device.token", "token_file: "+token)
	aggManifest := writeFile(t, dir, "aggregator.yml", text)
	s.base = serveHTTPInProcess(t, "--manifest", aggManifest, "--policy", filepath.Join(siteDir, "aggregator", "physmcp.policy.yml"), "--simulate")
	return s
}

// hang stops a device's process (its sockets stay open: a hung device, not a
// dead one) until the test ends.
func (s site) hang(t *testing.T, device string) {
	t.Helper()
	p := s.procs[device]
	t.Cleanup(func() { p.Signal(syscall.SIGCONT) })
	hang(t, p)
}

// The site example: an aggregator over three devices (real processes on
// loopback) serves their tools in groups by zone and the site's can_do at
// /mcp; every endpoint passes lint --strict; a do_ is routed to the device
// that owns it with the caller's key; a lost device shows up as blocked
// candidates, not as errors.
func TestAggregatorOverThreeDevices(t *testing.T) {
	s := startSite(t)
	base, urls, pumpState := s.base, s.urls, s.pumpState

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

	siteCanDo := dialMCP(t, mustHTTP(t, base+mcpserver.EndpointPath))
	intent := map[string]any{"intent": map[string]any{"semantic_tags": []string{"pump", "speed"}, "action": "set", "value": 1800}}
	report, _ := canDoUntil(t, siteCanDo, intent, func(rep map[string]any) bool {
		c := findEntry(rep["candidates"], "do_circulation_pump_speed")
		return c != nil && c["permission"] == "allowed"
	})
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

	s.procs["irrigation"].Kill()
	report = toolJSON(t, siteCanDo, "can_do", map[string]any{"intent": map[string]any{"semantic_tags": []string{"irrigation", "valve"}, "action": "set", "value": true}})
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
	s.hang(t, "pump")
	start := time.Now()
	report = toolJSON(t, siteCanDo, "can_do", intent)
	took := time.Since(start)
	t.Logf("site can_do with the pump device hung: %v", took.Round(time.Millisecond))
	hangGuard(t, "site can_do with the pump hung", took)
	if b := findEntry(report["blocked"], "do_circulation_pump_speed"); b == nil || b["permission"] != "source_unreachable" {
		t.Errorf("site can_do with the pump hung: %v; want do_circulation_pump_speed blocked source_unreachable", report)
	} else {
		waitedWithinBudget(t, "do_circulation_pump_speed of the hung pump", b)
	}
}

// canDoUntil asks the site's can_do until its report satisfies answered,
// for 20 s: a device up but slowed by the host's load may miss a can_do's
// 150 ms deadline, which is the deadline working, not the device failing.
// took is how long the last can_do took.
func canDoUntil(t *testing.T, c *client.Client, intent map[string]any, answered func(map[string]any) bool) (report map[string]any, took time.Duration) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		start := time.Now()
		report = toolJSON(t, c, "can_do", intent)
		took = time.Since(start)
		if answered(report) || time.Now().After(deadline) {
			return report, took
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitedRE is how long can_do waited for a device that did not answer, as
// its blocked entry says.
var waitedRE = regexp.MustCompile(`no answer within can_do's (-?[0-9.]+[a-zµ]+)`)

// waitedWithinBudget checks what the aggregator controls about a hung
// device: it was waited for until a deadline, no later than AssessTimeout
// after it was asked (so within the AssessBudget of the can_do), as the
// blocked entry's reason reports. The wall clock would add the host's load.
func waitedWithinBudget(t *testing.T, what string, blocked map[string]any) {
	t.Helper()
	reason, _ := blocked["reason"].(string)
	m := waitedRE.FindStringSubmatch(reason)
	if m == nil {
		t.Errorf("%s: reason %q does not say how long can_do waited", what, reason)
		return
	}
	waited, err := time.ParseDuration(m[1])
	if err != nil || waited > engine.AssessTimeout {
		t.Errorf("%s: can_do waited %s for it; want at most %v (its deadline), within the %v budget", what, m[1], engine.AssessTimeout, engine.AssessBudget)
	}
}

// hangGuard fails a can_do that took so long it must have waited for a hung
// device past any deadline; the deadlines themselves are waitedWithinBudget's.
func hangGuard(t *testing.T, what string, took time.Duration) {
	t.Helper()
	if took > 10*time.Second {
		t.Errorf("%s took %v: held up by a hung device (budget %v)", what, took, engine.AssessBudget)
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

// Two of the site's three devices hang (stopped, sockets open): the site's
// can_do still answers within the assessment budget, both are blocked
// source_unreachable with PhysMCP's device_offline reason, the third
// device's candidate stands, and the metadata counts the two as dropped
// late, as a mesh coordinator counts the peers it asked.
func TestAggregatorCanDoWithTwoHungDevices(t *testing.T) {
	s := startSite(t)
	siteCanDo := dialMCP(t, mustHTTP(t, s.base+mcpserver.EndpointPath))
	// one word of a do_ of each device
	intent := map[string]any{"intent": map[string]any{"semantic_tags": []string{"fan", "valve", "pump"}, "action": "set"}}
	tools := map[string]string{"climate": "do_vent_fan", "irrigation": "do_irrigation_valve", "pump": "do_circulation_pump_speed"}
	report, _ := canDoUntil(t, siteCanDo, intent, func(rep map[string]any) bool {
		meta, _ := rep["metadata"].(map[string]any)
		return meta["responses_received"] == 3.0
	})
	for d, tool := range tools {
		if c := findEntry(report["candidates"], tool); c == nil || c["permission"] != "allowed" {
			t.Fatalf("all devices up: %s of %s is not an allowed candidate: %v", tool, d, report)
		}
	}
	meta, _ := report["metadata"].(map[string]any)
	if meta["coordinator_node"] != "site_aggregator_01" || meta["peers_consulted"] != 3.0 || meta["responses_received"] != 3.0 ||
		meta["responses_dropped_late"] != 0.0 || meta["ttl_used"] != 1.0 {
		t.Errorf("all devices up: metadata %v; want the aggregator coordinating 3 devices, 3 answers, none late", meta)
	}

	s.hang(t, "climate")
	s.hang(t, "pump")
	report, took := canDoUntil(t, siteCanDo, intent, func(rep map[string]any) bool { // the irrigation device in time
		meta, _ := rep["metadata"].(map[string]any)
		return meta["responses_received"] == 1.0
	})
	meta, _ = report["metadata"].(map[string]any)
	t.Logf("site can_do with two of three devices hung: %v (budget %v); metadata %v", took.Round(time.Millisecond), engine.AssessBudget, meta)
	hangGuard(t, "site can_do with two devices hung", took)
	for _, d := range []string{"climate", "pump"} {
		b := findEntry(report["blocked"], tools[d])
		if b == nil || b["permission"] != "source_unreachable" || !strings.HasPrefix(b["reason"].(string), "device_offline: ") {
			t.Errorf("%s hung: %s is %v; want blocked source_unreachable, device_offline", d, tools[d], b)
			continue
		}
		waitedWithinBudget(t, tools[d]+" of a hung device", b)
	}
	if c := findEntry(report["candidates"], tools["irrigation"]); c == nil || c["permission"] != "allowed" || report["feasible"] != true {
		t.Errorf("the irrigation device answers: %v; want its valve an allowed candidate", report)
	}
	if meta["peers_consulted"] != 3.0 || meta["responses_received"] != 1.0 || meta["responses_dropped_late"] != 2.0 {
		t.Errorf("two devices hung: metadata %v; want 3 consulted, 1 answer, 2 dropped late", meta)
	}

	// Their reads, known to be out now, are read again for can_do, and
	// waited for no longer (a read waited for the bus's 2 s reconnection).
	start := time.Now()
	report = toolJSON(t, siteCanDo, "can_do", map[string]any{"intent": map[string]any{"semantic_tags": []string{"fan", "pump"}, "action": "read"}})
	took = time.Since(start)
	meta, _ = report["metadata"].(map[string]any)
	t.Logf("site can_do of the hung devices' reads: %v; metadata %v", took.Round(time.Millisecond), meta)
	hangGuard(t, "site can_do of the hung devices' reads", took)
	for _, tool := range []string{"read_vent_fan", "read_circulation_pump_speed"} {
		if b := findEntry(report["blocked"], tool); b == nil || b["permission"] != "source_unreachable" || !strings.HasPrefix(b["reason"].(string), "device_offline: ") {
			t.Errorf("%s of a hung device: %v; want blocked source_unreachable, device_offline", tool, b)
		} else {
			waitedWithinBudget(t, tool+" of a hung device", b)
		}
	}
	if meta["peers_consulted"] != 2.0 || meta["responses_dropped_late"] != 2.0 {
		t.Errorf("reads of two hung devices: metadata %v; want 2 consulted, 2 dropped late", meta)
	}
}
