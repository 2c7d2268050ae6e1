// Package modbusfault is a Modbus device for tests that misbehaves on demand:
// a TCP server on a loopback port (StartTCP) and an RTU server on a
// pseudo-terminal (StartRTU). It keeps the four tables in memory, answers
// FC1-6, 15 and 16, and applies faults chosen per function and address or
// for the next N requests: it can apply a write and then lose, delay, garble
// or refuse the reply, or drop the connection. It counts every request it
// receives and every write it applies, so a test can tell how many frames a
// client sent and how many writes took effect, and it lets a test wait until
// it has finished with a request instead of guessing how long that takes.
package modbusfault

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"
)

// Mode is what the device does with a request a fault matches.
type Mode int

const (
	// Normal: apply and answer (what happens without a fault).
	Normal Mode = iota
	// ApplyDrop: apply, then close the connection without answering.
	// On RTU there is no connection: the device stays silent.
	ApplyDrop
	// ApplyNoReply: apply and never answer; the connection stays open and
	// later requests are served.
	ApplyNoReply
	// ApplyFIN: apply, then shut down the sending side (FIN) without
	// answering, still reading what the client sends. RTU: silent.
	ApplyFIN
	// ApplyRST: apply, then reset the connection (SO_LINGER 0). RTU: silent.
	ApplyRST
	// Hang: neither apply nor answer. On TCP the connection hears nothing
	// more until the client closes it.
	Hang
	// Delay: apply, answer after Fault.Delay.
	Delay
	// Exception: do not apply; answer with exception Fault.Code.
	Exception
	// Garble: apply, then answer with a corrupt frame: a bad CRC on RTU, a
	// non-zero protocol id on TCP.
	Garble
	// Mismatch: apply, then answer as if the request had had another
	// function code (FC5 and FC6, FC15 and FC16, FC1 and FC2, FC3 and FC4
	// swapped): a well-formed reply that does not match the request.
	Mismatch
	// LateApply: hold the request without applying it until Fault.Hold is
	// closed (or Fault.Delay has passed), then apply it, even if the client
	// has closed the connection meanwhile, and answer if it has not. On TCP
	// the device serves its other connections meanwhile, as a TCP-to-RTU
	// gateway with a queue per connection does: a client that gave up and
	// reconnected can read the old value and then see the old write land.
	// On RTU the line is held too: nothing else is answered meanwhile.
	LateApply
	// LateException: do not apply; answer with exception Fault.Code after
	// Fault.Delay (or once Fault.Hold is closed), as a TCP-to-RTU gateway
	// answers 11 (target failed to respond) after its own timeout.
	LateException
	// ApplyException: apply, then answer with exception Fault.Code, as a
	// TCP-to-RTU gateway answers 11 when its target applied the write but
	// answered after the gateway's own timeout, or a device answers 4
	// (server device failure) when it failed after acting.
	ApplyException
	// AckLater: answer with exception 5 (acknowledge: accepted, to be acted
	// on later) at once, then apply the request after Fault.Delay (or once
	// Fault.Hold is closed), serving other requests meanwhile, as a device
	// does with a command that takes it a while.
	AckLater
)

var modeNames = [...]string{"normal", "apply-drop", "apply-no-reply", "apply-fin", "apply-rst", "hang", "delay",
	"exception", "garble", "mismatch", "late-apply", "late-exception", "apply-exception", "ack-later"}

func (m Mode) String() string {
	if m < 0 || int(m) >= len(modeNames) {
		return fmt.Sprintf("Mode(%d)", int(m))
	}
	return modeNames[m]
}

// Applies reports whether the device applies a write it handles in mode m.
func (m Mode) Applies() bool { return m != Hang && m != Exception && m != LateException }

// Request is a decoded request, as faults see it.
type Request struct {
	Unit     uint8
	Function uint8
	Address  uint16
	// Count is the number of registers or bits (1 for FC5 and FC6).
	Count uint16
}

// At matches requests with function code fc starting at addr.
func At(fc uint8, addr uint16) func(Request) bool {
	return func(r Request) bool { return r.Function == fc && r.Address == addr }
}

