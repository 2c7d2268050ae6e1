//go:build !lite

package main

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/state"
)

func TestStateCommand(t *testing.T) {
	runState := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"state"}, args...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	for _, args := range [][]string{nil, {"fix"}, {"check", "extra"}, {"reset", "--dir", "x"}} {
		if code, _, stderr := runState(args...); code != 2 || !strings.Contains(stderr, "usage: physmcpd state check|reset") && !strings.Contains(stderr, "unexpected argument") {
			t.Errorf("%v: exit %d, %q; want a usage error", args, code, stderr)
		}
	}
	dir := t.TempDir()
	if code, stdout, _ := runState("check", "--state-dir", dir); code != 0 || !strings.Contains(stdout, "no state store in "+dir+" yet") {
		t.Fatalf("check of an empty directory: exit %d, %q", code, stdout)
	}
	if code, _, stderr := runState("reset", "--state-dir", dir); code != 1 || !strings.Contains(stderr, "nothing to reset") {
		t.Fatalf("reset of an empty directory: exit %d, %q", code, stderr)
	}
	s, err := state.Open(dir, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	code, stdout, _ := runState("check", "--state-dir", dir)
	if code != 0 || !strings.HasPrefix(stdout, "ok: "+filepath.Join(dir, "state.db")+" (store ") || !strings.Contains(stdout, "0 idempotency records") {
		t.Fatalf("check of a sound store: exit %d, %q", code, stdout)
	}
	if code, _, stderr := runState("reset", "--state-dir", dir); code != 1 || !strings.Contains(stderr, "passes every check; nothing to reset") {
		t.Fatalf("reset of a sound store: exit %d, %q", code, stderr)
	}

	os.Remove(filepath.Join(dir, "state.db"))
	code, _, stderr := runState("check", "--state-dir", dir)
	if code != 1 || !strings.Contains(stderr, "broken: "+filepath.Join(dir, "state.db")+" is missing") || !strings.Contains(stderr, "physmcpd state reset --state-dir "+dir) {
		t.Fatalf("check of a deleted store: exit %d, %q", code, stderr)
	}
	code, stdout, stderr = runState("reset", "--state-dir", dir)
	if code != 0 || !strings.Contains(stdout, "new store ") || !strings.Contains(stderr, "WARNING") || !strings.Contains(stderr, "acts again") {
		t.Fatalf("reset of a deleted store: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, _ := runState("check", "--state-dir", dir); code != 0 {
		t.Fatalf("check after reset: exit %d", code)
	}
	if code := run([]string{"state", "check", "-h"}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("-h: exit %d", code)
	}
}
