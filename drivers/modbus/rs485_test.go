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

// rs485Before and rs485After are the configured delays of the recorded buses.
const (
	rs485Before = 300 * time.Microsecond
	rs485After  = 200 * time.Microsecond
)

// recordedRTU is an RTU bus at 9600 8E1 on a real pseudo-terminal, with the
// fault server answering (holding 0 is 1234), whose direction switch, port
// writes and waits are recorded; wait does the waiting.
func recordedRTU(tb testing.TB, mode manifest.RS485Direction, wait func(time.Duration)) (*Bus, *recorder, *serial.Mode) {
	srv := modbusfault.StartRTU(tb)
	srv.Device.Set(modbusfault.HoldingRegisters, 0, 1234)
	rec := &recorder{}
	var sw switcher = recSwitch{rec}
	if mode == manifest.DirGPIO {
		sw = lineSwitch{line: recLine{rec}, chip: recChip{rec}}
	}
	set, err := newSettings(1000, 0, manifest.DefaultMaxGap)
	if err != nil {
		tb.Fatal(err)
	}
	c := &manifest.ModbusRTUBus{Port: srv.Path(), Baud: 9600, Parity: "even", StopBits: 1,
		RS485: &manifest.RS485{Direction: mode, RTSOnSend: mode == manifest.DirRTS,
			DelayRTSBeforeSendUs: int(rs485Before / time.Microsecond), DelayRTSAfterSendUs: int(rs485After / time.Microsecond)}}
	b, err := newRTUBus(c, set, sw)
	if err != nil {
		tb.Fatal(err)
	}
	tr := b.tr.(*rtuTransport)
	tr.port = recPort{Port: tr.port, rec: rec}
	tr.dir.wait = func(d time.Duration) { rec.add("wait " + d.String()); wait(d) }
	m, _ := serialMode(c)
	return b, rec, m
}

// The user-space modes switch to transmit, wait the configured delay, write
// the frame, wait one character time for its last stop bit (a pty reports no
// line status), wait the configured delay and switch back to receive, with
// nothing else in between, on a real pseudo-terminal with the fault server
// answering. The order and the waits are the property; how late the switch
// is on the clock depends on the host's load and is BenchmarkRS485Release.
func TestRS485UserSpaceWaits(t *testing.T) {
	for _, mode := range []manifest.RS485Direction{manifest.DirRTS, manifest.DirGPIO} {
		t.Run(string(mode), func(t *testing.T) {
			b, rec, m := recordedRTU(t, mode, sleep)
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
			char := charTime(m)
			want := []string{"rx"} // receive as soon as the port opens
			for range frames {
				want = append(want, "tx", "wait "+rs485Before.String(), "write",
					"wait "+char.String(), "wait "+rs485After.String(), "rx")
			}
			want = append(want, "close")
			if !slices.Equal(kinds, want) {
				t.Fatalf("switch, port and wait events:\n%v\nwant\n%v", kinds, want)
			}
			// The waits are real: a load can only make them longer.
			for i := 1; i+5 < len(ev); i += 6 {
				tx, wrote, rx := ev[i].at, ev[i+2].at, ev[i+5].at
				if d := wrote.Sub(tx); d < rs485Before {
					t.Errorf("frame %d: written %v after switching to transmit, want at least %v", i/6, d, rs485Before)
				}
				if d := rx.Sub(wrote); d < char+rs485After {
					t.Errorf("frame %d: back to receive %v after the write, before the last stop bit (%v) plus the delay (%v)", i/6, d, char, rs485After)
				}
			}
		})
	}
}

// BenchmarkRS485Release is how long after the write returns the direction
// switch goes back to receive, beyond the last character and the configured
// delay, with the kernel's high-resolution sleep the code uses and with
// time.Sleep for comparison. A device may answer 3.5 characters after the
// frame (3.6 ms at 9600 8E1): a switch later than that talks over the reply.
// One op is one read at 9600 8E1 on a pseudo-terminal (rts mode).
func BenchmarkRS485Release(b *testing.B) {
	for _, c := range []struct {
		name string
		wait func(time.Duration)
	}{{"nanosleep", sleep}, {"time.Sleep", time.Sleep}} {
		b.Run(c.name, func(b *testing.B) {
			bus, rec, m := recordedRTU(b, manifest.DirRTS, c.wait)
			ctx := context.Background()
			for b.Loop() {
				if _, err := bus.ReadRegisters(ctx, 1, manifest.TableHolding, 0, 1); err != nil {
					b.Fatal(err)
				}
			}
			var late []time.Duration
			var wrote time.Time
			for _, e := range rec.events() {
				switch e.what {
				case "write":
					wrote = e.at
				case "rx":
					if !wrote.IsZero() {
						late = append(late, e.at.Sub(wrote)-charTime(m)-rs485After)
					}
				}
			}
			slices.Sort(late)
			b.ReportMetric(float64(late[len(late)/2].Microseconds()), "late-µs-median")
			b.ReportMetric(float64(late[len(late)-1].Microseconds()), "late-µs-max")
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
