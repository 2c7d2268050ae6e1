package engine_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
	"github.com/physmcp/physmcpd/state"
)

// restart binds a new engine to the rig's buses and store, as a daemon
// restart against the same device and state directory would.
func (r *rig) restart(t *testing.T, opts engine.Options) *engine.Engine {
	t.Helper()
	opts.Now, opts.Logger = r.clock.Now, quiet
	e, err := engine.New(r.e.Manifest(), r.e.Policy(), r.buses, opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func openState(t *testing.T, r *rig, dir string) *state.Store {
	t.Helper()
	s, err := state.Open(dir, r.clock.Now, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func doOn(t *testing.T, e *engine.Engine, tool string, value any, key string) promcp.DoResponse {
	t.Helper()
	resp, err := e.Do(context.Background(), operator, tool, promcp.DoRequest{Value: value, IdempotencyKey: key})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestCooldownSurvivesRestart(t *testing.T) {
	r := newRig(t)
	dir := t.TempDir()
	s := openState(t, r, dir)
	e := r.restart(t, engine.Options{Idempotency: s, Limits: s})
	if resp := doOn(t, e, "do_boiler_setpoint", 50.0, "k1"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("first write %+v", resp)
	}
	s.Close()

	r.clock.Advance(5 * time.Second) // cooldown_ms is 10000
	s = openState(t, r, dir)
	defer s.Close()
	e = r.restart(t, engine.Options{Idempotency: s, Limits: s})
	if resp := doOn(t, e, "do_boiler_setpoint", 60.0, "k2"); resp.Permission != promcp.CooldownActive {
		t.Fatalf("after restart inside the cooldown: %+v", resp)
	}
	// the key used before the restart still replays
	if resp := doOn(t, e, "do_boiler_setpoint", 50.0, "k1"); resp.Status != promcp.StatusSuccess || r.bus(t, "mb").Writes() != 1 {
		t.Fatalf("replay after restart %+v, %d writes", resp, r.bus(t, "mb").Writes())
	}
	// without the store the restart forgets (what the store is for)
	if resp := doOn(t, r.restart(t, engine.Options{}), "do_boiler_setpoint", 60.0, "k3"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("in-memory engine: %+v", resp)
	}
	r.clock.Advance(6 * time.Second)
	if resp := doOn(t, e, "do_boiler_setpoint", 60.0, "k2"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("after the cooldown: %+v", resp)
	}
}

func TestRateWindowSurvivesRestart(t *testing.T) {
	r := newRig(t)
	dir := t.TempDir()
	for i, v := range []float64{20, 30, 40} { // rate_limit 3/minute, cooldown 10 s
		s := openState(t, r, dir)
		e := r.restart(t, engine.Options{Idempotency: s, Limits: s})
		if resp := doOn(t, e, "do_boiler_setpoint", v, string(rune('a'+i))); resp.Status != promcp.StatusSuccess {
			t.Fatalf("write %d: %+v", i, resp)
		}
		s.Close()
		r.clock.Advance(11 * time.Second)
	}
	s := openState(t, r, dir)
	defer s.Close()
	if resp := doOn(t, r.restart(t, engine.Options{Idempotency: s, Limits: s}), "do_boiler_setpoint", 50.0, "d"); resp.Permission != promcp.RateLimited {
		t.Fatalf("fourth write in the minute after restarts: %+v", resp)
	}
}

// auditSink collects audit entries.
type auditSink struct {
	mu      sync.Mutex
	entries []engine.AuditEntry
}

func (a *auditSink) add(e engine.AuditEntry) {
	a.mu.Lock()
	a.entries = append(a.entries, e)
	a.mu.Unlock()
}

func TestEveryDoAttemptIsAudited(t *testing.T) {
	r := newRig(t)
	var sink auditSink
	e := r.restart(t, engine.Options{Audit: sink.add})
	doOn(t, e, "do_boiler_setpoint", 50.0, "k1")
	doOn(t, e, "do_boiler_setpoint", 50.0, "k1")  // replay
	doOn(t, e, "do_boiler_setpoint", 60.0, "k2")  // cooldown
	doOn(t, e, "do_boiler_setpoint", 500.0, "k3") // out of range
	want := []struct {
		outcome string
		status  promcp.Status
		perm    promcp.Permission
		applied any
	}{
		{engine.OutcomeApplied, promcp.StatusSuccess, "", 50.0},
		{engine.OutcomeReplayed, promcp.StatusSuccess, "", 50.0},
		{engine.OutcomeRefused, promcp.StatusFailed, promcp.CooldownActive, nil},
		{engine.OutcomeRefused, promcp.StatusFailed, promcp.OutOfRange, nil},
	}
	if len(sink.entries) != len(want) {
		t.Fatalf("%d entries, want %d: %+v", len(sink.entries), len(want), sink.entries)
	}
	for i, w := range want {
		got := sink.entries[i]
		if got.Outcome != w.outcome || got.Status != w.status || got.Permission != w.perm || got.Applied != w.applied ||
			got.Caller != operator.Identity || got.Role != operator.Role || got.Tool != "do_boiler_setpoint" || got.Key == "" || got.Arguments["value"] == nil {
			t.Errorf("entry %d = %+v, want %+v", i, got, w)
		}
	}
	if first := sink.entries[0]; first.Previous != 40.0 || first.Time.IsZero() {
		t.Errorf("applied entry lacks the previous value or time: %+v", first)
	}
}

func TestSettleInDoubtAtStartupBeforeSafeState(t *testing.T) {
	r := newRig(t)
	s := openState(t, r, t.TempDir())
	defer s.Close()
	gpio := r.bus(t, "gpio")
	// A crash left an intent to switch the pump on, and the pump is on: the
	// write happened. The safe state (pump off) must not hide that.
	err := s.Save("crashed", engine.Record{
		Fingerprint: engine.Fingerprint("do_night_pump", true), Tool: "do_night_pump", InDoubt: true,
		At:       r.clock.Now().Add(-time.Second),
		Response: promcp.DoResponse{Status: promcp.StatusFailed, IdempotencyKey: "crashed", AppliedValue: true, PreviousValue: false, SideEffects: []string{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var sink auditSink
	e := r.restart(t, engine.Options{Idempotency: s, Limits: s, Audit: sink.add})
	// (binding a GPIO output drives it to its safe level, so the pump is on
	// after the bind here, as a Modbus coil would have stayed on)
	if err := gpio.SetValue("night_pump", true); err != nil {
		t.Fatal(err)
	}
	if err := e.ApplySafeState(context.Background(), "start-up"); err != nil {
		t.Fatal(err)
	}
	if v := gpio.Value("night_pump"); v != false {
		t.Fatalf("pump after the safe state = %v, want false", v)
	}
	rec, ok := s.Load("crashed")
	if !ok || rec.InDoubt || rec.Response.Status != promcp.StatusSuccess {
		t.Fatalf("in-doubt record after start-up: %+v %v", rec, ok)
	}
	// the retry replays the settled answer: the pump is not switched on a second time
	before := gpio.Writes()
	resp := doOn(t, e, "do_night_pump", true, "crashed")
	if resp.Status != promcp.StatusSuccess || gpio.Writes() != before {
		t.Fatalf("retry %+v wrote %d times", resp, gpio.Writes()-before)
	}
	var outcomes []string
	for _, a := range sink.entries {
		outcomes = append(outcomes, a.Outcome)
	}
	if len(outcomes) != 3 || outcomes[0] != engine.OutcomeConfirmed || outcomes[1] != engine.OutcomeSafeState || outcomes[2] != engine.OutcomeReplayed {
		t.Fatalf("audit outcomes %v", outcomes)
	}
}

func TestInDoubtNotOnDeviceStaysInDoubt(t *testing.T) {
	r := newRig(t)
	s := openState(t, r, t.TempDir())
	defer s.Close()
	err := s.Save("lost", engine.Record{
		Fingerprint: engine.Fingerprint("do_damper_position", 30.0), Tool: "do_damper_position", InDoubt: true, At: r.clock.Now(),
		Response: promcp.DoResponse{Status: promcp.StatusFailed, IdempotencyKey: "lost", AppliedValue: 30.0, PreviousValue: 20.0, SideEffects: []string{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := r.restart(t, engine.Options{Idempotency: s, Limits: s})
	if err := e.SettleInDoubt(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rec, _ := s.Load("lost"); !rec.InDoubt {
		t.Fatalf("a write the device does not show was settled: %+v", rec)
	}
	mb := r.bus(t, "mb")
	if resp := doOn(t, e, "do_damper_position", 30.0, "lost"); resp.Status != promcp.StatusSuccess || mb.Writes() != 1 {
		t.Fatalf("retry %+v, %d writes, want 1", resp, mb.Writes())
	}
}

func TestSafeStateBypassesPolicyAndChargesCooldown(t *testing.T) {
	r := newRig(t)
	var sink auditSink
	e := r.restart(t, engine.Options{Audit: sink.add})
	gpio := r.bus(t, "gpio")
	if err := gpio.SetValue("night_pump", true); err != nil {
		t.Fatal(err)
	}
	// noon: the pump's time window is closed, yet the safe state acts
	if err := e.ApplySafeState(context.Background(), "shutdown"); err != nil {
		t.Fatal(err)
	}
	if v := gpio.Value("night_pump"); v != false {
		t.Fatalf("pump = %v, want false", v)
	}
	if len(sink.entries) != 1 {
		t.Fatalf("audit %+v, want one safe_state entry (only the pump declares a safe value)", sink.entries)
	}
	// a safe-state write that changes the device starts its cooldown; one that
	// finds the device already safe does not
	for _, c := range e.Manifest().Capabilities {
		if c.ToolName() == "do_boiler_setpoint" {
			c.SafeValue = 40.0 // what the simulator starts with
			t.Cleanup(func() { c.SafeValue = nil })
		}
	}
	if err := e.ApplySafeState(context.Background(), "start-up"); err != nil {
		t.Fatal(err)
	}
	if resp := doOn(t, e, "do_boiler_setpoint", 50.0, "after-unchanged"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("after a safe state that changed nothing: %+v", resp)
	}
	r.clock.Advance(time.Minute)
	if err := e.ApplySafeState(context.Background(), "shutdown"); err != nil {
		t.Fatal(err)
	}
	if resp := doOn(t, e, "do_boiler_setpoint", 50.0, "after-changed"); resp.Permission != promcp.CooldownActive {
		t.Fatalf("after a safe state that moved the setpoint: %+v", resp)
	}
	a := sink.entries[0]
	if a.Outcome != engine.OutcomeSafeState || a.Tool != "do_night_pump" || a.Previous != true || a.Applied != false || a.Reason != "shutdown" || a.Caller != "physmcpd" {
		t.Fatalf("audit entry %+v", a)
	}
}

func TestDeadManFiresOncePerSilence(t *testing.T) {
	r := newRig(t)
	e := r.restart(t, engine.Options{})
	ctx := context.Background()
	if fired, err := e.CheckDeadMan(ctx); fired || err != nil {
		t.Fatalf("without safe_state: fired %v, %v", fired, err)
	}
	e.Manifest().SafeState = &manifest.SafeState{DeadManTimeoutMs: 60000}
	t.Cleanup(func() { e.Manifest().SafeState = nil })
	gpio := r.bus(t, "gpio")
	gpio.SetValue("night_pump", true)
	r.clock.Advance(59 * time.Second)
	if fired, _ := e.CheckDeadMan(ctx); fired {
		t.Fatal("fired before the timeout")
	}
	r.clock.Advance(time.Second)
	if fired, err := e.CheckDeadMan(ctx); !fired || err != nil || gpio.Value("night_pump") != false {
		t.Fatalf("at the timeout: fired %v, %v, pump %v", fired, err, gpio.Value("night_pump"))
	}
	gpio.SetValue("night_pump", true)
	r.clock.Advance(time.Hour)
	if fired, _ := e.CheckDeadMan(ctx); fired || gpio.Value("night_pump") != true {
		t.Fatal("fired twice in one silence")
	}
	doOn(t, e, "do_damper_position", 30.0, "alive") // a do_* call re-arms it
	r.clock.Advance(30 * time.Second)
	if fired, _ := e.CheckDeadMan(ctx); fired {
		t.Fatal("fired 30 s after a do_* call")
	}
	r.clock.Advance(30 * time.Second)
	if fired, _ := e.CheckDeadMan(ctx); !fired || gpio.Value("night_pump") != false {
		t.Fatal("did not fire after the next silence")
	}
}

// The points the dead man's safe state could not make safe (here the pump:
// its GPIO chip is unreachable) are tried again while the silence lasts, 1 s
// after the first attempt and then twice as long each time up to a minute,
// and only they, until they are made safe; a do_* call ends the retries.
// Each attempt is audited; the failure is logged at error once, not at each
// retry. Before, the dead man fired once per silence whatever became of its
// writes: a pump left on by a device unreachable for a moment stayed on
// until an agent came back.
func TestDeadManRetriesWhatItCouldNotMakeSafe(t *testing.T) {
	r := newRig(t)
	var sink auditSink
	var logs strings.Builder
	e, err := engine.New(r.e.Manifest(), r.e.Policy(), r.buses, engine.Options{Now: r.clock.Now, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Audit: sink.add})
	if err != nil {
		t.Fatal(err)
	}
	e.Manifest().SafeState = &manifest.SafeState{DeadManTimeoutMs: 60000}
	t.Cleanup(func() { e.Manifest().SafeState = nil })
	for _, c := range e.Manifest().Capabilities {
		if c.ToolName() == "do_boiler_setpoint" {
			c.SafeValue = 40.0 // on another bus, which answers
			t.Cleanup(func() { c.SafeValue = nil })
		}
	}
	gpio := r.bus(t, "gpio")
	ctx := context.Background()
	safeWrites := func(tool string) (n int) {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		for _, a := range sink.entries {
			if a.Tool == tool && a.Outcome == engine.OutcomeSafeState {
				n++
			}
		}
		return n
	}
	attempts := func() int { return safeWrites("do_night_pump") }
	// at advances the clock by d and checks the dead man, which acts (or not)
	// and then has made as many attempts on the pump as want
	at := func(d time.Duration, acts bool, want int) {
		t.Helper()
		r.clock.Advance(d)
		if fired, _ := e.CheckDeadMan(ctx); fired != acts || attempts() != want {
			t.Fatalf("after %v more: acted %v, %d attempts on the pump; want %v, %d", d, fired, attempts(), acts, want)
		}
	}

	gpio.SetValue("night_pump", true)
	gpio.SetOffline(true)
	r.clock.Advance(time.Minute)
	if fired, err := e.CheckDeadMan(ctx); !fired || err == nil || !strings.Contains(err.Error(), "do_night_pump") {
		t.Fatalf("dead man with the pump unreachable: fired %v, %v", fired, err)
	}
	at(999*time.Millisecond, false, 1)
	at(time.Millisecond, true, 2) // 1 s after
	at(1999*time.Millisecond, false, 2)
	at(time.Millisecond, true, 3) // 2 s after
	for _, wait := range []time.Duration{4, 8, 16, 32, 60, 60} {
		at(wait*time.Second-time.Millisecond, false, attempts())
		at(time.Millisecond, true, attempts()+1)
	}
	gpio.SetOffline(false)
	at(time.Minute, true, attempts()+1)
	if v := gpio.Value("night_pump"); v != false {
		t.Fatalf("pump once its chip answered = %v, want false", v)
	}
	if n := safeWrites("do_boiler_setpoint"); n != 1 {
		t.Fatalf("the boiler (made safe at the first attempt) had %d safe writes in the silence, want 1", n)
	}
	gpio.SetValue("night_pump", true)
	at(time.Hour, false, attempts()) // made safe: no more retries in this silence

	// a do_* call ends the retries
	doOn(t, e, "do_damper_position", 30.0, "alive")
	gpio.SetOffline(true)
	at(time.Minute, true, attempts()+1)
	doOn(t, e, "do_damper_position", 31.0, "alive again")
	at(time.Second, false, attempts())
	at(58*time.Second, false, attempts())
	gpio.SetOffline(false)
	if v := gpio.Value("night_pump"); v != true {
		t.Fatalf("pump after a do_* call ended the retries = %v, want true (untouched)", v)
	}
	if n := strings.Count(logs.String(), `level=ERROR msg="safe state not applied" tool=do_night_pump`); n != 2 {
		t.Fatalf("the pump's failed safe state was logged at error %d times, want 2 (once per silence):\n%s", n, logs.String())
	}
}
