package manifest

import (
	"strings"
	"testing"
)

// The kernel sets a bias on input lines only, so validate refuses one on an
// output at its FILE:LINE:COL instead of serve failing at the line request.
func TestGPIOBias(t *testing.T) {
	runEdits(t, []edit{
		{name: "pull-down on an output", base: greenhouse, old: "      line: GPIO17\n", new: "      line: GPIO17\n      bias: pull-down\n", at: "pull-down",
			msg: "bias pull-down only applies to input lines: the kernel cannot set a bias on an output"},
		{name: "disable on an output", base: greenhouse, old: "      line: GPIO17\n", new: "      line: GPIO17\n      bias: disable\n", at: "disable",
			msg: "bias disable only applies to input lines"},
	})
	for _, ok := range []struct{ old, new string }{
		{"bias: pull-up", "bias: disable"}, // inputs take every bias
		{"      line: GPIO17\n", "      line: GPIO17\n      bias: as-is\n"},
	} {
		text := strings.Replace(readFile(t, greenhouse), ok.old, ok.new, 1)
		if m, diags := Parse("m.yml", []byte(text)); m == nil || len(diags) != 0 {
			t.Errorf("%s: want it valid, got:\n%s", ok.new, diags)
		}
	}
}
