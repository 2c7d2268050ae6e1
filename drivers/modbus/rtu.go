package modbus

import (
	"context"
	"errors"
	"fmt"
	"time"

	gb "github.com/goburrow/modbus"
	"go.bug.st/serial"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
)

// OpenRTU opens a Modbus RTU bus on a serial port (drivers.Opener). The port
// is opened now, so a wrong path or an RS-485 setting the driver refuses is
// reported at start-up; after a port error (adapter unplugged) it is reopened
// with backoff.
func OpenRTU(ctx context.Context, m *manifest.Manifest, b *manifest.Bus) (drivers.Bus, error) {
	c := b.ModbusRTU
	if c == nil {
		return nil, fmt.Errorf("bus %q: no modbus-rtu settings", b.Name)
	}
	set, err := newSettings(c.TimeoutMs, c.Retries, c.MaxGap)
	if err != nil {
		return nil, fmt.Errorf("bus %q: %w", b.Name, err)
	}
	line, err := openDirLine(ctx, m, c.RS485)
	if err != nil {
		return nil, fmt.Errorf("bus %q: %w", b.Name, err)
	}
	bus, err := newRTUBus(c, set, line)
	if err != nil {
		if line != nil {
			line.close()
		}
		return nil, fmt.Errorf("bus %q: %w", b.Name, err)
	}
	return bus, nil
}

// newRTUBus opens the bus; sw is the RS-485 direction switch of the rts and
// gpio modes (see newDirection).
func newRTUBus(c *manifest.ModbusRTUBus, set settings, sw switcher) (*Bus, error) {
	mode, err := serialMode(c)
	if err != nil {
		return nil, err
	}
	dir, err := newDirection(c.Port, c.RS485, mode, sw)
	if err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	tr := &rtuTransport{path: c.Port, mode: mode, dir: dir, stop: stop, gap: frameGap(mode)}
	if err := tr.open(); err != nil {
		return nil, err
	}
	// The handler is used only as the packager (address byte and CRC): its
	// transporter sleeps ~750 µs per byte and never flushes stale input.
	pk := gb.NewRTUClientHandler(c.Port)
	return newBus("modbus-rtu "+c.Port, set, pk, func(u uint8) { pk.SlaveId = u }, tr, rtuUnitOK, stop), nil
}

// rtuUnitOK refuses the broadcast address (no reply, so a write could not be
// confirmed) and the reserved range.
func rtuUnitOK(u uint8) error {
	if u == 0 || u > 247 {
		return fmt.Errorf("unit %d: RTU units are 1..247 (0 is broadcast, which gets no reply)", u)
	}
	return nil
}

func serialMode(c *manifest.ModbusRTUBus) (*serial.Mode, error) {
	m := &serial.Mode{BaudRate: c.Baud, DataBits: c.DataBits}
	if c.Baud <= 0 {
		return nil, fmt.Errorf("baud %d: must be positive", c.Baud)
	}
	if m.DataBits == 0 {
		m.DataBits = 8
	}
	if m.DataBits < 5 || m.DataBits > 8 {
		return nil, fmt.Errorf("data_bits %d: must be 5..8", c.DataBits)
	}
	switch c.Parity {
	case "none":
		m.Parity = serial.NoParity
	case "even":
		m.Parity = serial.EvenParity
	case "odd":
		m.Parity = serial.OddParity
	default:
		return nil, fmt.Errorf("parity %q: must be none, even or odd", c.Parity)
	}
	switch c.StopBits {
	case 1:
		m.StopBits = serial.OneStopBit
	case 2:
		m.StopBits = serial.TwoStopBits
	default:
		return nil, fmt.Errorf("stop_bits %d: must be 1 or 2", c.StopBits)
	}
	return m, nil
}

// frameGap is the silence that must separate frames: 3.5 character times, or
// a fixed 1.75 ms above 19200 baud (Modbus over serial line, 2.5.1.1).
func frameGap(m *serial.Mode) time.Duration {
	if m.BaudRate > 19200 {
		return 1750 * time.Microsecond
	}
	return charTime(m) * 7 / 2
}

// rtuTransport carries RTU frames over a serial port: wait out the inter-frame
// gap, drop stale input, write, then read exactly the reply's length (known
// from its function code) or give up at the deadline. Frames leave in order
// on the one line, the next only after the previous was given up on, so a
// write whose reply was lost reaches the device before the read that
// settles it: an RTU bus needs no settle window (manifest.Bus.LateWrite).
type rtuTransport struct {
	path     string
	mode     *serial.Mode
	dir      *direction
	stop     <-chan struct{}
	gap      time.Duration
	port     serial.Port
	lastIO   time.Time
	deadline time.Time
	bo       backoff
}

