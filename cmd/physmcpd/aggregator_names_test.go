//go:build !lite

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/mcpserver"
)

// twinAggregator adopts two devices (url, token file, names rule each) into
// one group.
const twinAggregator = `physmcp_version: "0.1"
profile: aggregator
device: {id: site_aggregator_01, type: aggregator, location: {zone: site}}
buses:
  gh1: {type: mcp, url: "%s", token_file: %s, adopt: {tools: all, group: greenhouse_a, names: %s}}
  gh2: {type: mcp, url: "%s", token_file: %s, adopt: {tools: all, group: greenhouse_a, names: %s}}
capabilities: []
`

// Two identical devices (the site example's climate controller twice, real
// processes, another device id each) behind one aggregator. Under names:
// device_prefixed both are served, apart, on one endpoint that passes lint
// --strict, and a do_ through each name acts once on its own device with the
// caller's key. Under names: as_is the first bus in name order serves the
// names; the other device's capabilities are blocked in the site's can_do
// (physmcp:not_served, no endpoint, the reason naming the device that
// serves them) and listed on the status page. The aggregator's policy names
// the adopted tools by pattern: its rule applies to each (refused there,
// nothing sent to the device), and a name no device offers is listed on the
// status page.
func TestAggregatorOverIdenticalDevices(t *testing.T) {
	full := buildBinary(t, "")
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(siteDir, "climate", "physmcp.manifest.yml"))
	if err != nil {
		t.Fatal(err)
	}
	example := string(data)
	urls, states := map[string]string{}, map[string]string{}
	for _, gh := range []string{"gh1", "gh2"} {
		id := "climate_greenhouse_a_0" + gh[2:]
		states[gh] = filepath.Join(dir, gh+"-state")
		manifest := writeFile(t, dir, gh+".yml", strings.Replace(example, "id: climate_greenhouse_a_01", "id: "+id, 1))
		urls[gh], _ = startHTTPSource(t, full, "--manifest", manifest, "--policy", filepath.Join(siteDir, "climate", "physmcp.policy.yml"),
			"--state-dir", states[gh])
	}
	token, _ := filepath.Abs(filepath.Join(siteDir, "aggregator", "device.token"))
	policy := filepath.Join(siteDir, "aggregator", "physmcp.policy.yml")
	aggregator := func(names, policy string) string {
		text := fmt.Sprintf(twinAggregator, urls["gh1"], token, names, urls["gh2"], token, names)
		return serveHTTPInProcess(t, "--manifest", writeFile(t, dir, names+".yml", text), "--policy", policy, "--simulate")
	}

	base := aggregator("device_prefixed", policy)
	for _, p := range []string{"", "/greenhouse_a"} {
		var out bytes.Buffer
		code := runLint([]string{"--strict", "--url", base + mcpserver.EndpointPath + p, "--header", "Authorization: Bearer " + operatorToken}, &out, &out)
		if code != 0 || !strings.Contains(out.String(), "0 error(s), 0 warning(s)") {
			t.Errorf("lint --strict --url /mcp%s: exit %d:\n%s", p, code, out.String())
		}
	}
	zone := dialMCP(t, mustHTTP(t, base+"/mcp/greenhouse_a"))
	want := []string{"can_do", "do_gh1_vent_fan", "do_gh2_vent_fan", "read_gh1_air_temperature", "read_gh1_vent_fan", "read_gh2_air_temperature", "read_gh2_vent_fan"}
	if got := listNames(zone); !slices.Equal(sorted(got), want) {
		t.Fatalf("/mcp/greenhouse_a lists %v, want %v", got, want)
	}
	keys := map[string]string{"gh1": "6f1b2c3d-0000-4e5f-8a9b-000000000001", "gh2": "6f1b2c3d-0000-4e5f-8a9b-000000000002"}
	for _, gh := range []string{"gh1", "gh2"} {
		for range 3 { // retried with one key: acts once
			do := map[string]any{"value": true, "idempotency_key": keys[gh]}
			if got := toolJSON(t, zone, "do_"+gh+"_vent_fan", do); got["status"] != "success" || got["applied_value"] != true {
				t.Fatalf("do_%s_vent_fan through the aggregator: %v", gh, got)
			}
		}
		if got := auditOutcomes(t, states[gh], "do_vent_fan"); got[engine.OutcomeApplied] != 1 || got["key "+keys[gh]] != 1 {
			t.Errorf("%s's audit trail after do_%s_vent_fan: %v; want one write, with the caller's key", gh, gh, got)
		}
		if gh == "gh1" {
			if got := auditOutcomes(t, states["gh2"], "do_vent_fan"); got[engine.OutcomeApplied] != 0 {
				t.Errorf("gh2 wrote after do_gh1_vent_fan: %v", got)
			}
		}
	}

	base = aggregator("as_is", policy)
	site := dialMCP(t, mustHTTP(t, base+mcpserver.EndpointPath))
	report := toolJSON(t, site, "can_do", map[string]any{"intent": map[string]any{"semantic_tags": []string{"fan"}, "action": "read"}})
	cand, blocked := findEntry(report["candidates"], "read_vent_fan"), findEntry(report["blocked"], "read_vent_fan")
	if from, _ := cand["adopted_from"].(map[string]any); cand == nil || cand["endpoint"] != "/mcp/greenhouse_a" || from["source_address"] != urls["gh1"] {
		t.Errorf("site can_do candidate: %v; want gh1's read_vent_fan on /mcp/greenhouse_a", cand)
	}
	wantReason := "name_collision: read_vent_fan of bus gh2 is not served: bus gh1 (first in bus name order) serves that name"
	if from, _ := blocked["adopted_from"].(map[string]any); blocked == nil || blocked["permission"] != "physmcp:not_served" || blocked["device_id"] != "gh2" ||
		blocked["endpoint"] != nil || from["source_address"] != urls["gh2"] || !strings.HasPrefix(blocked["reason"].(string), wantReason) {
		t.Errorf("site can_do blocked: %v; want gh2's read_vent_fan not served, %q", blocked, wantReason)
	}
	var out bytes.Buffer
	if code := runLint([]string{"--strict", "--url", base + mcpserver.EndpointPath, "--header", "Authorization: Bearer " + operatorToken}, &out, &out); code != 0 {
		t.Errorf("lint --strict --url /mcp with names colliding: exit %d:\n%s", code, out.String())
	}
	var status struct {
		NotServed []struct{ Tool, Device, Bus, Reason string } `json:"not_served"`
	}
	getJSON(t, base+mcpserver.StatusAPIPath, &status)
	var notServed []string
	for _, ns := range status.NotServed {
		if ns.Device == "gh2" && ns.Bus == "gh2" && strings.HasPrefix(ns.Reason, "name_collision: ") {
			notServed = append(notServed, ns.Tool)
		}
	}
	if want := []string{"do_vent_fan", "read_air_temperature", "read_vent_fan"}; !slices.Equal(sorted(notServed), want) {
		t.Errorf("status page, not served: %+v; want gh2's %v", status.NotServed, want)
	}

	data, err = os.ReadFile(policy)
	if err != nil {
		t.Fatal(err)
	}
	restricted := writeFile(t, dir, "restricted.policy.yml", string(data)+`capabilities:
  "do_gh?_vent_fan":
    rules: [{type: permission, require: [admin]}]
  "read_gh3_*":
    rules: [{type: permission, require: [operator]}]
`)
	base = aggregator("device_prefixed", restricted)
	zone = dialMCP(t, mustHTTP(t, base+"/mcp/greenhouse_a"))
	before := auditOutcomes(t, states["gh2"], "do_vent_fan")
	if got := listNames(zone); slices.Contains(got, "do_gh1_vent_fan") || slices.Contains(got, "do_gh2_vent_fan") || !slices.Contains(got, "read_gh2_vent_fan") {
		t.Errorf("an operator is listed %v under the aggregator's pattern rule; want the do_gh?_vent_fan hidden, the reads kept", got)
	}
	// the transport refuses a tool the caller's role may not call
	if res, err := callTool(t, zone, "do_gh2_vent_fan", map[string]any{"value": false, "idempotency_key": "6f1b2c3d-0000-4e5f-8a9b-000000000003"}); err == nil ||
		!strings.Contains(err.Error(), "role operator may not call do_gh2_vent_fan") {
		t.Errorf("an operator's do_gh2_vent_fan under the aggregator's pattern rule: %+v %v; want refused there", res, err)
	}
	if after := auditOutcomes(t, states["gh2"], "do_vent_fan"); !maps.Equal(after, before) {
		t.Errorf("gh2's audit trail changed after the aggregator refused: %v, before %v", after, before)
	}
	var unmatched struct {
		PolicyUnmatched []string `json:"policy_unmatched"`
	}
	getJSON(t, base+mcpserver.StatusAPIPath, &unmatched)
	if want := []string{"read_gh3_*"}; !slices.Equal(unmatched.PolicyUnmatched, want) {
		t.Errorf("status page, policy names without a tool: %q, want %q", unmatched.PolicyUnmatched, want)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// getJSON decodes the answer of an operator's GET of url into v.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
}

// An aggregator's policy may name the tools it will adopt: validate accepts
// them and lists them where the file gives them, as they cannot be checked
// before they are adopted.
func TestValidateListsAdoptedNames(t *testing.T) {
	policy := writeFile(t, t.TempDir(), "agg.policy.yml", `physmcp_policy_version: "0.1"
capabilities:
  "do_*_vent_fan":
    rules: [{type: permission, require: [supervisor]}]
  do_pump_speed:
    rules: [{type: rate, max: 4/hour}]
`)
	var stdout, stderr bytes.Buffer
	code := run([]string{"validate", "--manifest", filepath.Join(siteDir, "aggregator", "physmcp.manifest.yml"), "--policy", policy}, &stdout, &stderr)
	want := "policy names for adopted tools, checked when a source offers them:\n" +
		"  " + policy + ":3:3: capabilities.do_*_vent_fan\n" +
		"  " + policy + ":5:3: capabilities.do_pump_speed\n"
	if code != 0 || !strings.Contains(stdout.String(), want) {
		t.Errorf("exit %d, stdout:\n%s\nstderr:\n%s\nwant exit 0 and %q", code, stdout.String(), stderr.String(), want)
	}
}