// OnFunction matches requests with function code fc.
func OnFunction(fc uint8) func(Request) bool {
	return func(r Request) bool { return r.Function == fc }
}

// Fault is a misbehaviour to inject.
type Fault struct {
	Mode Mode
	// Match picks the requests the fault applies to; nil matches all.
	Match func(Request) bool
	// Times is how many matching requests it affects; 0 means all of them.
	Times int
	// Delay is how long Delay and LateException modes hold the reply
	// (LateApply: the request).
	Delay time.Duration
	// Hold, when set, holds a Delay or LateException reply (a LateApply
	// request) until it is closed instead: a test closes it once the client
	// has given up, so the reply (the write) is late however slowly either
	// side is scheduled.
	Hold <-chan struct{}
	// Code is the exception code for Exception, LateException and
	// ApplyException modes (0 means 4, server device failure).
	Code uint8
}

// Table is one of the four Modbus tables.
type Table int

const (
	Coils Table = iota
	DiscreteInputs
	InputRegisters
	HoldingRegisters
)

type cell struct {
	t    Table
	addr uint16
}

// Device is the state both servers share: the tables, the faults and the
// counts. Its methods are safe for concurrent use.
type Device struct {
	mu       sync.Mutex
	values   map[cell]uint16 // bits are 0 or 1; absent cells read 0
	writes   map[cell]int    // applied writes per address
	requests map[uint8]int   // requests received per function code
	handled  map[uint8]int   // requests finished with per function code
	changed  chan struct{}   // closed and replaced when requests or handled grows
	faults   []*Fault
	done     chan struct{}  // closed when the server closes; ends delays
	later    sync.WaitGroup // AckLater requests still to apply
}

func newDevice() *Device {
	return &Device{values: map[cell]uint16{}, writes: map[cell]int{}, requests: map[uint8]int{},
		handled: map[uint8]int{}, changed: make(chan struct{}), done: make(chan struct{})}
}

// Inject adds a fault. A request takes the first injected fault that matches
// it and has uses left.
func (d *Device) Inject(f Fault) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults = append(d.faults, &f)
}

// Set stores a value (for coils and discrete inputs, non-zero is on).
func (d *Device) Set(t Table, addr, v uint16) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if t == Coils || t == DiscreteInputs {
		v = min(v, 1)
	}
	d.values[cell{t, addr}] = v
}

// Value returns a stored value (1 or 0 for bits).
func (d *Device) Value(t Table, addr uint16) uint16 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.values[cell{t, addr}]
}

// Writes is how many applied writes covered addr of t (coils or holding
// registers).
func (d *Device) Writes(t Table, addr uint16) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.writes[cell{t, addr}]
}

// Requests is how many requests with function code fc arrived intact (an RTU
// frame with a bad CRC is dropped uncounted), whatever became of them.
func (d *Device) Requests(fc uint8) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.requests[fc]
}

// AwaitHandled waits until the device has finished with n requests with
// function code fc: acted on them (applied or not, but for an AckLater
// request still to apply), answered them or chosen silence, and ended their
// connection when the fault says so. A request sent just before the client
// gave up may reach the device only after, so a test that counts what a
// call put on the wire waits for this first.
func (d *Device) AwaitHandled(ctx context.Context, fc uint8, n int) error {
	return d.await(ctx, func() int { return d.handled[fc] }, fmt.Sprintf("finished with %%d FC%d requests", fc), n)
}

// AwaitRequests waits until n requests with function code fc have arrived,
// whatever becomes of them (a held one has arrived and is not handled yet).
func (d *Device) AwaitRequests(ctx context.Context, fc uint8, n int) error {
	return d.await(ctx, func() int { return d.requests[fc] }, fmt.Sprintf("received %%d FC%d requests", fc), n)
}

// AwaitWrites waits until n applied writes have covered addr of t (as
// Writes counts them): an AckLater request is applied after its answer.
func (d *Device) AwaitWrites(ctx context.Context, t Table, addr uint16, n int) error {
	return d.await(ctx, func() int { return d.writes[cell{t, addr}] }, fmt.Sprintf("applied %%d writes to %d", addr), n)
}

