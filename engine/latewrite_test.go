package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/modbusfault"
	"github.com/physmcp/physmcpd/promcp"
	"github.com/physmcp/physmcpd/state"
)

// A Modbus TCP device (or a TCP-to-RTU gateway's queue) may hold a write
// frame the client gave up on while it serves the client's next connection,
// and apply it later. These tests hold it on purpose (modbusfault.LateApply)
// and count the writes the device applies. The device answers the frame when
// it applies it, on the connection it came on, unless it closed that
// connection first: its echo then proves the write applied.

// lateWindow is late_write_ms in these tests: long enough that a quick retry
// made right after the in-doubt answer surely falls inside it on a loaded
// machine.
const lateWindow = 4000

// newLateRig is a rig on a Modbus TCP device whose first FC6 write to
// holding register 0 is held unapplied until release is called; window is
// the bus's late_write_ms. closeConn makes the device close its connections
// (FIN), as one that drops the connection of a frame it holds does; right
// after the held write it is the held write's only one.
func newLateRig(t *testing.T, opts engine.Options, window int) (w *wireRig, release, closeConn func()) {
	t.Helper()
	s := modbusfault.StartTCP(t)
	bus := fmt.Sprintf("{type: modbus-tcp, address: %q, timeout_ms: %d, late_write_ms: %d}", s.Addr(), wireTimeout, window)
	w = wireRigOn(t, s.Device, bus, opts)
	hold := make(chan struct{})
	s.Inject(modbusfault.Fault{Mode: modbusfault.LateApply, Match: modbusfault.At(6, 0), Times: 1, Hold: hold})
	return w, func() { close(hold) }, func() { s.CloseConns(false) }
}

// inDoubt makes a write whose frame the device holds, and waits until the
// device has it.
func (w *wireRig) inDoubt(t *testing.T, e *engine.Engine, v int, key string) promcp.DoResponse {
	t.Helper()
	resp := doOn(t, e, "do_flow_setpoint", v, key)
	if resp.Status != promcp.StatusFailed || resp.Permission != promcp.SourceUnreachable || !strings.Contains(resp.Reason, "late_write_ms") {
		t.Fatalf("held write answered %+v, want in doubt with a settle window", resp)
	}
	w.await(t, func(ctx context.Context) error { return w.dev.AwaitRequests(ctx, 6, 1) })
	return resp
}

func (w *wireRig) await(t *testing.T, f func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f(ctx); err != nil {
		t.Fatal(err)
	}
}

// lateUntil is the settle window's end that an answer's reason gives.
func lateUntil(t *testing.T, reason string) time.Time {
	t.Helper()
	_, after, ok := strings.Cut(reason, "until ")
	stamp, _, _ := strings.Cut(after, " ")
	at, err := time.Parse(time.RFC3339Nano, stamp)
	if !ok || err != nil {
		t.Fatalf("no window end in %q: %v", reason, err)
	}
	return at
}

