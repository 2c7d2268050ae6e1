package lint

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func findingKeys(fs []Finding) []string {
	keys := make([]string, len(fs))
	for i, f := range fs {
		tool := f.Tool
		if tool == "" {
			tool = "-"
		}
		rule := f.Rule
		if f.Code != "" {
			rule = f.Code + " " + rule
		}
		keys[i] = string(f.Severity) + " " + rule + " " + tool
	}
	slices.Sort(keys)
	return keys
}

func TestBrokenToolListReportsEachRule(t *testing.T) {
	data, err := os.ReadFile("testdata/broken-tools.json")
	if err != nil {
		t.Fatal(err)
	}
	tools, err := ParseToolList(data)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"error name-format Read_Temp",
		"error name-verb Read_Temp",
		"error name-verb get_humidity",
		"warning name-generic read_data",
		"error read-response read_data",
		"warning read-description-mutation read_setpoint",
		"error read-response read_setpoint",
		"error read-side-effects read_setpoint",
		"warning annotation-hint read_setpoint",
		"error description-missing do_fan",
		"error do-idempotency-key do_fan",
		"error do-response do_fan",
		"error R006 do-response do_fan",
		"error do-response do_fan",
		"warning do-response do_fan",
		"error annotation-hint do_fan",
		"warning description-short do_valve",
		"error input-schema do_valve",
		"error do-idempotency-key do_valve",
		"error permission-enum do_valve",
		"warning permission-enum do_valve",
		"warning do-idempotency-key do_pump",
		"error response-schema-missing do_pump",
		"error response-schema-missing do_light",
		"error response-schema-missing do_door",
		"warning name-generic do_update",
		"error response-schema-missing do_update",
		"error cando-intent can_do",
		"error R010 cando-response can_do",
		"error cando-response can_do",
		"error cando-response can_do",
		"warning cando-response can_do",
		"error cando-response can_do",
		"error permission-enum can_do",
		"warning permission-enum can_do",
		"warning cando-intent can_do",
		"error cando-response can_do",
		"warning cando-response can_do",
		"error name-duplicate can_do",
		"error name-duplicate read_setpoint",
		"error cando-single -",
		"warning tool-density -",
		"warning do-density -",
	}
	slices.Sort(want)
	got := findingKeys(Check(tools))
	if !slices.Equal(got, want) {
		t.Errorf("findings:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
	// Every rule id a finding carries is documented in Rules (ruleSeverity panics otherwise).
	for _, f := range Check(tools) {
		ruleSeverity(f.Rule)
	}
}

func TestCanDoCount(t *testing.T) {
	read := Tool{Name: "read_level", Description: "Tank level in percent of capacity.", InputSchema: map[string]any{"type": "object"}}
	do := Tool{Name: "do_pump", Description: "Starts or stops the feed pump.", InputSchema: map[string]any{"type": "object"}}
	for _, tc := range []struct {
		tools []Tool
		want  Severity
	}{
		{[]Tool{read}, Warning},
		{[]Tool{read, do}, Error},
	} {
		var got []Finding
		for _, f := range Check(tc.tools) {
			if f.Rule == "cando-single" {
				got = append(got, f)
			}
		}
		if len(got) != 1 || got[0].Severity != tc.want {
			t.Errorf("%d tools without can_do: got %v, want one cando-single %s", len(tc.tools), got, tc.want)
		}
	}
}

func TestParseToolListShapes(t *testing.T) {
	for _, doc := range []string{
		`[{"name":"read_level","responseSchema":{"type":"object"}}]`,
		`{"tools":[{"name":"read_level","outputSchema":{"type":"object"}}]}`,
		`{"device":{"id":"x"},"tools":[{"name":"read_level","outputSchema":{"type":"string"},"responseSchema":{"type":"object"}}]}`,
	} {
		tools, err := ParseToolList([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if len(tools) != 1 || tools[0].Name != "read_level" || tools[0].OutputSchema["type"] != "object" {
			t.Errorf("%s: got %+v", doc, tools)
		}
	}
	for _, doc := range []string{`{"device":{}}`, `[{"description":"no name"}]`, `not json`} {
		if _, err := ParseToolList([]byte(doc)); err == nil {
			t.Errorf("%s: no error", doc)
		}
	}
}

func TestSplitCommand(t *testing.T) {
	got, err := SplitCommand(`physmcpd serve --manifest "my dir/m.yml"  --policy 'p.yml'`)
	want := []string{"physmcpd", "serve", "--manifest", "my dir/m.yml", "--policy", "p.yml"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("got %q, %v; want %q", got, err, want)
	}
	for _, bad := range []string{"", "  ", `serve "open`} {
		if _, err := SplitCommand(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// fakeSession answers each tool with a fixed body.
type fakeSession struct {
	bodies map[string]func(args map[string]any) (any, bool, error)
}

func (f fakeSession) ListTools(context.Context) ([]Tool, error) { return nil, nil }
func (f fakeSession) Close() error                              { return nil }
func (f fakeSession) CallTool(_ context.Context, name string, args map[string]any) (any, bool, error) {
	return f.bodies[name](args)
}

func fixed(body any) func(map[string]any) (any, bool, error) {
	return func(map[string]any) (any, bool, error) { return body, false, nil }
}

var objectSchema = map[string]any{"type": "object"}

func goodRead() map[string]any {
	return map[string]any{"value": 21.5, "unit": "°C", "timestamp": "2026-01-02T03:04:05.000Z", "quality": "good"}
}

func report(candidates, blocked, unroutable []any, feasible bool) map[string]any {
	return map[string]any{
		"query_id": "0b7c4a8e-5c1d-4f7a-9d2e-3f4a5b6c7d8e", "feasible": feasible,
		"candidates": candidates, "blocked": blocked, "unroutable": unroutable,
		"context":  map[string]any{"related_reads": []any{"read_temperature"}, "current_observations": map[string]any{}},
		"metadata": map[string]any{"timestamp": "2026-01-02T03:04:05.000Z", "total_latency_ms": 1.0},
	}
}

func candidate(tool, permission, validUntil string) map[string]any {
	return map[string]any{"capability": tool, "source": "dev", "confidence": 0.9, "permission": permission, "valid_until": validUntil}
}

func TestLiveAcceptsAGoodServer(t *testing.T) {
	tools := []Tool{
		{Name: "read_temperature", InputSchema: objectSchema},
		{Name: "do_heater", InputSchema: objectSchema},
		{Name: "can_do", InputSchema: objectSchema},
	}
	s := fakeSession{bodies: map[string]func(map[string]any) (any, bool, error){
		"read_temperature": fixed(goodRead()),
		"can_do": func(args map[string]any) (any, bool, error) {
			tags := args["intent"].(map[string]any)["semantic_tags"].([]any)
			if len(tags) == 1 && tags[0] == "heater" {
				return report([]any{candidate("do_heater", "allowed", "2026-01-02T03:05:05Z")}, []any{}, []any{}, true), false, nil
			}
			return report([]any{}, []any{}, []any{map[string]any{"outcome": "unroutable", "reason": "no_producer", "detail": "no"}}, false), false, nil
		},
	}}
	findings, notes := Live(context.Background(), s, tools)
	if len(findings) != 0 {
		t.Errorf("findings on a good server: %v (notes %v)", findings, notes)
	}
}

func TestLiveFindsBrokenAnswers(t *testing.T) {
	readSchema := map[string]any{"type": "object", "required": []any{"value"}}
	tools := []Tool{
		{Name: "read_temperature", InputSchema: objectSchema, OutputSchema: readSchema},
		{Name: "read_humidity", InputSchema: objectSchema},
		{Name: "read_door", InputSchema: objectSchema},
		{Name: "do_heater", InputSchema: objectSchema},
		{Name: "do_fan", InputSchema: objectSchema},
		{Name: "can_do", InputSchema: objectSchema},
	}
	s := fakeSession{bodies: map[string]func(map[string]any) (any, bool, error){
		// No value (schema and contract), a quality outside the enum, a local time.
		"read_temperature": fixed(map[string]any{"unit": nil, "timestamp": "2026-01-02T04:04:05+01:00", "quality": "great"}),
		"read_humidity":    func(map[string]any) (any, bool, error) { return nil, false, errors.New("-32603 internal error") },
		"read_door":        fixed("closed"),
		"can_do": func(args map[string]any) (any, bool, error) {
			tags := args["intent"].(map[string]any)["semantic_tags"].([]any)
			switch {
			case len(tags) == 1 && tags[0] == "heater":
				// Asserted feasible without an allowed candidate, a foreign tool,
				// a candidate without valid_until, an invented permission.
				return report([]any{candidate("do_boiler", "allowed", "2026-01-02T03:05:05Z"),
					candidate("do_heater", "maybe", "")}, []any{}, []any{}, false), false, nil
			case len(tags) == 1 && tags[0] == "fan":
				r := report([]any{}, []any{}, []any{}, false)
				r["query_id"] = "42"
				return r, false, nil
			}
			// Feasible for an intent that matches nothing.
			return report([]any{candidate("do_heater", "allowed", "2026-01-02T03:05:05Z")}, []any{}, []any{}, true), false, nil
		},
	}}
	findings, _ := Live(context.Background(), s, tools)
	got := findingKeys(findings)
	want := []string{
		"error live-output-schema read_temperature",
		"error live-read-contract read_temperature", // lacks value
		"error live-read-contract read_temperature", // quality
		"error live-read-contract read_temperature", // not UTC
		"error live-call read_humidity",
		"error live-call read_door",
		// heater: foreign do_boiler, bad permission, no valid_until, feasible false but an allowed candidate
		"error live-cando-foreign can_do",
		"error live-cando-contract can_do",
		"error live-cando-contract can_do",
		"error live-cando-contract can_do",
		// fan: bad query_id, unexplained refusal, not routed
		"error live-cando-contract can_do",
		"error live-cando-contract can_do",
		"warning live-cando-coverage can_do",
		// read intent for read_temperature is fine; nothing-matches and malformed intents claim feasible
		"error live-cando-contract can_do",
		"error live-cando-contract can_do",
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		var lines []string
		for _, f := range findings {
			lines = append(lines, f.String())
		}
		t.Errorf("findings:\n got %s\nwant %s\n%s", strings.Join(got, "\n     "), strings.Join(want, "\n     "), strings.Join(lines, "\n"))
	}
}

// docs/lint.md documents every rule id, and names no rule that does not exist.
func TestRulesAreDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/lint.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\|").FindAllStringSubmatch(string(doc), -1)
	var ids []string
	for _, m := range documented {
		ids = append(ids, m[1])
	}
	var want []string
	for _, r := range Rules {
		want = append(want, r.ID)
	}
	if !slices.Equal(ids, want) {
		t.Errorf("docs/lint.md documents rules\n %q\nlint.Rules has\n %q", ids, want)
	}
}

// Findings the seed validator has a code for carry it in text and JSON.
func TestSeedCodesInOutput(t *testing.T) {
	do := Tool{Name: "do_fan_speed", Description: "Sets the fan speed in percent.",
		InputSchema:  map[string]any{"type": "object", "properties": map[string]any{"idempotency_key": map[string]any{"type": "string"}}},
		OutputSchema: map[string]any{"type": "object", "properties": map[string]any{"status": map[string]any{}}, "required": []any{"status"}},
	}
	var r6 *Finding
	for _, f := range Check([]Tool{do}) {
		if f.Code == "R006" {
			r6 = &f
		}
	}
	if r6 == nil {
		t.Fatal("no R006 finding for a do_* response without compensable")
	}
	if s := r6.String(); !strings.Contains(s, "R006 do-response") || !strings.Contains(s, "lacks compensable") {
		t.Errorf("text %q, want R006 beside do-response", s)
	}
	b, err := json.Marshal(r6)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"rule":"do-response","code":"R006"`) {
		t.Errorf("JSON %s has no code R006", b)
	}
	plain, _ := json.Marshal(finding("name-verb", "x", "no verb"))
	if strings.Contains(string(plain), `"code"`) {
		t.Errorf("a finding without a seed code has one: %s", plain)
	}
}

// docs/lint.md lists each seed code beside its rule.
func TestSeedCodesAreDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/lint.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range SeedCodes {
		if row := "| `" + c.Code + "` | `" + c.Rule + "` |"; !strings.Contains(string(doc), row) {
			t.Errorf("docs/lint.md has no row %q", row)
		}
		if !slices.ContainsFunc(Rules, func(r Rule) bool { return r.ID == c.Rule }) {
			t.Errorf("seed code %s maps to unknown rule %s", c.Code, c.Rule)
		}
	}
}

// proMCP wants feasible:false explained by blocked or unroutable: a report
// whose only candidate awaits a person's approval says nothing of why unless
// the candidate is listed under blocked too.
func TestLiveWantsApprovalOnlyReportsExplained(t *testing.T) {
	tools := []Tool{{Name: "read_temperature", InputSchema: objectSchema}, {Name: "do_heater", InputSchema: objectSchema}, {Name: "can_do", InputSchema: objectSchema}}
	approval := candidate("do_heater", "requires_human_approval", "2026-01-02T03:05:05Z")
	mirror := map[string]any{"capability": "do_heater", "source": "dev", "permission": "requires_human_approval", "reason": "a person must approve it", "details": nil}
	for _, tc := range []struct {
		name    string
		blocked []any
		errors  int
	}{{name: "bare", blocked: []any{}, errors: 1}, {name: "listed under blocked", blocked: []any{mirror}}} {
		t.Run(tc.name, func(t *testing.T) {
			s := fakeSession{bodies: map[string]func(map[string]any) (any, bool, error){
				"read_temperature": fixed(goodRead()),
				"can_do": func(args map[string]any) (any, bool, error) {
					tags := args["intent"].(map[string]any)["semantic_tags"].([]any)
					if len(tags) == 1 && tags[0] == "heater" {
						return report([]any{approval}, tc.blocked, []any{}, false), false, nil
					}
					return report([]any{}, []any{}, []any{map[string]any{"outcome": "unroutable", "reason": "no_producer", "detail": "no"}}, false), false, nil
				},
			}}
			findings, _ := Live(context.Background(), s, tools)
			if len(findings) != tc.errors || tc.errors > 0 && findings[0].Rule != "live-cando-contract" {
				t.Errorf("findings %v, want %d live-cando-contract", findings, tc.errors)
			}
		})
	}
}