// await waits until count (called under d.mu) is at least n; what
// describes it, with a %d for the count, should the wait end first.
func (d *Device) await(ctx context.Context, count func() int, what string, n int) error {
	for {
		d.mu.Lock()
		got, changed := count(), d.changed
		d.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("modbusfault: "+what+", waiting for %d: %w", got, n, ctx.Err())
		}
	}
}

// finished counts a request with function code fc as handled; the transports
// call it once they have done all they do about the request.
func (d *Device) finished(fc uint8) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.handled[fc]++
	d.counted()
}

// counted wakes the waiters of Await*; the caller holds d.mu.
func (d *Device) counted() {
	close(d.changed)
	d.changed = make(chan struct{})
}

// wait sleeps for dt, or until hold closes when it is not nil; false means the
// server closed meanwhile.
func (d *Device) wait(dt time.Duration, hold <-chan struct{}) bool {
	var elapsed <-chan time.Time // stays nil, never ready, while hold is set
	if hold == nil {
		t := time.NewTimer(dt)
		defer t.Stop()
		elapsed = t.C
	}
	select {
	case <-elapsed:
	case <-hold:
	case <-d.done:
		return false
	}
	return true
}

// outcome is what the transport does about one request: send pdu (nil: no
// reply) after waiting delay (or for hold), or act out mode. A LateApply
// outcome has no pdu yet: late applies the request after the wait.
type outcome struct {
	mode  Mode
	pdu   []byte
	delay time.Duration
	hold  <-chan struct{}
	late  func() []byte
}

// hold waits out o's delay or hold, then applies a LateApply request; false
// means the server closed meanwhile (a held request is then never applied).
func (d *Device) hold(o *outcome) bool {
	if o.mode != Delay && o.mode != LateApply && o.mode != LateException {
		return true
	}
	if !d.wait(o.delay, o.hold) {
		return false
	}
	if o.late != nil {
		o.pdu = o.late()
	}
	return true
}

// handle decodes a request PDU, picks its fault, applies it and builds the
// reply PDU.
func (d *Device) handle(unit uint8, pdu []byte) outcome {
	r, payload, code := decode(unit, pdu)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.requests[r.Function]++
	d.counted()
	if code != 0 {
		return outcome{mode: Normal, pdu: []byte{r.Function | 0x80, code}}
	}
	f := d.take(r)
	switch f.Mode {
	case Hang:
		return outcome{mode: Hang}
	case Exception, LateException:
		return outcome{mode: f.Mode, pdu: []byte{r.Function | 0x80, f.Code}, delay: f.Delay, hold: f.Hold}
	case LateApply:
		return outcome{mode: LateApply, delay: f.Delay, hold: f.Hold, late: func() []byte {
			d.mu.Lock()
			defer d.mu.Unlock()
			return d.apply(r, payload)
		}}
	case AckLater:
		payload = bytes.Clone(payload) // the transport reuses its buffer
		d.later.Go(func() {
			if d.wait(f.Delay, f.Hold) {
				d.mu.Lock()
				defer d.mu.Unlock()
				d.apply(r, payload)
			}
		})
		return outcome{mode: AckLater, pdu: []byte{r.Function | 0x80, 5}}
	}
	reply := d.apply(r, payload)
	switch f.Mode {
	case Mismatch:
		reply[0] = swapped[reply[0]]
	case ApplyException:
		reply = []byte{r.Function | 0x80, f.Code}
	}
	return outcome{mode: f.Mode, pdu: reply, delay: f.Delay, hold: f.Hold}
}

// swapped pairs function codes whose replies have the same layout.
var swapped = map[uint8]uint8{1: 2, 2: 1, 3: 4, 4: 3, 5: 6, 6: 5, 15: 16, 16: 15}

