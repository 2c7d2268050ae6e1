package manifest

import (
	"strings"
	"testing"
	"time"
)

const safeStateBase = `physmcp_version: "0.1"
device: {id: rig_01, type: rig}
buses: {plc: {type: modbus-tcp, address: "127.0.0.1:1502", simulated: true}}
capabilities:
  - name: flow
    kind: do
    description: Flow setpoint.
    binding: {bus: plc, unit: 1, table: holding, address: 0, data_type: uint16}
    data_type: int
    unit: "l/min"
    range: {min: 0, max: 100}
    side_effects: ["changes the flow"]
    semantic_tags: [flow]
`

func TestSafeState(t *testing.T) {
	m, diags := Parse("m.yml", []byte(safeStateBase+"    safe_value: 0\nsafe_state: {dead_man_timeout_ms: 30000}\n"))
	if m == nil || diags.HasErrors() {
		t.Fatalf("valid safe_state rejected:\n%s", diags)
	}
	if got := m.SafeState.DeadManTimeout(); got != 30*time.Second {
		t.Fatalf("DeadManTimeout = %s", got)
	}
	if (*SafeState)(nil).DeadManTimeout() != 0 {
		t.Fatal("no safe_state must mean no dead man")
	}
	for text, want := range map[string]string{
		safeStateBase + "    safe_value: 0\nsafe_state: {dead_man_timeout_ms: 0}\n": "m.yml:15:35: safe_state.dead_man_timeout_ms: must be a positive number",
		safeStateBase + "safe_state: {dead_man_timeout_ms: 1000}\n":                 "m.yml:14:13: safe_state: no do capability declares a safe_value",
		safeStateBase + "    safe_value: 0\nsafe_state: {}\n":                       "dead_man_timeout_ms",
	} {
		m, diags := Parse("m.yml", []byte(text))
		if m != nil || !strings.Contains(diags.String(), want) {
			t.Errorf("want an error containing %q, got:\n%s", want, diags)
		}
	}
}
