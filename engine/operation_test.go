package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/promcp"
	"github.com/physmcp/physmcpd/state"
)

// busLog sits between the engine and the simulated Modbus bus and records
// every write that reaches it, in order.
type busLog struct {
	drivers.ModbusBus
	mu     sync.Mutex
	writes []string
}

func (b *busLog) WriteRegisters(ctx context.Context, unit uint8, addr uint16, v []uint16) error {
	b.note(fmt.Sprintf("reg%d=%v", addr, v))
	return b.ModbusBus.WriteRegisters(ctx, unit, addr, v)
}

func (b *busLog) WriteCoils(ctx context.Context, unit uint8, addr uint16, v []bool) error {
	b.note(fmt.Sprintf("coil%d=%v", addr, v))
	return b.ModbusBus.WriteCoils(ctx, unit, addr, v)
}

func (b *busLog) note(s string) {
	b.mu.Lock()
	b.writes = append(b.writes, s)
	b.mu.Unlock()
}

func (b *busLog) log() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.writes...)
}

// opsRig is the operations device on the real clock (ramps take real time)
// with its bus behind a busLog, and a state store in dir unless dir is "".
func opsRig(t *testing.T, dir string) (*engine.Engine, *busLog) {
	t.Helper()
	return opsRigOn(t, dir, engine.Options{}, nil)
}

// opsRigOn is opsRig with opts (its logger and stores set) and, unless wrap
// is nil, the engine's bus wrap(the busLog).
func opsRigOn(t *testing.T, dir string, opts engine.Options, wrap func(*busLog) drivers.Bus) (*engine.Engine, *busLog) {
	t.Helper()
	return opsRigFrom(t, "testdata/operations.manifest.yml", dir, opts, wrap)
}

// opsRigFrom is opsRigOn with the manifest at path.
func opsRigFrom(t *testing.T, path, dir string, opts engine.Options, wrap func(*busLog) drivers.Bus) (*engine.Engine, *busLog) {
	t.Helper()
	m, diags := manifest.Load(path)
	if m == nil {
		t.Fatalf("manifest: %s", diags)
	}
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{}), true)
	if err != nil {
		t.Fatal(err)
	}
	wire := &busLog{ModbusBus: buses["mb"].(drivers.ModbusBus)}
	var bus drivers.Bus = wire
	if wrap != nil {
		bus = wrap(wire)
	}
	opts.Logger = quiet
	if dir != "" {
		store, err := state.Open(dir, nil, quiet)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		opts.Idempotency, opts.Limits, opts.Operations = store, store, store
	}
	e, err := engine.New(m, nil, map[string]drivers.Bus{"mb": bus}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, wire
}

// simEngineWith is an engine for m on simulated buses under the policy
// policyYAML, its Modbus bus logged.
func simEngineWith(t *testing.T, m *manifest.Manifest, policyYAML string) (*engine.Engine, *busLog) {
	t.Helper()
	p, diags := policy.Parse("ops.policy.yml", []byte(policyYAML), m)
	if p == nil || len(diags) != 0 {
		t.Fatalf("policy: %v", diags)
	}
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{}), true)
	if err != nil {
		t.Fatal(err)
	}
	wire := &busLog{ModbusBus: buses["mb"].(drivers.ModbusBus)}
	buses["mb"] = wire
	e, err := engine.New(m, p, buses, engine.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, wire
}

