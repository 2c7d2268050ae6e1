package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// BenchmarkCanDo is can_do on a device of 200 capabilities (100 zone
// setpoints, 100 zone temperatures, all read once so the cache is warm): an
// intent naming one zone's setpoint, and a broad one that every setpoint
// matches, both listing the default 8 candidates; one-zone-all lists all 100
// (max_candidates), which the dry runs of every match do not cost, but the
// entries built do.
func BenchmarkCanDo(b *testing.B) {
	var text strings.Builder
	text.WriteString("physmcp_version: \"0.1\"\ndevice: {id: zones, type: test_rig, location: {zone: lab}}\nbuses:\n  mb: {type: modbus-tcp, address: 127.0.0.1:1502, simulated: true}\ncapabilities:\n")
	for i := range 100 {
		fmt.Fprintf(&text, `  - {name: setpoint_%03d, kind: do, description: Zone %d setpoint., data_type: float, unit: "°C", range: {min: 0, max: 100},
     binding: {bus: mb, unit: 1, table: holding, address: %d, data_type: uint16, scale: 0.1},
     semantic_tags: [heating, setpoint, zone_%03d], side_effects: ["zone %d heats"]}
  - {name: temperature_%03d, kind: read, description: Zone %d air temperature., data_type: float, unit: "°C", range: {min: -40, max: 125},
     binding: {bus: mb, unit: 1, table: input, address: %d, data_type: int16, scale: 0.1}, cache_ttl_ms: 3600000,
     semantic_tags: [temperature, air, zone_%03d]}
`, i, i, i, i, i, i, i, i, i)
	}
	m, diags := manifest.Parse("zones.yml", []byte(text.String()))
	if m == nil || diags.HasErrors() {
		b.Fatal(diags)
	}
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{}), true)
	if err != nil {
		b.Fatal(err)
	}
	e, err := engine.New(m, nil, buses, engine.Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	for _, t := range e.Tools() {
		if t.Kind == engine.ToolRead {
			_, _ = e.Read(context.Background(), operator, t.Name)
		}
	}
	oneZone := promcp.Intent{SemanticTags: []string{"zone_042", "setpoint"}, Action: "set", Target: "setpoint_042", Value: 21.5, Location: "lab"}
	for _, in := range []struct {
		name   string
		intent promcp.Intent
		max    int
	}{
		{"one-zone", oneZone, 0},
		{"one-zone-all", oneZone, 100},
		{"broad", promcp.Intent{SemanticTags: []string{"heating"}, Action: "set", Value: 21.5}, 0},
	} {
		b.Run(in.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := e.CanDo(context.Background(), operator, promcp.CanDoRequest{Intent: in.intent, MaxCandidates: in.max}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
