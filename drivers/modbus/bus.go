// Package modbus is the real Modbus driver: Modbus TCP with explicit reconnect
// and backoff, and Modbus RTU over a serial line (RS-485 direction control by
// the kernel when configured). Framing is goburrow/modbus's; the transports
// are our own.
//
// A bus runs one transaction at a time. A caller that finds it idle runs its
// transaction itself, on its own goroutine: no hand-off, which would cost two
// goroutine switches per read. Callers that find it busy wait in a bounded
// queue, which a helper goroutine serves until it is empty. Reads of the same
// unit and table that wait in the queue together are coalesced into one
// request when their ranges lie within the bus's max_gap of each other; each
// caller gets its own slice. A merged read that draws an exception (the gap
// may cover registers the device does not map) is retried request by request.
//
// Writes go on the wire exactly once. The bus's retries, and the TCP
// transport's resend on a fresh connection after finding the old one closed,
// apply to reads only. A write that failed after its frame left (no reply, a
// garbled or mismatched reply, the link dropped, the caller gone while it was
// on the bus) returns an error wrapping drivers.ErrInDoubt: the device may
// have applied it, and only reading the device can tell. A request that
// failed before any byte of it left (refused, queue full, its deadline
// passed or it was cancelled while it waited for the bus, connect refused or
// timed out, nothing of the frame accepted) returns an error wrapping
// drivers.ErrNotSent: a write so was certainly not applied, even when the
// error is a timeout. Once any byte of a frame was handed to the connection
// or serial port, the rest may still go out: no mark. An exception reply is
// *drivers.ModbusException (refused, not applied), except those that may
// come after the device acted (exceptionInDoubt), which wrap
// drivers.ErrInDoubt too. On Modbus TCP a write whose deadline passed
// leaves its connection listening for the reply until the bus's
// late_write_ms has passed: the error is then a *drivers.LateReply, which
// tells whether a late echo proved it applied.
//
// Deadlines come from the caller's context (Deadline, Err) and are enforced
// on the wire, so a transaction needs no timer or context of its own. A caller
// whose context has a deadline, or cannot be cancelled, runs its transaction
// itself and returns when its current attempt ends, at the latest at its
// deadline. One that can be cancelled without a deadline always goes through
// the queue, so that it can leave the moment it gives up.
package modbus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	gb "github.com/goburrow/modbus"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
)

const (
	defaultTimeout = manifest.DefaultModbusTimeoutMs * time.Millisecond
	maxRetries     = 10
	// queueLen bounds how many requests may wait for the bus; beyond that
	// callers get ErrQueueFull at once instead of piling up behind a slow device.
	queueLen = 64

	maxReadRegisters  = 125
	maxReadBits       = 2000
	maxWriteRegisters = 123
	maxWriteCoils     = 1968
)

// settings are what every Modbus bus has, whatever its transport.
type settings struct {
	timeout time.Duration // per attempt
	retries int           // further attempts after a transport failure (reads only)
	maxGap  int           // largest hole merged when coalescing; -1: never merge
}

// newSettings validates the manifest's values (the manifest fills in max_gap's
// default when it is not written). timeout_ms 0 means "not set"; max_gap 0
// merges only adjoining reads and -1 disables coalescing; retries 0 means none.
func newSettings(timeoutMs, retries, maxGap int) (settings, error) {
	s := settings{timeout: time.Duration(timeoutMs) * time.Millisecond, retries: retries, maxGap: maxGap}
	switch {
	case timeoutMs < 0:
		return s, fmt.Errorf("timeout_ms %d: must not be negative", timeoutMs)
	case retries < 0 || retries > maxRetries:
		return s, fmt.Errorf("retries %d: must be 0..%d", retries, maxRetries)
	case maxGap < -1 || maxGap > maxReadBits:
		return s, fmt.Errorf("max_gap %d: must be -1 (no coalescing) or 0..%d", maxGap, maxReadBits)
	}
	if s.timeout == 0 {
		s.timeout = defaultTimeout
	}
	return s, nil
}

// transporter is a goburrow Transporter that honours a per-exchange deadline.
// Only the bus worker calls it, one exchange at a time. Send wraps failures
// that happened before any byte left with notSent.
type transporter interface {
	gb.Transporter
	// prepare sets the next exchange's deadline and whether its request may
	// be sent twice (reads: yes; writes: never).
	prepare(deadline time.Time, mayResend bool)
	// fault tells the transport the last exchange went wrong above the byte
	// level (bad CRC, mismatched reply), so it must resynchronise.
	fault()
	close() error
}

