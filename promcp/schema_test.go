//go:build !lite

package promcp

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/manifest"
)

func ptr[T any](v T) *T { return &v }

var (
	setpoint = &manifest.Capability{Name: "heater_setpoint", Kind: manifest.KindDo, DataType: manifest.TypeFloat, Unit: "°C",
		Range: &manifest.Range{Min: ptr(5.0), Max: ptr(35.0)}}
	temperature = &manifest.Capability{Name: "air_temperature", Kind: manifest.KindRead, DataType: manifest.TypeFloat, Unit: "°C",
		Range: &manifest.Range{Min: ptr(-20.0), Max: ptr(60.0)}}
	fanSpeed = &manifest.Capability{Name: "fan_speed", Kind: manifest.KindDo, DataType: manifest.TypeInt, Unit: "%",
		Range: &manifest.Range{Min: ptr(0.0), Max: ptr(100.0)}}
	doorClosed = &manifest.Capability{Name: "door_closed", Kind: manifest.KindRead, DataType: manifest.TypeBool}
	mode       = &manifest.Capability{Name: "mode", Kind: manifest.KindDo, DataType: manifest.TypeEnum, EnumValues: []string{"off", "eco", "comfort"}}
	label      = &manifest.Capability{Name: "label", Kind: manifest.KindDo, DataType: manifest.TypeString}
)

const ts = "2026-01-02T03:04:05.678Z"

type schemaCase struct {
	name   string
	schema Schema
	accept []string
	reject map[string]string // document → part of the expected error
}

