package manifest

import (
	"strings"
	"testing"
)

// The pump skid's first interlock, as the example writes it.
const pumpInterlock = `      - capability: tank_level
        op: ">"
        value: 10
        when: true
`

func interlockEdit(name, new, at, msg string, warning bool) edit {
	return edit{name: name, base: pumpSkid, old: pumpInterlock, new: new, at: at, msg: msg, warning: warning}
}

// Each interlock error, with the line and column it must be reported at.
var interlockEdits = []edit{
	interlockEdit("unknown source", strings.Replace(pumpInterlock, "tank_level", "tank_lvl", 1), "tank_lvl", `no read capability named "tank_lvl" (did you mean "tank_level"?)`, false),
	interlockEdit("do capability as source", strings.Replace(pumpInterlock, "tank_level", "do_pump_speed", 1), "do_pump_speed", "do_pump_speed is a do capability", false),
	interlockEdit("value outside the source range", strings.Replace(pumpInterlock, "value: 10", "value: 200", 1), "200", "outside read_tank_level's range", true),
	interlockEdit("unknown op", strings.Replace(pumpInterlock, `op: ">"`, `op: "=>"`, 1), `"=>"`, "must be one of < <= > >= == !=", false),
	interlockEdit("string value for a number", strings.Replace(pumpInterlock, "value: 10", "value: high", 1), "high", "read_tank_level is a number, so value must be a number", false),
	interlockEdit("when of the wrong type", strings.Replace(pumpInterlock, "when: true", "when: 1", 1), "1\n", "must be true or false, got 1 (when is a value of do_pump_run)", false),
	interlockEdit("missing value", strings.Replace(pumpInterlock, "        value: 10\n", "", 1), "capability: tank_level", `missing required key "value"`, false),
	interlockEdit("empty reason", strings.Replace(pumpInterlock, "when: true\n", "when: true\n        reason: \"\"\n", 1), `""`, "must not be empty", false),
	{name: "ordering op on an enum", base: pumpSkid, old: `op: "!="`, new: `op: "<"`, at: `"<"`, msg: "read_pump_mode is enum: only == and != compare it"},
	{name: "enum value not listed", base: pumpSkid, old: "value: fault", new: "value: broken", at: "broken", msg: "must be one of enum_values (off, manual, auto, fault), got broken (a value of read_pump_mode)"},
	{name: "interlock on a read capability", base: pumpSkid, old: "    simulation:\n      follows: pump_run\n",
		new: "    simulation:\n      follows: pump_run\n    interlocks: [{capability: tank_level, op: \">\", value: 10}]\n", at: "[{capability", msg: "only applies to do capabilities"},
}

func TestInterlockFindings(t *testing.T) { runEdits(t, interlockEdits) }

func TestInterlockResolves(t *testing.T) {
	// A tool name resolves like a capability name.
	text := strings.Replace(readFile(t, pumpSkid), "capability: tank_level", "capability: read_tank_level", 1)
	m, diags := Parse("m.yml", []byte(text))
	if m == nil {
		t.Fatal(diags)
	}
	ils := m.Tool("do_pump_run").Interlocks
	if len(ils) != 2 {
		t.Fatalf("want 2 interlocks, got %d", len(ils))
	}
	if ils[0].Source != m.Tool("read_tank_level") || ils[1].Source != m.Tool("read_pump_mode") {
		t.Errorf("sources: %v, %v", ils[0].Source, ils[1].Source)
	}
	if ils[0].Op != ">" || !SameValue(ils[0].Value, 10.0) || ils[0].Reason == "" {
		t.Errorf("interlock: %+v", ils[0])
	}
	// when: true guards switching on; switching off is never interlocked.
	if !ils[0].Applies(true) || ils[0].Applies(false) {
		t.Errorf("when: true must apply to true only")
	}
	if (&Interlock{}).Applies(false) != true {
		t.Errorf("an interlock without when applies to every value")
	}
}

func TestSameValue(t *testing.T) {
	for _, tc := range []struct {
		a, b any
		want bool
	}{
		{10, 10.0, true}, {int64(3), 3, true}, {true, true, true}, {true, 1, false},
		{"auto", "auto", true}, {"1", 1, false}, {2.5, 2.4, false},
	} {
		if got := SameValue(tc.a, tc.b); got != tc.want {
			t.Errorf("SameValue(%#v, %#v) = %v", tc.a, tc.b, got)
		}
	}
}