// Bus is one Modbus bus. It implements drivers.ModbusBus.
type Bus struct {
	desc    string
	set     settings
	tr      transporter
	client  gb.Client
	setUnit func(uint8)
	// unitOK rejects unit ids the transport cannot address (RTU broadcast).
	unitOK func(uint8) error

	mu    sync.Mutex
	queue []*request
	// busy: a goroutine owns the bus (runs a transaction or serves the
	// queue). A non-empty queue always has an owner.
	busy   bool
	closed bool
	idle   chan struct{} // closed when the owner leaves after Close
	done   chan struct{}

	transactions atomic.Uint64
}

var _ drivers.ModbusBus = (*Bus)(nil)

// newBus makes a bus on tr. done is closed by Close; the transport watches it
// too, so a backoff wait does not hold Close up.
func newBus(desc string, set settings, pk gb.Packager, setUnit func(uint8), tr transporter, unitOK func(uint8) error, done chan struct{}) *Bus {
	return &Bus{
		desc: desc, set: set, tr: tr,
		client: gb.NewClient2(pk, tr), setUnit: setUnit, unitOK: unitOK,
		done: done,
	}
}

// Describe names the bus ("modbus-tcp 10.0.0.5:502").
func (b *Bus) Describe() string { return b.desc }

// Transactions is how many request frames the bus has sent (attempts included).
func (b *Bus) Transactions() uint64 { return b.transactions.Load() }

// Close fails the waiting requests, lets a transaction in flight finish and
// releases the transport.
func (b *Bus) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	for _, r := range b.queue {
		b.finishLocked(r, result{err: b.opError(r, notSent(ErrClosed))})
	}
	b.queue = nil
	var idle chan struct{}
	if b.busy {
		idle = make(chan struct{})
		b.idle = idle
	}
	b.mu.Unlock()
	close(b.done)
	if idle != nil {
		<-idle
	}
	return b.tr.close()
}

type opKind int

const (
	opReadBits opKind = iota
	opReadRegisters
	opWriteCoils
	opWriteRegisters
)

func (k opKind) isRead() bool { return k == opReadBits || k == opReadRegisters }

type reqState int

const (
	stateQueued reqState = iota
	stateOnBus
	stateFinished
)

// request is one caller's operation. state is guarded by Bus.mu.
type request struct {
	ctx   context.Context
	kind  opKind
	unit  uint8
	table manifest.ModbusTable
	addr  uint16
	count uint16
	bits  []bool   // coils to write
	regs  []uint16 // registers to write
	state reqState
	done  chan result // buffered, so the bus's owner never waits for a caller
}

func (r *request) end() int { return int(r.addr) + int(r.count) }

func (r *request) function() uint8 {
	switch {
	case r.kind == opReadBits && r.table == manifest.TableCoil:
		return fcReadCoils
	case r.kind == opReadBits:
		return fcReadDiscreteInputs
	case r.kind == opReadRegisters && r.table == manifest.TableHolding:
		return fcReadHolding
	case r.kind == opReadRegisters:
		return fcReadInput
	case r.kind == opWriteCoils && r.count == 1:
		return fcWriteCoil
	case r.kind == opWriteCoils:
		return fcWriteCoils
	case r.kind == opWriteRegisters && r.count == 1:
		return fcWriteRegister
	}
	return fcWriteRegisters
}

type result struct {
	bits []bool
	regs []uint16
	err  error
}

// ReadBits reads coils (FC1) or discrete inputs (FC2).
func (b *Bus) ReadBits(ctx context.Context, unit uint8, table manifest.ModbusTable, addr, count uint16) ([]bool, error) {
	r := &request{ctx: ctx, kind: opReadBits, unit: unit, table: table, addr: addr, count: count}
	if !table.IsBits() {
		return nil, b.opError(r, fmt.Errorf("table %q does not hold bits (use coil or discrete_input)", table))
	}
	res := b.submit(r, maxReadBits)
	return res.bits, res.err
}

// ReadRegisters reads holding (FC3) or input (FC4) registers.
func (b *Bus) ReadRegisters(ctx context.Context, unit uint8, table manifest.ModbusTable, addr, count uint16) ([]uint16, error) {
	r := &request{ctx: ctx, kind: opReadRegisters, unit: unit, table: table, addr: addr, count: count}
	if table != manifest.TableHolding && table != manifest.TableInput {
		return nil, b.opError(r, fmt.Errorf("table %q does not hold registers (use holding or input)", table))
	}
	res := b.submit(r, maxReadRegisters)
	return res.regs, res.err
}

