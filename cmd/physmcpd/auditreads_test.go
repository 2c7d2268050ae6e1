//go:build !lite

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/mcpserver"
)

// auditAllPolicy is the example's policy with defaults.audit_all on and
// read_door_closed for operators only, so the viewer's read is refused.
func auditAllPolicy(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(serveExamplePolicy)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(b), "defaults:\n  require_permission: none\n", "defaults:\n  require_permission: none\n  audit_all: true\n", 1)
	if text == string(b) {
		t.Fatal("the example policy's defaults changed: update auditAllPolicy")
	}
	// capabilities is the policy's last section
	text += "  read_door_closed:\n    rules:\n      - {type: permission, require: [operator]}\n"
	return writeFile(t, dir, "policy.yml", text)
}

// audit verify passes on a trail in which defaults.audit_all put read lines
// (fresh, cached and refused) between the do_* lines, also while serve is
// appending them, and fails at the line after a read line that was altered.
func TestAuditVerifyTrailWithReads(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	url, cancel, logs, exit := serveInBackground(t, []string{"--manifest", serveExampleManifest, "--policy", auditAllPolicy(t, dir),
		"--simulate", "--http", "127.0.0.1:0", "--state-dir", state})
	base := strings.TrimSuffix(url, mcpserver.EndpointPath)
	op, viewer := httpClient(t, base, exampleOperatorToken), httpClient(t, base, exampleViewerToken)
	verify := func() (int, string) {
		var out bytes.Buffer
		code := run([]string{"audit", "verify", "--state-dir", state}, &out, &out)
		return code, out.String()
	}

	fresh := answer(t, op, "read_air_temperature", nil)
	if cached := answer(t, op, "read_air_temperature", nil); cached["timestamp"] != fresh["timestamp"] {
		t.Fatalf("second read not from the cache (TTL 1 s): %v, then %v", fresh, cached)
	}
	if r := answer(t, op, "do_vent_fan", map[string]any{"value": true, "idempotency_key": "fan-on"}); r["status"] != "success" {
		t.Fatalf("do_vent_fan: %v", r)
	}
	if r, err := callTool(t, viewer, "read_door_closed", nil); err == nil || !strings.Contains(err.Error(), "may not call") {
		t.Fatalf("the viewer's read_door_closed was not refused: %v %+v", err, r)
	}
	if r := answer(t, op, "do_vent_fan", map[string]any{"value": false, "idempotency_key": "fan-off"}); r["status"] == "success" {
		t.Fatalf("do_vent_fan in its cooldown: %v", r)
	}
	answer(t, viewer, "read_air_temperature", nil)
	answer(t, op, "read_door_closed", nil)

	// A trail is checked where it is written, by a running device: reads
	// keep arriving while audit verify walks it.
	ctx, stopReads := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, c := range []string{exampleOperatorToken, exampleViewerToken} {
		reader := httpClient(t, base, c)
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := callTool(t, reader, "read_air_temperature", nil); err != nil && ctx.Err() == nil {
					t.Errorf("read during verify: %v", err)
					return
				}
			}
		})
	}
	verifies := 0
	for start := time.Now(); time.Since(start) < time.Second; verifies++ {
		if code, out := verify(); code != 0 {
			t.Errorf("verify %d of the live trail: exit %d: %s", verifies+1, code, out)
			break
		}
	}
	stopReads()
	wg.Wait()

	cancel()
	select {
	case code := <-exit:
		if code != 0 {
			t.Fatalf("serve exit %d:\n%s", code, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
	code, out := verify()
	if code != 0 || !strings.HasPrefix(out, "ok: ") {
		t.Fatalf("verify after serve stopped: exit %d: %s", code, out)
	}
	t.Logf("%d checks of the live trail; then %s", verifies, strings.TrimSpace(out))

	files, _ := filepath.Glob(filepath.Join(auditDir(state), "audit-*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("trail files %v, want one", files)
	}
	trail, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(trail, []byte("\n")), []byte("\n"))
	var outcomes []string
	refusedRead := -1
	for i, l := range lines {
		var e struct{ Tool, Outcome, Caller string }
		if err := json.Unmarshal(l, &e); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if e.Tool == "" {
			continue // the keyed event
		}
		outcomes = append(outcomes, e.Tool+" "+e.Outcome)
		if e.Tool == "read_door_closed" && e.Outcome == "refused" && e.Caller == "viewer" {
			refusedRead = i
		}
	}
	for _, want := range []string{"read_air_temperature read", "do_vent_fan applied", "read_door_closed refused", "do_vent_fan refused", "read_door_closed read"} {
		if !slices.Contains(outcomes, want) {
			t.Errorf("no %q line in the trail: %v", want, outcomes[:min(len(outcomes), 20)])
		}
	}
	if refusedRead < 0 || refusedRead == len(lines)-1 {
		t.Fatalf("the viewer's refused read is not a line with one after it (line %d of %d)", refusedRead+1, len(lines))
	}

	// The refused read, claimed for the operator.
	altered := bytes.Replace(lines[refusedRead], []byte(`"caller":"viewer"`), []byte(`"caller":"operator"`), 1)
	if bytes.Equal(altered, lines[refusedRead]) {
		t.Fatalf("line %d has no viewer caller: %s", refusedRead+1, lines[refusedRead])
	}
	if err := os.WriteFile(files[0], bytes.Replace(trail, lines[refusedRead], altered, 1), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out = verify()
	if want := files[0] + ":" + strconv.Itoa(refusedRead+2) + ": chain broken"; code != 1 || !strings.HasPrefix(out, want) {
		t.Errorf("verify with read line %d altered: exit %d: %s, want exit 1 and %q", refusedRead+1, code, out, want)
	}
	if err := os.WriteFile(files[0], trail, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := verify(); code != 0 {
		t.Errorf("verify with the line restored: exit %d: %s", code, out)
	}
}
