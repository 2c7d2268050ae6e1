package policy

import (
	"strings"
	"testing"
	"time"
)

// FuzzParse feeds arbitrary bytes to the policy parser (against the pump-skid
// manifest): findings only, never a panic, and every window of an accepted
// policy answers Contains and NextChange.
func FuzzParse(f *testing.F) {
	m := loadManifest(f, pumpSkidM)
	f.Add([]byte(readFile(f, pumpSkid)))
	for _, e := range policyEdits {
		if e.base == pumpSkid {
			f.Add([]byte(strings.Replace(readFile(f, pumpSkid), e.old, e.new, 1)))
		}
	}
	now := time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, data []byte) {
		p, diags := Parse("f.yml", data, m)
		if p != nil && diags.HasErrors() {
			t.Fatalf("a policy was returned with errors:\n%s", diags)
		}
		if p == nil && !diags.HasErrors() {
			t.Fatal("no policy and no error")
		}
		if p == nil {
			return
		}
		for _, w := range p.TimeWindows {
			in := w.Contains(now)
			if next := w.NextChange(now); next.IsZero() || w.Contains(next) == in {
				t.Fatalf("window %s: NextChange(%s) = %s does not flip Contains", w.Name, now, next)
			}
		}
		for _, tp := range p.Capabilities {
			for _, r := range tp.Rules {
				if r.TimeWindow != nil {
					r.TimeWindow.Evaluate(p, now)
				}
			}
		}
	})
}
