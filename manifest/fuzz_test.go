package manifest

import (
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary bytes to the manifest parser: it must return
// findings, never panic, and never return a manifest together with an error.
func FuzzParse(f *testing.F) {
	for _, path := range []string{greenhouse, pumpSkid} {
		f.Add([]byte(readFile(f, path)))
	}
	for _, e := range manifestEdits {
		text := readFile(f, e.base)
		if e.old != "" && strings.Count(text, e.old) == 1 {
			f.Add([]byte(strings.Replace(text, e.old, e.new, 1)))
		}
	}
	f.Add([]byte("buses: {b: {type: modbus-tcp, address: \"h:1\"}}\ncapabilities: [{binding: {bus: b, address: \"unit=1:reg=40001:dtype=string:length=2\"}}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, diags := Parse("f.yml", data)
		if m != nil && diags.HasErrors() {
			t.Fatalf("a manifest was returned with errors:\n%s", diags)
		}
		if m == nil && !diags.HasErrors() {
			t.Fatal("no manifest and no error")
		}
		if m != nil {
			for _, c := range m.Capabilities {
				b := c.Binding
				if n := btoi(b.I2C != nil) + btoi(b.GPIO != nil) + btoi(b.Modbus != nil); n != 1 || b.Type == "" {
					t.Fatalf("%s: binding has %d typed parts, type %q", c.ToolName(), n, b.Type)
				}
			}
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
