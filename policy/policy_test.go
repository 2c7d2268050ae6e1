package policy

import (
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/physmcp/physmcpd/internal/strictyaml"
	"github.com/physmcp/physmcpd/manifest"
)

const (
	greenhouse     = "../examples/physmcp.policy.yml"
	greenhouseM    = "../examples/physmcp.manifest.yml"
	pumpSkid       = "../examples/pump-skid/physmcp.policy.yml"
	pumpSkidM      = "../examples/pump-skid/physmcp.manifest.yml"
	viewerToken    = "viewer-example-token-do-not-use"
	operatorToken  = "operator-example-token-do-not-use"
	berlinTimezone = "Europe/Berlin"
)

func loadManifest(t testing.TB, path string) *manifest.Manifest {
	t.Helper()
	m, diags := manifest.Load(path)
	if m == nil {
		t.Fatal(diags)
	}
	return m
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestExamplesAreValid(t *testing.T) {
	for _, pair := range [][2]string{{greenhouse, greenhouseM}, {pumpSkid, pumpSkidM}} {
		p, diags := Load(pair[0], loadManifest(t, pair[1]))
		if p == nil {
			t.Fatalf("%s: %s", pair[0], diags)
		}
		if len(diags) != 0 {
			t.Errorf("%s: want no findings, got:\n%s", pair[0], diags)
		}
	}
}

func TestGreenhousePolicy(t *testing.T) {
	p, diags := Load(greenhouse, loadManifest(t, greenhouseM))
	if p == nil {
		t.Fatal(diags)
	}
	if p.LocalRole() != manifest.RoleOperator || p.DefaultRole() != manifest.RoleNone {
		t.Errorf("roles: local %s default %s", p.LocalRole(), p.DefaultRole())
	}
	rules := p.Rules("do_heater_setpoint")
	if len(rules) != 2 || rules[0].RangeGuard == nil || *rules[0].RangeGuard.Min != 10 || rules[0].RangeGuard.OnViolation != ViolationDeny {
		t.Fatalf("do_heater_setpoint rules: %+v", rules)
	}
	if r := rules[1].Rate; r == nil || r.Max.Count != 30 || r.Max.Per != time.Hour {
		t.Errorf("rate rule: %+v", rules[1])
	}
	if tp := p.Capabilities["do_vent_fan"]; tp == nil || tp.Tool != "do_vent_fan" || tp.Rules[0].Permission == nil {
		t.Errorf("do_vent_fan: %+v", tp)
	}
	tokens := p.Identity.Providers[0].Tokens
	if tokens[0].SHA256 != HashToken(viewerToken) || tokens[1].SHA256 != HashToken(operatorToken) {
		t.Errorf("the example's hashes do not match the example tokens in its comment")
	}
	if p.Rules("read_air_temperature") != nil {
		t.Errorf("a tool without rules has rules")
	}
}

func TestPumpSkidPolicy(t *testing.T) {
	p, diags := Load(pumpSkid, loadManifest(t, pumpSkidM))
	if p == nil {
		t.Fatal(diags)
	}
	// "pump_run" names one tool only, so the key is re-keyed to the tool name.
	if tp := p.Capabilities["do_pump_run"]; tp == nil || tp.Tool != "do_pump_run" || len(tp.Rules) != 2 || tp.Rules[1].Approval.TimeoutS != 300 {
		t.Fatalf("do_pump_run: %+v", tp)
	}
	if _, ok := p.Capabilities["pump_run"]; ok {
		t.Error("the capability-name key was kept")
	}
	night := p.TimeWindows["night_shift"]
	if night.Name != "night_shift" || night.StartMin != 22*60 || night.EndMin != 6*60 || night.Location.String() != berlinTimezone || night.DaySet != [7]bool{true, true, true, true, true, true, true} {
		t.Errorf("night_shift: %+v", night)
	}
	sunday := p.TimeWindows["sunday_maintenance"]
	if sunday.DaySet != [7]bool{true, false, false, false, false, false, false} {
		t.Errorf("sunday_maintenance days: %v", sunday.DaySet)
	}
}

func TestNilSafeHelpers(t *testing.T) {
	var p *Policy
	if p.Rules("do_x") != nil || p.DefaultRole() != manifest.RoleNone || p.LocalRole() != manifest.RoleNone {
		t.Error("a nil policy must have no rules and role none")
	}
	var w *TimeWindow
	if w.Contains(time.Now()) || !w.NextChange(time.Now()).IsZero() {
		t.Error("a nil window contains nothing and never changes")
	}
}

func TestHashToken(t *testing.T) {
	// sha256("abc") from FIPS 180-2.
	if got := HashToken("abc"); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("HashToken(abc) = %s", got)
	}
}

