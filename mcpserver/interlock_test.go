//go:build !lite

package mcpserver_test

import (
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/mcpserver"
)

// A do_* description states its interlocks, so an agent knows what to check first.
func TestDescriptionStatesInterlocks(t *testing.T) {
	e := pumpSkid(t)
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
