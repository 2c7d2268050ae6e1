package mcpcore

import (
	"fmt"
	"strings"

	"github.com/physmcp/physmcpd/manifest"
)

// interlockFacts states a do_* tool's interlocks, so an agent knows which
// readings to check before acting: " Interlock: true only while
// read_tank_level > 10 %."
func interlockFacts(c *manifest.Capability) string {
	var b strings.Builder
	for _, il := range c.Interlocks {
		which := "acts"
		if il.When != nil {
			which = fmt.Sprintf("%v", il.When)
		}
		unit := ""
		if il.Source.Unit != "" {
			unit = " " + il.Source.Unit
		}
		fmt.Fprintf(&b, " Interlock: %s only while %s %s %v%s.", which, il.Source.ToolName(), il.Op, il.Value, unit)
	}
	return b.String()
}
