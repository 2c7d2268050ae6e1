package modbus

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/internal/modbusfault"
	"github.com/physmcp/physmcpd/manifest"
)

// A write the TCP bus gave up on (its deadline passed) leaves its connection
// listening for the reply until late_write_ms has passed: the device's echo,
// however late, says the write was applied; an exception, the connection
// closing, the window passing or the bus closing say nothing. Meanwhile the
// bus goes on over a new connection.
func TestLateReplyTCP(t *testing.T) {
	const window = 30 * time.Second // longer than any test waits: the end of listening is the event's
	cases := []struct {
		name    string
		mode    modbusfault.Mode
		late    time.Duration
		end     func(s *modbusfault.TCP, b *Bus, release func()) // makes listening end
		proved  bool                                             // the echo proves it applied
		applied int                                              // writes the device applies in the end
	}{
		{name: "echo", mode: modbusfault.LateApply, late: window, end: func(_ *modbusfault.TCP, _ *Bus, release func()) { release() }, proved: true, applied: 1},
		{name: "gateway-exception", mode: modbusfault.LateException, late: window, end: func(_ *modbusfault.TCP, _ *Bus, release func()) { release() }},
		{name: "fin", mode: modbusfault.LateApply, late: window, end: func(s *modbusfault.TCP, _ *Bus, _ func()) { s.CloseConns(false) }, applied: 1},
		{name: "rst", mode: modbusfault.LateApply, late: window, end: func(s *modbusfault.TCP, _ *Bus, _ func()) { s.CloseConns(true) }, applied: 1},
		{name: "bus-closed", mode: modbusfault.LateApply, late: window, end: func(_ *modbusfault.TCP, b *Bus, _ func()) { b.Close() }, applied: 1},
		{name: "window-passed", mode: modbusfault.LateApply, late: 50 * time.Millisecond, end: func(*modbusfault.TCP, *Bus, func()) {}, applied: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := modbusfault.StartTCP(t)
			set, err := newSettings(int(faultTimeout/time.Millisecond), 0, manifest.DefaultMaxGap)
			if err != nil {
				t.Fatal(err)
			}
			b := newTCPBus(s.Addr(), set, c.late)
			t.Cleanup(func() { b.Close() })
			hold := make(chan struct{})
			s.Inject(modbusfault.Fault{Mode: c.mode, Code: 11, Match: modbusfault.At(fcWriteRegister, faultAddr), Times: 1, Hold: hold})

			err = b.WriteRegisters(context.Background(), 1, faultAddr, []uint16{0x1234})
			var lr *drivers.LateReply
			if !errors.Is(err, drivers.ErrInDoubt) || !errors.Is(err, drivers.ErrTimeout) || !errors.As(err, &lr) {
				t.Fatalf("held write: err = %v, want in doubt, timed out, listening for the reply", err)
			}
			if c.name == "echo" {
				// The bus goes on over a new connection; the write has not landed.
				regs, err := b.ReadRegisters(context.Background(), 1, manifest.TableHolding, faultAddr, 1)
				if err != nil || regs[0] != 0 {
					t.Fatalf("read while listening: %v, %v; want 0", regs, err)
				}
			}
			c.end(s, b, func() { close(hold) })
			select {
			case <-lr.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("still listening 10 s after it should have ended")
			}
			if lr.Applied() != c.proved {
				t.Fatalf("late reply proves applied: %v, want %v", lr.Applied(), c.proved)
			}
			if !c.proved {
				select {
				case <-hold:
				default:
					close(hold) // the device acts on the frame only now, after listening ended
				}
			}
			awaitHandled(t, s.Device, fcWriteRegister, 1)
			if frames, n := s.Requests(fcWriteRegister), s.Writes(modbusfault.HoldingRegisters, faultAddr); frames != 1 || n != c.applied {
				t.Fatalf("%d FC6 frames, %d writes applied; want 1 and %d", frames, n, c.applied)
			}
		})
	}
}

// A device that takes one connection at a time refuses the bus's next one
// while the bus listens on the old: the refused connect ends the listening,
// so the connection is free for the next attempt.
func TestLateReplyGivesWayToANewConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	held := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		held <- c
		_, _ = io.Copy(io.Discard, c) // hears the write, never answers
	}()
	set, err := newSettings(int(faultTimeout/time.Millisecond), 0, manifest.DefaultMaxGap)
	if err != nil {
		t.Fatal(err)
	}
	b := newTCPBus(addr, set, 30*time.Second)
	t.Cleanup(func() { b.Close() })
	err = b.WriteRegisters(context.Background(), 1, faultAddr, []uint16{1})
	var lr *drivers.LateReply
	if !errors.As(err, &lr) {
		t.Fatalf("unanswered write: %v, want listening for the reply", err)
	}
	ln.Close() // the one connection it takes is in use: connects are refused
	if _, err := b.ReadRegisters(context.Background(), 1, manifest.TableHolding, 0, 1); !errors.Is(err, drivers.ErrUnreachable) {
		t.Fatalf("read while the device refuses connections: %v, want unreachable", err)
	}
	select {
	case <-lr.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("still listening 10 s after a connect was refused")
	}
	if lr.Applied() {
		t.Fatal("listening given up proves the write applied")
	}
	(<-held).Close()
}

