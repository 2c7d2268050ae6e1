package modbus

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.bug.st/serial"

	"github.com/physmcp/physmcpd/internal/modbusfault"
	"github.com/physmcp/physmcpd/manifest"
)

// recorder keeps what the direction switch and the port did, with when.
type recorder struct {
	mu sync.Mutex
	ev []event
}

type event struct {
	what string // tx, rx (the switch), write (a port write returned), close
	at   time.Time
}

func (r *recorder) add(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ev = append(r.ev, event{what, time.Now()})
}

func (r *recorder) events() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ev)
}

func level(transmit bool) string {
	if transmit {
		return "tx"
	}
	return "rx"
}

// recSwitch stands in for RTS, which a pseudo-terminal does not have.
type recSwitch struct{ *recorder }

func (s recSwitch) set(transmit bool) error { s.add(level(transmit)); return nil }
func (s recSwitch) close() error            { s.add("close"); return nil }

// recLine and recChip stand in for a GPIO line and its chip, so the gpio
// mode runs through lineSwitch as it does on a board.
type recLine struct{ *recorder }

func (l recLine) Read(context.Context) (bool, error)       { return false, nil }
func (l recLine) Write(_ context.Context, high bool) error { l.add(level(high)); return nil }

type recChip struct{ *recorder }

func (c recChip) Describe() string { return "recording chip" }
func (c recChip) Close() error     { c.add("close"); return nil }

// recPort notes when each write to the real pseudo-terminal returned.
type recPort struct {
	serial.Port
	rec *recorder
}

func (p recPort) Write(b []byte) (int, error) {
	n, err := p.Port.Write(b)
	p.rec.add("write")
	return n, err
}

// The user-space modes switch to transmit before the first byte and back to
// receive only after the last stop bit (a pty reports no line status, so one
// character time after tcdrain) plus the configured delays, and before the
// device may answer (3.5 character times), on a real pseudo-terminal with
// the fault server answering.
func TestRS485UserSpaceTiming(t *testing.T) {
	const (
		before = 300 * time.Microsecond
		after  = 200 * time.Microsecond
	)
	for _, mode := range []manifest.RS485Direction{manifest.DirRTS, manifest.DirGPIO} {
		t.Run(string(mode), func(t *testing.T) {
			srv := modbusfault.StartRTU(t)
			srv.Device.Set(modbusfault.HoldingRegisters, 0, 1234)
			rec := &recorder{}
			var sw switcher = recSwitch{rec}
			if mode == manifest.DirGPIO {
				sw = lineSwitch{line: recLine{rec}, chip: recChip{rec}}
			}
			set, err := newSettings(1000, 0, manifest.DefaultMaxGap)
			if err != nil {
				t.Fatal(err)
			}
			c := &manifest.ModbusRTUBus{Port: srv.Path(), Baud: 9600, Parity: "even", StopBits: 1,
				RS485: &manifest.RS485{Direction: mode, RTSOnSend: mode == manifest.DirRTS,
					DelayRTSBeforeSendUs: int(before / time.Microsecond), DelayRTSAfterSendUs: int(after / time.Microsecond)}}
			b, err := newRTUBus(c, set, sw)
			if err != nil {
				t.Fatal(err)
			}
			tr := b.tr.(*rtuTransport)
			tr.port = recPort{Port: tr.port, rec: rec}
			ctx := context.Background()
			const frames = 20
			for i := range frames {
				if i%2 == 0 {
					if v, err := b.ReadRegisters(ctx, 1, manifest.TableHolding, 0, 1); err != nil || v[0] != 1234 {
						t.Fatalf("read %d: %v, %v", i, v, err)
					}
				} else if err := b.WriteRegisters(ctx, 1, 1, []uint16{uint16(i)}); err != nil {
					t.Fatalf("write %d: %v", i, err)
				}
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}

			ev := rec.events()
			var kinds []string
			for _, e := range ev {
				kinds = append(kinds, e.what)
			}
			want := []string{"rx"} // receive as soon as the port opens
			for range frames {
				want = append(want, "tx", "write", "rx")
			}
			want = append(want, "close")
			if !slices.Equal(kinds, want) {
				t.Fatalf("switch and port events:\n%v\nwant\n%v", kinds, want)
			}
			mode9600, _ := serialMode(c)
			char, gap := charTime(mode9600), frameGap(mode9600)
			var holds []time.Duration
			for i := 1; i+2 < len(ev); i += 3 {
				tx, wrote, rx := ev[i].at, ev[i+1].at, ev[i+2].at
				if d := wrote.Sub(tx); d < before {
					t.Errorf("frame %d: written %v after switching to transmit, want at least %v", i/3, d, before)
				}
				hold := rx.Sub(wrote)
				if hold < char+after {
					t.Errorf("frame %d: back to receive %v after the write, before the last stop bit (%v) plus the delay (%v)", i/3, hold, char, after)
				}
				holds = append(holds, hold)
			}
			slices.Sort(holds)
			median := holds[len(holds)/2]
			t.Logf("%s at 9600 8E1: character %v, released after the write: min %v, median %v, max %v (device may answer after %v)",
				mode, char, holds[0], median, holds[len(holds)-1], gap)
			// A late switch talks over the reply: time.Sleep, which rounds up
			// to the next millisecond, made the median 2 ms late here.
			if late := char + after + time.Millisecond; median >= min(late, gap) {
				t.Errorf("median release %v after the write: want below %v (and the device's 3.5 characters, %v)", median, late, gap)
			}
		})
	}
}

