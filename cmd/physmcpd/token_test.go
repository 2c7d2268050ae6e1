//go:build !lite

package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/audit"
	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/policy"
)

func TestTokenNewPrintsTheHashEntry(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runToken([]string{"new", "--name", "ops", "--role", "operator"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	m := regexp.MustCompile(`token: (\S+)\n[\s\S]*sha256: ([0-9a-f]{64}), role: operator`).FindStringSubmatch(out.String())
	if m == nil || policy.HashToken(m[1]) != m[2] {
		t.Errorf("output %q", out.String())
	}
}

// The override minted with a new key file is accepted by an authenticator
// built from the same policy and key, with the policy's override role.
func TestTokenOverrideMintsAVerifiableToken(t *testing.T) {
	const mf, pf = "../../examples/pump-skid/physmcp.manifest.yml", "../../examples/pump-skid/physmcp.policy.yml"
	key := filepath.Join(t.TempDir(), "override.key")
	var out, errb bytes.Buffer
	now := time.Now()
	if code := tokenOverride([]string{"--manifest", mf, "--policy", pf, "--key", key, "--name", "bob", "--reason", "pump stuck"}, &out, &errb, func() time.Time { return now }); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "AUDIT emergency override") || !strings.Contains(errb.String(), "created the override key") {
		t.Errorf("stderr %q", errb.String())
	}
	m, p, ok := loadDevice(mf, pf, &errb)
	if !ok {
		t.Fatal(errb.String())
	}
	data, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(p, auth.Options{DeviceID: m.Device.ID, OverrideKey: bytes.TrimSpace(data), Audit: func(auth.AuditEvent) {}})
	if err != nil {
		t.Fatal(err)
	}
	pr, err := a.Authenticate("Bearer " + strings.TrimSpace(out.String()))
	if err != nil || pr.Role != "admin" || pr.Method != auth.MethodOverride {
		t.Errorf("override: %+v %v", pr, err)
	}
}

// Using an override token over HTTP lands in the audit trail, not only in the log.
func TestOverrideUseIsAudited(t *testing.T) {
	const mf, pf = "../../examples/pump-skid/physmcp.manifest.yml", "../../examples/pump-skid/physmcp.policy.yml"
	var errb bytes.Buffer
	m, p, ok := loadDevice(mf, pf, &errb)
	if !ok {
		t.Fatal(errb.String())
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "override.key")
	key := auth.NewOverrideKey()
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	e, err := openEngine(context.Background(), m, p, true, logger, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	trail, err := audit.Open(filepath.Join(dir, "audit"), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := serveConfig{httpAddr: "127.0.0.1:0", access: accessFlags{overrideKey: keyFile}}
	acc, err := httpAccess(cfg, m, p, e, trail, logger)
	if err != nil {
		t.Fatal(err)
	}
	o, err := auth.MintOverride(p, m.Device.ID, key, "bob", "pump stuck", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if pr, err := acc.Auth.Authenticate("Bearer " + o.Token); err != nil || pr.Method != auth.MethodOverride {
		t.Fatalf("override: %+v %v", pr, err)
	}
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "audit", "*"))
	var all strings.Builder
	for _, f := range files {
		data, _ := os.ReadFile(f)
		all.Write(data)
	}
	if !strings.Contains(all.String(), `"override_event"`) || !strings.Contains(all.String(), o.ID) {
		t.Fatalf("audit trail has no override entry:\n%s", all.String())
	}
	if _, err := audit.Verify(filepath.Join(dir, "audit")); err != nil {
		t.Fatalf("verify: %v", err)
	}
}
