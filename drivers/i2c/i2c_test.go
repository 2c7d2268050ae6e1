package i2c

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/i2c/i2ctest"
	"periph.io/x/conn/v3/physic"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
)

func TestTxPlayback(t *testing.T) {
	// A TMP102 at 0x48: temperature register 0x00 reads 0x19 0x00 (25 °C).
	pb := &i2ctest.Playback{DontPanic: true, Ops: []i2ctest.IO{
		{Addr: 0x48, W: []byte{0x00}, R: []byte{0x19, 0x00}},
		{Addr: 0x48, W: []byte{0x01, 0x60, 0xA0}},
	}}
	b := New("i2c test", pb, 0)
	r := make([]byte, 2)
	if err := b.Tx(context.Background(), 0x48, []byte{0x00}, r); err != nil || r[0] != 0x19 || r[1] != 0 {
		t.Fatalf("read = % x, %v", r, err)
	}
	if err := b.Tx(context.Background(), 0x48, []byte{0x01, 0x60, 0xA0}, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("not every expected transaction happened: %v", err)
	}
}

// flaky fails its first n transactions with err, then counts the rest.
type flaky struct {
	ops int
	n   int
	err error
	mu  sync.Mutex
	in  int // transactions in progress, to catch overlap
	max int
}

func (f *flaky) Tx(addr uint16, w, r []byte) error {
	f.mu.Lock()
	f.in++
	f.max = max(f.max, f.in)
	fail := f.n > 0
	f.n--
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.in--; f.mu.Unlock() }()
	if fail {
		return f.err
	}
	f.mu.Lock()
	f.ops++
	f.mu.Unlock()
	return nil
}

func (f *flaky) String() string { return "flaky" }

func (f *flaky) Close() error                    { return nil }
func (f *flaky) SetSpeed(physic.Frequency) error { return nil }

func TestRetriesAreBounded(t *testing.T) {
	nack := errors.New("sysfs-i2c: no such device or address")
	f := &flaky{n: 2, err: nack}
	b := New("i2c /dev/i2c-1", f, 2)
	if err := b.Tx(context.Background(), 0x48, []byte{0x00}, make([]byte, 2)); err != nil {
		t.Fatalf("two failures and two retries: %v", err)
	}
	f.n = 3
	err := b.Tx(context.Background(), 0x48, []byte{0x07}, make([]byte, 2))
	var te *TxError
	if !errors.As(err, &te) || te.Attempts != 3 {
		t.Fatalf("err = %v, want a TxError after 3 attempts", err)
	}
	if !errors.Is(err, drivers.ErrUnreachable) {
		t.Fatalf("a NACK should be unreachable: %v", err)
	}
	want := "i2c /dev/i2c-1: address 0x48 register 0x07 (write 1 bytes, read 2) after 3 attempts"
	if !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error %q\nwant prefix %q", err, want)
	}
	if f.ops != 1 {
		t.Fatalf("%d transactions reached the device, want 1", f.ops)
	}
}

func TestTimeoutClassified(t *testing.T) {
	f := &flaky{n: 1, err: errors.New("sysfs-i2c: connection timed out")}
	err := New("i2c x", f, 0).Tx(context.Background(), 0x48, []byte{0}, make([]byte, 1))
	if !errors.Is(err, drivers.ErrTimeout) || errors.Is(err, drivers.ErrInDoubt) {
		t.Fatalf("err = %v, want a timeout (a read is never in doubt)", err)
	}
}

func TestFailedWriteIsInDoubtAndNotRepeated(t *testing.T) {
	for _, msg := range []string{"sysfs-i2c: remote I/O error", "sysfs-i2c: connection timed out", "sysfs-i2c: resource temporarily unavailable"} {
		f := &flaky{n: 5, err: errors.New(msg)}
		err := New("i2c x", f, 3).Tx(context.Background(), 0x20, []byte{1, 0x71}, nil)
		if !errors.Is(err, drivers.ErrInDoubt) {
			t.Errorf("%s: err = %v, want in doubt", msg, err)
		}
		if tries := 5 - f.n; tries != 1 {
			t.Errorf("%s: the write was tried %d times with retries 3, want once", msg, tries)
		}
	}
	// Its deadline passed while another held the bus: never started, so
	// not sent (though a timeout), not in doubt.
	b := New("i2c x", &flaky{}, 3)
	b.lock <- struct{}{}
	past, stop := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer stop()
	if err := b.Tx(past, 0x20, []byte{1, 0x71}, nil); !errors.Is(err, drivers.ErrNotSent) || !errors.Is(err, drivers.ErrTimeout) || errors.Is(err, drivers.ErrInDoubt) {
		t.Errorf("write whose deadline passed waiting for the bus = %v, want a timeout, not sent, not in doubt", err)
	}
	// Cancelled before the transfer: never started, so not in doubt.
	f := &flaky{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := New("i2c x", f, 3).Tx(ctx, 0x20, []byte{1, 0x71}, nil)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, drivers.ErrNotSent) || errors.Is(err, drivers.ErrInDoubt) || f.n != 0 {
		t.Fatalf("cancelled write = %v after %d transfers, want cancelled, not in doubt, none", err, -f.n)
	}
}

