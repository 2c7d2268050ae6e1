package sdnotify

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func listen(t *testing.T) (string, *net.UnixConn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return path, conn
}

func env(vars map[string]string) Env { return func(k string) string { return vars[k] } }

func receive(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 256)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestSendReachesTheSocket(t *testing.T) {
	path, conn := listen(t)
	n := New(env(map[string]string{"NOTIFY_SOCKET": path}))
	if !n.Enabled() {
		t.Fatal("not enabled with NOTIFY_SOCKET set")
	}
	if err := n.Send("READY=1"); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, conn); got != "READY=1" {
		t.Fatalf("got %q", got)
	}
}

func TestAbstractSocket(t *testing.T) {
	name := "@physmcpd-sdnotify-test-" + strconv.Itoa(os.Getpid())
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := New(env(map[string]string{"NOTIFY_SOCKET": name})).Send("STOPPING=1"); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, conn); got != "STOPPING=1" {
		t.Fatalf("got %q", got)
	}
}

func TestWithoutSystemdNothingIsSent(t *testing.T) {
	n := New(env(nil))
	if n.Enabled() {
		t.Fatal("enabled without NOTIFY_SOCKET")
	}
	if err := n.Send("READY=1"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := n.WatchdogInterval(); ok || err != nil {
		t.Fatalf("watchdog on without systemd: ok=%v err=%v", ok, err)
	}
}

func TestWatchdogInterval(t *testing.T) {
	pid := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		name string
		vars map[string]string
		want time.Duration
		ok   bool
		bad  bool
	}{
		{"half of WATCHDOG_USEC", map[string]string{"WATCHDOG_USEC": "30000000"}, 15 * time.Second, true, false},
		{"for this pid", map[string]string{"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": pid}, time.Second, true, false},
		{"for another pid", map[string]string{"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "1"}, 0, false, false},
		{"off", map[string]string{}, 0, false, false},
		{"malformed", map[string]string{"WATCHDOG_USEC": "soon"}, 0, false, true},
		{"zero", map[string]string{"WATCHDOG_USEC": "0"}, 0, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.vars["NOTIFY_SOCKET"] = "/run/systemd/notify"
			got, ok, err := New(env(tc.vars)).WatchdogInterval()
			if (err != nil) != tc.bad || ok != tc.ok || got != tc.want {
				t.Fatalf("got %v ok=%v err=%v; want %v ok=%v bad=%v", got, ok, err, tc.want, tc.ok, tc.bad)
			}
		})
	}
}
