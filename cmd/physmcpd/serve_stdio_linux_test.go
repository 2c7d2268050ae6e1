//go:build !lite

package main

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"golang.org/x/sys/unix"
)

// TestStdioPipeIsReadOnThePoller serves over blocking pipes, as an MCP
// client hands them to physmcpd: stdin is read non-blocking (on Go's
// poller) while serving, and is blocking again once the session ends.
func TestStdioPipeIsReadOnThePoller(t *testing.T) {
	pipe := func() (r, w *os.File) {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		// os.NewFile leaves blocking descriptors off the poller, as os.Stdin
		r, w = os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1")
		t.Cleanup(func() { r.Close(); w.Close() })
		return r, w
	}
	nonblocking := func(f *os.File) bool {
		flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
		if err != nil {
			t.Fatal(err)
		}
		return flags&unix.O_NONBLOCK != 0
	}
	serverIn, clientOut := pipe()
	clientIn, serverOut := pipe()
	logs := &serveLogBuffer{}
	cfg, code := parseServe([]string{"--manifest", serveExampleManifest, "--policy", serveExamplePolicy, "--simulate"}, logs)
	if code >= 0 {
		t.Fatalf("parse: exit %d: %s", code, logs.String())
	}
	done := make(chan int, 1)
	go func() { done <- serve(context.Background(), cfg, serverIn, serverOut, logs) }()
	c := dialMCP(t, transport.NewIO(clientIn, clientOut, io.NopCloser(strings.NewReader(""))))
	res, err := callTool(t, c, "read_air_temperature", nil)
	if err != nil || res.IsError {
		t.Fatalf("read: %v %+v", err, res)
	}
	if text := res.Content[0].(mcp.TextContent).Text; !strings.Contains(text, `"quality":"good"`) {
		t.Errorf("read: %s", text)
	}
	if !nonblocking(serverIn) {
		t.Error("stdin is read blocking, off the poller")
	}
	clientOut.Close() // the client closes physmcpd's stdin: the session ends
	if code := <-done; code != 0 {
		t.Fatalf("serve: exit %d; logs:\n%s", code, logs.String())
	}
	serverOut.Close() // as the process exiting would: the client's reader ends
	if nonblocking(serverIn) {
		t.Error("stdin is still O_NONBLOCK after serving")
	}
}
