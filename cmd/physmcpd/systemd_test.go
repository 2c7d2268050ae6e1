package main

import (
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

func TestServeNotifiesSystemd(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "20000") // keep-alives every 10 ms
	serverIn, clientOut := io.Pipe()
	t.Cleanup(func() { clientOut.Close() })
	serveInProcess(t, []string{"--manifest", serveExampleManifest, "--policy", serveExamplePolicy, "--simulate", "--stdio"}, serverIn, io.Discard)
	buf := make([]byte, 64)
	for _, want := range []string{"READY=1", "WATCHDOG=1", "WATCHDOG=1"} {
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := conn.Read(buf)
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("got %q, %v; want %s", buf[:n], err, want)
		}
	}
}
