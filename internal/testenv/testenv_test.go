package testenv

import (
	"testing"
)

// recorder is a testing.TB that records instead of stopping the test.
type recorder struct {
	testing.TB
	failed, skipped string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Fatalf(format string, args ...any) { r.failed = format }
func (r *recorder) Skipf(format string, args ...any)  { r.skipped = format }

func TestMissing(t *testing.T) {
	for ci, want := range map[string]string{"true": "fail", "": "skip", "1": "skip", "false": "skip"} {
		t.Setenv("CI", ci)
		r := &recorder{TB: t}
		Missing(r, "node is missing: %s", "npm ci")
		got := "skip"
		if r.failed != "" {
			got = "fail"
		}
		if got != want || (r.failed == "") == (r.skipped == "") {
			t.Errorf("CI=%q: %s (failed %q, skipped %q), want %s", ci, got, r.failed, r.skipped, want)
		}
	}
}