// The old frame lands after a retry would have read the device: the retry
// neither reads nor writes inside the window (a retry that cannot wait is
// told when to come back), waits for the window's end when it can, and then
// finds the value: one write applied. Without the window the quick retry
// read the old value and wrote again, and the old frame landed after it: 2.
// The device closes the frame's connection instead of answering: that
// proves nothing, and the window is waited out.
func TestLateWriteIsAppliedOnce(t *testing.T) {
	w, release, closeConn := newLateRig(t, engine.Options{}, lateWindow)
	first := w.inDoubt(t, w.e, 500, "A")
	end := lateUntil(t, first.Reason)
	closeConn()

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	quick, err := w.e.Do(ctx, operator, "do_flow_setpoint", promcp.DoRequest{Value: 500, IdempotencyKey: "A"})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if quick.Status != promcp.StatusFailed || quick.Permission != promcp.SourceUnreachable || !strings.Contains(quick.Reason, "could not wait") {
		t.Fatalf("retry that cannot wait for the window = %+v, want in doubt, nothing written", quick)
	}
	if got := lateUntil(t, quick.Reason); !got.Equal(end) {
		t.Fatalf("the retry names the window's end %s, the first answer %s", got, end)
	}

	// The frame lands while a patient retry waits for the window.
	again := make(chan promcp.DoResponse, 1)
	go func() {
		resp, _ := w.e.Do(context.Background(), operator, "do_flow_setpoint", promcp.DoRequest{Value: 500, IdempotencyKey: "A"})
		again <- resp
	}()
	release()
	w.await(t, func(ctx context.Context) error { return w.dev.AwaitHandled(ctx, 6, 1) })
	resp := <-again
	at, _ := time.Parse(time.RFC3339Nano, resp.Timestamp)
	if resp.Status != promcp.StatusSuccess || resp.AppliedValue != int64(500) || at.Before(end.Truncate(time.Millisecond)) {
		t.Fatalf("patient retry = %+v, want success with 500 after %s", resp, end)
	}
	if n, frames := w.dev.Writes(modbusfault.HoldingRegisters, 0), w.dev.Requests(6); n != 1 || frames != 1 {
		t.Fatalf("%d writes applied, %d FC6 frames; want 1 and 1", n, frames)
	}
	t.Logf("writes applied: %d", w.dev.Writes(modbusfault.HoldingRegisters, 0))
}

// Another key's write inside the window is refused, nothing written, and
// can_do says so; after the window it is written and the device keeps its
// value, not the old frame's; the old key's retry is then superseded.
func TestLateWriteWindowRefusesOtherKeys(t *testing.T) {
	w, release, closeConn := newLateRig(t, engine.Options{}, lateWindow)
	end := lateUntil(t, w.inDoubt(t, w.e, 500, "A").Reason)
	closeConn() // no late reply settles A

	b := w.do(t, "do_flow_setpoint", 700, "B")
	if b.Permission != promcp.CooldownActive || !strings.Contains(b.Reason, `"A"`) || !lateUntil(t, b.Reason).Equal(end) {
		t.Fatalf("B inside A's window = %+v, want cooldown_active naming A and %s", b, end)
	}
	rep, err := w.e.CanDo(context.Background(), operator, promcp.CanDoRequest{Intent: promcp.Intent{SemanticTags: []string{"flow"}, Action: "set", Value: 700}})
	if err != nil {
		t.Fatal(err)
	}
	blocked := false
	for _, bl := range rep.Blocked {
		blocked = blocked || bl.Capability == "do_flow_setpoint" && bl.Permission == promcp.CooldownActive && strings.Contains(bl.Reason, `"A"`) && bl.ClearsAt == promcp.Time(end)
	}
	if !blocked {
		t.Fatalf("can_do inside A's window: %+v, want do_flow_setpoint blocked as B was, clearing at %s", rep, end)
	}
	if n := w.dev.Requests(6); n != 1 {
		t.Fatalf("%d FC6 frames, want A's only", n)
	}

	release()
	w.await(t, func(ctx context.Context) error { return w.dev.AwaitHandled(ctx, 6, 1) })
	w.awaitClear(t, "do_flow_setpoint")
	if b = w.do(t, "do_flow_setpoint", 700, "B"); b.Status != promcp.StatusSuccess {
		t.Fatalf("B after the window = %+v", b)
	}
	if a := w.do(t, "do_flow_setpoint", 500, "A"); a.Permission != promcp.Superseded {
		t.Fatalf("A after B = %+v, want superseded", a)
	}
	if v, n := w.dev.Value(modbusfault.HoldingRegisters, 0), w.dev.Writes(modbusfault.HoldingRegisters, 0); v != 700 || n != 2 {
		t.Fatalf("device holds %d after %d writes; want 700 after 2 (A late, then B)", v, n)
	}
}

