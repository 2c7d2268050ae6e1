package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionCommandAndFlag(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var stdout bytes.Buffer
		if code := run(args, &stdout, io.Discard); code != 0 || stdout.String() != versionLine()+"\n" {
			t.Errorf("%v: exit %d: %q", args, code, stdout.String())
		}
		if !strings.HasPrefix(stdout.String(), "physmcpd "+buildVersion+" (linux/") {
			t.Errorf("%v: %q does not start with the version and the target", args, stdout.String())
		}
	}
	if code := run([]string{"version", "extra"}, io.Discard, io.Discard); code != 2 {
		t.Errorf("version extra: exit %d, want 2", code)
	}
}

func TestResolveVersion(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	checkout := &debug.BuildInfo{
		Main:     debug.Module{Version: "v0.0.0-20261203071500-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}},
	}
	cases := []struct {
		name                 string
		version, revision    string
		info                 *debug.BuildInfo
		wantVersion, wantRev string
	}{
		{"stamped by build.sh wins", "v1.2.3", "feed", checkout, "v1.2.3", "feed"},
		{"go build in a checkout", "dev", "", checkout, checkout.Main.Version, rev + "+dirty"},
		{"clean checkout", "dev", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}}, "dev", rev},
		{"go install pkg@v1.2.3", "dev", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3", ""},
		{"no build info", "dev", "", nil, "dev", ""},
	}
	for _, c := range cases {
		v, r := resolveVersion(c.version, c.revision, c.info)
		if v != c.wantVersion || r != c.wantRev {
			t.Errorf("%s: got %q, %q; want %q, %q", c.name, v, r, c.wantVersion, c.wantRev)
		}
	}
}

// A plain go build from this checkout reports the commit it was built from,
// not just "dev"; build.sh's -X stamps win over the build info.
func TestSourceBuildReportsGitRevision(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("git rev-parse HEAD: %v (CI builds from a checkout)", err)
		}
		t.Skipf("not a git checkout: %v", err)
	}
	rev := strings.TrimSpace(string(head))
	bin := filepath.Join(t.TempDir(), "physmcpd")
	// -buildvcs=true as go build's default (auto) has it in a checkout: a
	// machine's go env may turn it off.
	for _, c := range []struct {
		name, ldflags string
		want          []string
	}{
		{"go build", "", []string{", git " + rev}},
		{"stamped", "-X main.buildVersion=v9.9.9 -X main.buildRevision=stamped-rev", []string{"physmcpd v9.9.9 (", ", git stamped-rev)"}},
	} {
		build := exec.Command("go", "build", "-buildvcs=true", "-ldflags", c.ldflags, "-o", bin, ".")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, out)
		}
		out, err := exec.Command(bin, "--version").Output()
		if err != nil {
			t.Fatalf("%s: %s --version: %v", c.name, bin, err)
		}
		if strings.HasPrefix(string(out), "physmcpd dev ") {
			t.Errorf("%s: %q says dev", c.name, out)
		}
		for _, w := range c.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s: %q does not contain %q", c.name, out, w)
			}
		}
		t.Logf("%s: %s", c.name, strings.TrimSpace(string(out)))
	}
}
