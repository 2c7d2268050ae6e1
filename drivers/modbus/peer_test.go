package modbus

// Integration tests against an independent Modbus implementation: Debian's
// python3-pymodbus server (testdata/peer.py), over TCP on 127.0.0.1 and over
// RTU through a socat pseudo-terminal pair. Without the packages the tests
// skip, except under CI (CI set), where they fail: CI must never skip them.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
)

const (
	python      = "/usr/bin/python3" // Debian's: another python3 on PATH may not see its pymodbus
	installMsg  = "apt-get install python3-pymodbus socat"
	counterUnit = 99 // the peer's request counter, see testdata/peer.py
)

// requirePeer skips (or under CI fails) when the peer's packages are missing.
func requirePeer(t testing.TB, needSocat bool) {
	t.Helper()
	var missing []string
	if err := exec.Command(python, "-c", "import pymodbus").Run(); err != nil {
		missing = append(missing, fmt.Sprintf("pymodbus for %s (%v)", python, err))
	}
	if _, err := exec.LookPath("socat"); needSocat && err != nil {
		missing = append(missing, "socat")
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("Modbus peer tests need %s: %s", strings.Join(missing, " and "), installMsg)
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " (CI is set, so this fails instead of skipping)")
	}
	t.Skip(msg)
}

// proc is a child process whose output is kept for failure reports.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	// lines receives output lines while someone waits for one.
	lines chan string
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func start(t testing.TB, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(name, args...), lines: make(chan string, 100)}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	w.Close()
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			fmt.Fprintln(p, sc.Text())
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		r.Close()
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.output())
		}
	})
	return p
}

func (p *proc) stop() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

// waitFor polls cond until it holds or the peer had 20 s to start.
func waitFor(t testing.TB, what string, cond func() error) {
	t.Helper()
	var err error
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if err = cond(); err == nil {
			return
		}
	}
	t.Fatalf("%s: %v", what, err)
}

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

