package engine_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
	"github.com/physmcp/physmcpd/state"
)

// answerLost is an operation store that loses a sequence's answer, as a
// crash right before it was recorded would.
type answerLost struct{ engine.OperationStore }

func (a answerLost) SaveOperation(r engine.OperationRecord) error {
	if len(r.Answer) > 0 {
		return nil
	}
	return a.OperationStore.SaveOperation(r)
}

// A sequence interrupted by a restart after it began undoing its steps is
// not run forward again on its retry: the steps it undid would replay as
// done, and the steps after them act. Here the changeover's step 3 (the
// outlet) is refused by its interlock, steps 2 and 1 are undone, and
// physmcpd stops before the answer is recorded; the tank then fills, so
// step 3 would pass. The retry writes nothing and answers
// compensation_failed (read before acting). Before, it replayed steps 1 and
// 2, opened the outlet and answered completed, with the inlet open and the
// transfer pump off (undone).
func TestSequenceInterruptedWhileUndoingIsNotRunForward(t *testing.T) {
	m, diags := manifest.Load("testdata/operations.manifest.yml")
	if m == nil || diags.HasErrors() {
		t.Fatalf("manifest: %s", diags)
	}
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{}), true)
	if err != nil {
		t.Fatal(err)
	}
	dev := buses["mb"].(simBus)
	wire := &busLog{ModbusBus: buses["mb"].(drivers.ModbusBus)}
	dir := t.TempDir()
	open := func(lose bool) (*engine.Engine, *state.Store) {
		s, err := state.Open(dir, nil, quiet)
		if err != nil {
			t.Fatal(err)
		}
		var ops engine.OperationStore = s
		if lose {
			ops = answerLost{s}
		}
		e, err := engine.New(m, nil, map[string]drivers.Bus{"mb": wire}, engine.Options{Logger: quiet, Idempotency: s, Limits: s, Operations: ops})
		if err != nil {
			t.Fatal(err)
		}
		return e, s
	}
	ctx := context.Background()
	e, s := open(true)
	first, err := e.Sequence(ctx, operator, "do_changeover", promcp.SequenceRequest{IdempotencyKey: "seq-r"})
	if err != nil || first.Outcome != promcp.SequenceCompensated {
		t.Fatalf("first run: %+v, %v", first, err)
	}
	s.Close() // the engine stops with it (Close would close the bus too)
	before := wire.log()

	if err := dev.SetValue("tank_level", 50); err != nil {
		t.Fatal(err)
	}
	e, s = open(false)
	defer s.Close()
	defer e.Close()
	again, err := e.Sequence(ctx, operator, "do_changeover", promcp.SequenceRequest{IdempotencyKey: "seq-r"})
	if err != nil {
		t.Fatal(err)
	}
	if got := wire.log(); !slices.Equal(got, before) {
		t.Errorf("the retry wrote %v after the restart, want nothing", got[len(before):])
	}
	if again.Outcome != promcp.SequenceCompensationFailed || !strings.Contains(again.Reason, "undoing") {
		t.Errorf("retry after the restart: outcome %s, reason %q; want compensation_failed saying it was undoing", again.Outcome, again.Reason)
	}
	replay, _ := e.Sequence(ctx, operator, "do_changeover", promcp.SequenceRequest{IdempotencyKey: "seq-r"})
	if replay.Timestamp != again.Timestamp {
		t.Errorf("a further retry answered %+v, want the retry's answer replayed", replay)
	}
}

// A sequence interrupted by a restart whose points the safe state has
// driven since (start-up) is not run forward on its retry either: its steps
// that acted would replay as done though the safe state undid them. Here
// do_pump_then_valve stops (physmcpd with it) while step 2 (the valve) is
// on the wire; the restarted physmcpd applies its start-up safe state (the
// pump off). Before, the retry replayed step 1 (pump on) as done, wrote
// the valve and answered completed, with the pump off.
func TestSequenceInterruptedIsNotRunForwardAfterTheSafeState(t *testing.T) {
	path := opsWith(t, `
  - name: pump_then_valve
    kind: sequence
    description: Start the pump, then open the valve.
    semantic_tags: [pump, valve]
    steps:
      - {tool: do_pump, value: true}
      - {tool: do_valve_command, value: 50}
`)
	m, diags := manifest.Load(path)
	if m == nil || diags.HasErrors() {
		t.Fatalf("manifest: %s", diags)
	}
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{}), true)
	if err != nil {
		t.Fatal(err)
	}
	wire := &busLog{ModbusBus: buses["mb"].(drivers.ModbusBus)}
	h, wrap := newHoldBus()
	t.Cleanup(h.release)
	dir := t.TempDir()
	open := func(bus drivers.Bus) (*engine.Engine, *state.Store) {
		s, err := state.Open(dir, nil, quiet)
		if err != nil {
			t.Fatal(err)
		}
		e, err := engine.New(m, nil, map[string]drivers.Bus{"mb": bus}, engine.Options{Logger: quiet, Idempotency: s, Limits: s, Operations: s})
		if err != nil {
			t.Fatal(err)
		}
		return e, s
	}
	ctx := context.Background()
	first, s := open(wrap(wire))
	h.arm("reg2=") // step 2 stays on the wire: physmcpd stops meanwhile
	go func() {
		_, _ = first.Sequence(ctx, operator, "do_pump_then_valve", promcp.SequenceRequest{IdempotencyKey: "seq-s"})
	}()
	<-h.held
	s.Close()

	e, s := open(wire)
	defer s.Close()
	if err := e.ApplySafeState(ctx, "start-up"); err != nil {
		t.Fatal(err)
	}
	before := wire.log()
	again, err := e.Sequence(ctx, operator, "do_pump_then_valve", promcp.SequenceRequest{IdempotencyKey: "seq-s"})
	if err != nil {
		t.Fatal(err)
	}
	if got := wire.log(); !slices.Equal(got, before) {
		t.Errorf("the retry wrote %v after the restart's safe state, want nothing", got[len(before):])
	}
	if again.Outcome != promcp.SequenceCompensationFailed || !strings.Contains(again.Reason, "safe state") {
		t.Errorf("retry after the restart: outcome %s, reason %q; want compensation_failed naming the safe state", again.Outcome, again.Reason)
	}
}
