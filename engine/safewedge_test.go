package engine_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/promcp"
)

// The safe state (start-up, dead man, shutdown, a bus opening late) waits
// for a register's write turn held by a write wedged in its driver (a hung
// adapter: the transaction ignores its context) only as a do_* waits: until
// its deadline, and never past the moment the wedged write is past every
// transaction it may run under the turn (three of its 5 s timeout) and
// engine.WedgeMargin. The point is then reported not made safe (the error
// names its tool and the wedged write, the audit has it as a failed
// safe_state write), and the other points are made safe. With a state store
// the wedged write's key is in doubt and held: settling it waits no longer
// than a do_* retry of it would (its 5 s timeout), then leaves it in doubt.
// Before, the safe state waited for the wedged write for good: the dead man
// never reported, and the shutdown's 10 s bound never ended it (SIGTERM did
// not stop the daemon).
func TestSafeStateIsNotWaitedForBehindAWedgedWrite(t *testing.T) {
	for _, c := range []struct {
		name     string
		store    bool
		deadline time.Duration // 0: none, as at start-up and for the dead man
		want     time.Duration // how long the safe state takes
		says     string        // in the error
	}{
		{name: "without a deadline", want: 3*5*time.Second + engine.WedgeMargin, says: "wedged"},
		{name: "with a state store", store: true, want: 3*5*time.Second + engine.WedgeMargin, says: "wedged"},
		{name: "at shutdown", deadline: 10 * time.Second, want: 10 * time.Second, says: "deadline exceeded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dir := ""
				if c.store {
					dir = t.TempDir()
				}
				var sink auditSink
				h, wrap := newHoldBus()
				e, wire := opsRigOn(t, dir, engine.Options{Audit: sink.add}, wrap)
				t.Cleanup(h.release) // before the engine closes
				h.arm("reg2=")
				wedged := make(chan promcp.DoResponse, 1)
				go func() {
					r, _ := e.Do(context.WithoutCancel(context.Background()), operator, "do_valve_command", promcp.DoRequest{Value: 60, IdempotencyKey: "B"})
					wedged <- r
				}()
				<-h.held

				ctx := context.Background()
				if c.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, c.deadline)
					defer cancel()
				}
				began := time.Now()
				done := make(chan error, 1)
				go func() { done <- e.ApplySafeState(ctx, "dead-man timeout: test") }()
				var err error
				select {
				case err = <-done:
				case <-time.After(10 * time.Minute):
					h.release()
					t.Fatal("the safe state was still waiting for the wedged write after 10 minutes")
				}
				if took := time.Since(began); took != c.want {
					t.Errorf("the safe state took %v, want %v", took, c.want)
				}
				if err == nil || !strings.Contains(err.Error(), "do_valve_command: safe value 0 not written: the register's write turn is held by another write") ||
					!strings.Contains(err.Error(), c.says) {
					t.Errorf("safe state behind a wedged write: %v; want do_valve_command not written, naming the held turn and %q", err, c.says)
				}
				if c.store && (err == nil || !strings.Contains(err.Error(), "do_valve_command key B: left in doubt")) {
					t.Errorf("safe state with the wedged write's key in doubt: %v; want key B left in doubt", err)
				}
				if got := wire.log(); !slices.Contains(got, "reg0=[200]") || !slices.Contains(got, "coil1=[false]") || slices.Contains(got, "reg2=[0]") {
					t.Errorf("writes during the safe state: %v; want the oven's 20 °C and the pump off, nothing to the wedged register", got)
				}
				if a := safeEntry(&sink, "do_valve_command"); a == nil || a.Status != promcp.StatusFailed || a.Permission != promcp.SourceUnreachable ||
					!strings.Contains(a.Reason, "write turn is held by another write") {
					t.Errorf("audit of the valve's safe state: %+v; want a failed safe_state entry naming the held turn", a)
				}
				select {
				case r := <-wedged:
					t.Fatalf("the wedged write answered %+v", r)
				default:
				}
				h.release()
				<-wedged
				if err := e.ApplySafeState(context.Background(), "once the wedge cleared"); err != nil {
					t.Fatalf("safe state once the wedge cleared: %v", err)
				}
			})
		})
	}
}

// safeEntry is the first safe_state audit entry of tool (nil: none).
func safeEntry(sink *auditSink, tool string) *engine.AuditEntry {
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for i, a := range sink.entries {
		if a.Tool == tool && a.Outcome == engine.OutcomeSafeState {
			return &sink.entries[i]
		}
	}
	return nil
}

// doubtBus answers a write of its value with drivers.ErrInDoubt, writing
// nothing: the reply was lost.
type doubtBus struct {
	drivers.ModbusBus
	write string
}