func peerScript(t testing.TB) string {
	t.Helper()
	p, err := filepath.Abs("testdata/peer.py")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// tcpPeer is a pymodbus TCP server on a loopback port.
type tcpPeer struct {
	t    testing.TB
	port string
	p    *proc
}

func startTCPPeer(t testing.TB) *tcpPeer {
	requirePeer(t, false)
	tp := &tcpPeer{t: t, port: freePort(t)}
	tp.restart()
	return tp
}

func (tp *tcpPeer) addr() string { return "127.0.0.1:" + tp.port }

func (tp *tcpPeer) restart() {
	tp.p = start(tp.t, python, peerScript(tp.t), "tcp", "127.0.0.1", tp.port)
	waitFor(tp.t, "pymodbus TCP peer never accepted a connection", func() error {
		c, err := net.Dial("tcp", tp.addr())
		if err == nil {
			c.Close()
		}
		return err
	})
}

// rtuPeer is a socat pseudo-terminal pair with a pymodbus RTU server on one end.
type rtuPeer struct {
	t           testing.TB
	dir         string
	socat, peer *proc
}

func startRTUPeer(t testing.TB) *rtuPeer {
	requirePeer(t, true)
	rp := &rtuPeer{t: t, dir: t.TempDir()}
	rp.startSocat()
	rp.startServer()
	return rp
}

func (rp *rtuPeer) client() string { return filepath.Join(rp.dir, "ttyA") }

func (rp *rtuPeer) startSocat() {
	a, b := rp.client(), filepath.Join(rp.dir, "ttyB")
	rp.socat = start(rp.t, "socat", "-d", "-d", "pty,raw,echo=0,link="+a, "pty,raw,echo=0,link="+b)
	// socat creates the links asynchronously; it is ready once it says so.
	deadline := time.After(20 * time.Second)
	for {
		select {
		case line := <-rp.socat.lines:
			if strings.Contains(line, "starting data transfer loop") {
				return
			}
		case <-deadline:
			rp.t.Fatalf("socat never started its transfer loop:\n%s", rp.socat.output())
		}
	}
}

func (rp *rtuPeer) startServer() {
	rp.peer = start(rp.t, python, peerScript(rp.t), "rtu", filepath.Join(rp.dir, "ttyB"), "115200")
}

func (rp *rtuPeer) bus(t testing.TB, timeoutMs, retries, maxGap int) *Bus {
	t.Helper()
	set, err := newSettings(timeoutMs, retries, maxGap)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newRTUBus(&manifest.ModbusRTUBus{Port: rp.client(), Baud: 115200, Parity: "none", StopBits: 1}, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	// A request sent before the server has opened its end is lost.
	waitFor(t, "pymodbus RTU peer never answered", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := b.ReadRegisters(ctx, counterUnit, manifest.TableHolding, 0, 2)
		return err
	})
	return b
}

func tcpBus(t testing.TB, addr string, timeoutMs, retries, maxGap int) *Bus {
	t.Helper()
	set, err := newSettings(timeoutMs, retries, maxGap)
	if err != nil {
		t.Fatal(err)
	}
	b := newTCPBus(addr, set, 0)
	t.Cleanup(func() { b.Close() })
	return b
}

// requests is the peer's count of requests to units 1 and 17.
func requests(t testing.TB, b *Bus) int {
	t.Helper()
	r, err := b.ReadRegisters(context.Background(), counterUnit, manifest.TableHolding, 0, 2)
	if err != nil {
		t.Fatalf("reading the peer's request counter: %v", err)
	}
	return int(r[0])<<16 | int(r[1])
}

func TestTCPPeer(t *testing.T) {
	peer := startTCPPeer(t)
	b := tcpBus(t, peer.addr(), 300, 0, manifest.DefaultMaxGap)
	testAgainstPeer(t, b)

	t.Run("peer killed and restarted", func(t *testing.T) {
		ctx := context.Background()
		if _, err := b.ReadRegisters(ctx, 1, manifest.TableHolding, 0, 1); err != nil {
			t.Fatal(err)
		}
		peer.p.stop()
		_, err := b.ReadRegisters(ctx, 1, manifest.TableHolding, 0, 1)
		if !errors.Is(err, drivers.ErrUnreachable) {
			t.Fatalf("read with the peer down = %v, want unreachable", err)
		}
		t.Logf("peer down: %v", err)
		peer.restart()
		waitFor(t, "no recovery after the peer restarted", func() error {
			r, err := b.ReadRegisters(ctx, 1, manifest.TableHolding, 3, 1)
			if err == nil && r[0] != 30 {
				err = fmt.Errorf("read %v", r)
			}
			return err
		})
	})
}

func TestRTUPeer(t *testing.T) {
	peer := startRTUPeer(t)
	b := peer.bus(t, 300, 0, manifest.DefaultMaxGap)
	testAgainstPeer(t, b)

	t.Run("peer killed and restarted", func(t *testing.T) {
		ctx := context.Background()
		peer.peer.stop()
		_, err := b.ReadRegisters(ctx, 1, manifest.TableHolding, 0, 1)
		if !errors.Is(err, drivers.ErrTimeout) {
			t.Fatalf("read with the peer down = %v, want timeout", err)
		}
		peer.startServer()
		waitFor(t, "no recovery after the peer restarted", func() error {
			_, err := b.ReadRegisters(ctx, 1, manifest.TableHolding, 0, 1)
			return err
		})
	})

	t.Run("pseudo-terminal pair replaced", func(t *testing.T) {
		// Like an adapter unplugged and plugged in again: the port vanishes
		// and comes back under the same path; the bus reopens it.
		ctx := context.Background()
		peer.peer.stop()
		peer.socat.stop()
		_, err := b.ReadRegisters(ctx, 1, manifest.TableHolding, 0, 1)
		if !errors.Is(err, drivers.ErrUnreachable) && !errors.Is(err, drivers.ErrTimeout) {
			t.Fatalf("read with the port gone = %v, want unreachable or timeout", err)
		}
		t.Logf("port gone: %v", err)
		peer.startSocat()
		peer.startServer()
		waitFor(t, "no recovery after the port came back", func() error {
			_, err := b.ReadRegisters(ctx, 1, manifest.TableHolding, 0, 1)
			return err
		})
	})
}

// testAgainstPeer runs the checks common to TCP and RTU against the
// testdata/peer.py data model.
func testAgainstPeer(t *testing.T, b *Bus) {
	ctx := context.Background()
	h := manifest.TableHolding

	t.Run("read all four tables", func(t *testing.T) {
		hr, err := b.ReadRegisters(ctx, 1, h, 0, 10)
		if err != nil || fmt.Sprint(hr) != "[0 10 20 30 40 50 60 70 80 90]" {
			t.Fatalf("holding = %v, %v", hr, err)
		}
		ir, err := b.ReadRegisters(ctx, 17, manifest.TableInput, 0, 5)
		if err != nil || fmt.Sprint(ir) != "[1000 1001 1002 1003 1004]" {
			t.Fatalf("input = %v, %v", ir, err)
		}
		co, err := b.ReadBits(ctx, 1, manifest.TableCoil, 0, 10)
		if err != nil || fmt.Sprint(co) != "[true false true false true false true false true false]" {
			t.Fatalf("coils = %v, %v", co, err)
		}
		di, err := b.ReadBits(ctx, 1, manifest.TableDiscreteInput, 0, 7)
		if err != nil || fmt.Sprint(di) != "[true false false true false false true]" {
			t.Fatalf("discrete inputs = %v, %v", di, err)
		}
	})

	t.Run("writes read back", func(t *testing.T) {
		before := requests(t, b)
		if err := b.WriteRegisters(ctx, 1, 50, []uint16{12345}); err != nil { // FC6
			t.Fatal(err)
		}
		if err := b.WriteRegisters(ctx, 1, 60, []uint16{1, 2, 65535}); err != nil { // FC16
			t.Fatal(err)
		}
		if err := b.WriteCoils(ctx, 1, 1, []bool{true}); err != nil { // FC5
			t.Fatal(err)
		}
		if err := b.WriteCoils(ctx, 1, 20, []bool{false, true, true, false, true, false, false, true, true}); err != nil { // FC15
			t.Fatal(err)
		}
		if n := requests(t, b) - before; n != 4 {
			t.Fatalf("peer counted %d requests for 4 writes", n)
		}
		hr, err := b.ReadRegisters(ctx, 1, h, 50, 1)
		if err != nil || hr[0] != 12345 {
			t.Fatalf("FC6 read back %v, %v", hr, err)
		}
		hr, err = b.ReadRegisters(ctx, 1, h, 60, 3)
		if err != nil || fmt.Sprint(hr) != "[1 2 65535]" {
			t.Fatalf("FC16 read back %v, %v", hr, err)
		}
		co, err := b.ReadBits(ctx, 1, manifest.TableCoil, 1, 1)
		if err != nil || !co[0] {
			t.Fatalf("FC5 read back %v, %v", co, err)
		}
		co, err = b.ReadBits(ctx, 1, manifest.TableCoil, 20, 9)
		if err != nil || fmt.Sprint(co) != "[false true true false true false false true true]" {
			t.Fatalf("FC15 read back %v, %v", co, err)
		}
		// Restore the data model for the other tests.
		if err := b.WriteRegisters(ctx, 1, 50, []uint16{500}); err != nil {
			t.Fatal(err)
		}
		if err := b.WriteRegisters(ctx, 1, 60, []uint16{600, 610, 620}); err != nil {
			t.Fatal(err)
		}
		if err := b.WriteCoils(ctx, 1, 1, []bool{false}); err != nil {
			t.Fatal(err)
		}
		if err := b.WriteCoils(ctx, 1, 20, []bool{true, false, true, false, true, false, true, false, true}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("exception reply", func(t *testing.T) {
		_, err := b.ReadRegisters(ctx, 1, h, 5000, 2)
		var exc *drivers.ModbusException
		if !errors.As(err, &exc) || exc.Code != 2 || exc.Function != fcReadHolding {
			t.Fatalf("read past the map = %v, want exception 2 (illegal data address) to FC3", err)
		}
		want := b.Describe() + ": unit 1 FC3 read holding 5000 count 2: modbus exception 2 (illegal data address)"
		if !strings.HasPrefix(err.Error(), want) {
			t.Fatalf("error %q\nwant prefix %q", err, want)
		}
		if hr, err := b.ReadRegisters(ctx, 1, h, 0, 2); err != nil || fmt.Sprint(hr) != "[0 10]" {
			t.Fatalf("read after the exception = %v, %v", hr, err)
		}
	})

	t.Run("unknown unit times out, then the bus recovers", func(t *testing.T) {
		_, err := b.ReadRegisters(ctx, 5, h, 0, 1)
		if !errors.Is(err, drivers.ErrTimeout) {
			t.Fatalf("read from unit 5 = %v, want a timeout", err)
		}
		if !strings.Contains(err.Error(), "unit 5 FC3") {
			t.Fatalf("error does not name the unit and function: %v", err)
		}
		if hr, err := b.ReadRegisters(ctx, 1, h, 4, 2); err != nil || fmt.Sprint(hr) != "[40 50]" {
			t.Fatalf("read after the timeout = %v, %v", hr, err)
		}
	})

	t.Run("coalescing", func(t *testing.T) {
		ranges := [][2]uint16{{100, 2}, {102, 4}, {110, 1}, {111, 2}, {118, 2}}
		coalesced := concurrentReads(t, b, ranges)
		b.set.maxGap = -1 // only the worker reads it, and it is idle between the calls
		separate := concurrentReads(t, b, ranges)
		b.set.maxGap = manifest.DefaultMaxGap
		if coalesced != 1 || separate != len(ranges) {
			t.Fatalf("peer counted %d requests coalesced and %d separate, want 1 and %d", coalesced, separate, len(ranges))
		}
	})
}

// concurrentReads queues reads of ranges (holding, unit 1) behind a request
// to a unit that never answers, so they all wait together, then returns how
// many requests the peer counted for them.
func concurrentReads(t *testing.T, b *Bus, ranges [][2]uint16) int {
	t.Helper()
	ctx := context.Background()
	before := requests(t, b)
	sent := b.Transactions()
	blocked := make(chan struct{})
	go func() {
		defer close(blocked)
		b.ReadRegisters(ctx, 5, manifest.TableHolding, 0, 1)
	}()
	for b.Transactions() == sent { // until the blocking read is on the bus
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	for _, r := range ranges {
		wg.Go(func() {
			got, err := b.ReadRegisters(ctx, 1, manifest.TableHolding, r[0], r[1])
			if err != nil {
				t.Errorf("read %v: %v", r, err)
				return
			}
			for i, v := range got {
				if v != 10*(r[0]+uint16(i)) {
					t.Errorf("read %v = %v", r, got)
				}
			}
		})
	}
	waitQueued(t, b, len(ranges))
	wg.Wait()
	<-blocked
	return requests(t, b) - before
}