type edit struct {
	name     string
	base     string
	old, new string
	at       string
	msg      string
	warning  bool
}

func markerPos(t *testing.T, text string, start int, at string) strictyaml.Pos {
	t.Helper()
	pre, post, hasCaret := strings.Cut(at, "^")
	if !hasCaret {
		pre, post = "", at
	}
	marker := pre + post
	off := -1
	if i := strings.Index(text[start:], marker); i >= 0 {
		off = start + i + len(pre)
	} else if strings.Count(text, marker) == 1 {
		off = strings.Index(text, marker) + len(pre)
	} else {
		t.Fatalf("marker %q not found once", marker)
	}
	line := strings.Count(text[:off], "\n") + 1
	col := utf8.RuneCountInString(text[strings.LastIndex(text[:off], "\n")+1:off]) + 1
	return strictyaml.Pos{File: "p.yml", Line: line, Col: col}
}

var policyEdits = []edit{
	{name: "unknown top-level key", base: greenhouse, old: "defaults:", new: "default:", at: "default:", msg: `did you mean "defaults"?`},
	{name: "unsupported version", base: greenhouse, old: `physmcp_policy_version: "0.1"`, new: `physmcp_policy_version: "1"`, at: `"1"`, msg: "unsupported version"},
	{name: "unknown tool", base: greenhouse, old: "  do_vent_fan:", new: "  do_vent_fans:", at: "do_vent_fans:\n    rules", msg: `no tool or capability "do_vent_fans" (did you mean "do_vent_fan"?)`},
	{name: "ambiguous capability name", base: greenhouse, old: "  do_heater_setpoint:\n    rules:", new: "  heater_setpoint:\n    rules:", at: "heater_setpoint:\n    rules:", msg: "names both read_heater_setpoint and do_heater_setpoint"},
	{name: "tool given twice", base: pumpSkid, old: "  do_pump_speed:", new: "  do_pump_run:\n    rules: [{type: human_approval}]\n  do_pump_speed:", at: "do_pump_run:\n    rules: [", msg: `do_pump_run already has rules under "pump_run"`},
	{name: "missing rules", base: greenhouse, old: "  do_vent_fan:\n    rules:\n      - type: permission\n        require: [operator, supervisor, admin]\n", new: "  do_vent_fan: {}\n", at: "{}", msg: `missing required key "rules"`},
	{name: "unknown rule type", base: greenhouse, old: "type: rate", new: "type: rates", at: "rates", msg: `unknown rule type "rates" (did you mean "rate"?)`},
	{name: "cooldown rule", base: greenhouse, old: "type: rate", new: "type: cooldown", at: "cooldown", msg: "cooldowns are set in the manifest"},
	{name: "key of another rule type", base: greenhouse, old: "        max: 30/hour\n", new: "        max: 30/hour\n        require: [admin]\n", at: "require", msg: `unknown key "require"`},
	{name: "bad rate grammar", base: greenhouse, old: "max: 30/hour", new: "max: 30/fortnight", at: "30/fortnight", msg: "not of the form N/second"},
	{name: "rate on a read tool", base: greenhouse, old: "capabilities:\n", new: "capabilities:\n  read_air_temperature:\n    rules:\n      - type: rate\n        max: 1/second\n", at: "rate\n        max: 1/second", msg: "only applies to do_ tools"},
	{name: "range guard on a read tool", base: greenhouse, old: "capabilities:\n", new: "capabilities:\n  read_air_temperature:\n    rules:\n      - type: range_guard\n        max: 30\n        on_violation: warn\n", at: "range_guard\n        max: 30", msg: "only applies to do_ tools"},
	{name: "range guard wider than the manifest", base: greenhouse, old: "        max: 30\n", new: "        max: 40\n", at: "40", msg: "max 40 is wider than the manifest range 5..35"},
	{name: "range guard min below the manifest", base: greenhouse, old: "        min: 10\n", new: "        min: 1\n", at: "1\n", msg: "min 1 is wider than the manifest range"},
	{name: "range guard min above max", base: greenhouse, old: "        min: 10\n", new: "        min: 31\n", at: "31", msg: "min 31 is greater than max 30"},
	{name: "range guard without bounds", base: greenhouse, old: "        min: 10\n        max: 30\n", new: "", at: "type: range_guard", msg: "needs min, max or both"},
	{name: "range guard bad violation", base: greenhouse, old: "on_violation: deny", new: "on_violation: ignore", at: "ignore", msg: "must be clamp, deny or warn"},
	{name: "range guard missing violation", base: greenhouse, old: "        on_violation: deny\n", new: "", at: "type: range_guard", msg: `missing required key "on_violation"`},
	{name: "range guard on bool", base: greenhouse, old: "      - type: permission\n", new: "      - type: range_guard\n        max: 1\n        on_violation: deny\n      - type: permission\n", at: "type: range_guard\n        max: 1", msg: "only applies to numeric tools"},
	{name: "two range guards", base: greenhouse, old: "      - type: rate\n", new: "      - type: range_guard\n        min: 11\n        on_violation: warn\n      - type: rate\n", at: "range_guard\n        min: 11", msg: "already has a range_guard rule"},
	{name: "unknown window", base: pumpSkid, old: "deny_during: [night_shift, sunday_maintenance]", new: "deny_during: [night_shfit, sunday_maintenance]", at: "[night_shfit", msg: `no time window named "night_shfit" (did you mean "night_shift"?)`},
	{name: "no windows defined", base: greenhouse, old: "      - type: rate\n", new: "      - type: time_window\n        allow_during: [daytime]\n      - type: rate\n", at: "[daytime]", msg: "defines no time_windows"},
	{name: "empty time window rule", base: pumpSkid, old: "        deny_during: [night_shift, sunday_maintenance]\n", new: "", at: "type: time_window", msg: "needs allow_during, deny_during or both"},
	{name: "window in allow and deny", base: pumpSkid, old: "        deny_during: [night_shift, sunday_maintenance]\n", new: "        deny_during: [night_shift, sunday_maintenance]\n        allow_during: [night_shift]\n", at: "[night_shift, sunday", msg: "in both allow_during and deny_during"},
	{name: "bad timezone", base: pumpSkid, old: "    end: \"06:00\"\n    timezone: Europe/Berlin", new: "    end: \"06:00\"\n    timezone: Europe/Bonn", at: "Europe/Bonn", msg: `unknown time zone "Europe/Bonn"`},
	{name: "start equals end", base: pumpSkid, old: `end: "06:00"`, new: `end: "22:00"`, at: `"22:00"`, msg: "start and end are both 22:00"},
	{name: "bad clock", base: pumpSkid, old: `start: "22:00"`, new: `start: "24:00"`, at: `"24:00"`, msg: "HH:MM"},
	{name: "clock as sexagesimal", base: pumpSkid, old: `start: "22:00"`, new: `start: 10pm`, at: `10pm`, msg: "HH:MM"},
	{name: "bad day", base: pumpSkid, old: "days: [sun]", new: "days: [sunday]", at: "[sunday]", msg: `unknown day "sunday"`},
	{name: "day twice", base: pumpSkid, old: "days: [sun]", new: "days: [sun, sun]", at: "[sun, sun]", msg: "sun is listed twice"},
	{name: "bad window name", base: pumpSkid, old: "  night_shift:\n    start", new: "  Night:\n    start: \"01:00\"\n    end: \"02:00\"\n    timezone: UTC\n  night_shift:\n    start", at: "Night", msg: `window name "Night"`},
	{name: "bad role in permission", base: greenhouse, old: "[operator, supervisor, admin]", new: "[operator, root]", at: "[operator, root]", msg: `unknown role "root"`},
	{name: "empty permission", base: greenhouse, old: "[operator, supervisor, admin]", new: "[]", at: "[]", msg: "needs at least one role"},
	{name: "bad default role", base: greenhouse, old: "require_permission: none", new: "require_permission: everyone", at: "everyone", msg: `unknown role "everyone"`},
	{name: "bad local role", base: greenhouse, old: "local_role: operator", new: "local_role: god", at: "god", msg: `unknown role "god"`},
	{name: "token not hashed", base: greenhouse, old: "sha256: 09b7d775219c57da609a44cf8ec010e2f53a959837d06de600205091823fe68d", new: "sha256: viewer-example-token-do-not-use", at: "viewer-example-token-do-not-use\n", msg: "64 lowercase hex digits"},
	{name: "token hash twice", base: greenhouse, old: "sha256: 7b020792499cb6968089acbdd92886d4f2a5a53f3fceec8ce095c61bca288c0b", new: "sha256: 09b7d775219c57da609a44cf8ec010e2f53a959837d06de600205091823fe68d", at: "09b7d775219c57da609a44cf8ec010e2f53a959837d06de600205091823fe68d\n          role: operator", msg: "listed twice"},
	{name: "token name twice", base: greenhouse, old: "name: operator", new: "name: viewer", at: "viewer\n          sha256: 7b02", msg: `token name "viewer" is used twice`},
	{name: "bad provider type", base: greenhouse, old: "    - type: static\n", new: "    - type: ldap\n", at: "ldap", msg: "must be static, jwt or mtls"},
	{name: "mtls without clients", base: greenhouse, old: "    - type: static\n", new: "    - type: mtls\n      ca_cert_path: ca.pem\n    - type: static\n", at: "type: mtls", msg: "an mtls provider needs clients"},
	{name: "mtls bad subject", base: greenhouse, old: "    - type: static\n", new: "    - type: mtls\n      ca_cert_path: ca.pem\n      subject: serial\n      clients: [{name: a, role: operator}]\n    - type: static\n", at: "serial", msg: "must be cn, dns, email or uri"},
	{name: "mtls client twice", base: greenhouse, old: "    - type: static\n", new: "    - type: mtls\n      ca_cert_path: ca.pem\n      clients: [{name: a, role: operator}, {name: a, role: admin}]\n    - type: static\n", at: "a, role: admin", msg: `client "a" is listed twice`},
	{name: "mtls client role", base: greenhouse, old: "    - type: static\n", new: "    - type: mtls\n      ca_cert_path: ca.pem\n      clients: [{name: a, role: root}]\n    - type: static\n", at: "root", msg: `unknown role "root"`},
	{name: "mtls without ca", base: greenhouse, old: "    - type: static\n", new: "    - type: mtls\n      clients: [{name: a, role: operator}]\n    - type: static\n", at: "type: mtls", msg: "needs ca_cert_path"},
	{name: "key of another provider", base: greenhouse, old: "    - type: static\n", new: "    - type: static\n      issuer: https://id.example\n", at: "https://id.example", msg: "issuer belongs to a jwt provider"},
	{name: "jwt without audience", base: greenhouse, old: "  providers:\n", new: "  providers:\n    - type: jwt\n      issuer: https://id.example\n", at: "type: jwt", msg: "needs audience"},
	{name: "emergency ttl", base: pumpSkid, old: "override_token_ttl_seconds: 900", new: "override_token_ttl_seconds: 0", at: "0\n", msg: "at least 1"},
	{name: "emergency role", base: pumpSkid, old: "override_permission: admin", new: "override_permission: boss", at: "boss", msg: `unknown role "boss"`},
	{name: "quorum min peers", base: greenhouse, old: "      - type: rate\n", new: "      - type: quorum\n        min_peers: 0\n      - type: rate\n", at: "0\n", msg: "at least 1"},
	{name: "quorum on failure", base: greenhouse, old: "      - type: rate\n", new: "      - type: quorum\n        min_peers: 2\n        on_failure: shrug\n      - type: rate\n", at: "shrug", msg: "deny or allow_local"},
	{name: "approval timeout", base: pumpSkid, old: "timeout_s: 300", new: "timeout_s: 0", at: "0\n", msg: "at least 1 second"},
	{name: "range guard between two steps", base: pumpSkid, old: "        min: 20\n        max: 90\n", new: "        min: 20.01\n        max: 20.09\n", at: "type: range_guard", msg: "do_pump_speed holds no value in 20.01..20.09 (uint16 × 0.1 holds 0..6553.5 in steps of 0.1), so the guard lets nothing through"},
	{name: "quorum check on an unknown capability", base: greenhouse, old: "\ncapabilities:\n", new: "\nquorum_checks:\n  area_clear:\n    conditions: [{capability: door_closd, op: \"==\", value: true}]\ncapabilities:\n", at: "door_closd", msg: `no read capability named "door_closd" (did you mean "door_closed"?)`},
	{name: "quorum check on a do capability", base: greenhouse, old: "\ncapabilities:\n", new: "\nquorum_checks:\n  area_clear:\n    conditions: [{capability: vent_fan, op: \"==\", value: false}]\ncapabilities:\n", at: "vent_fan, op", msg: "do_vent_fan is a do capability"},
	{name: "quorum check value of another type", base: greenhouse, old: "\ncapabilities:\n", new: "\nquorum_checks:\n  area_clear:\n    conditions: [{capability: air_temperature, op: \"<\", value: warm}]\ncapabilities:\n", at: "warm", msg: "read_air_temperature is a number, so value must be a number"},
	{name: "quorum check condition with when", base: greenhouse, old: "\ncapabilities:\n", new: "\nquorum_checks:\n  area_clear:\n    conditions: [{capability: door_closed, op: \"==\", value: true, when: true}]\ncapabilities:\n", at: "when", msg: `unknown key "when"`},
	{name: "quorum check unknown key", base: greenhouse, old: "\ncapabilities:\n", new: "\nquorum_checks:\n  area_clear:\n    condition: [{capability: door_closed, op: \"==\", value: true}]\ncapabilities:\n", at: "condition:", msg: `unknown key "condition"`},
	{name: "quorum check that checks nothing", base: greenhouse, old: "\ncapabilities:\n", new: "\nquorum_checks:\n  area_clear: {}\ncapabilities:\n", at: "{}", msg: "needs conditions, allow_during or deny_during"},
	{name: "quorum check window", base: greenhouse, old: "\ncapabilities:\n", new: "\nquorum_checks:\n  area_clear:\n    allow_during: [daytime]\ncapabilities:\n", at: "[daytime]", msg: "defines no time_windows"},
	{name: "quorum check name", base: greenhouse, old: "\ncapabilities:\n", new: "\nquorum_checks:\n  AreaClear:\n    conditions: [{capability: door_closed, op: \"==\", value: true}]\ncapabilities:\n", at: "AreaClear", msg: `quorum check name "AreaClear"`},
	{name: "quorum rule check without voters", base: greenhouse, old: "      - type: rate\n", new: "      - type: quorum\n        min_peers: 1\n        check: area_clear\n      - type: rate\n", at: "check: ^area_clear", msg: "with min_peers 1 no peer votes"},
	{name: "quorum rule check name", base: greenhouse, old: "      - type: rate\n", new: "      - type: quorum\n        min_peers: 2\n        check: Area Clear\n      - type: rate\n", at: "Area Clear", msg: `quorum check name "Area Clear"`},
	// Warnings.
	{name: "quorum check without a mesh", base: greenhouse, old: "\ncapabilities:\n", new: "\nquorum_checks:\n  area_clear:\n    conditions: [{capability: door_closed, op: \"==\", value: true}]\ncapabilities:\n", at: "area_clear:\n    conditions", msg: "network.mesh is not enabled", warning: true},
	{name: "unused window", base: pumpSkid, old: "deny_during: [night_shift, sunday_maintenance]", new: "deny_during: [night_shift]", at: "sunday_maintenance:\n", msg: "no rule uses this time window", warning: true},
	{name: "role below the manifest minimum", base: greenhouse, old: "[operator, supervisor, admin]", new: "[none, operator]", at: "[none", msg: "role none is below the manifest's requires_permission operator", warning: true},
	{name: "jwt without key_file", base: greenhouse, old: "  providers:\n", new: "  providers:\n    - type: jwt\n      issuer: https://id.example\n      audience: physmcpd\n", at: "type: jwt", msg: "needs key_file"},
	{name: "range guard max between steps", base: pumpSkid, old: "        max: 90\n", new: "        max: 89.95\n", at: "89.95", msg: "the greatest value the guard lets through is 89.9", warning: true},
	{name: "range guard min between steps", base: pumpSkid, old: "        min: 20\n", new: "        min: 19.99\n", at: "19.99", msg: "min 19.99 is not a value do_pump_speed can write (uint16 × 0.1 holds 0..6553.5 in steps of 0.1); the least value the guard lets through is 20", warning: true},
	{name: "empty rules", base: greenhouse, old: "  do_vent_fan:\n    rules:\n      - type: permission\n        require: [operator, supervisor, admin]\n", new: "  do_vent_fan:\n    rules: []\n", at: "[]", msg: "no rules", warning: true},
}