// WriteCoils writes one coil (FC5) or several (FC15).
func (b *Bus) WriteCoils(ctx context.Context, unit uint8, addr uint16, values []bool) error {
	r := &request{ctx: ctx, kind: opWriteCoils, unit: unit, table: manifest.TableCoil, addr: addr,
		count: uint16(min(len(values), 0xFFFF)), bits: values}
	return b.submit(r, maxWriteCoils).err
}

// WriteRegisters writes one holding register (FC6) or several (FC16).
func (b *Bus) WriteRegisters(ctx context.Context, unit uint8, addr uint16, values []uint16) error {
	r := &request{ctx: ctx, kind: opWriteRegisters, unit: unit, table: manifest.TableHolding, addr: addr,
		count: uint16(min(len(values), 0xFFFF)), regs: values}
	return b.submit(r, maxWriteRegisters).err
}

func (b *Bus) opError(r *request, err error) error {
	return &OpError{Bus: b.desc, Unit: r.unit, Function: r.function(), Table: r.table, Address: r.addr, Count: r.count, Err: err}
}

// submit runs r at once when the bus is idle and the caller may run it
// itself; otherwise it queues r and waits for its result or for the caller's
// context.
func (b *Bus) submit(r *request, maxCount int) result {
	if err := b.unitOK(r.unit); err != nil {
		return result{err: b.opError(r, notSent(err))}
	}
	if r.count == 0 || int(r.count) > maxCount || len(r.bits)+len(r.regs) > maxCount {
		return result{err: b.opError(r, notSent(fmt.Errorf("count must be 1..%d", maxCount)))}
	}
	if r.end() > 0x10000 {
		return result{err: b.opError(r, notSent(errors.New("range runs past address 65535")))}
	}
	b.mu.Lock()
	switch {
	case b.closed:
		b.mu.Unlock()
		return result{err: b.opError(r, notSent(ErrClosed))}
	case !b.busy && runsItself(r.ctx):
		b.busy = true
		r.state = stateOnBus
		b.mu.Unlock()
		defer b.release()
		return b.runOne(r)
	case len(b.queue) >= queueLen:
		b.mu.Unlock()
		return result{err: b.opError(r, notSent(fmt.Errorf("%w (%d waiting)", ErrQueueFull, queueLen)))}
	}
	r.done = make(chan result, 1)
	b.queue = append(b.queue, r)
	if !b.busy {
		b.busy = true
		go b.serve()
	}
	b.mu.Unlock()

	select {
	case res := <-r.done:
		return res
	case <-r.ctx.Done():
	}
	b.mu.Lock()
	state := r.state
	if state == stateQueued {
		b.removeLocked(r)
	}
	b.mu.Unlock()
	switch state {
	case stateQueued:
		return result{err: b.opError(r, notSent(ctxError(r.ctx.Err(), "while waiting for the bus")))}
	case stateOnBus:
		err := ctxError(r.ctx.Err(), "while the request was on the bus")
		if !r.kind.isRead() {
			// The helper goes on without the caller and may have sent it
			// already; a read queued after it still sees its outcome.
			err = fmt.Errorf("%w: %w", drivers.ErrInDoubt, err)
		}
		return result{err: b.opError(r, err)}
	}
	return <-r.done
}

// runsItself reports whether a caller may run its transaction on its own
// goroutine: it cannot give up at all, or its deadline bounds every attempt
// (an explicit cancel before it waits out the attempt under way).
func runsItself(ctx context.Context) bool {
	if _, ok := ctx.Deadline(); ok {
		return true
	}
	return ctx.Done() == nil
}

// ctxError keeps the context's error and, for a deadline, drivers.ErrTimeout.
func ctxError(err error, what string) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: deadline passed %s (%w)", drivers.ErrTimeout, what, err)
	}
	return fmt.Errorf("%w %s", err, what)
}

func (b *Bus) removeLocked(r *request) {
	for i, q := range b.queue {
		if q == r {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			return
		}
	}
}

func (b *Bus) finishLocked(r *request, res result) {
	r.state = stateFinished
	r.done <- res
}

func (b *Bus) finish(r *request, res result) {
	b.mu.Lock()
	b.finishLocked(r, res)
	b.mu.Unlock()
}

// release ends a caller's own transaction: requests that queued meanwhile
// go to a helper, so the caller returns at once.
func (b *Bus) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.leaveLocked()
		return
	}
	go b.serve()
}

