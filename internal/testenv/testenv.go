// Package testenv decides what a test does when something it needs (node,
// qemu, a kernel image, socat) is not installed: skip on a developer's
// machine, fail under CI=true, where .ci/run and .ci/setup.d install all of
// it, so a missing install step cannot pass as a green run that ran nothing.
package testenv

import (
	"os"
	"testing"
)

// Missing skips t, or fails it when CI=true, saying what is missing and how
// to install it.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and "+format, args...)
	} else {
		t.Skipf(format, args...)
	}
}
