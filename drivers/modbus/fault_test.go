package modbus

// Writes under injected faults (internal/modbusfault, a real TCP server on
// loopback and a real pseudo-terminal): one WriteRegisters or WriteCoils call
// puts exactly one frame on the wire whatever the bus's retries, the device
// applies it at most once, and the error wraps drivers.ErrInDoubt exactly when
// the device may have applied it. Reads keep their retries and reconnects.
// TestMain prints the totals; `go test -v -run Fault` shows each case too.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/internal/modbusfault"
	"github.com/physmcp/physmcpd/manifest"
)

const (
	faultTimeout = 300 * time.Millisecond // the bus timeout in these tests
	faultAddr    = 40
)

var retryCounts = []int{0, 1, 3}

// tally adds up what the fault tests saw, for TestMain's summary.
var tally struct {
	sync.Mutex
	calls, frames, applied, twice, inDoubt, exceptions, ok int // writes
	idle, idleFrames, idleApplied, idleOK                  int // writes after an idle close
	reads, readFrames, readsOK                             int
}

func TestMain(m *testing.M) {
	code := m.Run()
	if tally.calls+tally.idle+tally.reads > 0 {
		fmt.Printf("modbusfault: %d write calls (fault modes x retries 0,1,3 x TCP/RTU x FC5,6,15,16): "+
			"%d frames on the wire, %d applied, %d applied twice, %d in doubt, %d exceptions, %d ok\n",
			tally.calls, tally.frames, tally.applied, tally.twice, tally.inDoubt, tally.exceptions, tally.ok)
		fmt.Printf("modbusfault: %d writes after the device closed the idle connection (FIN, RST): "+
			"%d frames on the wire, %d applied, %d ok\n", tally.idle, tally.idleFrames, tally.idleApplied, tally.idleOK)
		fmt.Printf("modbusfault: %d reads under the same faults: %d frames on the wire, %d succeeded\n",
			tally.reads, tally.readFrames, tally.readsOK)
	}
	os.Exit(code)
}

// faultBus is a bus on a fault-injecting device.
type faultBus struct {
	dev  *modbusfault.Device
	tcp  *modbusfault.TCP // nil for RTU
	stop func()           // closes the device's server
	bus  *Bus
}