func (c schemaCase) run(t *testing.T) {
	t.Helper()
	if _, err := CompileSchema(c.schema); err != nil {
		t.Fatalf("%s: schema does not compile: %v", c.name, err)
	}
	if _, err := json.Marshal(c.schema); err != nil {
		t.Fatalf("%s: schema does not marshal: %v", c.name, err)
	}
	for _, doc := range c.accept {
		if err := Validate(c.schema, json.RawMessage(doc)); err != nil {
			t.Errorf("%s: %s rejected: %v", c.name, doc, err)
		}
	}
	for doc, want := range c.reject {
		err := Validate(c.schema, json.RawMessage(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %s: got %v, want an error containing %q", c.name, doc, err, want)
		}
	}
}

func TestReadOutputSchema(t *testing.T) {
	cases := []schemaCase{{
		name:   "float with unit and range",
		schema: ReadOutputSchema(temperature),
		accept: []string{
			`{"value":21.5,"unit":"°C","timestamp":"` + ts + `","quality":"good","device_id":"d1"}`,
			// Out of range is a legitimate (degraded) read, not a schema violation.
			`{"value":99,"unit":"°C","timestamp":"` + ts + `","quality":"degraded","detail":"implausible"}`,
			`{"value":null,"unit":"°C","timestamp":"` + ts + `","quality":"error","detail":"timeout"}`,
		},
		reject: map[string]string{
			`{"value":"21","unit":"°C","timestamp":"` + ts + `","quality":"good"}`: "at '/value': got string, want null or number",
			`{"value":21,"unit":"K","timestamp":"` + ts + `","quality":"good"}`:    "at '/unit': value must be '°C'",
			`{"value":21,"unit":"°C","timestamp":"now","quality":"good"}`:          "at '/timestamp'",
			`{"value":21,"unit":"°C","timestamp":"` + ts + `","quality":"fine"}`:   "at '/quality': value must be one of",
			`{"value":21,"unit":"°C","quality":"good"}`:                            "missing property 'timestamp'",
			`{"unit":"°C","timestamp":"` + ts + `","quality":"good"}`:              "missing property 'value'",
		},
	}, {
		name:   "bool without unit",
		schema: ReadOutputSchema(doorClosed),
		accept: []string{`{"value":true,"unit":null,"timestamp":"` + ts + `","quality":"good"}`},
		reject: map[string]string{
			`{"value":1,"unit":null,"timestamp":"` + ts + `","quality":"good"}`:  "at '/value': got number, want null or boolean",
			`{"value":true,"unit":"","timestamp":"` + ts + `","quality":"good"}`: "at '/unit': got string, want null",
			`{"value":true,"timestamp":"` + ts + `","quality":"good"}`:           "missing property 'unit'",
		},
	}, {
		name:   "enum",
		schema: ReadOutputSchema(mode),
		accept: []string{
			`{"value":"eco","unit":null,"timestamp":"` + ts + `","quality":"good"}`,
			`{"value":null,"unit":null,"timestamp":"` + ts + `","quality":"degraded"}`,
		},
		reject: map[string]string{`{"value":"turbo","unit":null,"timestamp":"` + ts + `","quality":"good"}`: "at '/value': value must be one of 'off', 'eco', 'comfort'"},
	}}
	for _, c := range cases {
		c.run(t)
	}
	desc := ReadOutputSchema(temperature)["properties"].(Schema)["value"].(Schema)["description"].(string)
	if !strings.Contains(desc, "-20 to 60 °C") {
		t.Errorf("value description %q does not state the range", desc)
	}
}

func TestDoInputSchema(t *testing.T) {
	cases := []schemaCase{{
		name:   "float bounded by the manifest range",
		schema: DoInputSchema(setpoint),
		accept: []string{`{"value":21}`, `{"value":5,"idempotency_key":"k1"}`, `{"value":35.0}`},
		reject: map[string]string{
			`{"value":35.5}`:                    "at '/value': maximum: got 35.5, want 35",
			`{"value":4}`:                       "at '/value': minimum: got 4, want 5",
			`{"value":"21"}`:                    "at '/value': got string, want number",
			`{"idempotency_key":"k"}`:           "missing property 'value'",
			`{"value":21,"idempotency_key":""}`: "at '/idempotency_key': minLength: got 0, want 1",
			`{"value":21,"idempotency_key":3}`:  "at '/idempotency_key': got number, want string",
			`{"value":21,"key":"k"}`:            "additional properties 'key' not allowed",
			`{"value":21,"idempotency_key":"` + strings.Repeat("k", 129) + `"}`: "maxLength: got 129, want 128",
		},
	}, {
		name:   "int",
		schema: DoInputSchema(fanSpeed),
		accept: []string{`{"value":40}`, `{"value":40.0}`},
		reject: map[string]string{`{"value":40.5}`: "got number, want integer", `{"value":101}`: "maximum: got 101, want 100"},
	}, {
		name:   "enum",
		schema: DoInputSchema(mode),
		accept: []string{`{"value":"eco"}`},
		reject: map[string]string{`{"value":"turbo"}`: "value must be one of", `{"value":1}`: "got number, want string"},
	}, {
		name:   "string",
		schema: DoInputSchema(label),
		accept: []string{`{"value":"hall"}`},
		reject: map[string]string{`{"value":true}`: "got boolean, want string"},
	}}
	for _, c := range cases {
		c.run(t)
	}
	key := DoInputSchema(setpoint)["properties"].(Schema)["idempotency_key"].(Schema)["description"].(string)
	if !strings.Contains(key, "Reuse the same key to retry safely") || !strings.Contains(key, "Generated") {
		t.Errorf("idempotency_key description %q does not explain retries and generation", key)
	}
}

func TestDoOutputSchema(t *testing.T) {
	success, err := json.Marshal(DoResponse{
		Status: StatusSuccess, IdempotencyKey: "k1", AppliedValue: 21.0, PreviousValue: 18.0,
		SideEffects: []string{"heating_power_changes"}, Compensable: true, CompensationHint: ptr("do_heater_setpoint value=18"),
		Timestamp: ts, Compensation: &Compensation{Tool: "do_heater_setpoint", Arguments: map[string]any{"value": 18.0}}, DeviceID: "d1",
	})
	if err != nil {
		t.Fatal(err)
	}
	failed, err := json.Marshal(DoResponse{
		Status: StatusFailed, IdempotencyKey: "k2", SideEffects: []string{}, Timestamp: ts,
		Permission: OutOfRange, Reason: "40 is above the maximum 35 °C",
	})
	if err != nil {
		t.Fatal(err)
	}
	schemaCase{
		name:   "do output",
		schema: DoOutputSchema(setpoint),
		accept: []string{string(success), string(failed)},
		reject: map[string]string{
			strings.Replace(string(success), `"success"`, `"done"`, 1):                        "at '/status': value must be one of",
			strings.Replace(string(success), `"compensable":true,`, ``, 1):                    "missing property 'compensable'",
			strings.Replace(string(failed), `"out_of_range"`, `"too_high"`, 1):                "at '/permission': value must be one of",
			strings.Replace(string(success), `"applied_value":21`, `"applied_value":"21"`, 1): "at '/applied_value': got string",
			strings.Replace(string(failed), `"side_effects":[]`, `"side_effects":null`, 1):    "at '/side_effects': got null, want array",
		},
	}.run(t)
}

// The nine proMCP values, then PhysMCP's prefixed extensions (never a bare new word).
func TestPermissionEnumIsTheNinePlusPrefixedExtensions(t *testing.T) {
	want := []any{"allowed", "requires_human_approval", "policy_denied", "rate_limited", "cooldown_active",
		"out_of_range", "permission_insufficient", "source_unreachable", "partition_no_quorum",
		"physmcp:device_rejected", "physmcp:superseded", "physmcp:not_served"}
	got := DoOutputSchema(setpoint)["properties"].(Schema)["permission"].(Schema)["enum"]
	if !reflect.DeepEqual(got, want) {
		t.Errorf("do permission enum = %v", got)
	}
	candidate := CanDoOutputSchema()["properties"].(Schema)["candidates"].(Schema)["items"].(Schema)
	if got := candidate["properties"].(Schema)["permission"].(Schema)["enum"]; !reflect.DeepEqual(got, want) {
		t.Errorf("candidate permission enum = %v", got)
	}
}

func TestCanDoInputSchema(t *testing.T) {
	schemaCase{
		name:   "can_do input",
		schema: CanDoInputSchema(),
		accept: []string{
			`{"intent":{"semantic_tags":["heating","setpoint"],"action":"set","target":"heater_setpoint","value":21}}`,
			`{"query":{"semantic_tags":["heating"],"direction":"increase"},"scope":["do_heater_setpoint"]}`,
			`{"intent":{"semantic_tags":["door"],"action":"read","location":"hall"}}`,
			`{"intent":{"semantic_tags":["heating"]},"max_candidates":3}`,
			// Exactly one of intent and query is ParseCanDo's to enforce:
			// model APIs reject the top-level anyOf that would say it here.
			`{}`,
		},
		reject: map[string]string{
			`{"intent":{"semantic_tags":[]}}`:                         "at '/intent/semantic_tags': minItems: got 0, want 1",
			`{"intent":{"action":"set"}}`:                             "missing property 'semantic_tags'",
			`{"intent":{"semantic_tags":["a"],"action":"explode"}}`:   "at '/intent/action': value must be one of",
			`{"intent":{"semantic_tags":["a"],"value":{"x":1}}}`:      "at '/intent/value': got object",
			`{"intent":{"semantic_tags":["a"]},"extra":1}`:            "additional properties 'extra' not allowed",
			`{"intent":{"semantic_tags":["a"],"colour":"red"}}`:       "additional properties 'colour' not allowed",
			`{"intent":{"semantic_tags":["a"]},"max_candidates":0}`:   "at '/max_candidates': minimum: got 0, want 1",
			`{"intent":{"semantic_tags":["a"]},"max_candidates":2.5}`: "at '/max_candidates': got number, want integer",
		},
	}.run(t)
}

// The input says in words what the schema cannot: exactly one of intent and query.
func TestCanDoInputSchemaDocumentsExactlyOne(t *testing.T) {
	s := CanDoInputSchema()
	if _, ok := s["anyOf"]; ok {
		t.Error("can_do input has a top-level anyOf")
	}
	if d, _ := s["description"].(string); !strings.Contains(d, "exactly one of intent and its PhysMCP alias query") {
		t.Errorf("description %q does not say exactly one of intent and query is required", d)
	}
	if req, ok := s["required"]; ok {
		t.Errorf("required = %v: both intent and query are optional properties", req)
	}
}

func TestCanDoOutputSchema(t *testing.T) {
	report := CapabilityReport{
		QueryID: NewUUID(), Feasible: true,
		Candidates: []Candidate{{
			Capability: "do_heater_setpoint", Source: "heater_hall_01", Confidence: 0.92, Permission: Allowed,
			CurrentState: CurrentState{Value: 18.0, Unit: ptr("°C"), Timestamp: ts},
			Constraints:  Constraints{Min: ptr(10.0), Max: ptr(30.0), Unit: ptr("°C"), CooldownMs: 10000, RateLimit: "6/minute"},
			SideEffects:  []string{"heating_power_changes"}, ValidUntil: ts, EstimatedLatencyMs: 12,
			MatchReasons: []string{"tags heating, setpoint"},
		}},
		Blocked: []Blocked{{Capability: "do_vent_fan", Source: "heater_hall_01", Permission: CooldownActive,
			Reason: "cooldown", ClearsAt: ts, Confidence: 0.4}},
		Unroutable: []Unroutable{},
		Context:    ReportContext{RelatedReads: []string{"read_heater_setpoint"}, CurrentObservations: map[string]any{"read_heater_setpoint": 18.0}},
		Metadata:   ReportMetadata{Timestamp: ts, TotalLatencyMs: 2, DeviceID: "heater_hall_01", PromcpBase: BaseVersion},
	}
	good, err := json.Marshal(report)
	if err != nil {
		t.Fatal(err)
	}
	capped := report
	_, _, capped.Metadata.Omitted = Cap(1, []Ranked{{0.9, Allowed, false}, {0.5, RequiresHumanApproval, false}}, []Ranked{{0.4, CooldownActive, false}})
	cappedJSON, err := json.Marshal(capped)
	if err != nil {
		t.Fatal(err)
	}
	malformed, err := json.Marshal(MalformedRequestReport("intent is required", "d1", time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	schemaCase{
		name:   "capability report",
		schema: CanDoOutputSchema(),
		accept: []string{string(good), string(malformed), string(cappedJSON)},
		reject: map[string]string{
			strings.Replace(string(cappedJSON), `"count":1`, `"count":-1`, 1):                   "at '/metadata/omitted/candidates/count': minimum: got -1, want 0",
			strings.Replace(string(good), `"valid_until":"`+ts+`",`, ``, 1):                     "at '/candidates/0': missing property 'valid_until'",
			strings.Replace(string(good), `"confidence":0.92`, `"confidence":1.2`, 1):           "at '/candidates/0/confidence': maximum: got 1.2, want 1",
			strings.Replace(string(good), `"permission":"allowed"`, `"permission":"x_ok"`, 1):   "at '/candidates/0/permission': value must be one of",
			strings.Replace(string(malformed), `"malformed_request"`, `"confused"`, 1):          "at '/unroutable/0/reason': value must be one of",
			strings.Replace(string(malformed), `"outcome":"unroutable"`, `"outcome":"lost"`, 1): "at '/unroutable/0/outcome': value must be 'unroutable'",
			strings.Replace(string(good), `"query_id":"`, `"query_id":"q`, 1):                   "at '/query_id'",
		},
	}.run(t)
}

func TestParseCanDo(t *testing.T) {
	parse := func(doc string) (CanDoRequest, error) {
		var args map[string]any
		if err := json.Unmarshal([]byte(doc), &args); err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		return ParseCanDo(args)
	}
	req, err := parse(`{"intent":{"semantic_tags":["heating","setpoint"],"action":"set","target":"heater_setpoint","value":21,"location":"hall"},"scope":["do_heater_setpoint"]}`)
	if err != nil {
		t.Fatal(err)
	}
	want := CanDoRequest{
		Intent: Intent{SemanticTags: []string{"heating", "setpoint"}, Action: "set", Target: "heater_setpoint", Value: 21.0, Location: "hall"},
		Scope:  []string{"do_heater_setpoint"},
	}
	if !reflect.DeepEqual(req, want) {
		t.Errorf("got %+v, want %+v", req, want)
	}

	req, err = parse(`{"query":{"semantic_tags":["fan"],"direction":"increase"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if req.Intent.Action != "increase" || !reflect.DeepEqual(req.Intent.SemanticTags, []string{"fan"}) {
		t.Errorf("aliases not applied: %+v", req)
	}
	if _, err := parse(`{"intent":{"semantic_tags":["fan"],"action":"set","direction":"set"}}`); err != nil {
		t.Errorf("agreeing action and direction rejected: %v", err)
	}

	bad := map[string]string{
		`{}`: "intent (or its alias query) is required",
		`{"intent":{"semantic_tags":["a"]},"query":{"semantic_tags":["a"]}}`: "not both",
		`{"intent":"heat"}`:                                                      "intent must be an object, not a string",
		`{"query":{"semantic_tags":[]}}`:                                         "query.semantic_tags must list at least one tag",
		`{"intent":{}}`:                                                          "intent.semantic_tags must list at least one tag",
		`{"intent":{"semantic_tags":"a"}}`:                                       "intent.semantic_tags must be an array of strings, not a string",
		`{"intent":{"semantic_tags":["a",1]}}`:                                   "intent.semantic_tags[1] must be a non-empty string, not a number",
		`{"intent":{"semantic_tags":[""]}}`:                                      "intent.semantic_tags[0] must be a non-empty string, not an empty string",
		`{"intent":{"semantic_tags":["a"],"action":"explode"}}`:                  `intent.action "explode" is not one of read, create`,
		`{"intent":{"semantic_tags":["a"],"action":"set","direction":"delete"}}`: "disagree",
		`{"intent":{"semantic_tags":["a"],"action":3}}`:                          "intent.action must be a string, not a number",
		`{"intent":{"semantic_tags":["a"],"target":["x"]}}`:                      "intent.target must be a string, not an array",
		`{"intent":{"semantic_tags":["a"],"value":{"x":1}}}`:                     "intent.value must be a number, string or boolean, not an object",
		`{"intent":{"semantic_tags":["a"],"value":null}}`:                        "intent.value must be a number, string or boolean, not null",
		`{"intent":{"semantic_tags":["a"],"colour":"red"}}`:                      "unknown field intent.colour",
		`{"intent":{"semantic_tags":["a"]},"scope":"x"}`:                         "scope must be an array of strings",
		`{"intent":{"semantic_tags":["a"]},"limit":3}`:                           "unknown field limit",
		`{"intent":{"semantic_tags":["a"]},"max_candidates":0}`:                  "max_candidates must be a whole number of at least 1, not 0",
		`{"intent":{"semantic_tags":["a"]},"max_candidates":2.5}`:                "max_candidates must be a whole number of at least 1, not 2.5",
		`{"intent":{"semantic_tags":["a"]},"max_candidates":"3"}`:                "max_candidates must be a whole number of at least 1, not a string",
	}
	for doc, want := range bad {
		if _, err := parse(doc); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error containing %q", doc, err, want)
		}
	}
	for doc, want := range map[string]int{
		`{"intent":{"semantic_tags":["a"]}}`:                       0,
		`{"intent":{"semantic_tags":["a"]},"max_candidates":3}`:    3,
		`{"intent":{"semantic_tags":["a"]},"max_candidates":1e40}`: maxCandidatesAsked,
	} {
		if req, err := parse(doc); err != nil || req.MaxCandidates != want {
			t.Errorf("%s: max_candidates %d (%v), want %d", doc, req.MaxCandidates, err, want)
		}
	}
	if _, err := ParseCanDo(nil); err == nil {
		t.Error("nil arguments accepted")
	}
}

func TestNewUUID(t *testing.T) {
	a, b := NewUUID(), NewUUID()
	if a == b {
		t.Fatal("two query ids are equal")
	}
	if err := Validate(Schema{"type": "string", "format": "uuid"}, a); err != nil {
		t.Fatal(err)
	}
	if a[14] != '4' || !strings.ContainsRune("89ab", rune(a[19])) {
		t.Errorf("%s is not a version 4, variant 1 UUID", a)
	}
}
