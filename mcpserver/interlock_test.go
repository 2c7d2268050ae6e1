package mcpserver_test

import (
	"context"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/policy"
)

// A do_* description states its interlocks, so an agent knows what to check first.
func TestDescriptionStatesInterlocks(t *testing.T) {
	m, diags := manifest.Load("../examples/pump-skid/physmcp.manifest.yml")
	if m == nil {
		t.Fatal(diags)
	}
	p, diags := policy.Load("../examples/pump-skid/physmcp.policy.yml", m)
	if p == nil {
		t.Fatal(diags)
	}
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.Open, true)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(m, p, buses, engine.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	tools, err := mcpserver.GroupTools(e, "operation")
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools {
		if tool.Name != "do_pump_run" {
			continue
		}
		for _, want := range []string{"Interlock: true only while read_tank_level > 10 %.", "Interlock: true only while read_pump_mode != fault."} {
			if !strings.Contains(tool.Description, want) {
				t.Errorf("description lacks %q: %s", want, tool.Description)
			}
		}
		return
	}
	t.Fatal("no do_pump_run in the operation group")
}
