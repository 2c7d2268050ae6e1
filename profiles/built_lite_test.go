//go:build lite

package profiles

import (
	"strings"
	"testing"
)

// The Lite build serves Lite by default and refuses Full wherever it is asked
// for, saying which binary serves it.
func TestLiteBuildServesLiteOnly(t *testing.T) {
	if p, err := Resolve("", device("")); err != nil || p.Name != "lite" {
		t.Errorf("default: %q, %v; want lite", p.Name, err)
	}
	for _, tc := range []struct{ flag, manifest string }{{"full", ""}, {"", "full"}, {"full", "lite"}} {
		_, err := Resolve(tc.flag, device(tc.manifest))
		if err == nil || !strings.Contains(err.Error(), "lite build") || !strings.Contains(err.Error(), "needs the full build") {
			t.Errorf("flag %q manifest %q: %v; want the lite build's refusal", tc.flag, tc.manifest, err)
		}
	}
}