func TestPolicyFindings(t *testing.T) {
	models := map[string]*manifest.Manifest{greenhouse: loadManifest(t, greenhouseM), pumpSkid: loadManifest(t, pumpSkidM)}
	for _, e := range policyEdits {
		t.Run(e.name, func(t *testing.T) {
			text := readFile(t, e.base)
			if n := strings.Count(text, e.old); n != 1 {
				t.Fatalf("%q occurs %d times, want once", e.old, n)
			}
			start := strings.Index(text, e.old)
			text = text[:start] + e.new + text[start+len(e.old):]
			want := markerPos(t, text, start, e.at)
			p, diags := Parse("p.yml", []byte(text), models[e.base])
			if e.warning == (p == nil) {
				t.Errorf("warning %v, but policy accepted = %v:\n%s", e.warning, p != nil, diags)
			}
			sev := strictyaml.Error
			if e.warning {
				sev = strictyaml.Warning
			}
			for _, d := range diags {
				if d.Pos == want && d.Severity == sev && strings.Contains(d.Msg, e.msg) {
					return
				}
			}
			t.Errorf("want a finding at %s containing %q; got:\n%s", want, e.msg, diags)
		})
	}
}

func TestPolicyNeedsManifest(t *testing.T) {
	p, diags := Parse("p.yml", []byte(readFile(t, greenhouse)), nil)
	if p != nil || !strings.Contains(diags.String(), "without a valid manifest") {
		t.Errorf("want an error without a manifest, got %v", diags)
	}
}
