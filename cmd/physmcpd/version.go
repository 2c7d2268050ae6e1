package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

func init() {
	register("version", "print the version, the git revision and the target this binary was built for", runVersion)
	info, _ := debug.ReadBuildInfo()
	buildVersion, buildRevision = resolveVersion(buildVersion, buildRevision, info)
}

// buildVersion and buildRevision are stamped at link time by build.sh
// (-ldflags "-X main.buildVersion=... -X main.buildRevision=..."); init fills
// in what a plain go build or go install knows instead, so serverInfo and
// `physmcpd version` agree.
var (
	buildVersion  = "dev"
	buildRevision = ""
)

// resolveVersion prefers the stamped values, then the build info: the module
// version (a tag for go install pkg@v1.2.3, a pseudo-version carrying the
// commit for a go build in a checkout since Go 1.24) and vcs.revision with
// "+dirty" when the work tree had changes (vcs.modified).
func resolveVersion(version, revision string, info *debug.BuildInfo) (string, string) {
	if info == nil {
		return version, revision
	}
	if version == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		version = info.Main.Version
	}
	if revision == "" {
		var modified bool
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if revision != "" && modified {
			revision += "+dirty"
		}
	}
	return version, revision
}

// runVersion prints "physmcpd VERSION (GOOS/GOARCH[ GOARM=N], goX.Y.Z[, git REVISION])".
func runVersion(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "usage: physmcpd version")
		return 2
	}
	fmt.Fprintln(stdout, versionLine())
	return 0
}

func versionLine() string {
	git := ""
	if buildRevision != "" {
		git = ", git " + buildRevision
	}
	return fmt.Sprintf("physmcpd %s (%s, %s%s)", buildVersion, target(), runtime.Version(), git)
}

// target is GOOS/GOARCH plus the arm level (GOARM=6 and 7 builds differ).
func target() string {
	t := runtime.GOOS + "/" + runtime.GOARCH
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "GO"+goarchUpper() && s.Value != "" {
				t += " " + s.Key + "=" + s.Value
			}
		}
	}
	return t
}

// goarchUpper is the name of the build setting for this GOARCH's level
// (GOARM, GOARM64, GOAMD64, ...).
func goarchUpper() string {
	b := []byte(runtime.GOARCH)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}
