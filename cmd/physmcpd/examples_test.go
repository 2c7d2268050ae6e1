//go:build !lite

package main

import (
	"bytes"
	"path/filepath"
	"testing"
)

// Every example (examples/**/physmcp.manifest.yml with its policy) passes
// validate, and lint finds no error in its tool list (warnings are allowed:
// a grouped device's whole list is over the density advice its endpoints meet).
func TestExamplesValidateAndLint(t *testing.T) {
	manifests, policies := exampleManifests(t)
	for i, m := range manifests {
		args := []string{"--manifest", m}
		if policies[i] != "" {
			args = append(args, "--policy", policies[i])
		}
		var out, errOut bytes.Buffer
		if code := run(append([]string{"validate"}, args...), &out, &errOut); code != 0 {
			t.Errorf("validate %s: exit %d\n%s%s", m, code, out.String(), errOut.String())
			continue
		}
		out.Reset()
		if code := run(append([]string{"tools", "--json"}, args...), &out, &errOut); code != 0 {
			t.Fatalf("tools %s: exit %d: %s", m, code, errOut.String())
		}
		list := writeFile(t, t.TempDir(), filepath.Base(filepath.Dir(m))+".json", out.String())
		out.Reset()
		if code := run([]string{"lint", list}, &out, &errOut); code != 0 {
			t.Errorf("lint %s: exit %d\n%s%s", m, code, out.String(), errOut.String())
		}
	}
}
