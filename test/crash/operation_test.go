package crash

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// rampManifest is the crash rig's device with a ramp on its flow setpoint:
// one write of at most 1 l/h every 40 ms.
const rampManifest = `physmcp_version: "0.1"
device: {id: crash_rig_01, type: test_rig}
buses:
  plc:
    type: modbus-tcp
    address: 127.0.0.1:1502
    simulated: true
    simulation: {write_log: %q}
capabilities:
  - name: flow_setpoint
    kind: do
    description: Flow setpoint.
    binding: {bus: plc, unit: 1, table: holding, address: 0, data_type: uint16}
    data_type: int
    range: {min: 0, max: 60000}
    safe_value: 0
    side_effects: [flow through the loop changes]
    semantic_tags: [flow, setpoint]
  - name: flow_ramp
    kind: start
    description: Ramp the flow setpoint to a target.
    drives: flow_setpoint
    ramp: {rate_per_minute: 1500, step_ms: 40}
    semantic_tags: [flow, ramp]
audit: {enabled: true, retention_days: 30}
`

func (r *rig) tool(name string, args map[string]any) map[string]any {
	r.t.Helper()
	return doResult(r.t, r.call("tools/call", map[string]any{"name": name, "arguments": args}))
}

// TestRampSurvivesSIGKILL kills the daemon with SIGKILL in the middle of a
// ramp. After the restart read_status_* answers the operation as failed with
// the documented reason (interrupted, not resumed), the start-up safe state
// has driven the setpoint to its safe value and nothing else writes it, and
// the start retried with its key answers the same operation without
// starting it again.
func TestRampSurvivesSIGKILL(t *testing.T) {
	r := newRig(t)
	must(t, os.WriteFile(r.manifest, fmt.Appendf(nil, rampManifest, r.writeLog), 0o600))
	r.start()
	started := r.tool("start_flow_ramp", map[string]any{"value": 100, "idempotency_key": "ramp-key"})
	id, _ := started["operation_id"].(string)
	if started["status"] != "running" || id == "" {
		t.Fatalf("start: %v", started)
	}
	// start-up safe state (0), then the ramp's writes 1, 2, 3, ...
	deadline := time.Now().Add(10 * time.Second)
	for len(r.writes("flow_setpoint")) < 8 {
		if time.Now().After(deadline) {
			t.Fatalf("the ramp did not write: %v", r.writes("flow_setpoint"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.kill()
	before := r.writes("flow_setpoint")
	last := before[len(before)-1]
	if last < 7 || last >= 100 {
		t.Fatalf("killed at %d (writes %v), want mid-ramp", last, before)
	}

	r.start()
	st := r.tool("read_status_flow_ramp", map[string]any{"operation_id": id})
	reason, _ := st["reason"].(string)
	if st["state"] != "failed" || !strings.Contains(reason, "interrupted") || st["value"] != 0.0 || st["quality"] != "good" {
		t.Fatalf("status after the restart: %v", st)
	}
	if w := st["writes"].(float64); w < 1 || int(w) > len(before)-1 {
		t.Fatalf("the record counts %v writes; the bus took %d", w, len(before)-1)
	}
	again := r.tool("start_flow_ramp", map[string]any{"value": 100, "idempotency_key": "ramp-key"})
	if again["operation_id"] != id {
		t.Fatalf("the retried start answered %v, want operation %s", again, id)
	}
	time.Sleep(300 * time.Millisecond)
	after := r.writes("flow_setpoint")[len(before):]
	if len(after) != 1 || after[0] != 0 {
		t.Fatalf("writes after the restart: %v, want only the start-up safe value 0", after)
	}
}
