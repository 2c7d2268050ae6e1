package modbus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.bug.st/serial"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/gpio"
	"github.com/physmcp/physmcpd/manifest"
)

// switcher drives a transceiver's driver-enable: on to transmit, off to receive.
type switcher interface {
	set(transmit bool) error
	close() error
}

// direction switches the RS-485 transceiver of one RTU bus (manifest
// rs485.direction). auto needs nothing; kernel is set once per port open
// (TIOCSRS485); rts and gpio switch from user space around each frame: to
// transmit before the first byte, back to receive once the last stop bit has
// left the UART, so the device's reply is never talked over.
type direction struct {
	path     string
	cfg      *manifest.RS485
	mode     manifest.RS485Direction
	charTime time.Duration       // one character on the wire
	before   time.Duration       // after switching to transmit, before the first byte
	after    time.Duration       // after the last stop bit, before switching back
	wait     func(time.Duration) // sleep; a test records the waits between the switch and the port

	sw  switcher // rts and gpio: RTS on ctl, or the direction line
	ctl *portCtl // rts and gpio: a second descriptor of the open port
}

// newDirection checks the RS-485 settings for the port. sw is what drives the
// driver-enable in the rts and gpio modes: the direction line for gpio, nil
// for rts (the port's RTS), or a test's recorder.
func newDirection(path string, r *manifest.RS485, m *serial.Mode, sw switcher) (*direction, error) {
	d := &direction{path: path, cfg: r, mode: r.Mode(), charTime: charTime(m), wait: sleep, sw: sw}
	if r != nil {
		if r.DelayRTSBeforeSendUs < 0 || r.DelayRTSAfterSendUs < 0 {
			return nil, errors.New("rs485: delays must not be negative")
		}
		d.before = time.Duration(r.DelayRTSBeforeSendUs) * time.Microsecond
		d.after = time.Duration(r.DelayRTSAfterSendUs) * time.Microsecond
	}
	switch d.mode {
	case manifest.DirAuto, manifest.DirKernel:
		if sw != nil {
			return nil, fmt.Errorf("rs485: direction %s switches no line", d.mode)
		}
	case manifest.DirRTS:
		if r.RTSOnSend == r.RTSAfterSend {
			return nil, errors.New("rs485: direction rts needs exactly one of rts_on_send and rts_after_send")
		}
		if d.sw == nil {
			d.sw = rtsSwitch{d: d, onSend: r.RTSOnSend}
		}
	case manifest.DirGPIO:
		if sw == nil {
			return nil, errors.New("rs485: direction gpio needs its line")
		}
	default:
		return nil, fmt.Errorf("rs485: unknown direction %q", d.mode)
	}
	return d, nil
}

// openPort prepares a port about to be opened: the kernel mode is set on the
// port, the user-space modes take their control descriptor first (the serial
// library then opens the port for exclusive use) and start in receive.
func (d *direction) openPort() error {
	switch d.mode {
	case manifest.DirKernel:
		return setRS485(d.path, d.cfg)
	case manifest.DirRTS, manifest.DirGPIO:
		ctl, err := openCtl(d.path)
		if err != nil {
			return fmt.Errorf("%w: rs485: opening %s: %w", drivers.ErrUnreachable, d.path, err)
		}
		d.ctl = ctl
		if err := d.sw.set(false); err != nil {
			d.closePort()
			return fmt.Errorf("rs485: direction %s: switching to receive: %w", d.mode, err)
		}
	}
	return nil
}

// closePort drops the control descriptor; the direction line stays requested.
func (d *direction) closePort() {
	if d.ctl != nil {
		d.ctl.close()
		d.ctl = nil
	}
}

// close releases everything, the direction line included.
func (d *direction) close() error {
	d.closePort()
	if d.sw != nil {
		return d.sw.close()
	}
	return nil
}

// transmit switches to transmit before a frame (user-space modes only).
func (d *direction) transmit() error {
	if d.ctl == nil {
		return nil
	}
	if err := d.sw.set(true); err != nil {
		return fmt.Errorf("rs485: switching to transmit: %w", err)
	}
	d.wait(d.before)
	return nil
}

// receive waits for the frame's last stop bit to leave, then switches back to
// receive. It switches even when the wait failed: a transceiver left in
// transmit would hold the whole bus.
func (d *direction) receive() error {
	if d.ctl == nil {
		return nil
	}
	werr := d.ctl.waitSent(d.charTime, d.wait)
	d.wait(d.after)
	if err := d.sw.set(false); err != nil {
		return fmt.Errorf("rs485: switching back to receive: %w", errors.Join(werr, err))
	}
	if werr != nil {
		return fmt.Errorf("rs485: waiting for the frame to leave: %w", werr)
	}
	return nil
}

