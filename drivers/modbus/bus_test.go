package modbus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	gb "github.com/goburrow/modbus"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
)

func rd(kind opKind, unit uint8, table manifest.ModbusTable, addr, count uint16) *request {
	return &request{ctx: context.Background(), kind: kind, unit: unit, table: table, addr: addr, count: count}
}

func TestTakeBatch(t *testing.T) {
	h := manifest.TableHolding
	regs := func(addr, count uint16) *request { return rd(opReadRegisters, 1, h, addr, count) }
	write := func(unit uint8, addr uint16) *request {
		return &request{kind: opWriteRegisters, unit: unit, table: h, addr: addr, count: 1, regs: []uint16{1}}
	}
	tests := []struct {
		name   string
		q      []*request
		maxGap int
		want   []int // indexes of q in the batch, in batch order
	}{
		{"adjacent", []*request{regs(0, 2), regs(2, 2), regs(4, 1)}, 8, []int{0, 1, 2}},
		{"within gap", []*request{regs(0, 2), regs(10, 2)}, 8, []int{0, 1}},
		{"beyond gap", []*request{regs(0, 2), regs(11, 2)}, 8, []int{0}},
		{"gap bridged by a later request", []*request{regs(0, 2), regs(20, 2), regs(10, 2)}, 8, []int{0, 2, 1}},
		{"below the head", []*request{regs(10, 2), regs(0, 2)}, 8, []int{0, 1}},
		{"overlapping", []*request{regs(0, 4), regs(2, 4)}, 0, []int{0, 1}},
		{"coalescing off", []*request{regs(0, 2), regs(2, 2)}, -1, []int{0}},
		{"other unit", []*request{regs(0, 2), rd(opReadRegisters, 2, h, 2, 2)}, 8, []int{0}},
		{"other table", []*request{regs(0, 2), rd(opReadRegisters, 1, manifest.TableInput, 2, 2)}, 8, []int{0}},
		{"bits and registers", []*request{regs(0, 2), rd(opReadBits, 1, manifest.TableCoil, 2, 2)}, 8, []int{0}},
		{"register limit", []*request{regs(0, 100), regs(100, 26)}, 8, []int{0}},
		{"register limit exactly", []*request{regs(0, 100), regs(100, 25)}, 8, []int{0, 1}},
		{"bit limit", []*request{rd(opReadBits, 1, manifest.TableCoil, 0, 1999), rd(opReadBits, 1, manifest.TableCoil, 1999, 1)}, 8, []int{0, 1}},
		{"no overtaking a write to the unit", []*request{regs(0, 2), write(1, 5), regs(2, 2)}, 8, []int{0}},
		{"a write to another unit is no barrier", []*request{regs(0, 2), write(2, 5), regs(2, 2)}, 8, []int{0, 2}},
		{"writes are never merged", []*request{write(1, 0), write(1, 1)}, 8, []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			batch, rest := takeBatch(tt.q, tt.maxGap)
			var got []int
			for _, r := range batch {
				for i, q := range tt.q {
					if q == r {
						got = append(got, i)
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("batch = %v, want %v", got, tt.want)
			}
			if len(batch)+len(rest) != len(tt.q) {
				t.Fatalf("batch %d + rest %d != queue %d", len(batch), len(rest), len(tt.q))
			}
			for i := 1; i < len(rest); i++ { // the rest keeps its order
				if indexOf(tt.q, rest[i-1]) > indexOf(tt.q, rest[i]) {
					t.Fatalf("rest out of order")
				}
			}
		})
	}
}

func indexOf(q []*request, r *request) int {
	for i, x := range q {
		if x == r {
			return i
		}
	}
	return -1
}

func TestRTUReplyLen(t *testing.T) {
	tests := []struct {
		b    []byte
		want int
		err  bool
	}{
		{nil, 0, false},
		{[]byte{1}, 0, false},
		{[]byte{1, 0x83}, 5, false},
		{[]byte{1, 3}, 0, false},
		{[]byte{1, 3, 16}, 21, false},
		{[]byte{1, 1, 2}, 7, false},
		{[]byte{1, 6}, 8, false},
		{[]byte{1, 16}, 8, false},
		{[]byte{1, 0x2b}, 0, true},
	}
	for _, tt := range tests {
		got, err := rtuReplyLen(tt.b)
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("rtuReplyLen(% x) = %d, %v; want %d, error %v", tt.b, got, err, tt.want, tt.err)
		}
	}
}