func TestTransactionsAreSerialised(t *testing.T) {
	f := &flaky{}
	b := New("i2c x", f, 0)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			if err := b.Tx(context.Background(), uint16(0x40+i%8), []byte{byte(i)}, make([]byte, 1)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if f.max != 1 || f.ops != 50 {
		t.Fatalf("at most %d transactions at once (want 1), %d done", f.max, f.ops)
	}
}

func TestWaitingForTheBusHonoursTheContext(t *testing.T) {
	b := New("i2c x", &flaky{}, 0)
	b.lock <- struct{}{} // someone else holds the bus
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Tx(ctx, 0x48, []byte{0}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

func TestBadInput(t *testing.T) {
	b := New("i2c x", &flaky{}, 0)
	if err := b.Tx(context.Background(), 0x80, nil, nil); err == nil {
		t.Error("10-bit address accepted")
	}
	for _, c := range []manifest.I2CBus{{Device: ""}, {Device: "i2c-1"}, {Device: "1", Retries: 11}, {Device: "1", TimeoutMs: -1}} {
		if _, err := Open(context.Background(), nil, &manifest.Bus{Name: "b", Type: manifest.BusI2C, I2C: &c}); err == nil {
			t.Errorf("Open(%+v): no error", c)
		}
	}
}

// adapter is a USB I2C adapter that can be unplugged: every transfer on it
// then fails with ENODEV, as the kernel answers on an adapter whose device
// went away, until its file is closed.
type adapter struct {
	flaky
	unplugged bool
	closed    bool
}

func (a *adapter) Tx(addr uint16, w, r []byte) error {
	if a.unplugged {
		return errors.New("sysfs-i2c: " + syscall.ENODEV.Error())
	}
	return a.flaky.Tx(addr, w, r)
}

func (a *adapter) Close() error { a.closed = true; return nil }

// An adapter that went away is closed at its first ENODEV and opened again
// by the transaction after it comes back, rather than failing for good (and
// keeping the kernel's old adapter, and its number, held open). Meanwhile
// nothing reaches a bus, and a write cut by the unplug is in doubt, not repeated.
func TestAdapterThatWentAwayIsOpenedAgain(t *testing.T) {
	old := &adapter{}
	var plugged *adapter // nil: not there
	opens := 0
	b := New("i2c /dev/i2c-1", old, 2)
	b.reopen = func() (i2c.BusCloser, error) {
		opens++
		if plugged == nil {
			return nil, fmt.Errorf("%w: opening /dev/i2c-1: no such file or directory", drivers.ErrUnreachable)
		}
		return plugged, nil
	}
	ctx := context.Background()
	old.unplugged = true
	err := b.Tx(ctx, 0x20, []byte{1, 0x71}, nil)
	if !errors.Is(err, drivers.ErrInDoubt) || !errors.Is(err, drivers.ErrUnreachable) || !old.closed {
		t.Fatalf("write cut by the unplug = %v (adapter closed %v), want in doubt and unreachable, the adapter closed", err, old.closed)
	}
	if err := b.Tx(ctx, 0x20, []byte{0}, make([]byte, 1)); !errors.Is(err, drivers.ErrUnreachable) || opens != 1 {
		t.Fatalf("read while unplugged = %v after %d opens, want unreachable after 1", err, opens)
	}
	plugged = &adapter{}
	if err := b.Tx(ctx, 0x20, []byte{0}, make([]byte, 1)); err != nil || opens != 2 || plugged.ops != 1 || old.ops != 0 {
		t.Fatalf("read once plugged back = %v after %d opens, %d transfers on the new adapter and %d on the old", err, opens, plugged.ops, old.ops)
	}
	if err := b.Close(); err != nil || !plugged.closed {
		t.Fatalf("close = %v, new adapter closed %v", err, plugged.closed)
	}
}
