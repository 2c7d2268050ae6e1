package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/modbusfault"
	"github.com/physmcp/physmcpd/promcp"
	"github.com/physmcp/physmcpd/state"
)

// ackWindow is acknowledge_ms in these tests: long enough that a quick retry
// made right after the acknowledge surely falls inside it on a loaded
// machine.
const ackWindow = 4000

// newAckRig is a rig on a Modbus device (transport tcp, with late_write_ms
// 0, or rtu) that acknowledges the first FC6 write to holding register 0
// and applies it once hold is closed.
func newAckRig(t *testing.T, transport string, opts engine.Options) (w *wireRig, hold chan struct{}) {
	t.Helper()
	var bus string
	var dev *modbusfault.Device
	if transport == "tcp" {
		s := modbusfault.StartTCP(t)
		dev = s.Device
		bus = fmt.Sprintf("{type: modbus-tcp, address: %q, timeout_ms: %d, late_write_ms: 0, acknowledge_ms: %d}", s.Addr(), wireTimeout, ackWindow)
	} else {
		s := modbusfault.StartRTU(t)
		dev = s.Device
		bus = fmt.Sprintf("{type: modbus-rtu, port: %s, baud: 115200, parity: none, stop_bits: 1, timeout_ms: %d, acknowledge_ms: %d}", s.Path(), wireTimeout, ackWindow)
	}
	w = wireRigOn(t, dev, bus, opts)
	hold = make(chan struct{})
	dev.Inject(modbusfault.Fault{Mode: modbusfault.AckLater, Match: modbusfault.At(6, 0), Times: 1, Hold: hold})
	return w, hold
}

// acknowledged makes the write the device acknowledges, through e.
func (w *wireRig) acknowledged(t *testing.T, e *engine.Engine) promcp.DoResponse {
	t.Helper()
	first := doOn(t, e, "do_flow_setpoint", 500, "A")
	if first.Status != promcp.StatusFailed || first.Permission != promcp.SourceUnreachable || !strings.Contains(first.Reason, "acknowledge_ms") {
		t.Fatalf("acknowledged write answered %+v, want in doubt with a settle window", first)
	}
	return first
}

// A device that answers a write with exception 5 (acknowledge) has accepted
// it and acts on it later (modbusfault.AckLater, held until the test lets
// it apply). Over RTU, and over TCP without late_write_ms, a retry with the
// key used to read the old value at once and write again: two writes
// applied, a second pulse on a command register. The acknowledge opens a
// settle window instead: the retry waits it out (or, when it cannot wait,
// writes nothing), another key is refused with cooldown_active, and the
// device applies the write once.
func TestAcknowledgedWriteIsAppliedOnce(t *testing.T) {
	for _, transport := range []string{"tcp", "rtu"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			w, hold := newAckRig(t, transport, engine.Options{})
			dev := w.dev
			end := lateUntil(t, w.acknowledged(t, w.e).Reason)

			// A retry that cannot wait for the window's end writes nothing.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			quick, err := w.e.Do(ctx, operator, "do_flow_setpoint", promcp.DoRequest{Value: 500, IdempotencyKey: "A"})
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			// The device acts on the acknowledged write only now.
			applied := dev.Writes(modbusfault.HoldingRegisters, 0)
			close(hold)
			w.await(t, func(ctx context.Context) error {
				return dev.AwaitWrites(ctx, modbusfault.HoldingRegisters, 0, applied+1)
			})
			if n, frames := dev.Writes(modbusfault.HoldingRegisters, 0), dev.Requests(6); n != 1 || frames != 1 {
				t.Fatalf("after a quick retry and the late apply: %d writes applied, %d FC6 frames; want 1 and 1 (quick retry answered %+v)", n, frames, quick)
			}
			if quick.Status != promcp.StatusFailed || quick.Permission != promcp.SourceUnreachable || !strings.Contains(quick.Reason, "could not wait") {
				t.Fatalf("retry that cannot wait for the window = %+v, want in doubt, nothing written", quick)
			}
			// Another key meets the window, applied or not, as cooldown_active.
			if b := w.do(t, "do_flow_setpoint", 700, "B"); b.Permission != promcp.CooldownActive ||
				!strings.Contains(b.Reason, `"A"`) || !strings.Contains(b.Reason, "acknowledge_ms") {
				t.Fatalf("B inside A's settle window = %+v, want cooldown_active naming A and acknowledge_ms", b)
			}

			again := w.do(t, "do_flow_setpoint", 500, "A")
			at, _ := time.Parse(time.RFC3339Nano, again.Timestamp)
			if again.Status != promcp.StatusSuccess || again.AppliedValue != int64(500) || at.Before(end.Truncate(time.Millisecond)) {
				t.Fatalf("patient retry = %+v, want success with 500 after %s", again, end)
			}
			if n, frames := dev.Writes(modbusfault.HoldingRegisters, 0), dev.Requests(6); n != 1 || frames != 1 {
				t.Fatalf("%d writes applied, %d FC6 frames; want 1 and 1", n, frames)
			}
		})
	}
}