func TestBackoff(t *testing.T) {
	var b backoff
	now := time.Unix(1000, 0)
	var delays []time.Duration
	for range 8 {
		b.failed(now, errors.New("refused"))
		delays = append(delays, b.next.Sub(now))
	}
	want := "[100ms 200ms 400ms 800ms 1.6s 3s 3s 3s]"
	if fmt.Sprint(delays) != want {
		t.Fatalf("delays %v, want %s", delays, want)
	}
	// A deadline before the next attempt fails at once, naming the last error.
	err := b.wait(now, now.Add(time.Second), nil)
	if !errors.Is(err, drivers.ErrUnreachable) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("wait = %v, want unreachable naming the last error", err)
	}
	if err := b.wait(now.Add(3*time.Second), now.Add(4*time.Second), nil); err != nil {
		t.Fatalf("wait after the backoff = %v", err)
	}
	b.succeeded()
	if err := b.wait(now, now, nil); err != nil {
		t.Fatalf("wait after success = %v", err)
	}
}

func TestSettings(t *testing.T) {
	s, err := newSettings(0, 0, 0)
	if err != nil || s.timeout != defaultTimeout || s.retries != 0 || s.maxGap != 0 {
		t.Fatalf("defaults = %+v, %v", s, err)
	}
	for _, bad := range [][3]int{{-1, 0, 0}, {0, -1, 0}, {0, 11, 0}, {0, 0, -2}, {0, 0, 2001}} {
		if _, err := newSettings(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("newSettings%v: no error", bad)
		}
	}
}

func TestSerialSettings(t *testing.T) {
	c := &manifest.ModbusRTUBus{Port: "/dev/null", Baud: 9600, Parity: "even", StopBits: 1}
	m, err := serialMode(c)
	if err != nil || m.DataBits != 8 {
		t.Fatalf("serialMode = %+v, %v", m, err)
	}
	// 11 bits per character at 9600 baud: 3.5 characters = 4.01 ms.
	if g := frameGap(m); g < 4000*time.Microsecond || g > 4020*time.Microsecond {
		t.Fatalf("frame gap %v", g)
	}
	m.BaudRate = 115200
	if g := frameGap(m); g != 1750*time.Microsecond {
		t.Fatalf("frame gap above 19200 baud %v", g)
	}
	for _, bad := range []manifest.ModbusRTUBus{
		{Baud: 0, Parity: "none", StopBits: 1},
		{Baud: 9600, Parity: "mark", StopBits: 1},
		{Baud: 9600, Parity: "none", StopBits: 3},
		{Baud: 9600, Parity: "none", StopBits: 1, DataBits: 9},
	} {
		if _, err := serialMode(&bad); err == nil {
			t.Errorf("serialMode(%+v): no error", bad)
		}
	}
	if err := rtuUnitOK(0); err == nil {
		t.Error("RTU unit 0 accepted")
	}
}

// fakeDevice answers MBAP frames like a device whose holding register a holds
// a and whose coils are all on. Unit 9 answers every request with exception 2
// when the range crosses address 100. gate, when set, holds each reply until
// the test sends on it.
type fakeDevice struct {
	mu       sync.Mutex
	frames   [][]byte
	gate     chan struct{}
	failures int // the next n exchanges time out
	panics   int // the next n exchanges panic
}

func (d *fakeDevice) prepare(time.Time, bool) {}
func (d *fakeDevice) fault()                  {}
func (d *fakeDevice) close() error            { return nil }

func (d *fakeDevice) Send(adu []byte) ([]byte, error) {
	d.mu.Lock()
	d.frames = append(d.frames, append([]byte(nil), adu...))
	gate := d.gate
	fail := d.failures > 0
	if fail {
		d.failures--
	}
	panics := d.panics > 0
	if panics {
		d.panics--
	}
	d.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if panics {
		panic("fake transport panic")
	}
	if fail {
		return nil, fmt.Errorf("%w: fake", drivers.ErrTimeout)
	}
	fc, addr := adu[7], int(adu[8])<<8|int(adu[9])
	count := int(adu[10])<<8 | int(adu[11])
	var pdu []byte
	switch {
	case adu[6] == 9 && (fc == fcReadHolding || fc == fcReadInput) && addr+count > 100:
		pdu = []byte{fc | 0x80, 2}
	case fc == fcReadHolding || fc == fcReadInput:
		pdu = []byte{fc, byte(2 * count)}
		for a := addr; a < addr+count; a++ {
			pdu = append(pdu, byte(a>>8), byte(a))
		}
	case fc == fcReadCoils || fc == fcReadDiscreteInputs:
		pdu = []byte{fc, byte((count + 7) / 8)}
		for range (count + 7) / 8 {
			pdu = append(pdu, 0xFF)
		}
	default:
		pdu = append([]byte{fc}, adu[8:12]...)
	}
	resp := append([]byte(nil), adu[:7]...)
	resp[4], resp[5] = 0, byte(len(pdu)+1)
	return append(resp, pdu...), nil
}

