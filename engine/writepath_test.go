package engine_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/promcp"
	"github.com/physmcp/physmcpd/state"
)

// lossyWire sits between the engine and the simulated Modbus bus. For the
// next `lose` register writes it applies the write and then reports its
// outcome as lost, as a reply lost on the wire does; for the next `refuse`
// it answers an exception without applying. With skew, the device keeps
// another value than the one written. It counts writes applied.
type lossyWire struct {
	drivers.ModbusBus
	lostReplies
	refuse atomic.Int32
	code   uint8       // the exception refuse answers (0: 3, illegal data value)
	skew   atomic.Bool // the device keeps one raw step more than it is sent
}

// lostReplies counts the writes a wire's device applied, and loses the
// outcome of the next lose of them.
type lostReplies struct{ lose, applied atomic.Int32 }

// answer is the caller's answer to a write the device applied.
func (l *lostReplies) answer() error {
	l.applied.Add(1)
	if l.lose.Add(-1) >= 0 {
		return fmt.Errorf("reply lost: %w: %w", drivers.ErrTimeout, drivers.ErrInDoubt)
	}
	l.lose.Store(0)
	return nil
}

func (l *lossyWire) WriteRegisters(ctx context.Context, unit uint8, addr uint16, v []uint16) error {
	if l.refuse.Add(-1) >= 0 {
		return &drivers.ModbusException{Function: 16, Code: cmp.Or(l.code, 3)}
	}
	l.refuse.Store(0)
	if l.skew.Load() {
		v = append([]uint16(nil), v...)
		v[len(v)-1]++
	}
	if err := l.ModbusBus.WriteRegisters(ctx, unit, addr, v); err != nil {
		return err
	}
	return l.answer()
}

// lossyRig is the test device with its Modbus bus behind a lossyWire, and
// with a state store in dir unless dir is "".
func lossyRig(t *testing.T, dir string) (*rig, *lossyWire, *state.Store) {
	t.Helper()
	r := newRig(t)
	var store *state.Store
	if dir != "" {
		store = openState(t, r, dir)
	}
	wire := &lossyWire{ModbusBus: r.buses["mb"].(drivers.ModbusBus)}
	opts := engine.Options{}
	if store != nil {
		opts.Idempotency, opts.Limits = store, store
	}
	r.e = wire.engine(t, r, opts)
	return r, wire, store
}