// The window is kept in the state directory: a restarted engine still
// refuses another key inside it, and the retry waits for its end.
func TestLateWriteWindowSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	open := func() *state.Store {
		s, err := state.Open(dir, nil, quiet)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	w, release, _ := newLateRig(t, engine.Options{Idempotency: s, Limits: s}, lateWindow)
	end := lateUntil(t, w.inDoubt(t, w.e, 500, "A").Reason)
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
	again := make(chan promcp.DoResponse, 1)
	go func() {
		resp, _ := e.Do(context.Background(), operator, "do_flow_setpoint", promcp.DoRequest{Value: 500, IdempotencyKey: "A"})
		again <- resp
	}()
	release()
	if resp := <-again; resp.Status != promcp.StatusSuccess {
		t.Fatalf("retry of A after a restart = %+v", resp)
	}
	if n, frames := w.dev.Writes(modbusfault.HoldingRegisters, 0), w.dev.Requests(6); n != 1 || frames != 1 {
		t.Fatalf("%d writes applied, %d FC6 frames; want 1 and 1", n, frames)
	}
}

// The safe state waits for the window's end before it writes: written
// before, it would be undone when the held frame lands.
func TestLateWriteSafeStateWaitsForTheWindow(t *testing.T) {
	w, release, _ := newLateRig(t, engine.Options{}, lateWindow)
	w.inDoubt(t, w.e, 500, "A")
	done := make(chan error, 1)
	go func() { done <- w.e.ApplySafeState(context.Background(), "test") }()
	short, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := w.dev.AwaitRequests(short, 6, 2); err == nil {
		t.Fatal("the safe value was written inside the window")
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v, n := w.dev.Value(modbusfault.HoldingRegisters, 0), w.dev.Writes(modbusfault.HoldingRegisters, 0); v != 0 || n != 2 {
		t.Fatalf("device holds %d after %d writes; want the safe 0 after 2 (A late, then the safe value)", v, n)
	}
}

// The device applies the held frame late and answers it on the connection
// it came on: the echo settles the key as applied at once, far inside the
// window, with no call waiting (its read-back is the only frame). A retry
// replays that outcome without a frame, and another key's write to the
// register goes through at once.
func TestLateReplySettlesTheKey(t *testing.T) {
	const window = 60_000 // no part of the test waits for it
	w, release, _ := newLateRig(t, engine.Options{}, window)
	first := w.inDoubt(t, w.e, 500, "A")
	end := lateUntil(t, first.Reason)
	if !strings.Contains(first.Reason, "late reply") {
		t.Fatalf("in-doubt answer %q does not say a late reply settles the key", first.Reason)
	}
	reads := w.dev.Requests(3)
	release()
	// The settlement's read-back is the event: nothing else reads now.
	w.await(t, func(ctx context.Context) error { return w.dev.AwaitRequests(ctx, 3, reads+1) })

	a := w.do(t, "do_flow_setpoint", 500, "A")
	at, _ := time.Parse(time.RFC3339Nano, a.Timestamp)
	if a.Status != promcp.StatusSuccess || fmt.Sprint(a.AppliedValue) != "500" || !at.Before(end) {
		t.Fatalf("retry after the late reply = %+v, want success with 500 before the window's end %s", a, end)
	}
	if n := w.dev.Requests(3) - reads; n != 1 {
		t.Fatalf("%d FC3 frames since the late reply, want 1 (the settlement's read-back)", n)
	}
	if n, frames := w.dev.Writes(modbusfault.HoldingRegisters, 0), w.dev.Requests(6); n != 1 || frames != 1 {
		t.Fatalf("%d writes applied, %d FC6 frames; want 1 and 1", n, frames)
	}

	if b := w.do(t, "do_flow_setpoint", 700, "B"); b.Status != promcp.StatusSuccess {
		t.Fatalf("B right after A's late reply = %+v, want success (A's window ended)", b)
	}
	if v, n, frames := w.dev.Value(modbusfault.HoldingRegisters, 0), w.dev.Writes(modbusfault.HoldingRegisters, 0), w.dev.Requests(6); v != 700 || n != 2 || frames != 2 {
		t.Fatalf("device holds %d after %d writes, %d FC6 frames; want 700, 2, 2", v, n, frames)
	}
}