// prepare needs no resend policy: the bus decides about retries, and a serial
// line has no connection to reopen before sending.
func (t *rtuTransport) prepare(d time.Time, _ bool) { t.deadline = d }

// fault needs nothing: every exchange starts by discarding stale input.
func (t *rtuTransport) fault() {}

// close closes the bus's port and releases its RS-485 direction line.
func (t *rtuTransport) close() error {
	return errors.Join(t.closePort(), t.dir.close())
}

func (t *rtuTransport) closePort() error {
	if t.port == nil {
		return nil
	}
	t.dir.closePort()
	err := t.port.Close()
	t.port = nil
	return err
}

func (t *rtuTransport) open() error {
	if err := t.dir.openPort(); err != nil {
		return fmt.Errorf("%s: %w", t.path, err)
	}
	p, err := serial.Open(t.path, t.mode)
	if err != nil {
		t.dir.closePort()
		return fmt.Errorf("%w: opening %s: %w", drivers.ErrUnreachable, t.path, err)
	}
	t.port = p
	return nil
}

func (t *rtuTransport) reopen() error {
	if t.port != nil {
		return nil
	}
	if err := t.bo.wait(time.Now(), t.deadline, t.stop); err != nil {
		return err
	}
	if err := t.open(); err != nil {
		t.bo.failed(time.Now(), err)
		return err
	}
	t.bo.succeeded()
	return nil
}

// portError closes the port after an I/O error so the next exchange reopens it.
func (t *rtuTransport) portError(what string, err error) error {
	_ = t.closePort()
	t.bo.failed(time.Now(), err)
	return fmt.Errorf("%w: %s %s: %w", drivers.ErrUnreachable, what, t.path, err)
}

// Send implements gb.Transporter. Once any byte of adu is written, every
// failure may follow a request the device got.
func (t *rtuTransport) Send(adu []byte) ([]byte, error) {
	if err := t.reopen(); err != nil {
		return nil, notSent(err)
	}
	if wait := time.Until(t.lastIO.Add(t.gap)); wait > 0 {
		time.Sleep(wait)
	}
	// A late reply to an earlier, timed-out request would otherwise be taken
	// for this request's reply.
	if err := t.port.ResetInputBuffer(); err != nil {
		return nil, notSent(t.portError("flushing", err))
	}
	if err := t.dir.transmit(); err != nil {
		return nil, notSent(t.portError("switching", err))
	}
	if err := t.write(adu); err != nil {
		return nil, err
	}
	if err := t.dir.receive(); err != nil {
		return nil, t.portError("switching", err)
	}
	var buf [256]byte
	got := 0
	for {
		need, err := rtuReplyLen(buf[:got])
		if err != nil {
			t.lastIO = time.Now()
			return nil, err
		}
		if need > 0 && got >= need {
			t.lastIO = time.Now()
			return append([]byte(nil), buf[:need]...), nil
		}
		left := time.Until(t.deadline)
		if left <= 0 {
			t.lastIO = time.Now()
			return nil, fmt.Errorf("%w: no complete reply before the deadline (got % x)", drivers.ErrTimeout, buf[:got])
		}
		if err := t.port.SetReadTimeout(left); err != nil {
			return nil, t.portError("configuring", err)
		}
		want := len(buf)
		if need > 0 {
			want = need
		}
		n, err := t.port.Read(buf[got:want])
		if err != nil {
			return nil, t.portError("reading", err)
		}
		// n == 0 is go.bug.st/serial's read timeout; the loop checks the deadline.
		got += n
	}
}

// write puts adu on the wire. The direction is switched back to receive
// before a failure is reported, so a transceiver is never left transmitting.
func (t *rtuTransport) write(adu []byte) error {
	for sent := 0; sent < len(adu); {
		n, err := t.port.Write(adu[sent:])
		if err != nil {
			_ = t.dir.receive()
			err = t.portError("writing", err)
			if sent+max(n, 0) == 0 {
				err = notSent(err)
			}
			return err
		}
		sent += n
	}
	return nil
}

// rtuReplyLen is the full length of the RTU reply that starts with b, or 0
// while too few bytes have arrived to tell.
func rtuReplyLen(b []byte) (int, error) {
	if len(b) < 2 {
		return 0, nil
	}
	fc := b[1]
	switch {
	case fc&0x80 != 0:
		return 5, nil // unit, function|0x80, exception code, CRC
	case fc >= fcReadCoils && fc <= fcReadInput:
		if len(b) < 3 {
			return 0, nil
		}
		return 3 + int(b[2]) + 2, nil
	case fc == fcWriteCoil || fc == fcWriteRegister || fc == fcWriteCoils || fc == fcWriteRegisters:
		return 8, nil
	}
	return 0, fmt.Errorf("reply has function code %d, which this driver never sends (got % x)", fc, b)
}
