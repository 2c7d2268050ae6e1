//go:build !lite

package main

import (
	"bytes"
	"encoding/json"
	"io"
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

// A telemetry file serve cannot read stops it before it opens a bus.
func TestServeTelemetryFileMissing(t *testing.T) {
	example, err := os.ReadFile(serveExampleManifest)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "physmcp.manifest.yml")
	text := string(example) + "\ntelemetry:\n  mqtt: {broker: \"mqtt://greenhouse@127.0.0.1:1\", password_file: mqtt.password}\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	code := run([]string{"serve", "--manifest", path, "--policy", serveExamplePolicy, "--simulate", "--http", "127.0.0.1:0"}, io.Discard, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "telemetry.mqtt.password_file") || strings.Contains(stderr.String(), "safe state") {
		t.Errorf("exit %d: %s", code, stderr.String())
	}
}
