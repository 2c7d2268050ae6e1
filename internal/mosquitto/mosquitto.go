// Package mosquitto runs Debian's mosquitto broker for tests (installed by
// .ci/setup.d/70-mosquitto.sh), on a free loopback port, and restarts it.
package mosquitto

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/internal/testenv"
)

// Broker is one mosquitto process at a time, on one address.
type Broker struct {
	// Addr is host:port.
	Addr string

	t        testing.TB
	bin      string
	conf     string
	stopping func()
}

// Start runs a broker until the test ends. It keeps sessions and retained
// messages across Stop and Start (persistence), as a real broker would.
func Start(t testing.TB) *Broker {
	t.Helper()
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/mosquitto"); serr != nil {
			testenv.Missing(t, "mosquitto is not installed: apt-get install -y mosquitto (.ci/setup.d/70-mosquitto.sh)")
		}
		bin = "/usr/sbin/mosquitto"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := t.TempDir()
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	// user keeps mosquitto from switching to its own user, which cannot
	// write here.
	b := &Broker{Addr: fmt.Sprintf("127.0.0.1:%d", port), t: t, bin: bin, conf: filepath.Join(dir, "mosquitto.conf")}
	conf := fmt.Appendf(nil, "listener %d 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location %s/\nuser %s\nlog_type all\nlog_dest stdout\n", port, dir, me.Username)
	if err := os.WriteFile(b.conf, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	b.Restart()
	return b
}

// Stop ends the broker (SIGTERM, which saves its persistent state).
func (b *Broker) Stop() { b.stopping() }

// Restart starts the broker again on its address (after Stop).
func (b *Broker) Restart() {
	t := b.t
	t.Helper()
	var log bytes.Buffer
	cmd := exec.Command(b.bin, "-c", b.conf)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	b.stopping = func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
			if t.Failed() {
				t.Logf("mosquitto:\n%s", log.String())
			}
		})
	}
	t.Cleanup(b.stopping)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", b.Addr); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("mosquitto does not listen on %s", b.Addr)
			b.stopping() // logs its output
			t.FailNow()
		}
	}
}
