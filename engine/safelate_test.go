package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/modbusfault"
	"github.com/physmcp/physmcpd/promcp"
)

// safeInDoubt applies the safe state (flow_setpoint's 0) from 500 on a rig
// whose device holds or acknowledges the first FC6 frame: the write's
// outcome is in doubt. It waits until the device has the frame, and returns
// the settle window's end, as the register's refusal says it.
func (w *wireRig) safeInDoubt(t *testing.T) time.Time {
	t.Helper()
	w.dev.Set(modbusfault.HoldingRegisters, 0, 500)
	if err := w.e.ApplySafeState(context.Background(), "dead-man timeout: test"); err == nil {
		t.Fatal("the held safe write was answered as applied")
	}
	w.await(t, func(ctx context.Context) error { return w.dev.AwaitRequests(ctx, 6, 1) })
	st, err := w.e.Action(operator, "do_flow_setpoint")
	if err != nil {
		t.Fatal(err)
	}
	if st.Permission != promcp.CooldownActive || st.ClearsAt.IsZero() {
		t.Errorf("after the in-doubt safe write: %s (%s), want cooldown_active with clears_at", st.Permission, st.Reason)
	}
	return st.ClearsAt
}

// refusedInside checks that a do_* inside the safe write's window is refused
// naming that write and the window's end, and puts no frame on the wire.
// Written, it would be undone when the held safe frame lands: release lets
// it land, and the failure says what the device then holds.
func (w *wireRig) refusedInside(t *testing.T, end time.Time, why string, release func()) {
	t.Helper()
	frames := w.dev.Requests(6)
	b := w.do(t, "do_flow_setpoint", 700, "B")
	if b.Permission == promcp.CooldownActive && strings.Contains(b.Reason, "safe state's write of 0") &&
		strings.Contains(b.Reason, "no idempotency_key") && strings.Contains(b.Reason, why) && promcp.Time(lateUntil(t, b.Reason)) == promcp.Time(end) {
		if n := w.dev.Requests(6) - frames; n != 0 {
			t.Fatalf("refused B put %d FC6 frames on the wire", n)
		}
		return
	}
	sent := w.dev.Requests(6) - frames
	release()
	w.await(t, func(ctx context.Context) error {
		return w.dev.AwaitWrites(ctx, modbusfault.HoldingRegisters, 0, 1+sent)
	})
	t.Fatalf("B inside the safe write's window = %+v (%d FC6 frames sent for it); want cooldown_active until %s. "+
		"The held safe frame then landed: the device holds %d",
		b, sent, promcp.Time(end), w.dev.Value(modbusfault.HoldingRegisters, 0))
}

// The dead man's safe write is lost on the wire (modbusfault.LateApply: the
// device holds the frame and applies it late, on a connection it closed, so
// no late reply is heard). An agent coming back inside the bus's
// late_write_ms is refused with cooldown_active and writes nothing; without
// the window its 700 was written and read back, and the safe 0 landed after
// it. After the window it writes, and the device keeps its value.
func TestSafeStateInDoubtHoldsTheRegister(t *testing.T) {
	w, release, closeConn := newLateRig(t, engine.Options{}, lateWindow)
	end := w.safeInDoubt(t)
	closeConn()
	w.refusedInside(t, end, "late_write_ms", release)

	release()
	w.await(t, func(ctx context.Context) error { return w.dev.AwaitHandled(ctx, 6, 1) })
	if v := w.dev.Value(modbusfault.HoldingRegisters, 0); v != 0 {
		t.Fatalf("the held safe frame landed, and the device holds %d", v)
	}
	w.awaitClear(t, "do_flow_setpoint")
	if b := w.do(t, "do_flow_setpoint", 700, "B"); b.Status != promcp.StatusSuccess {
		t.Fatalf("B after the window = %+v", b)
	}
	if v, n, frames := w.dev.Value(modbusfault.HoldingRegisters, 0), w.dev.Writes(modbusfault.HoldingRegisters, 0), w.dev.Requests(6); v != 700 || n != 2 || frames != 2 {
		t.Fatalf("device holds %d after %d writes, %d FC6 frames; want 700, 2, 2 (the safe 0 late, then B)", v, n, frames)
	}
}

// The device applies the held safe frame and answers it on the connection it
// came on: the echo proves it applied, so the window ends at once, long
// before late_write_ms, and B is written.
func TestSafeStateLateReplyEndsTheWindow(t *testing.T) {
	const window = 60_000 // no part of the test waits for it
	w, release, _ := newLateRig(t, engine.Options{}, window)
	end := w.safeInDoubt(t)
	w.refusedInside(t, end, "late_write_ms", release)
	release()
	w.await(t, func(ctx context.Context) error {
		for {
			if st, err := w.e.Action(operator, "do_flow_setpoint"); err != nil || st.Permission == promcp.Allowed {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	if b := w.do(t, "do_flow_setpoint", 700, "B"); b.Status != promcp.StatusSuccess || !time.Now().Before(end) {
		t.Fatalf("B after the late reply = %+v, want success before the window's end %s", b, end)
	}
	if v, frames := w.dev.Value(modbusfault.HoldingRegisters, 0), w.dev.Requests(6); v != 700 || frames != 2 {
		t.Fatalf("device holds %d after %d FC6 frames; want 700 after 2", v, frames)
	}
}

// A device that acknowledges the safe write (exception 5) acts on it later:
// the register is held for the bus's acknowledge_ms, over TCP without
// late_write_ms and over RTU alike.
func TestSafeStateAcknowledgedHoldsTheRegister(t *testing.T) {
	for _, transport := range []string{"tcp", "rtu"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			w, hold := newAckRig(t, transport, engine.Options{})
			end := w.safeInDoubt(t)
			w.refusedInside(t, end, "acknowledge_ms", func() { close(hold) })
			close(hold)
			w.await(t, func(ctx context.Context) error { return w.dev.AwaitWrites(ctx, modbusfault.HoldingRegisters, 0, 1) })
			if v, frames := w.dev.Value(modbusfault.HoldingRegisters, 0), w.dev.Requests(6); v != 0 || frames != 1 {
				t.Fatalf("device holds %d after %d FC6 frames; want the safe 0 after 1", v, frames)
			}
		})
	}
}