func newFaultBus(t *testing.T, transport string, retries int) faultBus {
	t.Helper()
	set, err := newSettings(int(faultTimeout/time.Millisecond), retries, manifest.DefaultMaxGap)
	if err != nil {
		t.Fatal(err)
	}
	var fb faultBus
	if transport == "tcp" {
		fb.tcp = modbusfault.StartTCP(t)
		fb.dev, fb.stop, fb.bus = fb.tcp.Device, fb.tcp.Close, newTCPBus(fb.tcp.Addr(), set, 0)
	} else {
		srv := modbusfault.StartRTU(t)
		fb.dev, fb.stop = srv.Device, srv.Close
		fb.bus, err = newRTUBus(&manifest.ModbusRTUBus{Port: srv.Path(), Baud: 115200, Parity: "none", StopBits: 1}, set, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { fb.bus.Close() })
	// A first exchange, so the write under test goes on a reused connection
	// (where the old transport resent after a close) and the pty is set up.
	// On a loaded machine connecting alone may take longer than the bus
	// timeout: setting up, the read may be tried again.
	if err := eventually(func() error {
		_, err := fb.bus.ReadRegisters(context.Background(), 1, manifest.TableHolding, 0, 1)
		return err
	}); err != nil {
		t.Fatalf("first read: %v", err)
	}
	// The reply may reach the bus before the device counts the request as
	// handled: wait, so that the counts of the test start from here.
	awaitHandled(t, fb.dev, fcReadHolding, fb.dev.Requests(fcReadHolding))
	return fb
}

type writeOp struct {
	fc    uint8
	table modbusfault.Table
	// values is what the op writes from faultAddr, as the device stores them.
	values []uint16
}

var writeOps = []writeOp{
	{fcWriteRegister, modbusfault.HoldingRegisters, []uint16{0x1234}},
	{fcWriteRegisters, modbusfault.HoldingRegisters, []uint16{7, 8, 9}},
	{fcWriteCoil, modbusfault.Coils, []uint16{1}},
	{fcWriteCoils, modbusfault.Coils, []uint16{1, 0, 1}},
}

func (op writeOp) do(ctx context.Context, b *Bus) error {
	if op.table == modbusfault.HoldingRegisters {
		return b.WriteRegisters(ctx, 1, faultAddr, op.values)
	}
	bits := make([]bool, len(op.values))
	for i, v := range op.values {
		bits[i] = v != 0
	}
	return b.WriteCoils(ctx, 1, faultAddr, bits)
}

// faultCase is a fault and what a write under it must come to.
type faultCase struct {
	name    string
	fault   modbusfault.Fault
	tcpOnly bool // the mode acts on a connection
	applied bool // the device applies the write
	inDoubt bool
	cause   error // also wrapped, when not nil
}

var faultCases = []faultCase{
	{name: "normal", fault: modbusfault.Fault{Mode: modbusfault.Normal}, applied: true},
	{name: "apply-drop", fault: modbusfault.Fault{Mode: modbusfault.ApplyDrop}, tcpOnly: true, applied: true, inDoubt: true, cause: drivers.ErrUnreachable},
	{name: "apply-fin", fault: modbusfault.Fault{Mode: modbusfault.ApplyFIN}, tcpOnly: true, applied: true, inDoubt: true, cause: drivers.ErrUnreachable},
	{name: "apply-rst", fault: modbusfault.Fault{Mode: modbusfault.ApplyRST}, tcpOnly: true, applied: true, inDoubt: true, cause: drivers.ErrUnreachable},
	{name: "apply-no-reply", fault: modbusfault.Fault{Mode: modbusfault.ApplyNoReply}, applied: true, inDoubt: true, cause: drivers.ErrTimeout},
	{name: "hang", fault: modbusfault.Fault{Mode: modbusfault.Hang}, inDoubt: true, cause: drivers.ErrTimeout},
	{name: "delay-short", fault: modbusfault.Fault{Mode: modbusfault.Delay, Delay: faultTimeout / 10}, applied: true},
	{name: "delay-long", fault: modbusfault.Fault{Mode: modbusfault.Delay, Delay: 3 * faultTimeout / 2}, applied: true, inDoubt: true, cause: drivers.ErrTimeout},
	{name: "exception", fault: modbusfault.Fault{Mode: modbusfault.Exception, Code: 3}},
	{name: "busy", fault: modbusfault.Fault{Mode: modbusfault.Exception, Code: 6}},
	{name: "gateway-applied-too-late", fault: modbusfault.Fault{Mode: modbusfault.ApplyException, Code: 11}, applied: true, inDoubt: true},
	{name: "device-failed-after-acting", fault: modbusfault.Fault{Mode: modbusfault.ApplyException, Code: 4}, applied: true, inDoubt: true},
	{name: "garble", fault: modbusfault.Fault{Mode: modbusfault.Garble}, applied: true, inDoubt: true},
	{name: "mismatch", fault: modbusfault.Fault{Mode: modbusfault.Mismatch}, applied: true, inDoubt: true},
	{name: "late-apply", fault: modbusfault.Fault{Mode: modbusfault.LateApply, Delay: 3 * faultTimeout / 2}, applied: true, inDoubt: true, cause: drivers.ErrTimeout},
	{name: "acknowledged-applied-later", fault: modbusfault.Fault{Mode: modbusfault.AckLater, Code: 5}, applied: true, inDoubt: true},
}

// awaitHandled waits until the device has finished with n requests with
// function code fc (10 s at most): a frame sent just before the client gave
// up may reach it only after, and a late write is applied only then.
func awaitHandled(t *testing.T, dev *modbusfault.Device, fc uint8, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := dev.AwaitHandled(ctx, fc, n); err != nil {
		t.Error(err)
	}
}

// awaitWrites waits until the device has applied n writes to faultAddr of
// table (10 s at most).
func awaitWrites(t *testing.T, dev *modbusfault.Device, table modbusfault.Table, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := dev.AwaitWrites(ctx, table, faultAddr, n); err != nil {
		t.Error(err)
	}
}

// held is a hold for a fault meant to act after the bus gave up (a long
// Delay or LateApply), to be closed once the call has returned: late
// however slowly either side is scheduled (a timer set for after the
// deadline can fire before a loaded client notices the deadline). nil for
// other faults.
func (fc faultCase) held() chan struct{} {
	if fc.fault.Delay < faultTimeout {
		return nil
	}
	return make(chan struct{})
}

// forEachCase runs body in parallel for every fault case, retries count and
// transport the case applies to.
func forEachCase(t *testing.T, body func(t *testing.T, transport string, retries int, fc faultCase)) {
	for _, transport := range []string{"tcp", "rtu"} {
		for _, fc := range faultCases {
			if fc.tcpOnly && transport != "tcp" {
				continue
			}
			for _, retries := range retryCounts {
				t.Run(fmt.Sprintf("%s/%s/retries=%d", transport, fc.name, retries), func(t *testing.T) {
					t.Parallel()
					body(t, transport, retries, fc)
				})
			}
		}
	}
}

func TestFaultWritesGoOutOnce(t *testing.T) {
	forEachCase(t, func(t *testing.T, transport string, retries int, fc faultCase) {
		// One device per function code, all faulted at once to save time.
		buses := make([]faultBus, len(writeOps))
		for i := range writeOps {
			buses[i] = newFaultBus(t, transport, retries)
		}
		var wg sync.WaitGroup
		for i, op := range writeOps {
			wg.Go(func() { writeUnderFault(t, buses[i], fc, op) })
		}
		wg.Wait()
	})
}

// writeUnderFault makes one write call under fc's fault and checks what came
// of it. It runs beside the others, so it reports with Errorf only.
func writeUnderFault(t *testing.T, fb faultBus, fc faultCase, op writeOp) {
	f := fc.fault
	f.Match, f.Times = modbusfault.At(op.fc, faultAddr), 1
	hold := fc.held()
	f.Hold = hold
	fb.dev.Inject(f)
	err := op.do(context.Background(), fb.bus)
	if hold != nil {
		close(hold)
	}
	awaitHandled(t, fb.dev, op.fc, 1)
	if fc.applied {
		// An acknowledged write is applied after its answer.
		awaitWrites(t, fb.dev, op.table, 1)
	}

	frames, applied := fb.dev.Requests(op.fc), fb.dev.Writes(op.table, faultAddr)
	var exc *drivers.ModbusException
	isExc := errors.As(err, &exc)
	t.Logf("FC%d: %d frame(s), applied %d time(s), err: %v", op.fc, frames, applied, err)
	tally.Lock()
	tally.calls++
	tally.frames += frames
	tally.applied += applied
	tally.twice += max(applied-1, 0)
	tally.inDoubt += count(errors.Is(err, drivers.ErrInDoubt))
	tally.exceptions += count(isExc)
	tally.ok += count(err == nil)
	tally.Unlock()

	if frames != 1 {
		t.Errorf("FC%d: %d frames on the wire for one call, want 1", op.fc, frames)
	}
	if errors.Is(err, drivers.ErrNotSent) {
		t.Errorf("FC%d: err = %v says not sent, but the frame reached the device", op.fc, err)
	}
	if want := count(fc.applied); applied != want {
		t.Errorf("FC%d: applied %d times, want %d", op.fc, applied, want)
	}
	switch {
	case fc.fault.Mode == modbusfault.Exception:
		if !isExc || exc.Code != fc.fault.Code || exc.Function != op.fc || errors.Is(err, drivers.ErrInDoubt) {
			t.Errorf("FC%d: err = %v, want exception %d to FC%d, not in doubt", op.fc, err, fc.fault.Code, op.fc)
		}
	case fc.fault.Mode == modbusfault.ApplyException || fc.fault.Mode == modbusfault.AckLater:
		if !isExc || exc.Code != fc.fault.Code || !errors.Is(err, drivers.ErrInDoubt) {
			t.Errorf("FC%d: err = %v, want exception %d, in doubt", op.fc, err, fc.fault.Code)
		}
	case fc.inDoubt:
		if !errors.Is(err, drivers.ErrInDoubt) || isExc {
			t.Errorf("FC%d: err = %v, want in doubt", op.fc, err)
		}
		if fc.cause != nil && !errors.Is(err, fc.cause) {
			t.Errorf("FC%d: err = %v, want it to wrap %v too", op.fc, err, fc.cause)
		}
	case err != nil:
		t.Errorf("FC%d: err = %v", op.fc, err)
	}
	for i, v := range op.values {
		if !fc.applied {
			v = 0
		}
		if got := fb.dev.Value(op.table, faultAddr+uint16(i)); got != v {
			t.Errorf("FC%d: device holds %d at %d, want %d", op.fc, got, faultAddr+i, v)
		}
	}
	// The engine settles an in-doubt write by reading the device: the bus
	// must serve that read (on RTU, a late reply may spoil the first tries).
	n := uint16(len(op.values))
	if err := eventually(func() error {
		if op.table == modbusfault.HoldingRegisters {
			_, err := fb.bus.ReadRegisters(context.Background(), 1, manifest.TableHolding, faultAddr, n)
			return err
		}
		_, err := fb.bus.ReadBits(context.Background(), 1, manifest.TableCoil, faultAddr, n)
		return err
	}); err != nil {
		t.Errorf("FC%d: reading back: %v", op.fc, err)
	}
}

// eventually polls f for up to 10 s and returns its last error.
func eventually(f func() error) error {
	err := f()
	for end := time.Now().Add(10 * time.Second); err != nil && time.Now().Before(end); err = f() {
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

func count(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestFaultIdleCloseIsNoDoubt: a device that closed the idle connection
// (FIN or RST) costs the next write a reconnect, not its certainty.
func TestFaultIdleCloseIsNoDoubt(t *testing.T) {
	for _, rst := range []bool{false, true} {
		for _, retries := range retryCounts {
			t.Run(fmt.Sprintf("rst=%v/retries=%d", rst, retries), func(t *testing.T) {
				t.Parallel()
				for _, op := range writeOps {
					fb := newFaultBus(t, "tcp", retries)
					fb.tcp.CloseConns(rst)
					// Loopback delivers the FIN or RST during close(2); the
					// pause covers a loaded machine.
					time.Sleep(20 * time.Millisecond)
					err := op.do(context.Background(), fb.bus)
					awaitHandled(t, fb.dev, op.fc, 1)
					frames, applied := fb.dev.Requests(op.fc), fb.dev.Writes(op.table, faultAddr)
					t.Logf("FC%d: %d frame(s), applied %d time(s), err: %v", op.fc, frames, applied, err)
					tally.Lock()
					tally.idle++
					tally.idleFrames += frames
					tally.idleApplied += applied
					tally.idleOK += count(err == nil)
					tally.Unlock()
					if err != nil || frames != 1 || applied != 1 {
						t.Errorf("FC%d after an idle close: err = %v, %d frames, applied %d; want no error, 1, 1", op.fc, err, frames, applied)
					}
				}
			})
		}
	}
}

// TestFaultUnsentWriteIsNoDoubt: a write that cannot leave (device gone) was
// not applied, so it is not in doubt.
func TestFaultUnsentWriteIsNoDoubt(t *testing.T) {
	for _, transport := range []string{"tcp", "rtu"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			fb := newFaultBus(t, transport, 3)
			fb.stop()
			// TCP: the closed connection is noticed, the reconnect refused.
			// RTU: the hung-up port fails before the frame is written. One
			// write only: a reopened /dev/pts/N may be another test's pty.
			err := fb.bus.WriteRegisters(context.Background(), 1, faultAddr, []uint16{1})
			t.Logf("write with the device gone: %v", err)
			if !errors.Is(err, drivers.ErrUnreachable) || !errors.Is(err, drivers.ErrNotSent) || errors.Is(err, drivers.ErrInDoubt) {
				t.Fatalf("err = %v, want unreachable, not sent, not in doubt", err)
			}
		})
	}
}

// TestFaultReadsStillRetry: the same faults hitting a read once are
// recovered from by a retry, and on TCP by reconnecting when the peer closed
// the connection, whatever the retries. Reads are never in doubt.
func TestFaultReadsStillRetry(t *testing.T) {
	forEachCase(t, func(t *testing.T, transport string, retries int, fc faultCase) {
		if fc.fault.Mode == modbusfault.Normal {
			return
		}
		fb := newFaultBus(t, transport, retries)
		fb.dev.Set(modbusfault.HoldingRegisters, faultAddr, 4242)
		f := fc.fault
		f.Match, f.Times = modbusfault.At(fcReadHolding, faultAddr), 1
		// On TCP the retry goes on a new connection, so the reply is held
		// past the call; on RTU the line is held too, and a retry needs the
		// late reply.
		var hold chan struct{}
		if transport == "tcp" {
			hold = fc.held()
			f.Hold = hold
		}
		fb.dev.Inject(f)
		before, sent := fb.dev.Requests(fcReadHolding), fb.bus.Transactions()
		got, err := fb.bus.ReadRegisters(context.Background(), 1, manifest.TableHolding, faultAddr, 1)
		sent = fb.bus.Transactions() - sent
		if hold != nil {
			close(hold)
		}

		wantFrames, recovers := 1, false
		switch m := fc.fault.Mode; {
		case m == modbusfault.Exception || m == modbusfault.ApplyException || m == modbusfault.AckLater: // an answer: never retried
		case (m == modbusfault.Delay || m == modbusfault.LateApply) && fc.fault.Delay < faultTimeout:
			recovers = true
		case retries > 0:
			recovers, wantFrames = true, 2
			if hold == nil && fc.fault.Delay >= faultTimeout && sent == 1 && err == nil {
				// RTU: a loaded client may notice its deadline only once
				// the late reply is in, and take it.
				wantFrames = 1
			}
		case transport == "tcp" && (m == modbusfault.ApplyDrop || m == modbusfault.ApplyFIN || m == modbusfault.ApplyRST):
			// The connection was reused: a reconnect, not a retry.
			recovers, wantFrames = true, 2
		}
		// A frame may reach the device after the bus gave up on it.
		awaitHandled(t, fb.dev, fcReadHolding, before+wantFrames)
		frames := fb.dev.Requests(fcReadHolding) - before
		if frames != wantFrames {
			t.Errorf("%d frames on the wire, want %d", frames, wantFrames)
		}
		t.Logf("read: %d frame(s), got %v, err: %v", frames, got, err)
		tally.Lock()
		tally.reads++
		tally.readFrames += frames
		tally.readsOK += count(err == nil)
		tally.Unlock()

		if errors.Is(err, drivers.ErrInDoubt) {
			t.Errorf("read error in doubt: %v", err)
		}
		if recovers && (err != nil || got[0] != 4242) {
			t.Errorf("read = %v, %v; want 4242 after a retry or reconnect", got, err)
		}
		if !recovers && err == nil {
			t.Errorf("read succeeded with %d retries under %s", retries, fc.name)
		}
	})
}

// TestFaultCancelledOnTheBusIsInDoubt: a caller that gives up while its write
// is on the bus cannot know whether it was applied; one that gives up while
// the write still waits in the queue knows it was not (TestCancelledWriteIsNeverSent).
func TestFaultCancelledOnTheBusIsInDoubt(t *testing.T) {
	d := &fakeDevice{gate: make(chan struct{})}
	b := newFakeBus(t, d, settings{timeout: time.Second, retries: 3, maxGap: manifest.DefaultMaxGap})
	t.Cleanup(func() { close(d.gate) }) // before the bus closes, which waits for the worker
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- b.WriteRegisters(ctx, 1, faultAddr, []uint16{1}) }()
	for d.sent() != 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	err := <-errc
	if !errors.Is(err, drivers.ErrInDoubt) || !errors.Is(err, context.Canceled) || errors.Is(err, drivers.ErrNotSent) {
		t.Fatalf("write cancelled on the bus = %v, want in doubt and cancelled, not 'not sent'", err)
	}
	if !strings.Contains(err.Error(), "write outcome unknown") {
		t.Fatalf("error does not say the outcome is unknown: %v", err)
	}
}

// TestFaultTCPWriteThatNeverLeftIsNotSent: on Modbus TCP a write that
// failed before any byte of it was on a connection (the dial refused or timed
// out, the backoff refused to dial, the deadline had passed when the frame
// was to be written) was not sent, though two of them are timeouts; a retry
// then writes once.
func TestFaultTCPWriteThatNeverLeftIsNotSent(t *testing.T) {
	fb := newFaultBus(t, "tcp", 0)
	tr := fb.bus.tr.(*tcpTransport)
	write := func() error { return fb.bus.WriteRegisters(context.Background(), 1, faultAddr, []uint16{7}) }
	notSent := func(what string, err error, cause error) {
		t.Helper()
		t.Logf("write %s: %v", what, err)
		if !errors.Is(err, drivers.ErrNotSent) || !errors.Is(err, cause) || errors.Is(err, drivers.ErrInDoubt) {
			t.Errorf("write %s = %v, want %v, not sent, not in doubt", what, err, cause)
		}
	}
	// The bus timeout (each attempt's deadline) is a nanosecond: passed
	// before the frame is written on the open connection, then before the
	// dial of the next attempt ends. The caller runs the write itself, so
	// the setting is changed on the bus's own goroutine.
	fb.bus.set.timeout = time.Nanosecond
	notSent("whose deadline passed before the frame was written", write(), drivers.ErrTimeout)
	notSent("whose dial timed out", write(), drivers.ErrTimeout)
	fb.bus.set.timeout = faultTimeout

	// The backoff after the failed dial (one more failure: 200 ms) ends after
	// this write's deadline, so it is not dialled at all.
	tr.bo.failed(time.Now(), errors.New("dial failed"))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := fb.bus.WriteRegisters(ctx, 1, faultAddr, []uint16{7})
	notSent("refused by the backoff", err, drivers.ErrUnreachable)
	if !strings.Contains(err.Error(), "failed attempts") {
		t.Errorf("write refused by the backoff = %v, want it to say so", err)
	}
	tr.bo.succeeded()

	// A device that is gone refuses the dial.
	fb.stop()
	notSent("whose dial was refused", write(), drivers.ErrUnreachable)
	if n := fb.dev.Requests(fcWriteRegister); n != 0 {
		t.Fatalf("%d write frames reached the device, want none", n)
	}
}
