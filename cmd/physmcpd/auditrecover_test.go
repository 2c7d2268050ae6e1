//go:build !lite

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/profiles"
	"github.com/physmcp/physmcpd/promcp"
)

const recoverManifest = `physmcp_version: "0.1"
device: {id: audit_rig_01, type: test_rig}
buses:
  plc: {type: modbus-tcp, address: 127.0.0.1:1502, simulated: true}
capabilities:
  - name: flow_setpoint
    kind: do
    description: Flow setpoint.
    binding: {bus: plc, unit: 1, table: holding, address: 0, data_type: uint16}
    data_type: int
    range: {min: 0, max: 60000}
    semantic_tags: [flow, setpoint]
audit: {enabled: true, retention_days: 30}
`

// auditRig is a simulated device served with a state directory; drop
// decides which audit entries are lost, as if the process died before them.
type auditRig struct {
	dir string
	dur *durable
	e   *engine.Engine
}

func newAuditRig(t *testing.T, drop func(engine.AuditEntry) bool) *auditRig {
	t.Helper()
	dir := t.TempDir()
	mf := filepath.Join(dir, "m.yml")
	if err := os.WriteFile(mf, []byte(recoverManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	m, _, ok := loadDevice(mf, "", &errb)
	if !ok {
		t.Fatal(errb.String())
	}
	quiet := slog.New(slog.DiscardHandler)
	r := &auditRig{dir: filepath.Join(dir, "state")}
	d, opts, err := openDurable(serveConfig{stateDir: r.dir, simulate: true}, profiles.Full, m, quiet)
	if err != nil {
		t.Fatal(err)
	}
	sink := opts.Audit
	opts.Audit = func(a engine.AuditEntry) {
		if drop == nil || !drop(a) {
			sink(a)
		}
	}
	e, err := openEngine(context.Background(), m, nil, true, quiet, opts)
	if err != nil {
		d.close(quiet)
		t.Fatal(err)
	}
	r.dur, r.e = d, e
	t.Cleanup(r.close)
	return r
}

func (r *auditRig) close() {
	if r.e != nil {
		r.e.Close()
		r.dur.close(slog.New(slog.DiscardHandler))
		r.e = nil
	}
}

func (r *auditRig) do(t *testing.T, value any, key string) promcp.DoResponse {
	t.Helper()
	resp, err := r.e.Do(context.Background(), engine.Caller{Identity: "test"}, "do_flow_setpoint", promcp.DoRequest{Value: value, IdempotencyKey: key})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// trail returns the trail's lines, decoded.
func (r *auditRig) trail(t *testing.T) []map[string]any {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(auditDir(r.dir), "audit-*.jsonl"))
	var out []map[string]any
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			if len(line) > 70_000 {
				t.Fatalf("a line of %d bytes", len(line))
			}
			var m map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
		}
	}
	return out
}

func (r *auditRig) verify(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := run(append([]string{"audit", "verify", "--state-dir", r.dir}, args...), &out, &out)
	return code, out.String()
}

func outcomesOf(lines []map[string]any, key string) []string {
	var out []string
	for _, l := range lines {
		if l["idempotency_key"] == key {
			out = append(out, l["outcome"].(string))
		}
	}
	return out
}

