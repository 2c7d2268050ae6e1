//go:build !lite

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/profiles"
	"github.com/physmcp/physmcpd/state"
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

// storeRigManifest is a simulated Modbus device whose bus logs every applied
// write (simulation.write_log), with an actuator serve drives to its safe
// value at start-up.
const storeRigManifest = `physmcp_version: "0.1"
device: {id: store_rig_01, type: test_rig}
buses:
  plc:
    type: modbus-tcp
    address: 127.0.0.1:1502
    simulated: true
    simulation: {write_log: writes.jsonl}
capabilities:
  - name: flow_setpoint
    kind: do
    description: Flow setpoint, driven to 7 whenever serve starts or stops.
    binding: {bus: plc, unit: 1, table: holding, address: 0, data_type: uint16}
    data_type: int
    unit: l/h
    range: {min: 0, max: 60000}
    safe_value: 7
    side_effects: [flow through the test loop changes]
    semantic_tags: [flow, setpoint]
`

// storeRig is one device: its manifest, policy and bus write log, in a directory of its own.
type storeRig struct{ dir, manifest, policy, writeLog string }

func newStoreRig(t *testing.T, policyText string) storeRig {
	t.Helper()
	dir := t.TempDir()
	r := storeRig{dir: dir, manifest: filepath.Join(dir, "m.yml"), policy: filepath.Join(dir, "p.yml"), writeLog: filepath.Join(dir, "writes.jsonl")}
	if err := os.WriteFile(r.manifest, []byte(storeRigManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.policy, []byte(policyText), 0o600); err != nil {
		t.Fatal(err)
	}
	return r
}

// serve runs serve on stdio with an empty stdin, so it applies the safe
// state, serves nothing and stops, and returns the exit code and stderr.
func (r storeRig) serve(t *testing.T, stateDir string, extra ...string) (int, string) {
	t.Helper()
	var stderr bytes.Buffer
	cfg, code := parseServe(append([]string{"--manifest", r.manifest, "--policy", r.policy, "--simulate", "--stdio", "--state-dir", stateDir}, extra...), &stderr)
	if code >= 0 {
		t.Fatalf("parse: exit %d: %s", code, stderr.String())
	}
	code = serve(context.Background(), cfg, strings.NewReader(""), io.Discard, &stderr)
	return code, stderr.String()
}

// writes is how many writes reached the bus.
func (r storeRig) writes(t *testing.T) int {
	data, err := os.ReadFile(r.writeLog)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return bytes.Count(data, []byte("\n"))
}

const storeRigPolicy = "physmcp_policy_version: \"0.1\"\nidentity:\n  local_role: operator\n"

// TestServeRefusesABrokenStoreBeforeAnyWrite: a store truncated to zero or
// with a corrupted page stops serve with the reason and the way out, before
// it writes anything to the bus, the start-up safe state included; after
// `state reset`, serve starts again.
func TestServeRefusesABrokenStoreBeforeAnyWrite(t *testing.T) {
	good := filepath.Join(t.TempDir(), "state")
	// a control run on a sound store: the rig does see the safe-state writes
	control := newStoreRig(t, storeRigPolicy)
	if code, logs := control.serve(t, good); code != 0 || control.writes(t) == 0 {
		t.Fatalf("control run: exit %d, %d writes logged; want 0 and the safe-state writes:\n%s", code, control.writes(t), logs)
	}
	s, err := state.Open(good, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 { // records enough for the idempotency bucket to need pages of its own
		if err := s.Save(fmt.Sprintf("key-%03d", i), engine.Record{Tool: "do_flow_setpoint", At: time.Now(), Fingerprint: strings.Repeat("f", 200)}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()

	for _, tc := range []struct {
		name, want string
		damage     func(t *testing.T, db string)
	}{
		{"truncated to zero", "is empty (0 bytes)", func(t *testing.T, db string) { os.Truncate(db, 0) }},
		{"corrupted page", "is corrupted", garbleBucketRoots},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyStateDir(t, good)
			tc.damage(t, filepath.Join(dir, state.FileName))
			r := newStoreRig(t, storeRigPolicy)
			code, logs := r.serve(t, dir)
			if code != 1 || !strings.Contains(logs, tc.want) || !strings.Contains(logs, "physmcpd state reset --state-dir "+dir) || strings.Contains(logs, "panic") {
				t.Fatalf("exit %d; want 1 and an error saying %q and how to reset:\n%s", code, tc.want, logs)
			}
			if n := r.writes(t); n != 0 {
				t.Fatalf("%d writes reached the bus before serve refused the store", n)
			}
			var out, errOut bytes.Buffer
			if code := run([]string{"state", "reset", "--state-dir", dir}, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "WARNING") {
				t.Fatalf("state reset: exit %d\n%s%s", code, out.String(), errOut.String())
			}
			if code, logs := r.serve(t, dir); code != 0 || r.writes(t) == 0 {
				t.Fatalf("serve after state reset: exit %d, %d writes:\n%s", code, r.writes(t), logs)
			}
		})
	}
}

// TestServeRefusesMissingKeyFilesBeforeAnyWrite: an identity file serve
// cannot read stops it before it writes to the bus, naming the policy line
// or the flag.
func TestServeRefusesMissingKeyFilesBeforeAnyWrite(t *testing.T) {
	jwt := storeRigPolicy + "  providers:\n    - type: jwt\n      issuer: https://id.example\n      audience: physmcpd\n      key_file: missing.pem\n"
	for _, tc := range []struct {
		name, policy string
		flags        []string
		want         string
	}{
		{"jwt key_file", jwt, nil, "p.yml:8:17: identity.providers[0].key_file: cannot read "},
		{"override key", storeRigPolicy, []string{"--override-key", "/nonexistent/override.key"}, "--override-key: cannot read /nonexistent/override.key: no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newStoreRig(t, tc.policy)
			code, logs := r.serve(t, filepath.Join(r.dir, "state"), tc.flags...)
			if code != 1 || !strings.Contains(logs, tc.want) {
				t.Fatalf("exit %d; want 1 and %q:\n%s", code, tc.want, logs)
			}
			if n := r.writes(t); n != 0 {
				t.Fatalf("%d writes reached the bus", n)
			}
		})
	}
}

// garbleBucketRoots overwrites the root page of every bucket that has pages
// of its own.
func garbleBucketRoots(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	size := int64(db.Info().PageSize)
	var roots []int64
	db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bolt.Bucket) error {
			if r := b.Root(); r != 0 {
				roots = append(roots, int64(r))
			}
			return nil
		})
	})
	db.Close()
	if len(roots) == 0 {
		t.Fatal("every bucket is inline: no page to corrupt")
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, r := range roots {
		if _, err := f.WriteAt(bytes.Repeat([]byte{0xa5}, int(size)), r*size); err != nil {
			t.Fatal(err)
		}
	}
}

// copyStateDir copies the store files of dir into a new directory.
func copyStateDir(t *testing.T, dir string) string {
	t.Helper()
	to := t.TempDir()
	for _, name := range []string{state.FileName, state.IDFileName} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return to
}