// On RTU the write's intent has no window until the acknowledge comes back:
// the window it opens is saved, so a restarted engine still refuses another
// key inside it, and the retry waits for its end.
func TestAcknowledgeWindowSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	open := func() *state.Store {
		s, err := state.Open(dir, nil, quiet)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	w, hold := newAckRig(t, "rtu", engine.Options{Idempotency: s, Limits: s})
	end := lateUntil(t, w.acknowledged(t, w.e).Reason)
	if err := w.e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open()
	defer s.Close()
	e := w.open(t, engine.Options{Idempotency: s, Limits: s})
	if b := doOn(t, e, "do_flow_setpoint", 700, "B"); b.Permission != promcp.CooldownActive || !lateUntil(t, b.Reason).Equal(end) {
		t.Fatalf("B after a restart inside A's window = %+v, want cooldown_active until %s", b, end)
	}
	retryAppliedOnce(t, e, w.dev, hold)
}

// ackSaveLost is a state store that loses every save of key A after its
// first (the intent): a crash right after the acknowledge came back, before
// the window it opens was saved.
type ackSaveLost struct {
	*state.Store
	saves atomic.Int32
}

func (l *ackSaveLost) Save(key string, r engine.Record) error {
	if key == "A" && l.saves.Add(1) > 1 {
		return nil
	}
	return l.Store.Save(key, r)
}

// A crash after the device acknowledged a write and before its window was
// saved still finds a window after the restart: the RTU intent keeps the
// bound an acknowledge may open (the write's deadline and acknowledge_ms),
// so another key is refused and the retry waits, and the write is applied
// once. Before, the RTU intent had no window at all: B was written at once,
// and the retry of A found the old value and wrote it again.
func TestAcknowledgeWindowSurvivesACrashBeforeItsSave(t *testing.T) {
	dir := t.TempDir()
	open := func() *state.Store {
		s, err := state.Open(dir, nil, quiet)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	lost := &ackSaveLost{Store: s}
	w, hold := newAckRig(t, "rtu", engine.Options{Idempotency: lost, Limits: s})
	w.acknowledged(t, w.e)
	if err := w.e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open()
	defer s.Close()
	e := w.open(t, engine.Options{Idempotency: s, Limits: s})
	if b := doOn(t, e, "do_flow_setpoint", 700, "B"); b.Permission != promcp.CooldownActive {
		t.Fatalf("B after a restart inside A's possible window = %+v, want cooldown_active", b)
	}
	retryAppliedOnce(t, e, w.dev, hold)
}

// retryAppliedOnce retries A's write of 500 on the restarted engine e while
// the device still holds A's frame, releases it, and wants the retry to find
// it applied: one write and one FC6 frame at the device in all.
func retryAppliedOnce(t *testing.T, e *engine.Engine, dev *modbusfault.Device, hold chan struct{}) {
	t.Helper()
	again := make(chan promcp.DoResponse, 1)
	go func() {
		resp, _ := e.Do(context.Background(), operator, "do_flow_setpoint", promcp.DoRequest{Value: 500, IdempotencyKey: "A"})
		again <- resp
	}()
	close(hold)
	if resp := <-again; resp.Status != promcp.StatusSuccess {
		t.Fatalf("retry of A after a restart = %+v", resp)
	}
	if n, frames := dev.Writes(modbusfault.HoldingRegisters, 0), dev.Requests(6); n != 1 || frames != 1 {
		t.Fatalf("%d writes applied, %d FC6 frames; want 1 and 1", n, frames)
	}
}