func (d *fakeDevice) sent() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.frames)
}

func newFakeBus(t *testing.T, d *fakeDevice, set settings) *Bus {
	t.Helper()
	pk := gb.NewTCPClientHandler("fake")
	b := newBus("modbus-fake", set, pk, func(u uint8) { pk.SlaveId = u }, d, func(uint8) error { return nil }, make(chan struct{}))
	t.Cleanup(func() { b.Close() })
	return b
}

// waitQueued waits until n requests wait in b's queue.
func waitQueued(t testing.TB, b *Bus, n int) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		b.mu.Lock()
		got := len(b.queue)
		b.mu.Unlock()
		if got == n {
			return
		}
	}
	t.Fatalf("never saw %d queued requests", n)
}

func TestCoalescedReadsGetTheirSlices(t *testing.T) {
	d := &fakeDevice{gate: make(chan struct{})}
	b := newFakeBus(t, d, settings{timeout: time.Second, maxGap: manifest.DefaultMaxGap})
	ctx := context.Background()
	// A write holds the bus while the reads queue up behind it.
	writeDone := make(chan error, 1)
	go func() { writeDone <- b.WriteRegisters(ctx, 1, 500, []uint16{1}) }()
	for d.sent() != 1 {
		time.Sleep(time.Millisecond)
	}
	ranges := [][2]uint16{{10, 2}, {14, 3}, {12, 1}, {30, 2}}
	got := make([][]uint16, len(ranges))
	errs := make([]error, len(ranges))
	var wg sync.WaitGroup
	for i, r := range ranges {
		wg.Go(func() { got[i], errs[i] = b.ReadRegisters(ctx, 1, manifest.TableHolding, r[0], r[1]) })
	}
	waitQueued(t, b, len(ranges))
	close(d.gate)
	wg.Wait()
	if err := <-writeDone; err != nil {
		t.Fatal(err)
	}
	for i, r := range ranges {
		if errs[i] != nil {
			t.Fatalf("read %v: %v", r, errs[i])
		}
		for j, v := range got[i] {
			if v != r[0]+uint16(j) {
				t.Fatalf("read %v got %v", r, got[i])
			}
		}
	}
	// The write, one read of 10..16 and one of 30..31 (beyond the gap).
	if n := d.sent(); n != 3 {
		t.Fatalf("%d frames sent, want 3", n)
	}
}

func TestMergedExceptionFallsBackToSingleReads(t *testing.T) {
	d := &fakeDevice{gate: make(chan struct{})}
	b := newFakeBus(t, d, settings{timeout: time.Second, maxGap: manifest.DefaultMaxGap})
	ctx := context.Background()
	go b.WriteRegisters(ctx, 9, 0, []uint16{1})
	for d.sent() != 1 {
		time.Sleep(time.Millisecond)
	}
	var good []uint16
	var goodErr, badErr error
	var wg sync.WaitGroup
	wg.Go(func() { good, goodErr = b.ReadRegisters(ctx, 9, manifest.TableHolding, 96, 2) })
	waitQueued(t, b, 1)
	wg.Go(func() { _, badErr = b.ReadRegisters(ctx, 9, manifest.TableHolding, 104, 1) })
	waitQueued(t, b, 2)
	close(d.gate)
	wg.Wait()
	if goodErr != nil || fmt.Sprint(good) != "[96 97]" {
		t.Fatalf("in-range read = %v, %v", good, goodErr)
	}
	var exc *drivers.ModbusException
	if !errors.As(badErr, &exc) || exc.Code != 2 || exc.Function != fcReadHolding {
		t.Fatalf("out-of-range read error = %v, want exception 2 to FC3", badErr)
	}
	if !strings.Contains(badErr.Error(), "modbus-fake: unit 9 FC3 read holding 104") {
		t.Fatalf("error lacks context: %v", badErr)
	}
	// write, merged read, two single reads
	if n := d.sent(); n != 4 {
		t.Fatalf("%d frames sent, want 4", n)
	}
}

