package policy

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/internal/docsync"
	"github.com/physmcp/physmcpd/internal/strictyaml"
)

// TestSchemaAndDocsCoverDecoder fails when a key is added to (or removed
// from) the policy decoder without the JSON Schema and docs/policy.md following.
func TestSchemaAndDocsCoverDecoder(t *testing.T) {
	docs := map[string][]string{"Rule": {"type"}}
	for _, v := range []any{Policy{}, Defaults{}, ToolPolicy{}, TimeWindow{}, Identity{}, MeshIdentity{}, Provider{}, StaticToken{}, CertClient{}, Emergency{}, QuorumCheck{}, Condition{}} {
		t := reflect.TypeOf(v)
		docs[t.Name()] = strictyaml.Known(t)
	}
	schema := map[string][]string{"": docs["Policy"]}
	for name, k := range docs {
		if name != "Policy" && name != "Rule" {
			schema[name] = k
		}
	}
	for _, rt := range ruleTypes {
		docs[rt.keys.Name()] = strictyaml.Known(rt.keys)
		schema[rt.keys.Name()] = append([]string{"type"}, docs[rt.keys.Name()]...)
	}
	for _, m := range []map[string][]string{docs, schema} {
		for name, k := range m {
			k = slices.Clone(k)
			slices.Sort(k)
			m[name] = k
		}
	}
	text := docsync.Check(t, "../schema/physmcp.policy.schema.json", "../docs/policy.md", schema, docs)
	for _, rt := range ruleTypes {
		if !strings.Contains(text, "`type: "+string(rt.name)+"`") {
			t.Errorf("docs/policy.md does not document rule type %s", rt.name)
		}
	}
}
