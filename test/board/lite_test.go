package board

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The Lite build on the board: it opens the console UART itself (--serial:
// the real i.MX UART driver's termios) and serves the board's read_* and
// can_do to the host over it, from the real drivers; the do_ capabilities are
// not served (nor bound).
func TestBoardLite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	b := bootWith(t, ctx, "lite", "--serial", "/dev/ttymxc1", "--baud", "115200")

	if got, want := b.toolNames(t, ctx), "can_do read_board_temperature read_button_pressed read_expansion_temperature read_line_pressure read_missing_sensor_temperature read_overtemp_limit read_return_pressure read_tank_level"; got != want {
		t.Fatalf("tools %s, want %s", got, want)
	}
	if err := b.qmp.do("qom-set", map[string]any{"path": "/machine/peripheral/temp0", "property": "temperature", "value": 37000}); err != nil {
		t.Fatal(err)
	}
	if r := b.eventually(t, ctx, "read_board_temperature", 5*time.Second, func(r map[string]any) bool { return r["value"] == 37.0 }); r["value"] != 37.0 || r["quality"] != "good" {
		t.Errorf("after setting 37 °C over QMP: %v", r)
	}
	rep := b.call(t, ctx, "can_do", map[string]any{"intent": map[string]any{"semantic_tags": []any{"led"}, "action": "set", "value": true}})
	candidates, _ := rep["candidates"].([]any)
	for _, c := range candidates {
		if name := c.(map[string]any)["capability"].(string); strings.HasPrefix(name, "do_") {
			t.Errorf("can_do offers %s on Lite", name)
		}
	}
}
