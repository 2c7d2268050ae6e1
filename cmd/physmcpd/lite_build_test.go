//go:build !lite

package main

import (
	"bytes"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client/transport"
	"go.bug.st/serial"
)

// The Lite build (-tags lite) links nothing of what Lite does not serve,
// refuses the Full build's profile and flags by name, and serves the lite
// profile on stdio and a serial line to an mcp-go client.
func TestLiteBuild(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", "lite", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	fullOnly := []string{"net/http", "crypto/tls", "github.com/mark3labs/mcp-go", "github.com/golang-jwt/jwt", "go.etcd.io/bbolt",
		"github.com/santhosh-tekuri/jsonschema", "github.com/physmcp/physmcpd/auth", "github.com/physmcp/physmcpd/audit",
		"github.com/physmcp/physmcpd/state", "github.com/physmcp/physmcpd/lint", "github.com/physmcp/physmcpd/metrics", "github.com/prometheus"}
	for _, pkg := range strings.Fields(string(out)) {
		// mcpserver is the mcp-go adapter; its mcpcore and litemcp are Lite's own.
		linked := pkg == "github.com/physmcp/physmcpd/mcpserver"
		for _, p := range fullOnly {
			linked = linked || pkg == p || strings.HasPrefix(pkg, p+"/")
		}
		if linked {
			t.Errorf("the lite build links %s", pkg)
		}
	}
	bin := filepath.Join(t.TempDir(), "physmcpd-lite")
	if out, err := exec.Command("go", "build", "-tags", "lite", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags lite: %v\n%s", err, out)
	}

	t.Run("refuses full", func(t *testing.T) {
		for _, args := range [][]string{
			{"--profile", "full"}, {"--http", "127.0.0.1:8765"}, {"--state-dir", t.TempDir()}, {"--allow-remote"}, {"--tls-cert", "c.pem"}, {"--metrics-public"},
		} {
			var stderr bytes.Buffer
			cmd := exec.Command(bin, append([]string{"serve", "--manifest", serveExampleManifest, "--simulate"}, args...)...)
			cmd.Stderr = &stderr
			err := cmd.Run()
			if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 2 || !strings.Contains(stderr.String(), "lite build") ||
				!strings.Contains(stderr.String(), "full build") {
				t.Errorf("%v: %v\n%s", args, err, stderr.String())
			}
		}
	})

	t.Run("stdio", func(t *testing.T) {
		cmd := exec.Command(bin, "serve", "--manifest", serveExampleManifest, "--policy", serveExamplePolicy, "--simulate", "--log-level", "warn")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		checkLite(t, dialMCP(t, transport.NewIO(stdout, stdin, io.NopCloser(strings.NewReader("")))))
	})

	t.Run("serial", func(t *testing.T) {
		server, proxy := socatPtyPair(t)
		cmd := exec.Command(bin, "serve", "--manifest", serveExampleManifest, "--policy", serveExamplePolicy, "--simulate", "--serial", server, "--baud", "9600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		port, err := serial.Open(proxy, &serial.Mode{BaudRate: 9600})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { port.Close() })
		checkLite(t, dialMCP(t, transport.NewIO(port, portCloser{port}, io.NopCloser(strings.NewReader("")))))
	})
}