func TestCancelledWriteIsNeverSent(t *testing.T) {
	d := &fakeDevice{gate: make(chan struct{})}
	b := newFakeBus(t, d, settings{timeout: time.Second, maxGap: manifest.DefaultMaxGap})
	go b.ReadRegisters(context.Background(), 1, manifest.TableHolding, 0, 1)
	for d.sent() != 1 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- b.WriteCoils(ctx, 1, 7, []bool{true}) }()
	waitQueued(t, b, 1)
	cancel()
	err := <-errc
	if !errors.Is(err, context.Canceled) || !errors.Is(err, drivers.ErrNotSent) || errors.Is(err, drivers.ErrInDoubt) {
		t.Errorf("cancelled write = %v, want cancelled, not sent, not in doubt", err) // and free the bus
	}
	close(d.gate)
	if _, err := b.ReadRegisters(context.Background(), 1, manifest.TableHolding, 0, 1); err != nil {
		t.Fatal(err)
	}
	for _, f := range d.frames {
		if f[7] == fcWriteCoil {
			t.Fatalf("the cancelled write went out: % x", f)
		}
	}
}

func TestRetriesAreBounded(t *testing.T) {
	d := &fakeDevice{failures: 10}
	b := newFakeBus(t, d, settings{timeout: time.Second, retries: 2, maxGap: manifest.DefaultMaxGap})
	_, err := b.ReadRegisters(context.Background(), 1, manifest.TableHolding, 0, 1)
	if !errors.Is(err, drivers.ErrTimeout) || !strings.Contains(err.Error(), "after 3 attempts") {
		t.Fatalf("err = %v", err)
	}
	if d.sent() != 3 {
		t.Fatalf("%d attempts, want 3", d.sent())
	}
	d.failures = 1
	if _, err := b.ReadRegisters(context.Background(), 1, manifest.TableHolding, 0, 1); err != nil {
		t.Fatalf("a retry should have recovered: %v", err)
	}
}

func TestQueueFullAndClose(t *testing.T) {
	d := &fakeDevice{gate: make(chan struct{})}
	b := newFakeBus(t, d, settings{timeout: time.Second, maxGap: -1})
	ctx := context.Background()
	errs := make(chan error, queueLen+1)
	go func() { _, err := b.ReadRegisters(ctx, 1, manifest.TableHolding, 0, 1); errs <- err }()
	for d.sent() != 1 {
		time.Sleep(time.Millisecond)
	}
	for i := range queueLen {
		go func() { _, err := b.ReadRegisters(ctx, 1, manifest.TableHolding, uint16(i), 1); errs <- err }()
	}
	waitQueued(t, b, queueLen)
	if err := b.WriteRegisters(ctx, 1, 0, []uint16{1}); !errors.Is(err, ErrQueueFull) || !errors.Is(err, drivers.ErrNotSent) {
		t.Errorf("write on a full queue = %v, want queue full, not sent", err) // and free the bus
	}
	closed := make(chan error)
	go func() { closed <- b.Close() }()
	waitQueued(t, b, 0)
	close(d.gate)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	failed := 0
	for range queueLen + 1 {
		if err := <-errs; errors.Is(err, ErrClosed) && errors.Is(err, drivers.ErrNotSent) {
			failed++
		}
	}
	if failed != queueLen {
		t.Fatalf("%d queued requests failed with ErrClosed, want %d", failed, queueLen)
	}
}

func TestRequestValidation(t *testing.T) {
	b := newFakeBus(t, &fakeDevice{}, settings{timeout: time.Second, maxGap: manifest.DefaultMaxGap})
	ctx := context.Background()
	if _, err := b.ReadRegisters(ctx, 1, manifest.TableCoil, 0, 1); err == nil {
		t.Error("registers from the coil table")
	}
	if _, err := b.ReadBits(ctx, 1, manifest.TableHolding, 0, 1); err == nil {
		t.Error("bits from the holding table")
	}
	if _, err := b.ReadRegisters(ctx, 1, manifest.TableHolding, 0, 126); err == nil {
		t.Error("126 registers")
	}
	if _, err := b.ReadRegisters(ctx, 1, manifest.TableHolding, 65535, 2); err == nil {
		t.Error("range past 65535")
	}
	if err := b.WriteRegisters(ctx, 1, 0, nil); err == nil {
		t.Error("empty write")
	}
	if err := b.WriteRegisters(ctx, 1, 0, make([]uint16, 124)); err == nil {
		t.Error("124 registers written")
	}
}