// The real kernel and RTS switches on a pseudo-terminal, which has neither,
// fail at open with what to do.
func TestRS485RefusedOnPTY(t *testing.T) {
	srv := modbusfault.StartRTU(t)
	set, err := newSettings(0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		r    manifest.RS485
		want string
	}{
		{manifest.RS485{Direction: manifest.DirKernel, RTSOnSend: true}, "refused TIOCSRS485 (not an RS-485 capable UART? USB adapters and ptys have no kernel mode: use direction auto, rts or gpio)"},
		{manifest.RS485{Enabled: true, RTSAfterSend: true}, "refused TIOCSRS485"},
		{manifest.RS485{Direction: manifest.DirRTS, RTSOnSend: true}, "direction rts: switching to receive: setting RTS (the port has no RTS line?)"},
	} {
		b, err := newRTUBus(&manifest.ModbusRTUBus{Port: srv.Path(), Baud: 115200, Parity: "none", StopBits: 1, RS485: &c.r}, set, nil)
		if err == nil {
			b.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.r, err, c.want)
		}
	}
	// auto does nothing to the port.
	b, err := newRTUBus(&manifest.ModbusRTUBus{Port: srv.Path(), Baud: 115200, Parity: "none", StopBits: 1,
		RS485: &manifest.RS485{Direction: manifest.DirAuto}}, set, nil)
	if err != nil {
		t.Fatalf("auto: %v", err)
	}
	b.Close()
}

func TestNewDirectionRefuses(t *testing.T) {
	m := &serial.Mode{BaudRate: 9600, DataBits: 8}
	for _, c := range []struct {
		r    *manifest.RS485
		sw   switcher
		want string
	}{
		{&manifest.RS485{Direction: manifest.DirRTS}, nil, "exactly one of rts_on_send and rts_after_send"},
		{&manifest.RS485{Direction: manifest.DirRTS, RTSOnSend: true, RTSAfterSend: true}, nil, "exactly one"},
		{&manifest.RS485{Direction: manifest.DirGPIO}, nil, "needs its line"},
		{&manifest.RS485{Direction: manifest.DirKernel, RTSOnSend: true}, recSwitch{&recorder{}}, "switches no line"},
		{&manifest.RS485{Direction: "hardware"}, nil, `unknown direction "hardware"`},
		{&manifest.RS485{Direction: manifest.DirRTS, RTSOnSend: true, DelayRTSAfterSendUs: -1}, nil, "must not be negative"},
	} {
		if _, err := newDirection("/dev/null", c.r, m, c.sw); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.r, err, c.want)
		}
	}
}

// What TIOCSRS485 is asked for, and how a driver's different answer is told.
func TestKernelRS485Settings(t *testing.T) {
	for _, c := range []struct {
		r    manifest.RS485
		want serialRS485
	}{
		{manifest.RS485{Direction: manifest.DirKernel, RTSOnSend: true}, serialRS485{Flags: 0x3}},
		{manifest.RS485{Direction: manifest.DirKernel, RTSAfterSend: true, RXDuringTX: true}, serialRS485{Flags: 0x15}},
		// The kernel counts milliseconds: 1 µs is 1 ms, 1000 µs 1 ms, 1001 µs 2 ms.
		{manifest.RS485{Enabled: true, RTSOnSend: true, DelayRTSBeforeSendUs: 1, DelayRTSAfterSendUs: 1001}, serialRS485{Flags: 0x3, DelayRTSBeforeSend: 1, DelayRTSAfterSend: 2}},
		{manifest.RS485{Enabled: true, RTSOnSend: true, DelayRTSAfterSendUs: 1000}, serialRS485{Flags: 0x3, DelayRTSAfterSend: 1}},
	} {
		if got := kernelRS485(&c.r); got != c.want {
			t.Errorf("%+v: %+v, want %+v", c.r, got, c.want)
		}
	}
	asked := serialRS485{Flags: serRS485Enabled | serRS485RTSAfterSend, DelayRTSBeforeSend: 5}
	for _, c := range []struct {
		got  serialRS485
		want string
	}{
		{asked, ""},
		// Flags physmcpd does not set (bus termination 1<<5) are not compared.
		{serialRS485{Flags: asked.Flags | 1<<5, DelayRTSBeforeSend: 5}, ""},
		// What a driver does with an RTS level it cannot produce, and a delay it cannot make.
		{serialRS485{Flags: serRS485Enabled | serRS485RTSOnSend}, "rts_on_send asked false, got true; rts_after_send asked true, got false; delay_rts_before_send asked 5 ms, got 0 ms"},
		{serialRS485{}, "enabled asked true, got false; rts_after_send asked true, got false; delay_rts_before_send asked 5 ms, got 0 ms"},
	} {
		if d := rs485Diff(asked, c.got); d != c.want {
			t.Errorf("diff with %+v = %q, want %q", c.got, d, c.want)
		}
	}
}
