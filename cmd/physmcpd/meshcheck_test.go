//go:build !lite

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// validate names a mesh key file serve could not load at its line; serve
// refuses a mesh without HTTP before it opens any bus.
func TestMeshKeyFileAndTransport(t *testing.T) {
	dir := t.TempDir()
	mf := writeFile(t, dir, "m.yml", meshNodeManifest("node_1", "north", nil, false, time.Second))
	var out, errOut bytes.Buffer
	if code := run([]string{"validate", "--manifest", mf}, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "m.yml:4:") || !strings.Contains(errOut.String(), "network.mesh.key_file: cannot read") {
		t.Fatalf("validate without the key file: exit %d\n%s", code, errOut.String())
	}
	if err := os.WriteFile(filepath.Join(dir, "mesh.key"), []byte("dG9vIHNob3J0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	errOut.Reset()
	if code := run([]string{"validate", "--manifest", mf}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "a key is 16, 24 or 32 bytes") {
		t.Fatalf("validate with a short key: exit %d\n%s", code, errOut.String())
	}
	writeFile(t, dir, "mesh.key", "n/ybV659xBRpdDZivl3BWoHpSizbrS6kyZfzVItO0Tc=\n")
	errOut.Reset()
	if code := run([]string{"validate", "--manifest", mf}, &out, &errOut); code != 0 {
		t.Fatalf("validate with a good key: exit %d\n%s", code, errOut.String())
	}
	errOut.Reset()
	if code := run([]string{"serve", "--manifest", mf, "--simulate", "--stdio"}, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "serve with --http") {
		t.Fatalf("serve --stdio with a mesh: exit %d\n%s", code, errOut.String())
	}
}