// leaveLocked gives the bus up.
func (b *Bus) leaveLocked() {
	b.busy = false
	if b.idle != nil {
		close(b.idle)
		b.idle = nil
	}
}

// serve owns the bus until the queue is empty.
func (b *Bus) serve() {
	for {
		batch := b.next()
		if batch == nil {
			return
		}
		b.run(batch)
	}
}

// next takes the request at the head of the queue and the reads merged with
// it, and marks them as on the bus. When nothing is left it gives the bus up.
func (b *Bus) next() []*request {
	b.mu.Lock()
	defer b.mu.Unlock()
	live := b.queue[:0]
	for _, r := range b.queue {
		if err := r.ctx.Err(); err != nil {
			b.finishLocked(r, result{err: b.opError(r, notSent(ctxError(err, "while waiting for the bus")))})
			continue
		}
		live = append(live, r)
	}
	clear(b.queue[len(live):])
	b.queue = live
	if len(b.queue) == 0 {
		b.leaveLocked()
		return nil
	}
	var batch []*request
	batch, b.queue = takeBatch(b.queue, b.set.maxGap)
	for _, r := range batch {
		r.state = stateOnBus
	}
	return batch
}

// takeBatch removes the head of q and every queued read that can travel with
// it in one request: same kind, unit and table, ranges within maxGap of the
// growing merged range, and the merged range within the protocol's limit.
// It does not look past a write to the same unit, so a read queued after a
// write never overtakes it. maxGap < 0 disables merging.
func takeBatch(q []*request, maxGap int) (batch, rest []*request) {
	head := q[0]
	batch = []*request{head}
	if !head.kind.isRead() || maxGap < 0 {
		return batch, q[1:]
	}
	limit := maxReadRegisters
	if head.kind == opReadBits {
		limit = maxReadBits
	}
	lo, hi := int(head.addr), head.end()
	taken := make([]bool, len(q))
	taken[0] = true
	for grown := true; grown; {
		grown = false
		for i := 1; i < len(q); i++ {
			r := q[i]
			if !r.kind.isRead() && r.unit == head.unit {
				break
			}
			if taken[i] || r.kind != head.kind || r.unit != head.unit || r.table != head.table {
				continue
			}
			if int(r.addr) > hi+maxGap || r.end()+maxGap < lo {
				continue
			}
			nlo, nhi := min(lo, int(r.addr)), max(hi, r.end())
			if nhi-nlo > limit {
				continue
			}
			lo, hi = nlo, nhi
			taken[i], grown = true, true
			batch = append(batch, r)
		}
	}
	for i, r := range q {
		if !taken[i] {
			rest = append(rest, r)
		}
	}
	return batch, rest
}

// runOne performs r alone.
func (b *Bus) runOne(r *request) result {
	res := b.transact([]*request{r}, r)
	if res.err != nil {
		res.err = b.opError(r, res.err)
	}
	return res
}

// run performs a batch of queued requests and hands each caller its result.
func (b *Bus) run(batch []*request) {
	if len(batch) == 1 {
		b.finish(batch[0], b.runOne(batch[0]))
		return
	}
	lo, hi := int(batch[0].addr), batch[0].end()
	for _, r := range batch[1:] {
		lo, hi = min(lo, int(r.addr)), max(hi, r.end())
	}
	merged := &request{kind: batch[0].kind, unit: batch[0].unit, table: batch[0].table, addr: uint16(lo), count: uint16(hi - lo)}
	res := b.transact(batch, merged)
	if isException(res.err) {
		// The merged range may cover registers the device does not map: ask again one by one.
		for _, r := range batch {
			b.run([]*request{r})
		}
		return
	}
	for _, r := range batch {
		var mine result
		if res.err != nil {
			e := b.opError(r, res.err).(*OpError)
			e.Merged = fmt.Sprintf("%d count %d", merged.addr, merged.count)
			mine.err = e
		} else {
			from, to := int(r.addr)-lo, r.end()-lo
			if res.bits != nil {
				mine.bits = append([]bool(nil), res.bits[from:to]...)
			} else {
				mine.regs = append([]uint16(nil), res.regs[from:to]...)
			}
		}
		b.finish(r, mine)
	}
}