func start(t *testing.T, e *engine.Engine, tool string, req promcp.StartRequest) promcp.StartResponse {
	t.Helper()
	resp, err := e.Start(context.Background(), operator, tool, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func status(t *testing.T, e *engine.Engine, tool, id string, waitMs int) promcp.StatusResponse {
	t.Helper()
	resp, err := e.Status(context.Background(), operator, tool, promcp.StatusRequest{OperationID: id, WaitMs: waitMs}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestRampPolledToCompletionWithMonotoneProgress(t *testing.T) {
	e, wire := opsRig(t, "")
	resp := start(t, e, "start_oven_ramp", promcp.StartRequest{Value: 22.0, IdempotencyKey: "ramp-1"})
	if resp.Status != promcp.OpRunning || resp.OperationID == nil || resp.ExpectedCompletion == nil || len(resp.SideEffects) == 0 {
		t.Fatalf("start: %+v", resp)
	}
	if resp.PreviousValue != 20.0 || resp.TargetValue != 22.0 {
		t.Fatalf("start: previous %v, target %v", resp.PreviousValue, resp.TargetValue)
	}
	id := *resp.OperationID
	last := -1.0
	var st promcp.StatusResponse
	for deadline := time.Now().Add(5 * time.Second); ; {
		st = status(t, e, "read_status_oven_ramp", id, 0)
		if st.Progress < last {
			t.Fatalf("progress went back from %v to %v", last, st.Progress)
		}
		last = st.Progress
		if st.State != promcp.OpRunning || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st.State != promcp.OpSucceeded || st.Progress != 1 || st.Quality != promcp.QualityGood || st.Value != 22.0 || st.EndedAt == nil {
		t.Fatalf("final status: %+v", st)
	}
	// 20 → 22 °C at 0.2 °C per step: ten ordinary writes, every one on the bus.
	if got := len(wire.log()); got != 10 || st.Writes != 10 {
		t.Fatalf("%d bus writes, %d counted by the operation, want 10: %v", got, st.Writes, wire.log())
	}
}

func TestStartRetriedWithItsKeyStartsOnce(t *testing.T) {
	e, wire := opsRig(t, "")
	first := start(t, e, "start_oven_ramp", promcp.StartRequest{Value: 20.6, IdempotencyKey: "k"})
	st := status(t, e, "read_status_oven_ramp", *first.OperationID, 5000)
	if st.State != promcp.OpSucceeded {
		t.Fatalf("status: %+v", st)
	}
	writes := len(wire.log())
	again := start(t, e, "start_oven_ramp", promcp.StartRequest{Value: 20.6, IdempotencyKey: "k"})
	if *again.OperationID != *first.OperationID || again.Status != promcp.OpRunning {
		t.Fatalf("retry: %+v", again)
	}
	time.Sleep(100 * time.Millisecond)
	if got := len(wire.log()); got != writes || writes != 3 {
		t.Fatalf("bus writes %d after the retry, %d before; want 3", got, writes)
	}
	other := start(t, e, "start_oven_ramp", promcp.StartRequest{Value: 21.0, IdempotencyKey: "k"})
	if other.Status != promcp.OpFailed || other.OperationID != nil {
		t.Fatalf("same key, other value: %+v", other)
	}
}

func TestCancelDrivesTheSafeValue(t *testing.T) {
	e, wire := opsRig(t, "")
	// 20 → 100 °C would take 400 steps (8 s): cancel it on the way
	resp := start(t, e, "start_oven_ramp", promcp.StartRequest{Value: 100.0})
	id := *resp.OperationID
	// once it has made a step (the status after the cancel shows progress)
	for deadline := time.Now().Add(5 * time.Second); status(t, e, "read_status_oven_ramp", id, 0).Progress == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the ramp made no step within 5 s")
		}
	}
	// while it runs, the point is the operation's
	direct, err := e.Do(context.Background(), operator, "do_oven_setpoint", promcp.DoRequest{Value: 50.0})
	if err != nil || direct.Status != promcp.StatusFailed || direct.Permission != promcp.PolicyDenied {
		t.Fatalf("do_ while a ramp drives the point: %+v %v", direct, err)
	}
	// one operation per point
	if second := start(t, e, "start_oven_ramp", promcp.StartRequest{Value: 30.0}); second.Status != promcp.OpFailed || second.Permission != promcp.PolicyDenied {
		t.Fatalf("a second ramp of the same point: %+v", second)
	}
	c, err := e.Cancel(context.Background(), operator, "do_cancel_oven_ramp", promcp.CancelRequest{OperationID: id, IdempotencyKey: "c1"})
	if err != nil || c.Status != promcp.StatusSuccess || c.State != promcp.OpCancelled || c.AppliedValue != 20.0 {
		t.Fatalf("cancel: %+v %v", c, err)
	}
	n := len(wire.log())
	if last := wire.log()[n-1]; last != "reg0=[200]" {
		t.Fatalf("the last bus write is %s, want the safe value 20 °C (reg0=[200])", last)
	}
	time.Sleep(100 * time.Millisecond)
	if len(wire.log()) != n {
		t.Fatalf("writes after the cancel: %v", wire.log()[n:])
	}
	st := status(t, e, "read_status_oven_ramp", id, 0)
	if st.State != promcp.OpCancelled || st.Value != 20.0 || st.Progress == 0 || st.Progress == 1 {
		t.Fatalf("status after cancel: %+v", st)
	}
	again, _ := e.Cancel(context.Background(), operator, "do_cancel_oven_ramp", promcp.CancelRequest{OperationID: id, IdempotencyKey: "c1"})
	if again.Status != promcp.StatusSuccess || len(wire.log()) != n {
		t.Fatalf("retried cancel wrote again: %+v", again)
	}
}

func TestRunAndMove(t *testing.T) {
	e, wire := opsRig(t, "")
	run := start(t, e, "start_pump_run", promcp.StartRequest{Value: true, DurationMs: 150})
	mv := start(t, e, "start_valve_move", promcp.StartRequest{Value: 40})
	if st := status(t, e, "read_status_valve_move", *mv.OperationID, 2000); st.State != promcp.OpSucceeded || st.Value != int64(40) || st.Observed != "read_valve_position" {
		t.Fatalf("move: %+v", st)
	}
	if st := status(t, e, "read_status_pump_run", *run.OperationID, 3000); st.State != promcp.OpSucceeded || st.Value != false || st.Writes != 2 {
		t.Fatalf("run: %+v", st)
	}
	log := wire.log()
	if len(log) != 3 {
		t.Fatalf("bus writes: %v", log)
	}
	if bad := start(t, e, "start_pump_run", promcp.StartRequest{Value: true, DurationMs: 6000}); bad.Status != promcp.OpFailed || bad.Permission != promcp.OutOfRange {
		t.Fatalf("over max_duration_ms: %+v", bad)
	}
}

func TestSafeStateStopsARunningOperation(t *testing.T) {
	e, _ := opsRig(t, "")
	resp := start(t, e, "start_oven_ramp", promcp.StartRequest{Value: 150.0})
	time.Sleep(60 * time.Millisecond)
	if err := e.ApplySafeState(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	st := status(t, e, "read_status_oven_ramp", *resp.OperationID, 0)
	if st.State != promcp.OpFailed || st.Value != 20.0 {
		t.Fatalf("after the safe state: %+v", st)
	}
}

func TestSequenceCompensatesInReverseAndActsOncePerStep(t *testing.T) {
	e, wire := opsRig(t, "")
	resp, err := e.Sequence(context.Background(), operator, "do_changeover", promcp.SequenceRequest{IdempotencyKey: "seq-1"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != promcp.StatusFailed || resp.Outcome != promcp.SequenceCompensated || resp.FailedStep == nil || *resp.FailedStep != 3 {
		t.Fatalf("sequence: %+v", resp)
	}
	if resp.Steps[2].Permission != promcp.PolicyDenied || len(resp.Compensations) != 2 ||
		resp.Compensations[0].Tool != "do_transfer_pump" || resp.Compensations[1].Tool != "do_inlet_valve" {
		t.Fatalf("steps %+v, compensations %+v", resp.Steps, resp.Compensations)
	}
	// step 1, step 2, then undo 2, undo 1 (the outlet valve was never written)
	want := []string{"coil10=[false]", "coil11=[true]", "coil11=[false]", "coil10=[true]"}
	if got := wire.log(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("bus writes %v, want %v", got, want)
	}
	again, _ := e.Sequence(context.Background(), operator, "do_changeover", promcp.SequenceRequest{IdempotencyKey: "seq-1"})
	if fmt.Sprint(wire.log()) != fmt.Sprint(want) || again.Outcome != resp.Outcome || again.Timestamp != resp.Timestamp {
		t.Fatalf("the retried sequence acted again: %v, %+v", wire.log(), again)
	}
}

func TestCanDoKnowsOperations(t *testing.T) {
	e, wire := opsRig(t, "")
	rep, err := e.CanDo(context.Background(), operator, promcp.CanDoRequest{Intent: promcp.Intent{SemanticTags: []string{"oven", "ramp"}, Action: "set", Value: 30.0}})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range rep.Candidates {
		found = found || c.Capability == "start_oven_ramp" && c.Permission == promcp.Allowed && c.ValidUntil != ""
	}
	if !found {
		t.Fatalf("start_oven_ramp is no allowed candidate: %+v", rep)
	}
	// the changeover's third step is interlocked: the dry run says so before anything acts
	rep, _ = e.CanDo(context.Background(), operator, promcp.CanDoRequest{Intent: promcp.Intent{SemanticTags: []string{"changeover"}}})
	if len(rep.Blocked) != 1 || rep.Blocked[0].Capability != "do_changeover" || rep.Blocked[0].Permission != promcp.PolicyDenied {
		t.Fatalf("do_changeover: %+v", rep)
	}
	if n := len(wire.log()); n != 0 {
		t.Fatalf("can_do wrote %d times", n)
	}
}

func TestOperationTimesOut(t *testing.T) {
	e, _ := opsRig(t, "")
	resp := start(t, e, "start_valve_fill", promcp.StartRequest{Value: 60})
	st := status(t, e, "read_status_valve_fill", *resp.OperationID, 5000)
	if st.State != promcp.OpFailed || !strings.Contains(st.Reason, "timed out") || st.Observed != "read_tank_level" || st.LastWritten != int64(60) {
		t.Fatalf("status: %+v", st)
	}
}

// lossyCoil applies every write, and loses the reply to the next lose
// writes of the coil at addr, as a reply lost on the wire does.
type lossyCoil struct {
	*busLog
	addr uint16
	lose atomic.Int32
}

func (l *lossyCoil) WriteCoils(ctx context.Context, unit uint8, addr uint16, v []bool) error {
	if err := l.busLog.WriteCoils(ctx, unit, addr, v); err != nil || addr != l.addr || l.lose.Add(-1) < 0 {
		return err
	}
	return fmt.Errorf("reply lost: %w: %w", drivers.ErrTimeout, drivers.ErrInDoubt)
}

func lossyCoilRig(t *testing.T, addr uint16) (*engine.Engine, *lossyCoil) {
	t.Helper()
	var wire *lossyCoil
	e, _ := opsRigOn(t, "", engine.Options{}, func(b *busLog) drivers.Bus {
		wire = &lossyCoil{busLog: b, addr: addr}
		wire.lose.Store(1)
		return wire
	})
	return e, wire
}

// A sequence step whose write's outcome is lost may have acted: it is
// undone with the steps before it, so "compensated" holds (nothing remains
// done), rather than leaving the pump on with the inlet reopened.
func TestSequenceUndoesAStepInDoubt(t *testing.T) {
	e, wire := lossyCoilRig(t, 11) // the transfer pump, step 2
	resp, err := e.Sequence(context.Background(), operator, "do_changeover", promcp.SequenceRequest{IdempotencyKey: "seq-doubt"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Outcome != promcp.SequenceCompensated || resp.FailedStep == nil || *resp.FailedStep != 2 || !strings.Contains(resp.Reason, "steps 1..2 were undone") {
		t.Fatalf("sequence: %+v", resp)
	}
	// step 1, step 2 (its reply lost), then undo 2, undo 1
	want := []string{"coil10=[false]", "coil11=[true]", "coil11=[false]", "coil10=[true]"}
	if got := wire.log(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("bus writes %v, want %v", got, want)
	}
	if again, _ := e.Sequence(context.Background(), operator, "do_changeover", promcp.SequenceRequest{IdempotencyKey: "seq-doubt"}); fmt.Sprint(wire.log()) != fmt.Sprint(want) || again.Outcome != resp.Outcome {
		t.Fatalf("the retried sequence acted again: %v, %+v", wire.log(), again)
	}
}

// A run whose first write's outcome is lost may have started the pump, and
// nothing would stop it: the end value is written at once and the run
// fails, saying the first write's outcome is unknown (not "not applied").
func TestRunEndsAtOnceAfterAFirstWriteInDoubt(t *testing.T) {
	e, wire := lossyCoilRig(t, 1) // the pump
	resp := start(t, e, "start_pump_run", promcp.StartRequest{Value: true, DurationMs: 5000, IdempotencyKey: "run-doubt"})
	st := status(t, e, "read_status_pump_run", *resp.OperationID, 2000)
	if st.State != promcp.OpFailed || !strings.Contains(st.Reason, "no known outcome") || !strings.Contains(st.Reason, "end value false was written at once") || st.Value != false {
		t.Fatalf("status: %+v", st)
	}
	if want := []string{"coil1=[true]", "coil1=[false]"}; fmt.Sprint(wire.log()) != fmt.Sprint(want) {
		t.Fatalf("bus writes %v, want %v", wire.log(), want)
	}
}

// cancelAt cancels the call whose write reaches the coil at addr, as a
// client that goes away mid-sequence.
type cancelAt struct {
	*busLog
	addr   uint16
	cancel context.CancelFunc
}

func (c *cancelAt) WriteCoils(ctx context.Context, unit uint8, addr uint16, v []bool) error {
	err := c.busLog.WriteCoils(ctx, unit, addr, v)
	if addr == c.addr {
		c.cancel()
	}
	return err
}

// A sequence whose caller goes away after step 2 still undoes steps 2 and 1:
// the undo writes do not end with the call, which would leave the pump on
// and the inlet closed.
func TestSequenceUndoesAfterItsCallerWentAway(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wire *cancelAt
	e, _ := opsRigOn(t, "", engine.Options{}, func(b *busLog) drivers.Bus {
		wire = &cancelAt{busLog: b, addr: 11, cancel: cancel}
		return wire
	})
	resp, err := e.Sequence(ctx, operator, "do_changeover", promcp.SequenceRequest{IdempotencyKey: "seq-gone"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Outcome != promcp.SequenceCompensated || len(resp.Compensations) != 2 {
		t.Fatalf("sequence: %+v", resp)
	}
	coils, err := wire.ReadBits(context.Background(), 1, manifest.TableCoil, 10, 2)
	if err != nil || fmt.Sprint(coils) != "[true false]" {
		t.Fatalf("inlet and pump = %v, %v; want them back at [true false]", coils, err)
	}
}

// signalAt closes at when a register write to addr reaches the bus.
type signalAt struct {
	*busLog
	addr uint16
	at   chan struct{}
	once sync.Once
}

func (s *signalAt) WriteRegisters(ctx context.Context, unit uint8, addr uint16, v []uint16) error {
	err := s.busLog.WriteRegisters(ctx, unit, addr, v)
	if addr == s.addr {
		s.once.Do(func() { close(s.at) })
	}
	return err
}

// refusingRegs answers every register write with exception 3 (illegal
// data value): refused, not applied.
type refusingRegs struct{ *busLog }

func (r refusingRegs) WriteRegisters(ctx context.Context, unit uint8, addr uint16, v []uint16) error {
	r.busLog.note(fmt.Sprintf("refused reg%d=%v", addr, v))
	return &drivers.ModbusException{Function: 16, Code: 3}
}

// pumpThenHeat is the operations device with a sequence whose second step
// waits for a ramp.
func pumpThenHeat(t *testing.T) string {
	return opsWith(t, `
  - name: pump_then_heat
    kind: sequence
    description: Stop the pump, then ramp the oven up and wait for it.
    semantic_tags: [pump, oven]
    steps:
      - {tool: do_pump, value: false}
      - {tool: start_oven_ramp, value: 150, wait: true}
`)
}

// opsWith is the path of the operations device with more of its capabilities
// list (YAML list items) after its own.
func opsWith(t *testing.T, more string) string {
	t.Helper()
	base, err := os.ReadFile("testdata/operations.manifest.yml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ops.manifest.yml")
	if err := os.WriteFile(path, append(base, more...), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A start_* step whose operation failed before it wrote anything is not
// undone: its cancel would drive the oven to its safe value, which nothing
// asked for. The steps before it are.
func TestSequenceDoesNotCancelAnOperationThatWroteNothing(t *testing.T) {
	var wire refusingRegs
	e, _ := opsRigFrom(t, pumpThenHeat(t), "", engine.Options{}, func(b *busLog) drivers.Bus {
		wire = refusingRegs{b}
		return wire
	})
	ctx := context.Background()
	if resp, _ := e.Do(ctx, operator, "do_pump", promcp.DoRequest{Value: true}); resp.Status != promcp.StatusSuccess {
		t.Fatalf("do_pump: %+v", resp)
	}
	resp, _ := e.Sequence(ctx, operator, "do_pump_then_heat", promcp.SequenceRequest{IdempotencyKey: "seq-nothing"})
	if resp.Outcome != promcp.SequenceCompensated || len(resp.Compensations) != 1 || resp.Compensations[0].Tool != "do_pump" {
		t.Fatalf("sequence: %+v", resp)
	}
	want := []string{"coil1=[true]", "coil1=[false]", "refused reg0=[202]", "coil1=[true]"}
	if fmt.Sprint(wire.log()) != fmt.Sprint(want) {
		t.Fatalf("bus writes %v, want %v", wire.log(), want)
	}
}

// The safe state applied while a sequence runs (the dead man, shutdown) is
// the last word: the sequence acts no more, and undoes nothing, after it.
// Undoing step 1 would switch the pump the safe state had just switched off
// back on.
func TestSafeStateStopsASequence(t *testing.T) {
	var wire *signalAt
	e, _ := opsRigFrom(t, pumpThenHeat(t), "", engine.Options{}, func(b *busLog) drivers.Bus {
		wire = &signalAt{busLog: b, addr: 0, at: make(chan struct{})}
		return wire
	})
	ctx := context.Background()
	if resp, _ := e.Do(ctx, operator, "do_pump", promcp.DoRequest{Value: true}); resp.Status != promcp.StatusSuccess {
		t.Fatalf("do_pump: %+v", resp)
	}
	done := make(chan promcp.SequenceResponse)
	go func() {
		resp, _ := e.Sequence(ctx, operator, "do_pump_then_heat", promcp.SequenceRequest{IdempotencyKey: "seq-safe"})
		done <- resp
	}()
	<-wire.at // the ramp has begun
	if err := e.ApplySafeState(ctx, "dead-man timeout (test)"); err != nil {
		t.Fatal(err)
	}
	resp := <-done
	if resp.Outcome != promcp.SequenceCompensationFailed || len(resp.Compensations) != 0 || !strings.Contains(resp.Reason, "safe state") {
		t.Fatalf("sequence: %+v", resp)
	}
	coils, err := wire.ReadBits(ctx, 1, manifest.TableCoil, 1, 1)
	if err != nil || coils[0] {
		t.Fatalf("pump = %v, %v; want off, as the safe state left it (writes %v)", coils, err, wire.log())
	}
}