// TestWriteWhoseDeadlinePassedBeforeTheWireWasNotSent: a write whose
// deadline passed while another transaction held the bus, or before its
// attempt began, or that the bus's helper found expired in the queue, never
// left: not sent (though a timeout), not in doubt.
func TestWriteWhoseDeadlinePassedBeforeTheWireWasNotSent(t *testing.T) {
	notSentTimeout := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, drivers.ErrNotSent) || !errors.Is(err, drivers.ErrTimeout) || errors.Is(err, drivers.ErrInDoubt) {
			t.Errorf("write whose deadline passed %s = %v, want a timeout, not sent, not in doubt", what, err)
		}
	}
	d := &fakeDevice{gate: make(chan struct{})}
	b := newFakeBus(t, d, settings{timeout: time.Minute, maxGap: manifest.DefaultMaxGap})
	hog := make(chan error, 1)
	go func() { _, err := b.ReadRegisters(context.Background(), 1, manifest.TableHolding, 0, 1); hog <- err }()
	for d.sent() != 1 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	notSentTimeout("waiting for the bus", b.WriteRegisters(ctx, 1, 7, []uint16{1}))
	close(d.gate)
	if err := <-hog; err != nil {
		t.Fatal(err)
	}

	// Idle bus: the caller runs it itself, and finds it expired.
	notSentTimeout("before its attempt", b.WriteRegisters(ctx, 1, 7, []uint16{1}))

	// The helper serving the queue finds it expired.
	r := &request{ctx: ctx, kind: opWriteRegisters, unit: 1, table: manifest.TableHolding, addr: 7, count: 1,
		regs: []uint16{1}, done: make(chan result, 1)}
	b.mu.Lock()
	b.queue, b.busy = append(b.queue, r), true
	b.mu.Unlock()
	if batch := b.next(); batch != nil {
		t.Fatalf("the helper took %d expired requests", len(batch))
	}
	notSentTimeout("in the queue, found by the helper", (<-r.done).err)

	if n := d.sent(); n != 1 {
		t.Fatalf("%d frames sent, want 1 (the hog's read)", n)
	}
}

// TestCallerWithDeadlineRunsItsAttempt: a caller with a deadline runs its
// transaction itself, so a cancel while its write is on the wire waits for
// that attempt, which reports what became of the write (here: applied).
func TestCallerWithDeadlineRunsItsAttempt(t *testing.T) {
	d := &fakeDevice{gate: make(chan struct{})}
	b := newFakeBus(t, d, settings{timeout: time.Second, maxGap: manifest.DefaultMaxGap})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	errc := make(chan error, 1)
	go func() { errc <- b.WriteRegisters(ctx, 1, 7, []uint16{1}) }()
	for d.sent() != 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-errc:
		t.Fatalf("returned while its write was on the wire: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(d.gate)
	if err := <-errc; err != nil {
		t.Fatalf("write = %v, want its outcome (applied)", err)
	}
}

// TestPanicLeavesTheBusUsable: a transport that panics on a caller's own
// goroutine (the engine recovers it) gives the bus up, and requests that
// queued meanwhile are still served.
func TestPanicLeavesTheBusUsable(t *testing.T) {
	d := &fakeDevice{gate: make(chan struct{}), panics: 1}
	b := newFakeBus(t, d, settings{timeout: time.Second, maxGap: manifest.DefaultMaxGap})
	ctx := context.Background()
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		b.ReadRegisters(ctx, 1, manifest.TableHolding, 0, 1)
	}()
	for d.sent() != 1 {
		time.Sleep(time.Millisecond)
	}
	queued := make(chan error, 1)
	go func() { _, err := b.ReadRegisters(ctx, 1, manifest.TableHolding, 1, 1); queued <- err }()
	waitQueued(t, b, 1)
	close(d.gate)
	if p := <-panicked; p == nil {
		t.Fatal("the transport's panic did not reach its caller")
	}
	if err := <-queued; err != nil {
		t.Fatalf("queued read after the panic: %v", err)
	}
	if _, err := b.ReadRegisters(ctx, 1, manifest.TableHolding, 2, 1); err != nil {
		t.Fatalf("read after the panic: %v", err)
	}
}
