//go:build !lite

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
)

// The tokens are the example policies' documented example tokens.
var lintExamples = []struct{ name, manifest, policy, token string }{
	{"greenhouse", "../../examples/physmcp.manifest.yml", "../../examples/physmcp.policy.yml", "operator-example-token-do-not-use"},
	{"pump-skid", "../../examples/pump-skid/physmcp.manifest.yml", "../../examples/pump-skid/physmcp.policy.yml", "supervisor-example-token"},
	{"roadmap", "../../examples/roadmap/physmcp.manifest.yml", "../../examples/roadmap/physmcp.policy.yml", "operator-example-token-do-not-use"},
}

// adoptingExamples are the proxy and site examples, whose nodes work
// together: their tool lists are checked here, and proxy_test.go and
// aggregator_test.go serve them together (aggregator_test.go lints the
// aggregator's endpoints live).
var adoptingExamples = []struct{ name, manifest, policy, token string }{
	{"proxy sensor node", "../../examples/proxy/sensor-node/physmcp.manifest.yml", "", ""},
	{"proxy node", "../../examples/proxy/proxy-node/physmcp.manifest.yml", "../../examples/proxy/proxy-node/physmcp.policy.yml", ""},
	{"site climate", "../../examples/site/climate/physmcp.manifest.yml", "../../examples/site/climate/physmcp.policy.yml", ""},
	{"site irrigation", "../../examples/site/irrigation/physmcp.manifest.yml", "../../examples/site/irrigation/physmcp.policy.yml", ""},
	{"site pump", "../../examples/site/pump/physmcp.manifest.yml", "../../examples/site/pump/physmcp.policy.yml", ""},
	{"site aggregator", "../../examples/site/aggregator/physmcp.manifest.yml", "../../examples/site/aggregator/physmcp.policy.yml", ""},
}

func exampleGroups(t *testing.T, path string) []string {
	t.Helper()
	m, diags := manifest.Load(path)
	if m == nil || diags.HasErrors() {
		t.Fatalf("%s: %v", path, diags)
	}
	return mcpserver.Groups(m)
}

