package policy

import (
	"slices"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/internal/strictyaml"
	"github.com/physmcp/physmcpd/manifest"
)

const meshAggregatorM = "../examples/site/mesh-aggregator/physmcp.manifest.yml"

// findingAt fails t unless diags has a finding of sev on line containing msg.
func findingAt(t *testing.T, diags strictyaml.Diags, sev strictyaml.Severity, line int, msg string) {
	t.Helper()
	for _, d := range diags {
		if d.Pos.Line == line && d.Severity == sev && strings.Contains(d.Msg, msg) {
			return
		}
	}
	t.Errorf("want a finding on line %d containing %q; got:\n%s", line, msg, diags)
}

// withCapabilities is the greenhouse example's policy with its
// capabilities section replaced by caps, which starts on line 30.
func withCapabilities(t *testing.T, caps string) string {
	t.Helper()
	text := readFile(t, greenhouse)
	i := strings.Index(text, "\ncapabilities:\n")
	if i < 0 || strings.Count(text[:i], "\n") != 27 {
		t.Fatalf("the greenhouse policy moved its capabilities section (line %d)", strings.Count(text[:i], "\n")+2)
	}
	return text[:i] + "\ncapabilities:\n" + caps
}

// A pattern applies to the manifest's tools it matches, checked against
// each; an entry of the tool's own wins over it; of two patterns that match
// a tool, the first in the file applies, and the other is told.
func TestPatternOnManifestTools(t *testing.T) {
	m := loadManifest(t, greenhouseM)
	p, diags := Parse("p.yml", []byte(withCapabilities(t, `  "do_heater_*":
    rules: [{type: range_guard, min: 10, max: 30, on_violation: deny}]
  "*_setpoint":
    rules: [{type: permission, require: [operator]}]
  do_vent_fan:
    rules: [{type: permission, require: [admin]}]
`)), m)
	if p == nil {
		t.Fatal(diags)
	}
	if g := p.Rules("do_heater_setpoint"); len(g) != 1 || g[0].RangeGuard == nil {
		t.Errorf("do_heater_setpoint: want the first pattern's range guard, got %+v", g)
	}
	if r := p.Rules("do_vent_fan"); len(r) != 1 || r[0].Permission == nil {
		t.Errorf("do_vent_fan: want its own entry, got %+v", r)
	}
	if r := p.Rules("read_heater_setpoint"); len(r) != 1 || r[0].Permission == nil {
		t.Errorf("read_heater_setpoint: want the second pattern's rule, got %+v", r)
	}
	findingAt(t, diags, strictyaml.Warning, 32, `do_heater_setpoint matches this pattern but follows "do_heater_*" (line 30)`)
	if p.Rules("read_air_temperature") != nil {
		t.Error("read_air_temperature has rules")
	}

	for _, c := range []struct{ name, caps, msg string }{
		{"guard wider than a tool's range", `  "do_heater_*":
    rules: [{type: range_guard, max: 40, on_violation: deny}]
`, "max 40 is wider than the manifest range 5..35 of do_heater_setpoint"},
		{"rate rule on a read", `  "*_temperature":
    rules: [{type: rate, max: 1/minute}]
`, "a rate rule only applies to do_ tools, and read_air_temperature is a read"},
		{"pattern that matches nothing", `  "do_*_pump":
    rules: [{type: permission, require: [admin]}]
`, `the pattern "do_*_pump" applies to no tool of the manifest`},
		{"pattern shadowed by the tool's entry", `  "do_vent_*":
    rules: [{type: permission, require: [admin]}]
  do_vent_fan:
    rules: [{type: permission, require: [admin]}]
`, `the pattern "do_vent_*" applies to no tool`},
		{"bad pattern", `  "do_[vent":
    rules: [{type: permission, require: [admin]}]
`, `"do_[vent" is not a valid pattern`},
		{"tool name the manifest does not have", `  do_gh1_vent_fan:
    rules: [{type: permission, require: [admin]}]
`, `no tool or capability "do_gh1_vent_fan"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, diags := Parse("p.yml", []byte(withCapabilities(t, c.caps)), m)
			if p != nil {
				t.Errorf("accepted: %s", diags)
			}
			line := 30 // the key
			if c.name == "rate rule on a read" || c.name == "guard wider than a tool's range" {
				line = 31 // the rule
			}
			findingAt(t, diags, strictyaml.Error, line, c.msg)
		})
	}
}

const aggregatorPolicy = `physmcp_policy_version: "0.1"
capabilities:
  do_gh1_vent_fan:
    rules: [{type: permission, require: [admin]}]
  "do_*_vent_fan":
    rules:
      - {type: permission, require: [supervisor]}
      - {type: range_guard, max: 50, on_violation: deny}
  "read_*_temperature":
    rules: [{type: permission, require: [operator]}]
`

func expected(xs []Expected) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.At.String() + ": " + x.Field()
	}
	return out
}

func adopted(name string, kind manifest.Kind, typ manifest.DataType, max float64) *manifest.Capability {
	lo := 0.0
	return &manifest.Capability{Name: name, Kind: kind, DataType: typ, Range: &manifest.Range{Min: &lo, Max: &max},
		Binding: manifest.Binding{Bus: "devices/gh", Type: manifest.BusMCP, Virtual: &manifest.VirtualBinding{Tool: "x"}}}
}

// Under a manifest that adopts, names it does not have are expected from
// its sources: checked against each tool when it is adopted, and listed
// while they match none served.
func TestNamesExpectedFromAdoption(t *testing.T) {
	m := loadManifest(t, meshAggregatorM)
	p, diags := Parse("p.yml", []byte(aggregatorPolicy), m)
	if p == nil || len(diags) != 0 {
		t.Fatalf("want the policy accepted without findings: %s", diags)
	}
	// each where the file gives it, as a finding would name it
	if got, want := expected(p.Unmatched(nil)), []string{"p.yml:3:3: capabilities.do_gh1_vent_fan", "p.yml:5:3: capabilities.do_*_vent_fan", "p.yml:9:3: capabilities.read_*_temperature"}; !slices.Equal(got, want) {
		t.Errorf("nothing adopted: unmatched %q, want %q", got, want)
	}
	if got, want := expected(p.Unmatched([]string{"do_gh1_vent_fan", "read_gh1_vent_fan"})), []string{"p.yml:5:3: capabilities.do_*_vent_fan", "p.yml:9:3: capabilities.read_*_temperature"}; !slices.Equal(got, want) {
		t.Errorf("only gh1's fan: unmatched %q (the exact entry applies, not the pattern), want %q", got, want)
	}
	if got := p.Unmatched([]string{"do_gh1_vent_fan", "do_gh2_vent_fan", "read_gh2_air_temperature"}); len(got) != 0 {
		t.Errorf("all matched: unmatched %q", got)
	}
	if r := p.Rules("do_gh1_vent_fan"); len(r) != 1 || r[0].Permission.Require[0] != manifest.RoleAdmin {
		t.Errorf("the exact entry does not win over the pattern: %+v", r)
	}
	if r := p.Rules("do_gh2_vent_fan"); len(r) != 2 {
		t.Errorf("do_gh2_vent_fan: want the pattern's two rules, got %+v", r)
	}

	fits := adopted("gh2_vent_fan", manifest.KindDo, manifest.TypeFloat, 100)
	if d := p.Adopted(fits); len(d) != 0 {
		t.Errorf("a tool the rules fit: %s", d)
	}
	findingAt(t, p.Adopted(adopted("gh3_vent_fan", manifest.KindDo, manifest.TypeFloat, 40)), strictyaml.Error, 8,
		"max 50 is wider than the manifest range 0..40 of do_gh3_vent_fan")
	findingAt(t, p.Adopted(adopted("gh4_vent_fan", manifest.KindDo, manifest.TypeBool, 1)), strictyaml.Error, 8,
		"a range_guard only applies to numeric tools; do_gh4_vent_fan is bool")
	if d := p.Adopted(adopted("gh2_soil_moisture", manifest.KindDo, manifest.TypeFloat, 1)); len(d) != 0 {
		t.Errorf("a tool no rule names: %s", d)
	}

	for _, c := range []struct{ name, entry, msg string }{
		{"capability name", "  gh1_vent_fan:\n    rules: [{type: permission, require: [admin]}]\n", "a tool adopted from a source is named by its tool name"},
		{"no tool name", "  do_Gh1:\n    rules: [{type: permission, require: [admin]}]\n", "a tool adopted from a source is named by its tool name"},
		// A pattern written like a capability name matches no tool: the
		// tools it was meant for would be served without its rules.
		{"pattern of capability names", "  \"gh?_vent_fan\":\n    rules: [{type: permission, require: [admin]}]\n", `the pattern "gh?_vent_fan" can match no tool name`},
		{"pattern of another prefix", "  \"write_*\":\n    rules: [{type: permission, require: [admin]}]\n", `the pattern "write_*" can match no tool name`},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, diags := Parse("p.yml", []byte("physmcp_policy_version: \"0.1\"\ncapabilities:\n"+c.entry), m)
			if p != nil {
				t.Errorf("accepted: %s", diags)
			}
			findingAt(t, diags, strictyaml.Error, 3, c.msg)
		})
	}
}
