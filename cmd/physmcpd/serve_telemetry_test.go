//go:build !lite

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/internal/mosquitto"
	"github.com/physmcp/physmcpd/promcp"
)

// serve publishes the example's readings to the manifest's broker, one
// retained topic per read capability.
func TestServeTelemetry(t *testing.T) {
	broker := mosquitto.Start(t)
	example, err := os.ReadFile(serveExampleManifest)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "physmcp.manifest.yml")
	text := string(example) + "\ntelemetry:\n  mqtt: {broker: \"mqtt://" + broker.Addr + "\", topic_prefix: site/greenhouse}\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	serveInBackground(t, []string{"--manifest", path, "--policy", serveExamplePolicy, "--simulate", "--http", "127.0.0.1:0"})

	sub := mosquitto.Subscribe(t, broker.Addr, "serve-telemetry-test", "site/greenhouse/#")
	want := []string{"air_temperature", "door_closed", "heater_setpoint", "heater_flow_temperature", "heater_energy"}
	sub.WaitFor("every read capability's retained reading", func(msgs []mosquitto.Message) bool {
		seen := map[string]bool{}
		for _, m := range msgs {
			var r promcp.ReadResponse
			if json.Unmarshal([]byte(m.Payload), &r) != nil || r.DeviceID != "greenhouse_controller_01" || r.Timestamp == "" {
				t.Fatalf("%s: %s", m.Topic, m.Payload)
			}
			seen[strings.TrimPrefix(m.Topic, "site/greenhouse/")] = true
		}
		for _, name := range want {
			if !seen[name] {
				return false
			}
		}
		return len(seen) == len(want)
	})
}