// Every endpoint of every example passes lint --strict from its tool list.
func TestLintExampleToolListsStrict(t *testing.T) {
	for _, ex := range append(lintExamples, adoptingExamples...) {
		for _, g := range exampleGroups(t, ex.manifest) {
			args := []string{"--manifest", ex.manifest, "--json"}
			if ex.policy != "" {
				args = append(args, "--policy", ex.policy)
			}
			if g != "" {
				args = append(args, "--group", g)
			}
			var list, stderr bytes.Buffer
			if code := runTools(args, &list, &stderr); code != 0 {
				t.Fatalf("%s %q: tools exit %d: %s", ex.name, g, code, stderr.String())
			}
			file := filepath.Join(t.TempDir(), "tools.json")
			if err := os.WriteFile(file, list.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if code := runLint([]string{"--strict", file}, &out, &out); code != 0 || !strings.Contains(out.String(), "0 error(s), 0 warning(s)") {
				t.Errorf("%s %q: lint --strict exit %d:\n%s", ex.name, g, code, out.String())
			}
		}
	}
}

// Every HTTP endpoint serve opens passes lint --strict, live checks included.
func TestLintExampleEndpointsLiveStrict(t *testing.T) {
	for _, ex := range lintExamples {
		t.Run(ex.name, func(t *testing.T) {
			base := startServe(t, ex.manifest, ex.policy)
			groups := exampleGroups(t, ex.manifest)
			for _, g := range groups {
				url := base + mcpserver.GroupPath(g)
				var out bytes.Buffer
				code := runLint([]string{"--strict", "--url", url, "--header", "Authorization: Bearer " + ex.token}, &out, &out)
				if code != 0 || !strings.Contains(out.String(), "static + live") || !strings.Contains(out.String(), "0 error(s), 0 warning(s)") {
					t.Errorf("lint --strict --url %s: exit %d:\n%s", url, code, out.String())
				}
				t.Logf("%s", strings.TrimSpace(out.String()))
			}
		})
	}
}

// startServe runs serve (with extra flags) on a free loopback port until the
// test ends and returns the server's base URL.
func startServe(t *testing.T, manifestPath, policyPath string, extra ...string) string {
	t.Helper()
	url, _, _, _ := serveInBackground(t, append([]string{"--manifest", manifestPath, "--policy", policyPath, "--simulate", "--http", "127.0.0.1:0"}, extra...))
	return strings.TrimSuffix(url, mcpserver.EndpointPath)
}

func TestLintBrokenListAndExitCodes(t *testing.T) {
	var out bytes.Buffer
	if code := runLint([]string{"../../lint/testdata/broken-tools.json"}, &out, &out); code != 1 {
		t.Errorf("broken list: exit %d, want 1:\n%s", code, out.String())
	}
	for _, id := range []string{"name-verb", "do-idempotency-key", "cando-intent", "cando-single", "permission-enum", "read-side-effects", "do-density"} {
		if !strings.Contains(out.String(), " "+id+" ") {
			t.Errorf("broken list: no %s finding in:\n%s", id, out.String())
		}
	}

	// Warnings alone pass, and fail under --strict: physmcpd's own list with
	// one read renamed to a generic name.
	var list, stderr bytes.Buffer
	if code := runTools([]string{"--manifest", lintExamples[0].manifest, "--policy", lintExamples[0].policy, "--json"}, &list, &stderr); code != 0 {
		t.Fatalf("tools: exit %d: %s", code, stderr.String())
	}
	file := filepath.Join(t.TempDir(), "generic.json")
	generic := strings.ReplaceAll(list.String(), `"read_door_closed"`, `"read_data"`)
	if err := os.WriteFile(file, []byte(generic), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{file}, 0},
		{[]string{"--strict", file}, 1},
		{[]string{"--json", "--strict", file}, 1},
		{nil, 2},
		{[]string{file, "--url", "http://127.0.0.1:1/mcp"}, 2},
		{[]string{"--url", "http://127.0.0.1:1/mcp", "--timeout", "5s"}, 2},
		{[]string{"--stdio", `"unterminated`}, 2},
		{[]string{"--header", "X: y", file}, 2},
		{[]string{filepath.Join(t.TempDir(), "missing.json")}, 2},
		{[]string{"--rules"}, 0},
	} {
		var out bytes.Buffer
		if code := runLint(tc.args, &out, &out); code != tc.want {
			t.Errorf("lint %q: exit %d, want %d:\n%s", tc.args, code, tc.want, out.String())
		}
	}
}

// The roadmap's extension verbs pass by default, are not base proMCP under
// --strict-base, and a start_* without its companions is refused.
func TestLintExtensionVerbs(t *testing.T) {
	var list, stderr bytes.Buffer
	ex := lintExamples[2]
	if code := runTools([]string{"--manifest", ex.manifest, "--policy", ex.policy, "--group", "process", "--json"}, &list, &stderr); code != 0 {
		t.Fatalf("tools: exit %d: %s", code, stderr.String())
	}
	dir := t.TempDir()
	file, orphan := filepath.Join(dir, "tools.json"), filepath.Join(dir, "orphan.json")
	if err := os.WriteFile(file, list.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// a start_* whose companions are named for another operation
	renamed := strings.NewReplacer(`"read_status_oven_ramp"`, `"read_status_other"`, `"do_cancel_oven_ramp"`, `"do_cancel_other"`).Replace(list.String())
	if err := os.WriteFile(orphan, []byte(renamed), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want int
		has  []string
	}{
		{[]string{"--strict", file}, 0, []string{"0 error(s), 0 warning(s)"}},
		{[]string{"--strict-base", file}, 1, []string{"name-verb                       start_oven_ramp", "name-verb                       stream_oven_temperature", "2 error(s)"}},
		{[]string{orphan}, 1, []string{"start-companions", "lacks read_status_oven_ramp and do_cancel_oven_ramp"}},
	} {
		var out bytes.Buffer
		code := runLint(tc.args, &out, &out)
		if code != tc.want {
			t.Errorf("lint %q: exit %d, want %d:\n%s", tc.args, code, tc.want, out.String())
		}
		for _, h := range tc.has {
			if !strings.Contains(out.String(), h) {
				t.Errorf("lint %q: no %q in:\n%s", tc.args, h, out.String())
			}
		}
	}
}
