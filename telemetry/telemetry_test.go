package telemetry

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/mosquitto"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// A setpoint register read back by a read capability with a deadband of 1
// and a minimum interval of 100 ms; writes move the reading.
const boilerManifest = `physmcp_version: "0.1"
device: {id: boiler_telemetry_01, type: boiler}
buses:
  rs485: {type: modbus-rtu, port: /dev/null, baud: 9600, parity: even, stop_bits: 1, simulated: true}
capabilities:
  - name: flow_setpoint
    kind: do
    description: Change the boiler's flow temperature setpoint.
    binding: {bus: rs485, unit: 1, table: holding, address: 0, data_type: float32, byte_order: big, word_order: big}
    data_type: float
    unit: "°C"
    range: {min: 20, max: 80}
    semantic_tags: [boiler, setpoint]
    simulation: {initial: 40}
  - name: flow_temperature
    kind: read
    description: The boiler's flow temperature setpoint as the controller holds it.
    binding: {bus: rs485, unit: 1, table: holding, address: 0, data_type: float32, byte_order: big, word_order: big}
    data_type: float
    unit: "°C"
    range: {min: 20, max: 80}
    semantic_tags: [boiler, temperature]
    cache_ttl_ms: 100
    deadband: 1
    min_update_interval_ms: 100
telemetry:
  mqtt: {broker: "mqtt://%s", topic_prefix: site/boiler}
`

const flowTopic = "site/boiler/flow_temperature"

// Readings arrive on the capability's topic as read_* answers them when they
// change; a change within the deadband is not published; while the broker
// is down writes go on, and when it is back the latest reading arrives (not
// the ones it replaced).
func TestPublishOnChangeAcrossBrokerRestart(t *testing.T) {
	broker := mosquitto.Start(t)
	sub := mosquitto.Subscribe(t, broker.Addr, "telemetry-test", "site/boiler/#")

	dir := t.TempDir()
	path := filepath.Join(dir, "physmcp.manifest.yml")
	if err := os.WriteFile(path, fmt.Appendf(nil, boilerManifest, broker.Addr), 0o644); err != nil {
		t.Fatal(err)
	}
	m, diags := manifest.Load(path)
	if diags.HasErrors() {
		t.Fatalf("manifest: %v", diags)
	}
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.Open, true)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := engine.New(m, nil, buses, engine.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	p, err := Start(e, m, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	// values are the readings published while the subscriber was there:
	// not the retained copy the broker sends when it resubscribes after the
	// restart, nor one the broker sends again because the subscriber's
	// acknowledgement was lost in the restart.
	values := func(msgs []mosquitto.Message) []float64 {
		var out []float64
		for _, msg := range msgs {
			if msg.Retained || msg.Dup {
				continue
			}
			if msg.Topic != flowTopic {
				t.Errorf("message on %s: %s", msg.Topic, msg.Payload)
				continue
			}
			var r promcp.ReadResponse
			if err := json.Unmarshal([]byte(msg.Payload), &r); err != nil || r.Quality != promcp.QualityGood || r.Unit == nil || *r.Unit != "°C" || r.Timestamp == "" {
				t.Errorf("payload %s: %v", msg.Payload, err)
				continue
			}
			v, _ := r.Value.(float64)
			out = append(out, v)
		}
		return out
	}
	has := func(want float64) func([]mosquitto.Message) bool {
		return func(msgs []mosquitto.Message) bool {
			vs := values(msgs)
			return len(vs) > 0 && vs[len(vs)-1] == want
		}
	}
	write := func(v float64) {
		t.Helper()
		resp, err := e.Do(context.Background(), engine.Caller{Identity: "test", Role: manifest.RoleAdmin}, "do_flow_setpoint", promcp.DoRequest{Value: v})
		if err != nil || resp.Status != promcp.StatusSuccess {
			t.Fatalf("do_flow_setpoint %g: %v %+v", v, err, resp)
		}
	}

	sub.WaitFor("the first reading (40)", has(40))
	write(45)
	sub.WaitFor("45", has(45))
	write(45.5) // within the deadband of 45
	time.Sleep(time.Second)
	write(50)
	got := values(sub.WaitFor("50", has(50)))
	if want := []float64{40, 45, 50}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("published %v, want %v (45.5 is within the deadband)", got, want)
	}

	broker.Stop()
	write(60)
	time.Sleep(300 * time.Millisecond) // polled and offered; publishing fails
	write(70)
	time.Sleep(300 * time.Millisecond)
	broker.Restart()
	got = values(sub.WaitFor("70 after the restart", has(70)))
	if want := []float64{40, 45, 50, 70}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("published %v, want %v (60 was replaced by 70 while the broker was down)", got, want)
	}
}
