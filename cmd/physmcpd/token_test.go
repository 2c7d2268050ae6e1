package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/auth"
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