// transact performs op for the callers in batch: one attempt, plus for reads
// retries after transport failures, each attempt bounded by the bus timeout
// and by the latest caller deadline. Exceptions are answers and are never
// retried. A write is never repeated: once its frame may have left, a failure
// leaves its outcome in doubt.
func (b *Bus) transact(batch []*request, op *request) result {
	attempts := 1
	if op.kind.isRead() {
		attempts += b.set.retries
	}
	var res result
	for attempt := range attempts {
		deadline, live := b.attemptDeadline(batch)
		if !live {
			if res.err == nil {
				res.err = notSent(ctxError(batch[0].ctx.Err(), "before the request was sent"))
			}
			return res
		}
		res = b.exchange(deadline, op)
		if res.err == nil || isException(res.err) {
			if !op.kind.isRead() && exceptionInDoubt(res.err) {
				res.err = fmt.Errorf("%w (the device may have acted before it answered): %w", drivers.ErrInDoubt, res.err)
			}
			return res
		}
		b.tr.fault()
		if !op.kind.isRead() {
			if wasSent(res.err) {
				res.err = fmt.Errorf("%w (sent once, not resent): %w", drivers.ErrInDoubt, res.err)
			}
			return res
		}
		if attempt > 0 {
			res.err = fmt.Errorf("after %d attempts: %w", attempt+1, res.err)
		}
	}
	return res
}

// attemptDeadline is now plus the bus timeout, cut to the latest deadline of
// the callers still waiting; live is false when none is.
func (b *Bus) attemptDeadline(batch []*request) (deadline time.Time, live bool) {
	deadline = time.Now().Add(b.set.timeout)
	var latest time.Time
	unbounded := false
	for _, r := range batch {
		if r.ctx.Err() != nil {
			continue
		}
		live = true
		d, ok := r.ctx.Deadline()
		if !ok {
			unbounded = true
		} else if d.After(latest) {
			latest = d
		}
	}
	if live && !unbounded && latest.Before(deadline) {
		deadline = latest
	}
	return deadline, live
}

// exchange performs one request/response exchange through goburrow's client.
func (b *Bus) exchange(deadline time.Time, op *request) result {
	b.transactions.Add(1)
	b.setUnit(op.unit)
	b.tr.prepare(deadline, op.kind.isRead())
	var (
		raw []byte
		err error
		res result
	)
	switch op.function() {
	case fcReadCoils:
		raw, err = b.client.ReadCoils(op.addr, op.count)
	case fcReadDiscreteInputs:
		raw, err = b.client.ReadDiscreteInputs(op.addr, op.count)
	case fcReadHolding:
		raw, err = b.client.ReadHoldingRegisters(op.addr, op.count)
	case fcReadInput:
		raw, err = b.client.ReadInputRegisters(op.addr, op.count)
	case fcWriteCoil:
		v := uint16(0x0000)
		if op.bits[0] {
			v = 0xFF00
		}
		_, err = b.client.WriteSingleCoil(op.addr, v)
	case fcWriteCoils:
		_, err = b.client.WriteMultipleCoils(op.addr, op.count, packBits(op.bits))
	case fcWriteRegister:
		_, err = b.client.WriteSingleRegister(op.addr, op.regs[0])
	case fcWriteRegisters:
		_, err = b.client.WriteMultipleRegisters(op.addr, op.count, packRegisters(op.regs))
	}
	if err != nil {
		return result{err: mapException(err, op.function())}
	}
	switch op.kind {
	case opReadBits:
		res.bits, res.err = unpackBits(raw, int(op.count))
	case opReadRegisters:
		res.regs, res.err = unpackRegisters(raw, int(op.count))
	}
	return res
}

func packBits(bits []bool) []byte {
	out := make([]byte, (len(bits)+7)/8)
	for i, v := range bits {
		if v {
			out[i/8] |= 1 << (i % 8)
		}
	}
	return out
}

func unpackBits(raw []byte, n int) ([]bool, error) {
	if len(raw) != (n+7)/8 {
		return nil, fmt.Errorf("reply has %d data bytes, %d bits need %d", len(raw), n, (n+7)/8)
	}
	out := make([]bool, n)
	for i := range out {
		out[i] = raw[i/8]&(1<<(i%8)) != 0
	}
	return out, nil
}

func packRegisters(regs []uint16) []byte {
	out := make([]byte, 2*len(regs))
	for i, v := range regs {
		out[2*i], out[2*i+1] = byte(v>>8), byte(v)
	}
	return out
}

func unpackRegisters(raw []byte, n int) ([]uint16, error) {
	if len(raw) != 2*n {
		return nil, fmt.Errorf("reply has %d data bytes, %d registers need %d", len(raw), n, 2*n)
	}
	out := make([]uint16, n)
	for i := range out {
		out[i] = uint16(raw[2*i])<<8 | uint16(raw[2*i+1])
	}
	return out, nil
}
