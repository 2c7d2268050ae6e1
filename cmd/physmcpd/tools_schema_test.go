//go:build !lite

package main

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/physmcp/physmcpd/lint"
	"github.com/physmcp/physmcpd/promcp"
)

// exampleManifests finds every examples/**/physmcp.manifest.yml, each with
// the policy beside it when there is one.
func exampleManifests(t *testing.T) (manifests, policies []string) {
	t.Helper()
	err := filepath.WalkDir("../../examples", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != "physmcp.manifest.yml" {
			return err
		}
		policy := filepath.Join(filepath.Dir(path), "physmcp.policy.yml")
		if _, err := os.Stat(policy); err != nil {
			policy = ""
		}
		manifests, policies = append(manifests, path), append(policies, policy)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(manifests) < 2 {
		t.Fatalf("found %d example manifests, want the greenhouse and the pump skid at least", len(manifests))
	}
	return manifests, policies
}

// Every tool of every example has an input schema the strictest model tool
// APIs accept (a plain object: no top-level anyOf/oneOf/allOf/not, no $ref,
// no bare boolean schema) and no bare boolean in its output schema, as
// `physmcpd tools --json` lists them.
func TestExampleToolSchemasSuitModelAPIs(t *testing.T) {
	manifests, policies := exampleManifests(t)
	for i, m := range manifests {
		args := []string{"tools", "--manifest", m, "--json"}
		if policies[i] != "" {
			args = append(args, "--policy", policies[i])
		}
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 {
			t.Fatalf("%s: tools exit %d: %s", m, code, stderr.String())
		}
		var list struct {
			Tools []struct {
				Name         string         `json:"name"`
				InputSchema  map[string]any `json:"inputSchema"`
				OutputSchema map[string]any `json:"outputSchema"`
			} `json:"tools"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &list); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		for _, tool := range list.Tools {
			if tool.InputSchema["type"] != "object" {
				t.Errorf("%s %s: inputSchema type %v, want object", m, tool.Name, tool.InputSchema["type"])
			}
			for _, p := range lint.ModelAPIProblems(tool.InputSchema) {
				t.Errorf("%s %s: inputSchema: %s", m, tool.Name, p)
			}
			for _, p := range lint.BareBooleans(tool.OutputSchema) {
				t.Errorf("%s %s: outputSchema: %s", m, tool.Name, p)
			}
			for what, s := range map[string]map[string]any{"input": tool.InputSchema, "output": tool.OutputSchema} {
				if _, err := promcp.CompileSchema(s); err != nil {
					t.Errorf("%s %s: %sSchema does not compile: %v", m, tool.Name, what, err)
				}
			}
		}
		t.Logf("%s: %d tools checked", m, len(list.Tools))
	}
}
