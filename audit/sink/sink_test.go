package sink

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/audit"
	"github.com/physmcp/physmcpd/internal/mosquitto"
	"github.com/physmcp/physmcpd/manifest"
)

// trail is a keyed audit trail in a test's temporary state directory that
// can be closed and reopened, as a daemon restart does.
type trail struct {
	t    *testing.T
	dir  string
	key  *audit.Key
	log  *audit.Log
	ship *audit.Shipper
	n    int
}

func newTrail(t *testing.T) *trail {
	dir := t.TempDir()
	key, _, err := audit.LoadOrCreateKey(filepath.Join(dir, "audit.key"))
	if err != nil {
		t.Fatal(err)
	}
	tr := &trail{t: t, dir: filepath.Join(dir, "audit"), key: key}
	t.Cleanup(tr.stop)
	return tr
}

// start opens the trail and ships it to rs, from the persisted position.
func (tr *trail) start(rs *manifest.RemoteSink) {
	tr.t.Helper()
	l, err := audit.Open(tr.dir, 30, nil, audit.WithKey(tr.key))
	if err != nil {
		tr.t.Fatal(err)
	}
	s, name, err := New(rs)
	if err != nil {
		tr.t.Fatal(err)
	}
	sh, err := audit.Ship(l, s, audit.ShipOptions{Sink: name, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, MaxBatch: 3})
	if err != nil {
		tr.t.Fatal(err)
	}
	tr.log, tr.ship = l, sh
}

func (tr *trail) stop() {
	if tr.ship != nil {
		if err := tr.ship.Close(); err != nil {
			tr.t.Error(err)
		}
		tr.ship = nil
	}
	if tr.log != nil {
		tr.log.Close()
		tr.log = nil
	}
}

func (tr *trail) append(n int) {
	tr.t.Helper()
	for range n {
		tr.n++
		if err := tr.log.Append(map[string]any{"tool": "do_vent_fan", "n": tr.n}); err != nil {
			tr.t.Fatal(err)
		}
	}
}

// lines is every line of the trail, oldest first.
func (tr *trail) lines() []string {
	tr.t.Helper()
	files, _ := filepath.Glob(filepath.Join(tr.dir, "audit-*.jsonl"))
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tr.t.Fatal(err)
		}
		for l := range bytes.Lines(b) {
			out = append(out, string(bytes.TrimSuffix(l, []byte("\n"))))
		}
	}
	return out
}

// received collects what a sink got; a line may come more than once (at
// least once), so it keeps the order of first arrival.
type received struct {
	mu    sync.Mutex
	seen  map[string]bool
	order []string
	dups  int
}

func (r *received) add(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	if r.seen[line] {
		r.dups++
		return
	}
	r.seen[line] = true
	r.order = append(r.order, line)
}

func (r *received) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.order)
}

// waitAll waits until the sink has every line of the trail and checks they
// came in the trail's order, byte for byte.
func (r *received) waitAll(t *testing.T, tr *trail) {
	t.Helper()
	want := tr.lines()
	deadline := time.Now().Add(20 * time.Second)
	for r.count() < len(want) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.order) != len(want) {
		t.Fatalf("the sink has %d of the trail's %d lines:\n%s", len(r.order), len(want), strings.Join(r.order, "\n"))
	}
	for i := range want {
		if r.order[i] != want[i] {
			t.Fatalf("line %d shipped as\n%s\nthe trail has\n%s", i+1, r.order[i], want[i])
		}
	}
}

func TestHTTPOutageAndRestart(t *testing.T) {
	var down atomic.Bool
	var refused atomic.Int32
	var got received
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			refused.Add(1)
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/jsonl" {
			t.Errorf("Content-Type %q", ct)
		}
		b, _ := io.ReadAll(r.Body)
		if !bytes.HasSuffix(b, []byte("\n")) {
			t.Errorf("body does not end in a newline: %q", b)
		}
		for l := range bytes.Lines(b) {
			got.add(string(bytes.TrimSuffix(l, []byte("\n"))))
		}
	}))
	defer srv.Close()
	rs := &manifest.RemoteSink{Type: "http", Address: srv.URL + "/audit"}
	tr := newTrail(t)

	down.Store(true)
	tr.start(rs)
	tr.append(5)
	for refused.Load() < 3 { // retried with backoff while down
		time.Sleep(5 * time.Millisecond)
	}
	if got.count() != 0 {
		t.Fatalf("%d lines arrived while the sink was down", got.count())
	}
	down.Store(false)
	got.waitAll(t, tr)

	// down again, then a restart: the lines wait in the trail
	down.Store(true)
	tr.append(4)
	tr.stop()
	tr.start(rs)
	tr.append(2)
	down.Store(false)
	got.waitAll(t, tr)
	// every batch the server took was acknowledged and the position kept
	// across the restart, so nothing came twice
	if got.dups != 0 {
		t.Errorf("%d lines came twice", got.dups)
	}
}

// rfc5424 is the header physmcpd writes: PRI 110 (log audit, info),
// version 1, timestamp, host, app, procid, msgid, no structured data, then
// the BOM and the line.
var rfc5424 = regexp.MustCompile(`^<110>1 (\S+) (\S+) physmcpd ([0-9]+) audit - \x{FEFF}(\{.*\})$`)

func TestSyslogTCP(t *testing.T) {
	var got received
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	var conns sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	serve := func(ln net.Listener) {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			conns.Go(func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					// octet counting (RFC 6587 3.4.1): "LEN SP MSG"
					n, err := r.ReadString(' ')
					if err != nil {
						return
					}
					size, err := strconv.Atoi(n[:len(n)-1])
					if err != nil {
						t.Errorf("frame length %q", n)
						return
					}
					msg := make([]byte, size)
					if _, err := io.ReadFull(r, msg); err != nil {
						t.Errorf("frame of %d bytes: %v", size, err)
						return
					}
					m := rfc5424.FindSubmatch(msg)
					if m == nil {
						t.Errorf("not the RFC 5424 message expected: %q", msg)
						return
					}
					if _, err := time.Parse(time.RFC3339Nano, string(m[1])); err != nil {
						t.Errorf("TIMESTAMP %q: %v", m[1], err)
					}
					got.add(string(m[4]))
				}
			})
		}
	}
	go serve(ln)
	tr := newTrail(t)
	tr.start(&manifest.RemoteSink{Type: "syslog", Address: "syslog+tcp://" + addr})
	tr.append(4)
	got.waitAll(t, tr)

	// the receiver goes away and comes back on the same port
	ln.Close()
	mu.Lock()
	for _, c := range open {
		c.Close()
	}
	mu.Unlock()
	conns.Wait()
	tr.append(3)
	time.Sleep(50 * time.Millisecond) // sends fail meanwhile
	if ln, err = net.Listen("tcp", addr); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go serve(ln)
	got.waitAll(t, tr)
}

func TestMQTTBrokerRestart(t *testing.T) {
	broker := mosquitto.Start(t)
	addr := broker.Addr

	var got received
	mosquitto.SubscribeFunc(t, addr, "physmcpd-audit-test-receiver", "site/greenhouse/audit", func(m mosquitto.Message) { got.add(m.Payload) })

	tr := newTrail(t)
	tr.start(&manifest.RemoteSink{Type: "mqtt", Address: "mqtt://" + addr + "/site/greenhouse/audit"})
	tr.append(5)
	got.waitAll(t, tr)

	broker.Stop()
	tr.append(5) // while the broker is down
	time.Sleep(100 * time.Millisecond)
	broker.Restart()
	tr.append(2)
	got.waitAll(t, tr)
}