func TestUnauditedWritesAreRecoveredFromTheStore(t *testing.T) {
	r := newAuditRig(t, func(a engine.AuditEntry) bool { return a.Key == "lost" && a.Outcome == engine.OutcomeApplied })
	long := strings.Repeat("k", 3000) // kept in the trail as its digest
	for _, c := range []struct {
		v   int
		key string
	}{{5, "kept"}, {6, "lost"}, {8, long}} {
		if resp := r.do(t, c.v, c.key); resp.Status != promcp.StatusSuccess {
			t.Fatalf("%s: %+v", c.key, resp)
		}
	}
	if resp := r.do(t, 6, "lost"); resp.Status != promcp.StatusSuccess { // a replay is no account of the write
		t.Fatalf("replay: %+v", resp)
	}
	now := time.Now()
	// an intent saved before a crash: sent, or about to be, outcome unknown
	must(t, r.dur.store.Save("doubt", engine.Record{Tool: "do_flow_setpoint", At: now, SentAt: now, InDoubt: true, Seq: 9,
		Response: promcp.DoResponse{AppliedValue: 7}}))
	must(t, r.dur.store.Save("expired", engine.Record{Tool: "do_flow_setpoint", At: now.Add(-engine.KeyRetention - time.Minute)}))

	quiet := slog.New(slog.DiscardHandler)
	r.dur.recoverAudit(quiet)
	lines := r.trail(t)
	if got := outcomesOf(lines, "lost"); strings.Join(got, ",") != "replayed,recovered" {
		t.Fatalf("key lost: outcomes %v, want the replay then the recovered write", got)
	}
	for _, l := range lines {
		if l["idempotency_key"] == "lost" && l["outcome"] == outcomeRecovered && (l["applied_value"] != 6.0 || l["status"] != "success") {
			t.Fatalf("recovered line %v", l)
		}
	}
	for key, want := range map[string]string{"kept": "applied", "doubt": outcomeInDoubtRecovered, "expired": ""} {
		if got := strings.Join(outcomesOf(lines, key), ","); got != want {
			t.Errorf("key %s: outcomes %q, want %q", key, got, want)
		}
	}
	if n := len(lines); n != 6 {
		t.Fatalf("%d lines, want 6 (keyed event, kept, long, replay, 2 recovered):\n%v", n, lines)
	}
	r.dur.recoverAudit(quiet)
	if n := len(r.trail(t)); n != 6 {
		t.Fatalf("a second recovery appended again: %d lines", n)
	}
	r.close()
	if code, out := r.verify(t); code != 0 {
		t.Fatalf("audit verify: exit %d\n%s", code, out)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestHugeAndNestedArgumentsKeepTheTrailVerifiable(t *testing.T) {
	r := newAuditRig(t, nil)
	var deep any = 1
	for range 12_000 { // deeper than encoding/json decodes, so verify would reject the line as is
		deep = map[string]any{"v": deep}
	}
	for _, v := range []any{strings.Repeat("x", 700_000), deep} {
		if resp := r.do(t, v, ""); resp.Status != promcp.StatusFailed {
			t.Fatalf("a non-number was not refused: %+v", resp)
		}
	}
	lines := r.trail(t) // also checks every line is bounded
	value := lines[1]["arguments"].(map[string]any)["value"].(map[string]any)
	if value["truncated"] != true || value["bytes"] != 700_000.0 {
		t.Fatalf("700 KB value recorded as %v", value)
	}
	r.close()
	if code, out := r.verify(t); code != 0 {
		t.Fatalf("audit verify: exit %d\n%s", code, out)
	}
}

func TestAuditVerifyNeedsTheKeyOfAKeyedTrail(t *testing.T) {
	r := newAuditRig(t, nil)
	r.do(t, 5, "a")
	r.close()
	code, out := r.verify(t)
	if code != 0 || !strings.Contains(out, "keyed with key id") {
		t.Fatalf("with the state directory's key: exit %d, %q", code, out)
	}
	moved := filepath.Join(t.TempDir(), "copy.key")
	must(t, os.Rename(filepath.Join(r.dir, auditKeyFile), moved))
	if code, out := r.verify(t); code != 2 || !strings.Contains(out, "is keyed") || !strings.Contains(out, "--key") {
		t.Fatalf("without the key: exit %d, %q", code, out)
	}
	if code, out := r.verify(t, "--key", moved); code != 0 {
		t.Fatalf("with --key: exit %d, %q", code, out)
	}
	other := filepath.Join(t.TempDir(), "other.key")
	must(t, os.WriteFile(other, []byte(strings.Repeat("ab", 32)+"\n"), 0o600))
	if code, out := r.verify(t, "--key", other); code != 2 || !strings.Contains(out, "the key given has id") {
		t.Fatalf("with another key: exit %d, %q", code, out)
	}
	files, _ := filepath.Glob(filepath.Join(auditDir(r.dir), "audit-*.jsonl"))
	b, _ := os.ReadFile(files[0])
	must(t, os.WriteFile(files[0], bytes.Replace(b, []byte(`"applied_value":5`), []byte(`"applied_value":4`), 1), 0o600))
	if code, out := r.verify(t, "--key", moved); code != 1 || !strings.Contains(out, "jsonl:") {
		t.Fatalf("edited trail: exit %d, %q", code, out)
	}
}