// take returns the fault for r, using it up, or a Normal one.
func (d *Device) take(r Request) Fault {
	for i, f := range d.faults {
		if f.Match != nil && !f.Match(r) {
			continue
		}
		out := *f
		if f.Times > 0 {
			if f.Times--; f.Times == 0 {
				d.faults = append(d.faults[:i], d.faults[i+1:]...)
			}
		}
		if (out.Mode == Exception || out.Mode == LateException || out.Mode == ApplyException) && out.Code == 0 {
			out.Code = 4
		}
		return out
	}
	return Fault{Mode: Normal}
}

// decode parses a request PDU. code is the exception it earns when it is
// malformed (1: unknown function, 3: bad count or length, 2: past 65535).
func decode(unit uint8, pdu []byte) (r Request, payload []byte, code uint8) {
	if len(pdu) == 0 {
		return r, nil, 1
	}
	r = Request{Unit: unit, Function: pdu[0]}
	if len(pdu) < 5 {
		return r, nil, 3
	}
	r.Address = binary.BigEndian.Uint16(pdu[1:])
	n := binary.BigEndian.Uint16(pdu[3:])
	switch r.Function {
	case 1, 2:
		r.Count = n
		if n == 0 || n > 2000 || len(pdu) != 5 {
			return r, nil, 3
		}
	case 3, 4:
		r.Count = n
		if n == 0 || n > 125 || len(pdu) != 5 {
			return r, nil, 3
		}
	case 5:
		r.Count = 1
		if (n != 0 && n != 0xFF00) || len(pdu) != 5 {
			return r, nil, 3
		}
		return r, pdu[3:5], 0
	case 6:
		r.Count = 1
		if len(pdu) != 5 {
			return r, nil, 3
		}
		return r, pdu[3:5], 0
	case 15, 16:
		r.Count = n
		size, limit := (int(n)+7)/8, 1968
		if r.Function == 16 {
			size, limit = 2*int(n), 123
		}
		if n == 0 || int(n) > limit || len(pdu) != 6+size || int(pdu[5]) != size {
			return r, nil, 3
		}
		payload = pdu[6:]
	default:
		return r, nil, 1
	}
	if int(r.Address)+int(r.Count) > 0x10000 {
		return r, nil, 2
	}
	return r, payload, 0
}

// apply performs a decoded request on the tables and returns its reply PDU.
// The caller holds d.mu.
func (d *Device) apply(r Request, payload []byte) []byte {
	fc := r.Function
	switch fc {
	case 1, 2:
		t := Coils
		if fc == 2 {
			t = DiscreteInputs
		}
		out := []byte{fc, byte((r.Count + 7) / 8)}
		out = append(out, make([]byte, (r.Count+7)/8)...)
		for i := range r.Count {
			if d.values[cell{t, r.Address + i}] != 0 {
				out[2+i/8] |= 1 << (i % 8)
			}
		}
		return out
	case 3, 4:
		t := HoldingRegisters
		if fc == 4 {
			t = InputRegisters
		}
		out := []byte{fc, byte(2 * r.Count)}
		for i := range r.Count {
			out = binary.BigEndian.AppendUint16(out, d.values[cell{t, r.Address + i}])
		}
		return out
	case 5:
		d.store(Coils, r.Address, min(binary.BigEndian.Uint16(payload), 1))
	case 6:
		d.store(HoldingRegisters, r.Address, binary.BigEndian.Uint16(payload))
	case 15:
		for i := range r.Count {
			d.store(Coils, r.Address+i, uint16(payload[i/8]>>(i%8)&1))
		}
	case 16:
		for i := range r.Count {
			d.store(HoldingRegisters, r.Address+i, binary.BigEndian.Uint16(payload[2*i:]))
		}
	}
	// Writes echo the address and the value (FC5, FC6) or the count.
	out := []byte{fc}
	out = binary.BigEndian.AppendUint16(out, r.Address)
	if fc == 5 || fc == 6 {
		return append(out, payload...)
	}
	return binary.BigEndian.AppendUint16(out, r.Count)
}

func (d *Device) store(t Table, addr, v uint16) {
	d.values[cell{t, addr}] = v
	d.writes[cell{t, addr}]++
	d.counted()
}
