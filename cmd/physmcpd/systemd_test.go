//go:build !lite

package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
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
	// Keep-alives every 500 ms, each after a health check with a 250 ms
	// deadline, which a loaded machine still meets.
	t.Setenv("WATCHDOG_USEC", "1000000")
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

// keepAliveRig runs keepAlive on a tick channel the test drives and records
// what it sends and logs.
type keepAliveRig struct {
	tick   chan time.Time
	sent   chan string
	done   chan struct{}
	logs   *strings.Builder
	cancel context.CancelFunc
}

func startKeepAlive(t *testing.T, health func(context.Context) error) *keepAliveRig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &keepAliveRig{tick: make(chan time.Time), sent: make(chan string, 10), done: make(chan struct{}), logs: &strings.Builder{}, cancel: cancel}
	logger := slog.New(slog.NewTextHandler(r.logs, nil))
	send := func(state string) error { r.sent <- state; return nil }
	go func() { keepAlive(ctx, r.tick, 20*time.Millisecond, health, send, logger); close(r.done) }()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

func (r *keepAliveRig) next(t *testing.T) string {
	t.Helper()
	r.tick <- time.Now()
	select {
	case s := <-r.sent:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("nothing sent")
		return ""
	}
}

// Keep-alives go out while the engine is healthy; the first failed check
// stops them for good, says why once (log and STATUS=), and ends the loop.
func TestKeepAliveStopsWhenUnhealthy(t *testing.T) {
	var wedged atomic.Bool
	r := startKeepAlive(t, func(context.Context) error {
		if wedged.Load() {
			return errors.New("a transaction of read_x has run for 20s, past its 5s timeout")
		}
		return nil
	})
	for range 2 {
		if s := r.next(t); s != "WATCHDOG=1" {
			t.Fatalf("healthy: sent %q", s)
		}
	}
	wedged.Store(true)
	if s := r.next(t); s != "STATUS=unhealthy: a transaction of read_x has run for 20s, past its 5s timeout" {
		t.Fatalf("unhealthy: sent %q", s)
	}
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		t.Fatal("keep-alives go on after a failed check")
	}
	if n := strings.Count(r.logs.String(), "unhealthy"); n != 1 || !strings.Contains(r.logs.String(), "read_x") {
		t.Fatalf("want the reason logged once, got:\n%s", r.logs)
	}
	if len(r.sent) != 0 {
		t.Fatalf("sent after the status: %q", <-r.sent)
	}
}

// A check that does not answer by its deadline (a deadlocked engine) fails.
func TestKeepAliveNeedsAnAnswerInTime(t *testing.T) {
	r := startKeepAlive(t, func(ctx context.Context) error {
		<-ctx.Done()
		return context.Cause(ctx)
	})
	if s := r.next(t); !strings.HasPrefix(s, "STATUS=unhealthy: ") || !strings.Contains(s, "deadline exceeded") {
		t.Fatalf("sent %q", s)
	}
}

// A check cut short by shutdown is not a failure.
func TestKeepAliveEndsQuietlyOnShutdown(t *testing.T) {
	var r *keepAliveRig
	r = startKeepAlive(t, func(ctx context.Context) error {
		r.cancel()
		<-ctx.Done()
		return ctx.Err()
	})
	r.tick <- time.Now()
	<-r.done
	if len(r.sent) != 0 || r.logs.Len() != 0 {
		t.Fatalf("shutdown during a check: sent %d, logged %q", len(r.sent), r.logs)
	}
}