func (d doubtBus) WriteRegisters(ctx context.Context, unit uint8, addr uint16, v []uint16) error {
	if fmt.Sprintf("reg%d=%v", addr, v) == d.write {
		return fmt.Errorf("test: reply lost: %w", drivers.ErrInDoubt)
	}
	return d.ModbusBus.WriteRegisters(ctx, unit, addr, v)
}

// An in-doubt key whose register's write turn is held by a write wedged in
// its driver cannot be settled by the safe state (it would read the device
// under the turn): it is left in doubt, neither marked applied nor not
// applied, and once the wedge clears, a retry of it finds the later write
// (itself in doubt: it ran past its deadline) and answers superseded. Before, the safe state waited for the turn for
// good.
func TestInDoubtKeyBehindAWedgedWriteStaysInDoubt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, hold := newHoldBus()
		e, _ := opsRigOn(t, t.TempDir(), engine.Options{}, func(b *busLog) drivers.Bus {
			return doubtBus{ModbusBus: hold(b).(drivers.ModbusBus), write: "reg2=[40]"}
		})
		t.Cleanup(h.release)
		if a, _ := e.Do(context.Background(), operator, "do_valve_command", promcp.DoRequest{Value: 40, IdempotencyKey: "A"}); a.Status != promcp.StatusFailed {
			t.Fatalf("A with its reply lost = %+v, want failed (in doubt)", a)
		}
		time.Sleep(time.Minute) // past A's settle window
		h.arm("reg2=")
		wedged := make(chan promcp.DoResponse, 1)
		go func() {
			r, _ := e.Do(context.Background(), operator, "do_valve_command", promcp.DoRequest{Value: 60, IdempotencyKey: "B"})
			wedged <- r
		}()
		<-h.held
		err := e.ApplySafeState(context.Background(), "dead-man timeout: test")
		if err == nil || !strings.Contains(err.Error(), "do_valve_command key A: left in doubt") || !strings.Contains(err.Error(), "wedged") {
			t.Errorf("safe state with A in doubt behind a wedged write: %v; want key A left in doubt, naming the wedged write", err)
		}
		h.release()
		<-wedged // in doubt: it ran past its deadline
		if a, _ := e.Do(context.Background(), operator, "do_valve_command", promcp.DoRequest{Value: 40, IdempotencyKey: "A"}); a.Permission != promcp.Superseded {
			t.Fatalf("retry of A after the wedge cleared = %+v, want superseded by B", a)
		}
	})
}

// An operation wedged in its driver (the run's write hangs, ignoring its
// context) holds neither the safe state nor a cancel for good: stopping it
// waits for its runner only as long as its transaction may take (the pump's
// 5 s timeout) and engine.WedgeMargin, then ends it as failed; the pump's
// safe write then waits for the write turn the wedged write holds, as
// behind any wedged write (TestSafeStateIsNotWaitedForBehindAWedgedWrite),
// and the other points are made safe. Before, the safe state (the dead
// man's, the shutdown's) and a cancel waited for the runner for good.
func TestSafeStateStopsAWedgedOperation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, wrap := newHoldBus()
		e, wire := opsRigOn(t, "", engine.Options{}, wrap)
		t.Cleanup(h.release)
		h.arm("coil1=")
		started := make(chan promcp.StartResponse, 1)
		go func() {
			r, _ := e.Start(context.Background(), operator, "start_pump_run", promcp.StartRequest{Value: true, DurationMs: 5000, IdempotencyKey: "R"})
			started <- r
		}()
		<-h.held
		began := time.Now()
		done := make(chan error, 1)
		go func() { done <- e.ApplySafeState(context.Background(), "dead-man timeout: test") }()
		var err error
		select {
		case err = <-done:
		case <-time.After(10 * time.Minute):
			h.release()
			t.Fatal("the safe state was still waiting for the wedged operation after 10 minutes")
		}
		if took, want := time.Since(began), 3*5*time.Second+engine.WedgeMargin; took != want {
			t.Errorf("the safe state took %v, want %v", took, want)
		}
		if err == nil || !strings.Contains(err.Error(), "do_pump: safe value false not written: the register's write turn is held by another write") {
			t.Errorf("safe state with the pump's run wedged: %v; want do_pump not written, naming the held turn", err)
		}
		if got := wire.log(); !slices.Contains(got, "reg0=[200]") || !slices.Contains(got, "reg2=[0]") {
			t.Errorf("writes during the safe state: %v; want the oven's 20 °C and the valve closed", got)
		}
		h.release()
		r := <-started
		if r.OperationID == nil {
			t.Fatalf("start_pump_run = %+v", r)
		}
		if st, _ := e.Status(context.Background(), operator, "read_status_pump_run", promcp.StatusRequest{OperationID: *r.OperationID}, nil); st.State != promcp.OpFailed || !strings.Contains(st.Reason, "dead-man timeout") {
			t.Errorf("the wedged run after the safe state: %+v; want failed, stopped by the safe state", st)
		}
	})
}