// charTime is one character on the wire: start bit, data bits, parity, stop bits.
func charTime(m *serial.Mode) time.Duration {
	bits := 1 + m.DataBits + 1
	if m.Parity != serial.NoParity {
		bits++
	}
	if m.StopBits == serial.TwoStopBits {
		bits++
	}
	return time.Duration(bits) * time.Second / time.Duration(m.BaudRate)
}

// rtsSwitch drives RTS on the port's control descriptor: asserted while
// sending with rts_on_send, after sending with rts_after_send.
type rtsSwitch struct {
	d      *direction
	onSend bool
}

func (s rtsSwitch) set(transmit bool) error { return s.d.ctl.setRTS(transmit == s.onSend) }
func (rtsSwitch) close() error              { return nil }

// lineSwitch is a GPIO direction line, high (logical) while transmitting.
type lineSwitch struct {
	line drivers.GPIOLine
	chip drivers.Bus // closed with the bus, which releases the line at receive
}

func (s lineSwitch) set(transmit bool) error { return s.line.Write(context.Background(), transmit) }
func (s lineSwitch) close() error            { return s.chip.Close() }

// openDirLine requests the direction line of direction gpio through the GPIO
// driver, starting at receive (the request carries the level, so the
// transceiver never transmits on the way). Other modes need none.
func openDirLine(ctx context.Context, m *manifest.Manifest, r *manifest.RS485) (switcher, error) {
	if r.Mode() != manifest.DirGPIO || r.GPIO == nil {
		return nil, nil
	}
	l := r.GPIO
	b := m.Buses[l.Bus]
	if b == nil || b.GPIO == nil {
		return nil, fmt.Errorf("rs485: gpio bus %q: not a gpio bus of the manifest", l.Bus)
	}
	chip, err := gpio.Open(ctx, m, b)
	if err != nil {
		return nil, fmt.Errorf("rs485 direction line: %w", err)
	}
	line, err := chip.(drivers.GPIOChip).Line(l.Line, l.Offset,
		drivers.LineConfig{Direction: manifest.DirOutput, ActiveLow: l.ActiveLow, Initial: false})
	if err != nil {
		chip.Close()
		return nil, fmt.Errorf("rs485 direction line: %w", err)
	}
	return lineSwitch{line: line, chip: chip}, nil
}

// serialRS485 is the kernel's struct serial_rs485 (include/uapi/linux/serial.h).
type serialRS485 struct {
	Flags              uint32
	DelayRTSBeforeSend uint32 // milliseconds
	DelayRTSAfterSend  uint32 // milliseconds
	Padding            [5]uint32
}

const (
	serRS485Enabled      = 1 << 0
	serRS485RTSOnSend    = 1 << 1
	serRS485RTSAfterSend = 1 << 2
	serRS485RXDuringTX   = 1 << 4
	// serRS485Ours are the flags physmcpd sets; the driver may report others
	// (bus termination, addressing) that are none of its business.
	serRS485Ours = serRS485Enabled | serRS485RTSOnSend | serRS485RTSAfterSend | serRS485RXDuringTX
)

// kernelRS485 is what TIOCSRS485 is asked for.
func kernelRS485(r *manifest.RS485) serialRS485 {
	s := serialRS485{
		Flags: serRS485Enabled,
		// The kernel counts whole milliseconds; rounding up keeps at least the configured delay.
		DelayRTSBeforeSend: uint32((r.DelayRTSBeforeSendUs + 999) / 1000),
		DelayRTSAfterSend:  uint32((r.DelayRTSAfterSendUs + 999) / 1000),
	}
	for _, f := range []struct {
		on   bool
		flag uint32
	}{{r.RTSOnSend, serRS485RTSOnSend}, {r.RTSAfterSend, serRS485RTSAfterSend}, {r.RXDuringTX, serRS485RXDuringTX}} {
		if f.on {
			s.Flags |= f.flag
		}
	}
	return s
}

// rs485Diff names every setting the driver reported back differently from
// what was asked, comparing only the flags physmcpd sets; "" when none.
func rs485Diff(want, got serialRS485) string {
	var d []string
	for _, f := range []struct {
		name string
		flag uint32
	}{{"enabled", serRS485Enabled}, {"rts_on_send", serRS485RTSOnSend}, {"rts_after_send", serRS485RTSAfterSend}, {"rx_during_tx", serRS485RXDuringTX}} {
		if w, g := want.Flags&f.flag != 0, got.Flags&f.flag != 0; w != g {
			d = append(d, fmt.Sprintf("%s asked %v, got %v", f.name, w, g))
		}
	}
	for _, f := range []struct {
		name      string
		want, got uint32
	}{{"delay_rts_before_send", want.DelayRTSBeforeSend, got.DelayRTSBeforeSend}, {"delay_rts_after_send", want.DelayRTSAfterSend, got.DelayRTSAfterSend}} {
		if f.want != f.got {
			d = append(d, fmt.Sprintf("%s asked %d ms, got %d ms", f.name, f.want, f.got))
		}
	}
	return strings.Join(d, "; ")
}
