//go:build !lite

package profiles

import (
	"strings"
	"testing"
)

func TestResolveOrder(t *testing.T) {
	for _, tc := range []struct{ flag, manifest, want string }{
		{"", "", "full"},
		{"", "lite", "lite"},
		{"full", "lite", "full"},
		{"lite", "", "lite"},
	} {
		p, err := Resolve(tc.flag, device(tc.manifest))
		if err != nil || p.Name != tc.want {
			t.Errorf("flag %q manifest %q: got %q, %v; want %q", tc.flag, tc.manifest, p.Name, err, tc.want)
		}
	}
	if _, err := Resolve("tiny", nil); err == nil || !strings.Contains(err.Error(), `unknown profile "tiny": want full, lite, proxy or aggregator`) {
		t.Errorf("unknown profile: %v", err)
	}
}
