package main

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/profiles"
)

func TestStateDirFollowsProfileAndSimulation(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	m := &manifest.Manifest{Audit: &manifest.Audit{Enabled: true, RetentionDays: 7}}
	dir := filepath.Join(t.TempDir(), "state")

	// lite writes nothing; asking it for a state directory is an error, not ignored
	if _, _, err := openDurable(serveConfig{stateDir: dir, simulate: true}, profiles.Lite, m, quiet); err == nil || !strings.Contains(err.Error(), "writes nothing to disk") {
		t.Fatalf("lite with --state-dir: %v", err)
	}
	d, opts, err := openDurable(serveConfig{simulate: true}, profiles.Lite, m, quiet)
	if err != nil || opts.Idempotency != nil || opts.Limits != nil || opts.Audit != nil {
		t.Fatalf("lite: %+v, %v", opts, err)
	}
	d.close(quiet)
	// simulating without --state-dir keeps state in memory rather than in /var/lib
	if stateDirFor(serveConfig{simulate: true}) != "" || stateDirFor(serveConfig{}) != defaultStateDir {
		t.Fatal("default state directory")
	}
	d, opts, err = openDurable(serveConfig{stateDir: dir, simulate: true}, profiles.Full, m, quiet)
	if err != nil || opts.Idempotency == nil || opts.Limits == nil || opts.Audit == nil {
		t.Fatalf("full: %+v, %v", opts, err)
	}
	d.close(quiet)
	if _, err := os.Stat(filepath.Join(dir, "state.db")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(auditDir(dir)); err != nil {
		t.Fatal(err)
	}
}

func TestAuditVerifyCommand(t *testing.T) {
	var stderr, stdout bytes.Buffer
	if code := run([]string{"audit"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "usage: physmcpd audit verify") {
		t.Fatalf("no subcommand: exit %d, %q", code, stderr.String())
	}
	dir := t.TempDir()
	if code := run([]string{"audit", "verify", "--state-dir", dir}, io.Discard, &stderr); code != 1 {
		t.Fatalf("missing trail: exit %d", code)
	}
	os.Mkdir(auditDir(dir), 0o700)
	if code := run([]string{"audit", "verify", "--state-dir", dir}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "ok: 0 lines") {
		t.Fatalf("empty trail: exit %d, %q", code, stdout.String())
	}
}