// A device that takes one connection, and accepts another only to close it
// at once, gets its place back: the bus stops listening on the connection
// that holds it, as when a connect is refused.
func TestLateReplyGivesWayToAConnectionClosedAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	held := make(chan net.Conn, 1)
	go func() {
		for first := true; ; first = false {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !first {
				c.Close() // full: closed at once
				continue
			}
			held <- c
			go func() { _, _ = io.Copy(io.Discard, c) }() // hears the write, never answers
		}
	}()
	set, err := newSettings(int(faultTimeout/time.Millisecond), 0, manifest.DefaultMaxGap)
	if err != nil {
		t.Fatal(err)
	}
	b := newTCPBus(ln.Addr().String(), set, 30*time.Second)
	t.Cleanup(func() { b.Close() })
	err = b.WriteRegisters(context.Background(), 1, faultAddr, []uint16{1})
	var lr *drivers.LateReply
	if !errors.As(err, &lr) {
		t.Fatalf("unanswered write: %v, want listening for the reply", err)
	}
	if _, err := b.ReadRegisters(context.Background(), 1, manifest.TableHolding, 0, 1); !errors.Is(err, drivers.ErrUnreachable) {
		t.Fatalf("read on a connection the device closed at once: %v, want unreachable", err)
	}
	select {
	case <-lr.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("still listening 10 s after the device closed a new connection at once")
	}
	if lr.Applied() {
		t.Fatal("listening given up proves the write applied")
	}
	(<-held).Close()
}

// More in-doubt writes than MaxListening, each held by the device on its
// own connection: before each new connection the oldest listening one is
// closed, so the device never sees more than MaxListening+1 connections open
// (the bus holds MaxListening at most). A write whose listening was cut
// short is never proved applied, though the device applies it in the end:
// the proof is lost, never invented. The later ones are still heard out.
func TestLateReplyListeningIsCapped(t *testing.T) {
	const n = MaxListening + 2
	s := modbusfault.StartTCP(t)
	set, err := newSettings(int(faultTimeout/time.Millisecond), 0, manifest.DefaultMaxGap)
	if err != nil {
		t.Fatal(err)
	}
	b := newTCPBus(s.Addr(), set, 30*time.Second)
	t.Cleanup(func() { b.Close() })
	var holds [n]chan struct{}
	var late [n]*drivers.LateReply
	for i := range n {
		holds[i] = make(chan struct{})
		s.Inject(modbusfault.Fault{Mode: modbusfault.LateApply, Match: modbusfault.At(fcWriteRegister, faultAddr+uint16(i)), Times: 1, Hold: holds[i]})
		err := b.WriteRegisters(context.Background(), 1, faultAddr+uint16(i), []uint16{uint16(100 + i)})
		if !errors.As(err, &late[i]) {
			t.Fatalf("held write %d: %v, want listening for the reply", i, err)
		}
	}
	if peak := s.PeakConns(); peak > MaxListening+1 {
		t.Fatalf("the device saw %d connections open at once after %d in-doubt writes, want at most %d", peak, n, MaxListening+1)
	}
	t.Logf("%d in-doubt writes: at most %d connections open at once", n, s.PeakConns())
	for i := range n - MaxListening {
		select {
		case <-late[i].Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("write %d: still listening 10 s after %d later writes", i, n-1-i)
		}
	}
	for _, h := range holds {
		close(h) // the device applies every write now, and answers where it can
	}
	awaitHandled(t, s.Device, fcWriteRegister, n)
	for i := range n {
		if i >= n-MaxListening {
			select {
			case <-late[i].Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("write %d: still listening 10 s after the device answered", i)
			}
		}
		if proved, want := late[i].Applied(), i >= n-MaxListening; proved != want {
			t.Errorf("write %d: late reply proves it applied: %v, want %v", i, proved, want)
		}
		if w := s.Writes(modbusfault.HoldingRegisters, faultAddr+uint16(i)); w != 1 {
			t.Errorf("write %d applied %d times, want 1", i, w)
		}
	}
	if frames := s.Requests(fcWriteRegister); frames != n {
		t.Fatalf("%d FC6 frames, want %d", frames, n)
	}
}
