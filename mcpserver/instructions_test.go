//go:build !lite

package mcpserver_test

import (
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/mcpserver/mcpcore"
)

// The read_* and do_* output schemas repeat in every tool without
// describing their fields; the instructions must say what each quality and
// status means instead.
func TestInstructionsDefineQualityAndStatus(t *testing.T) {
	m, _ := loadExample(t)
	in := mcpcore.Instructions(m)
	for _, v := range []string{"good", "stale", "degraded", "error", "success", "partial", "failed"} {
		if !strings.Contains(in, v+" = ") {
			t.Errorf("instructions do not say what %s means: %s", v, in)
		}
	}
	for _, field := range []string{"timestamp", "detail", "compensation_hint", "device_id"} {
		if !strings.Contains(in, field) {
			t.Errorf("instructions do not mention %s", field)
		}
	}
}