// engine is a new engine for r's device with its Modbus bus behind l.
func (l *lossyWire) engine(t *testing.T, r *rig, opts engine.Options) *engine.Engine {
	t.Helper()
	buses := map[string]drivers.Bus{}
	for name, b := range r.buses {
		buses[name] = b
	}
	buses["mb"] = l
	opts.Now, opts.Logger = r.clock.Now, quiet
	e, err := engine.New(r.e.Manifest(), r.e.Policy(), buses, opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// forgetful is the state store of a machine that loses power after every
// answer: the outcomes the store may take before they are on disk (those
// the device showed on read-back) are lost, as a crash before their sync
// loses them. It counts them.
type forgetful struct {
	*state.Store
	lost atomic.Int32
}

func (f *forgetful) SaveOutcome(key string, r engine.Record, tool string, w *engine.Write, keep time.Duration, shown bool) error {
	if shown {
		f.lost.Add(1)
		return nil
	}
	return f.Store.SaveOutcome(key, r, tool, w, keep, shown)
}

// An outcome lost in a crash of the machine leaves the key's in-doubt
// intent, and the device settles it: found, the write is confirmed and the
// retry answers as the call did, without writing again. The store may lose
// only outcomes the device showed: one that read back another value than
// was written waits for the disk, as read back after a crash it would look
// unapplied and be written a second time.
func TestOutcomeLostInACrashIsSettledNotWrittenAgain(t *testing.T) {
	dir := t.TempDir()
	r, wire, store := lossyRig(t, dir)
	f := &forgetful{Store: store}
	e := wire.engine(t, r, engine.Options{Idempotency: f, Limits: f})
	calls := []struct {
		tool, key string
		value     float64
		skew      bool // the device keeps another value
		status    promcp.Status
		lost      int32 // outcomes lost so far
	}{
		{"do_boiler_setpoint", "A", 55, false, promcp.StatusSuccess, 1},
		{"do_damper_position", "B", 30, true, promcp.StatusPartial, 1},
		{"do_damper_position", "C", 95, false, promcp.StatusPartial, 2}, // clamped to 90 by the policy
	}
	answers := map[string]promcp.DoResponse{}
	for _, c := range calls {
		wire.skew.Store(c.skew)
		resp := doOn(t, e, c.tool, c.value, c.key)
		if resp.Status != c.status || f.lost.Load() != c.lost {
			t.Fatalf("%s = %+v, %d outcomes lost", c.key, resp, f.lost.Load())
		}
		answers[c.key] = resp
	}
	store.Close() // the engine goes down with the machine; the device stays

	store = openState(t, r, dir)
	defer store.Close()
	e = wire.engine(t, r, engine.Options{Idempotency: store, Limits: store})
	if err := e.SettleInDoubt(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		got, want := doOn(t, e, c.tool, c.value, c.key), answers[c.key]
		if got.Status != want.Status || got.AppliedValue != want.AppliedValue || got.PreviousValue != want.PreviousValue ||
			!slices.Equal(got.Warnings, want.Warnings) {
			t.Errorf("retry of %s after the crash = %+v, want the answer it had: %+v", c.key, got, want)
		}
	}
	if n := wire.applied.Load(); n != 3 {
		t.Fatalf("writes applied = %d, want 3 (each key once)", n)
	}
}

func TestInDoubtAnswerKeepsThePreviousValueAndIsChargedToTheCooldown(t *testing.T) {
	r, wire, _ := lossyRig(t, "")
	wire.lose.Store(1)
	resp := r.do(t, operator, "do_boiler_setpoint", 55.0, "A")
	if resp.Status != promcp.StatusFailed || resp.PreviousValue != 40.0 || !strings.Contains(resp.Reason, "outcome is unknown") {
		t.Fatalf("in-doubt answer = %+v", resp)
	}
	if len(resp.SideEffects) != 1 {
		t.Fatalf("an in-doubt write may have acted, yet lists side effects %v", resp.SideEffects)
	}
	// A new key 0.3 s later is inside the 10 s cooldown the lost write started.
	r.clock.Advance(300 * time.Millisecond)
	if resp := r.do(t, operator, "do_boiler_setpoint", 60.0, "B"); resp.Permission != promcp.CooldownActive {
		t.Fatalf("new key after an in-doubt write = %+v, want cooldown_active", resp)
	}
	// The retry of A finds its value on the device: confirmed, not written again.
	if resp := r.do(t, operator, "do_boiler_setpoint", 55.0, "A"); resp.Status != promcp.StatusSuccess || resp.AppliedValue != 55.0 || resp.PreviousValue != 40.0 {
		t.Fatalf("retry of A = %+v", resp)
	}
	if n := wire.applied.Load(); n != 1 {
		t.Fatalf("writes applied = %d, want 1", n)
	}
}

// A's reply is lost, B writes, A is retried: A must not undo B.
func TestRetryAfterALaterWriteIsSuperseded(t *testing.T) {
	r, wire, _ := lossyRig(t, "")
	wire.lose.Store(1)
	if resp := r.do(t, operator, "do_damper_position", 30.0, "A"); resp.Status != promcp.StatusFailed {
		t.Fatalf("A = %+v", resp)
	}
	if resp := r.do(t, operator, "do_damper_position", 50.0, "B"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("B = %+v", resp)
	}
	for range 2 {
		resp := r.do(t, operator, "do_damper_position", 30.0, "A")
		if resp.Permission != promcp.Superseded || resp.Status != promcp.StatusFailed || !strings.Contains(resp.Reason, `"B"`) {
			t.Fatalf("retry of A = %+v, want superseded naming B", resp)
		}
	}
	if got := r.bus(t, "mb").Value("damper_position"); got != 50.0 {
		t.Fatalf("device holds %v, want B's 50", got)
	}
	if n := wire.applied.Load(); n != 2 {
		t.Fatalf("writes applied = %d, want 2 (A once, B once)", n)
	}
}

// The same, across a restart: the write numbers are durable.
func TestSupersededSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	r, wire, store := lossyRig(t, dir)
	wire.lose.Store(1)
	r.do(t, operator, "do_damper_position", 30.0, "A")
	r.do(t, operator, "do_damper_position", 50.0, "B")
	// who asked is kept with the key, for an audit line recovered from the store
	for _, key := range []string{"A", "B"} {
		if rec, _ := store.Load(key); rec.Caller != operator.Identity || rec.Role != operator.Role {
			t.Fatalf("record of %s names caller %q role %q", key, rec.Caller, rec.Role)
		}
	}
	store.Close()
	store = openState(t, r, dir)
	defer store.Close()
	e := r.restart(t, engine.Options{Idempotency: store, Limits: store})
	if err := e.SettleInDoubt(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp := doOn(t, e, "do_damper_position", 30.0, "A")
	if resp.Permission != promcp.Superseded {
		t.Fatalf("retry of A after restart = %+v, want superseded", resp)
	}
	if n := wire.applied.Load(); n != 2 {
		t.Fatalf("writes applied = %d, want 2", n)
	}
}

// The device refuses the value: not "unreachable" (waiting would not help),
// and can_do says the same for that value afterwards.
func TestDeviceRefusalIsItsOwnOutcome(t *testing.T) {
	r, wire, _ := lossyRig(t, "")
	wire.refuse.Store(1)
	resp := r.do(t, operator, "do_boiler_setpoint", 55.0, "A")
	if resp.Permission != promcp.DeviceRejected || resp.PreviousValue != 40.0 || !strings.Contains(resp.Reason, "illegal data value") {
		t.Fatalf("refused write = %+v", resp)
	}
	if len(resp.SideEffects) != 0 {
		t.Fatalf("a write that changed nothing lists side effects %v", resp.SideEffects)
	}
	rep := r.canDo(t, operator, promcp.Intent{SemanticTags: []string{"boiler"}, Action: "set", Value: 55.0})
	if p, _ := permissionFor(rep, "do_boiler_setpoint"); p != promcp.DeviceRejected {
		t.Fatalf("can_do after the refusal: %s, want %s", p, promcp.DeviceRejected)
	}
	// Nothing was applied, so nothing was charged, and the key may be tried again.
	if resp := r.do(t, operator, "do_boiler_setpoint", 55.0, "A"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("retry once the device accepts = %+v", resp)
	}
	rep = r.canDo(t, operator, promcp.Intent{SemanticTags: []string{"boiler"}, Action: "set", Value: 55.0})
	if p, _ := permissionFor(rep, "do_boiler_setpoint"); p == promcp.DeviceRejected {
		t.Fatalf("can_do still reports the refusal after a write was accepted")
	}
	if n := wire.applied.Load(); n != 1 {
		t.Fatalf("writes applied = %d, want 1", n)
	}
}

// A device busy with something else (exception 6) refused nothing about the
// request: the write was not applied, and trying again later helps. It is
// answered, counted and audited as source_unreachable, not as a refusal of
// the value, and can_do does not block the value. Before, it was
// device_rejected ("retrying the same request will not help"), and can_do
// refused the value until a write of it succeeded.
func TestDeviceBusyIsNotARefusal(t *testing.T) {
	var sink auditSink
	r, wire, _ := lossyRig(t, "")
	r.e = wire.engine(t, r, engine.Options{Audit: sink.add})
	wire.code = 6
	wire.refuse.Store(1)
	resp := r.do(t, operator, "do_boiler_setpoint", 55.0, "A")
	if resp.Status != promcp.StatusFailed || resp.Permission != promcp.SourceUnreachable || !strings.Contains(resp.Reason, "server device busy") ||
		strings.Contains(resp.Reason, "will not help") {
		t.Fatalf("write answered busy = %+v, want source_unreachable, nothing applied", resp)
	}
	ts := toolStats(t, r.e.Stats(), "do_boiler_setpoint")
	if rejected, lost := refusals(ts, promcp.DeviceRejected), refusals(ts, promcp.SourceUnreachable); rejected != 0 || lost != 1 {
		t.Fatalf("counted %d device_rejected, %d source_unreachable; want 0 and 1", rejected, lost)
	}
	sink.mu.Lock()
	if n := len(sink.entries); n != 1 || sink.entries[0].Outcome != engine.OutcomeFailed || sink.entries[0].Permission != promcp.SourceUnreachable {
		t.Fatalf("audit: %+v, want one failed line (source_unreachable)", sink.entries)
	}
	sink.mu.Unlock()
	rep := r.canDo(t, operator, promcp.Intent{SemanticTags: []string{"boiler"}, Action: "set", Value: 55.0})
	if p, _ := permissionFor(rep, "do_boiler_setpoint"); p == promcp.DeviceRejected {
		t.Fatalf("can_do after the device was busy: %s", p)
	}
	if resp := r.do(t, operator, "do_boiler_setpoint", 55.0, "A"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("retry once the device is free = %+v", resp)
	}
	if n := wire.applied.Load(); n != 1 {
		t.Fatalf("writes applied = %d, want 1", n)
	}
}

// A crash after the write left and before it was charged: the restart charges
// it from when it left, so the cooldown holds.
func TestInDoubtIntentIsChargedAtStartUp(t *testing.T) {
	r := newRig(t)
	store := openState(t, r, t.TempDir())
	defer store.Close()
	err := store.Save("crashed", engine.Record{
		Fingerprint: engine.Fingerprint("do_boiler_setpoint", 55.0), Tool: "do_boiler_setpoint", InDoubt: true,
		At: r.clock.Now(), SentAt: r.clock.Now(), Seq: 1,
		Response: promcp.DoResponse{Status: promcp.StatusFailed, IdempotencyKey: "crashed", AppliedValue: 55.0, PreviousValue: 40.0, SideEffects: []string{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := r.restart(t, engine.Options{Idempotency: store, Limits: store})
	if err := e.SettleInDoubt(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(time.Second)
	if resp := doOn(t, e, "do_boiler_setpoint", 60.0, "next"); resp.Permission != promcp.CooldownActive {
		t.Fatalf("new key 1 s after a crashed write = %+v, want cooldown_active", resp)
	}
}

// A record from before writes were numbered (no Seq) cannot tell superseded
// from not applied: it is settled by the device's value, as before.
func TestUnnumberedInDoubtRecordIsSettledByTheDevice(t *testing.T) {
	e, mb := inDoubt(t, "old")
	if resp := doOn(t, e, "do_damper_position", 50.0, "other"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("other = %+v", resp)
	}
	resp := doOn(t, e, "do_damper_position", 30.0, "old")
	if resp.Status != promcp.StatusSuccess || resp.AppliedValue != 30.0 {
		t.Fatalf("retry of an unnumbered in-doubt key = %+v", resp)
	}
	if w := mb.Writes(); w != 2 {
		t.Fatalf("writes = %d, want 2", w)
	}
}
