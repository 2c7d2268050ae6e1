package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

func init() {
	register("version", "print the version and the target this binary was built for", runVersion)
}

// buildVersion is stamped at link time (build.sh: -ldflags "-X main.buildVersion=...").
var buildVersion = "dev"

// runVersion prints "physmcpd VERSION (GOOS/GOARCH[ vN], goX.Y.Z)".
func runVersion(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "usage: physmcpd version")
		return 2
	}
	fmt.Fprintf(stdout, "physmcpd %s (%s, %s)\n", buildVersion, target(), runtime.Version())
	return 0
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
