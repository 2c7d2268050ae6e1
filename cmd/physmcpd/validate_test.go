package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of TestValidateGolden")

// TestValidateGolden runs physmcpd validate on the examples and on files with
// every class of error, and compares the complete output with testdata/validate/*.golden.
func TestValidateGolden(t *testing.T) {
	const dir = "testdata/validate"
	for _, tc := range []struct {
		golden string
		args   []string
		code   int
	}{
		{"greenhouse.golden", []string{"--manifest", "../../examples/physmcp.manifest.yml", "--policy", "../../examples/physmcp.policy.yml"}, 0},
		{"pump-skid.golden", []string{"--manifest", "../../examples/pump-skid/physmcp.manifest.yml", "--policy", "../../examples/pump-skid/physmcp.policy.yml"}, 0},
		{"bad.manifest.golden", []string{"--manifest", dir + "/bad.manifest.yml"}, 1},
		{"bad.policy.golden", []string{"--manifest", "../../examples/physmcp.manifest.yml", "--policy", dir + "/bad.policy.yml"}, 1},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"validate"}, tc.args...), &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			got := "exit " + string(rune('0'+code)) + "\n--- stdout\n" + stdout.String() + "--- stderr\n" + stderr.String()
			path := filepath.Join(dir, tc.golden)
			if *updateGolden {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run TestValidateGolden -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("output differs from %s (run with -update after checking it):\n%s", path, got)
			}
		})
	}
}

func TestValidateExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no manifest", nil, 2, "usage: physmcpd validate"},
		{"unknown flag", []string{"--manifest", "x", "--strict"}, 2, "flag provided but not defined"},
		{"extra argument", []string{"--manifest", "x", "y"}, 2, "usage"},
		{"help", []string{"-h"}, 0, "usage"},
		{"missing file", []string{"--manifest", "testdata/validate/none.yml"}, 1, "testdata/validate/none.yml: cannot read the manifest"},
		{"missing policy", []string{"--manifest", "../../examples/physmcp.manifest.yml", "--policy", "none.yml"}, 1, "none.yml: cannot read the policy"},
		{"policy behind a bad manifest", []string{"--manifest", "testdata/validate/bad.manifest.yml", "--policy", "../../examples/physmcp.policy.yml"}, 1, "physmcp.policy.yml: not checked: the manifest has errors"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"validate"}, tc.args...), &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr.String(), tc.code, tc.stderr)
			}
		})
	}
}

// TestValidateIdentityFiles: every identity file the policy names and serve
// could not read is an error at the line naming it.
func TestValidateIdentityFiles(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "keys"), 0o700)
	os.WriteFile(filepath.Join(dir, "empty.pem"), nil, 0o600)
	policy := filepath.Join(dir, "p.yml")
	os.WriteFile(policy, []byte(`physmcp_policy_version: "0.1"
identity:
  providers:
    - {type: jwt, issuer: a, audience: b, key_file: missing.pem}
    - {type: jwt, issuer: a, audience: b, key_file: keys}
    - {type: jwt, issuer: a, audience: b, key_file: empty.pem}
`), 0o600)
	var stdout, stderr bytes.Buffer
	code := run([]string{"validate", "--manifest", "../../examples/physmcp.manifest.yml", "--policy", policy}, &stdout, &stderr)
	want := []string{
		policy + ":4:53: identity.providers[0].key_file: cannot read " + filepath.Join(dir, "missing.pem") + ": no such file or directory; put the file there or correct the path",
		policy + ":5:53: identity.providers[1].key_file: " + filepath.Join(dir, "keys") + " is a directory",
		policy + ":6:53: identity.providers[2].key_file: " + filepath.Join(dir, "empty.pem") + " is empty",
	}
	for _, w := range want {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("stderr lacks %q", w)
		}
	}
	if code != 1 || strings.Count(stderr.String(), "; put the file there") != len(want) {
		t.Errorf("exit %d, want 1 and exactly %d file errors; stderr:\n%s", code, len(want), stderr.String())
	}
}
