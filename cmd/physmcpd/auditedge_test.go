//go:build !lite

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/mcpserver"
)

// A do_* the HTTP edge refuses (403) for the caller's role writes nothing
// and is in the audit trail: one line naming the tool, caller, role, reason
// and the body's idempotency_key; audit verify passes on the trail.
func TestDoRefusedAtTheEdgeIsAudited(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	url, cancel, logs, exit := serveInBackground(t, []string{"--manifest", serveExampleManifest, "--policy", serveExamplePolicy,
		"--simulate", "--http", "127.0.0.1:0", "--state-dir", state})
	base := strings.TrimSuffix(url, mcpserver.EndpointPath)
	gpioWrites := func() float64 {
		code, fams := scrape(t, base, exampleOperatorToken)
		if code != http.StatusOK {
			t.Fatalf("scrape: %d", code)
		}
		return sample(t, fams, "physmcpd_bus_transactions_total", map[string]string{"bus": "gpio", "op": "write"})
	}
	before := gpioWrites()

	body := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"do_vent_fan","arguments":{"value":true,"idempotency_key":"viewer-fan-on"}}}`
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+exampleViewerToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !bytes.Contains(answer, []byte("permission_insufficient")) {
		t.Fatalf("the viewer's do_vent_fan: %d %s", resp.StatusCode, answer)
	}
	if after := gpioWrites(); after != before {
		t.Errorf("GPIO writes %v before the refused do_vent_fan, %v after", before, after)
	}

	cancel()
	select {
	case code := <-exit:
		if code != 0 {
			t.Fatalf("serve exit %d:\n%s", code, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
	var out bytes.Buffer
	if code := run([]string{"audit", "verify", "--state-dir", state}, &out, &out); code != 0 || !strings.HasPrefix(out.String(), "ok: ") {
		t.Fatalf("audit verify: exit %d: %s", code, out.String())
	}

	files, _ := filepath.Glob(filepath.Join(auditDir(state), "audit-*.jsonl"))
	var lines []map[string]any
	for _, f := range files {
		trail, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for l := range bytes.Lines(trail) {
			var e map[string]any
			if err := json.Unmarshal(l, &e); err != nil {
				t.Fatalf("%s: %v: %s", f, err, l)
			}
			if e["tool"] == "do_vent_fan" && e["caller"] != "physmcpd" { // not the safe state at start-up and shutdown
				lines = append(lines, e)
			}
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%d do_vent_fan lines in the trail, want 1: %v", len(lines), lines)
	}
	e := lines[0]
	args, _ := e["arguments"].(map[string]any)
	if e["caller"] != "viewer" || e["role"] != "none" || e["outcome"] != "refused" || e["status"] != "failed" ||
		e["permission"] != "permission_insufficient" || e["reason"] != "role none may not call do_vent_fan" ||
		e["idempotency_key"] != "viewer-fan-on" || args["idempotency_key"] != "viewer-fan-on" || args["value"] != true {
		t.Errorf("the refused do_vent_fan's line: %v", e)
	}
}
