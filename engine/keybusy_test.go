package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/modbusfault"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// A second call with a key whose first call is still on the wire waits for
// it only until its own deadline, then answers in doubt (nothing written,
// when to retry); the first completes as usual, and a third call replays its
// outcome. The second is counted and audited as key_busy, not as a write in
// doubt: it sent nothing. Before, the second waited for the first whatever
// its deadline, and then was counted and audited as in doubt.
func TestSameKeyWaitsOnlyUntilItsDeadline(t *testing.T) {
	var sink auditSink
	w, s, hold, first := firstWriteHeld(t, engine.Options{Audit: sink.add})

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	deadline, _ := ctx.Deadline()
	second := make(chan promcp.DoResponse, 1)
	go func() {
		resp, err := w.e.Do(ctx, operator, "do_flow_setpoint", promcp.DoRequest{Value: 500, IdempotencyKey: "A"})
		if err != nil {
			t.Error(err)
		}
		second <- resp
	}()
	var resp promcp.DoResponse
	select {
	case resp = <-second:
	case <-time.After(time.Until(deadline) + 10*time.Second):
		close(hold)
		t.Fatal("the second call with the key was still waiting for the first 10 s after its deadline")
	}
	t.Logf("the second call answered %s after its deadline", time.Since(deadline).Round(time.Millisecond))
	if resp.Status != promcp.StatusFailed || resp.Permission != promcp.SourceUnreachable || resp.AppliedValue != nil ||
		!strings.Contains(resp.Reason, "running since") || !strings.Contains(resp.Reason, "Nothing was written") ||
		!strings.Contains(resp.Reason, "Retry with the same idempotency_key after") {
		t.Fatalf("second call while the first is on the wire = %+v, want in doubt, nothing written, when to retry", resp)
	}
	select {
	case r := <-first:
		t.Fatalf("the first call answered %+v while its reply was held", r)
	default:
	}
	if n := s.Requests(6); n != 1 {
		t.Fatalf("%d FC6 frames while the first was held, want 1", n)
	}
	ts := toolStats(t, w.e.Stats(), "do_flow_setpoint")
	if busy, lost := refusals(ts, engine.KeyBusy), refusals(ts, promcp.SourceUnreachable); ts.Calls != 1 || busy != 1 || lost != 0 {
		t.Fatalf("counted %d calls, %d key_busy, %d source_unreachable; want 1, 1, 0", ts.Calls, busy, lost)
	}
	sink.mu.Lock()
	if n := len(sink.entries); n != 1 || sink.entries[0].Outcome != engine.OutcomeKeyBusy || sink.entries[0].Permission != promcp.SourceUnreachable {
		t.Fatalf("audit while the first is held: %+v, want one key_busy line (source_unreachable)", sink.entries)
	}
	sink.mu.Unlock()

	close(hold)
	a := <-first
	if a.Status != promcp.StatusSuccess || a.AppliedValue != int64(500) {
		t.Fatalf("first call = %+v, want success with 500", a)
	}
	if again := w.do(t, "do_flow_setpoint", 500, "A"); again.Status != promcp.StatusSuccess || again.Timestamp != a.Timestamp {
		t.Fatalf("third call with the key = %+v, want the first's outcome %+v", again, a)
	}
	if n, frames := s.Writes(modbusfault.HoldingRegisters, 0), s.Requests(6); n != 1 || frames != 1 {
		t.Fatalf("%d writes applied, %d FC6 frames; want 1 and 1", n, frames)
	}
}

// A call with a key whose first call, for another value, is still on the
// wire does not promise the first's outcome to a retry (a retry with its own
// value is refused as a different request): it is refused as a key reused
// for a different request, and nothing is written by it.
func TestSameKeyOtherRequestWhileRunning(t *testing.T) {
	w, s, hold, first := firstWriteHeld(t, engine.Options{})

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	resp, err := w.e.Do(ctx, operator, "do_flow_setpoint", promcp.DoRequest{Value: 600, IdempotencyKey: "A"})
	cancel()
	close(hold)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != promcp.StatusFailed || resp.Permission == promcp.SourceUnreachable || resp.AppliedValue != nil ||
		!strings.Contains(resp.Reason, "different request") || strings.Contains(resp.Reason, "returns that call's outcome") {
		t.Fatalf("another value with the key while the first is on the wire = %+v, want refused as a different request", resp)
	}
	if a := <-first; a.Status != promcp.StatusSuccess || a.AppliedValue != int64(500) {
		t.Fatalf("first call = %+v, want success with 500", a)
	}
	if n := s.Requests(6); n != 1 {
		t.Fatalf("%d FC6 frames, want 1", n)
	}
}

// firstWriteHeld starts a do_flow_setpoint 500 with key A whose FC6 reply
// the device holds until hold is closed (well under the 5 s the write may
// take: the capability's timeout; the bus's is longer), and returns once the
// frame is at the device; first gets the call's answer. The engine has opts.
func firstWriteHeld(t *testing.T, opts engine.Options) (w *wireRig, s *modbusfault.TCP, hold chan struct{}, first chan promcp.DoResponse) {
	s = modbusfault.StartTCP(t)
	w = wireRigOn(t, s.Device, fmt.Sprintf("{type: modbus-tcp, address: %q, timeout_ms: 30000}", s.Addr()), opts)
	hold = make(chan struct{})
	s.Inject(modbusfault.Fault{Mode: modbusfault.Delay, Match: modbusfault.At(6, 0), Times: 1, Hold: hold})
	first = make(chan promcp.DoResponse, 1)
	go func() { first <- w.do(t, "do_flow_setpoint", 500, "A") }()
	w.await(t, func(ctx context.Context) error { return s.AwaitRequests(ctx, 6, 1) })
	return w, s, hold, first
}

// holdBus holds, once armed, the first transaction whose description
// (busLog's "reg2=[0]", "coil10=[false]", or "read") begins with the armed
// prefix, until release: a driver blocked in a transaction.
type holdBus struct {
	*busLog
	mu     sync.Mutex
	prefix string // "": not armed
	held   chan struct{}
	gate   chan struct{}
	once   sync.Once
}

// newHoldBus is a holdBus and the wrap that puts it over opsRigOn's busLog.
func newHoldBus() (*holdBus, func(*busLog) drivers.Bus) {
	h := &holdBus{held: make(chan struct{}), gate: make(chan struct{})}
	return h, func(b *busLog) drivers.Bus { h.busLog = b; return h }
}

func (h *holdBus) arm(prefix string) {
	h.mu.Lock()
	h.prefix = prefix
	h.mu.Unlock()
}

func (h *holdBus) release() { h.once.Do(func() { close(h.gate) }) }

func (h *holdBus) wait(desc string) {
	h.mu.Lock()
	hold := h.prefix != "" && strings.HasPrefix(desc, h.prefix)
	if hold {
		h.prefix = ""
	}
	h.mu.Unlock()
	if hold {
		close(h.held)
		<-h.gate
	}
}

func (h *holdBus) ReadBits(ctx context.Context, unit uint8, table manifest.ModbusTable, addr, count uint16) ([]bool, error) {
	h.wait("read")
	return h.busLog.ReadBits(ctx, unit, table, addr, count)
}

func (h *holdBus) ReadRegisters(ctx context.Context, unit uint8, table manifest.ModbusTable, addr, count uint16) ([]uint16, error) {
	h.wait("read")
	return h.busLog.ReadRegisters(ctx, unit, table, addr, count)
}

func (h *holdBus) WriteCoils(ctx context.Context, unit uint8, addr uint16, v []bool) error {
	h.wait(fmt.Sprintf("coil%d=%v", addr, v))
	return h.busLog.WriteCoils(ctx, unit, addr, v)
}

func (h *holdBus) WriteRegisters(ctx context.Context, unit uint8, addr uint16, v []uint16) error {
	h.wait(fmt.Sprintf("reg%d=%v", addr, v))
	return h.busLog.WriteRegisters(ctx, unit, addr, v)
}

// opAnswer is what the key tests look at in an operation tool's answer.
type opAnswer struct {
	failed     bool
	permission promcp.Permission
	reason     string
	id         string // the operation's id, or the answer's timestamp: the same for a replay
}

// start_*, do_cancel_* and a sequence's do_* wait for a call with their key
// that is blocked in its driver only until their own deadline, as a do_*
// does: then they answer source_unreachable, act on nothing (no write at the
// bus), say when to retry, and are audited as key_busy, not in doubt; a call
// for another request with the key is refused as a different request. The
// first call then answers as usual, and a retry replays it. Before, they
// waited for the first call whatever their deadline.
//
// A call with no deadline (over MCP, do_* and operations run detached from
// the request) waits so for as long as its own transactions may take: the
// capability's timeout, a move's source's added, the steps' for a sequence.
// Before, it waited for as long as the first call was blocked, and its
// client with it.
func TestOperationKeyWaitsOnlyUntilItsDeadline(t *testing.T) {
	do := func(ctx context.Context, e *engine.Engine, _ string) opAnswer {
		r, err := e.Do(ctx, operator, "do_valve_command", promcp.DoRequest{Value: 40, IdempotencyKey: "K"})
		if err != nil {
			t.Error(err)
		}
		return opAnswer{r.Status == promcp.StatusFailed, r.Permission, r.Reason, r.Timestamp}
	}
	startMove := func(v int) func(context.Context, *engine.Engine, string) opAnswer {
		return func(ctx context.Context, e *engine.Engine, _ string) opAnswer {
			r, err := e.Start(ctx, operator, "start_valve_move", promcp.StartRequest{Value: v, IdempotencyKey: "K"})
			if err != nil {
				t.Error(err)
			}
			id := r.Timestamp
			if r.OperationID != nil {
				id = *r.OperationID
			}
			return opAnswer{r.Status == promcp.OpFailed, r.Permission, r.Reason, id}
		}
	}
	cancel := func(ctx context.Context, e *engine.Engine, id string) opAnswer {
		r, err := e.Cancel(ctx, operator, "do_cancel_valve_fill", promcp.CancelRequest{OperationID: id, IdempotencyKey: "K"})
		if err != nil {
			t.Error(err)
		}
		return opAnswer{r.Status == promcp.StatusFailed, r.Permission, r.Reason, r.Timestamp}
	}
	sequence := func(ctx context.Context, e *engine.Engine, _ string) opAnswer {
		r, err := e.Sequence(ctx, operator, "do_changeover", promcp.SequenceRequest{IdempotencyKey: "K"})
		if err != nil {
			t.Error(err)
		}
		return opAnswer{r.Status == promcp.StatusFailed, r.Permission, r.Reason, r.Timestamp}
	}
	for _, c := range []struct {
		name, tool string
		hold       string // the first call's transaction held at the bus
		// setup runs before the first call and gives it and the second its argument
		setup         func(*testing.T, *engine.Engine) string
		first, second func(context.Context, *engine.Engine, string) opAnswer
		otherRequest  bool
	}{
		{name: "start", tool: "start_valve_move", hold: "read", first: startMove(40), second: startMove(40)},
		{name: "start another value", tool: "start_valve_move", hold: "read", first: startMove(40), second: startMove(60), otherRequest: true},
		{name: "cancel", tool: "do_cancel_valve_fill", hold: "reg2=", setup: func(t *testing.T, e *engine.Engine) string {
			// an ended operation (its move times out after 200 ms): cancelling it drives the safe value
			id := *start(t, e, "start_valve_fill", promcp.StartRequest{Value: 40}).OperationID
			if st := status(t, e, "read_status_valve_fill", id, promcp.MaxWaitMs); st.State == promcp.OpRunning {
				t.Fatalf("the fill still runs: %+v", st)
			}
			return id
		}, first: cancel, second: cancel},
		{name: "sequence", tool: "do_changeover", hold: "coil10=", first: sequence, second: sequence},
		{name: "do", tool: "do_valve_command", hold: "reg2=", first: do, second: do},
	} {
		for _, detached := range []bool{false, true} {
			name := c.name
			if detached {
				name += " without a deadline"
			}
			run := func(t *testing.T) {
				var sink auditSink
				h, wrap := newHoldBus()
				e, wire := opsRigOn(t, "", engine.Options{Audit: sink.add}, wrap)
				t.Cleanup(h.release) // before the engine closes
				var arg string
				if c.setup != nil {
					arg = c.setup(t, e)
				}
				h.arm(c.hold)
				first := make(chan opAnswer, 1)
				go func() { first <- c.first(context.Background(), e, arg) }()
				select {
				case <-h.held:
				case <-time.After(20 * time.Second):
					t.Fatalf("the first call's %s did not reach the bus in 20 s", c.hold)
				}
				writes := len(wire.log())

				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				if detached {
					ctx = context.WithoutCancel(ctx) // as mcpserver runs it
				}
				second := make(chan opAnswer, 1)
				go func() { second <- c.second(ctx, e, arg) }()
				var resp opAnswer
				select {
				case resp = <-second:
				case <-time.After(time.Minute): // the longest bound here is the sequence's, 15 s
					h.release()
					t.Fatal("the second call with the key was still waiting for the first after a minute")
				}
				switch {
				case c.otherRequest && (!resp.failed || resp.permission != "" || !strings.Contains(resp.reason, "different request")):
					t.Fatalf("another request with the key while the first is held = %+v, want refused as a different request", resp)
				case !c.otherRequest && (!resp.failed || resp.permission != promcp.SourceUnreachable || !strings.Contains(resp.reason, "running since") ||
					!strings.Contains(resp.reason, "Nothing was written") || !strings.Contains(resp.reason, "Retry with the same idempotency_key")):
					t.Fatalf("second call while the first is held = %+v, want source_unreachable, nothing written, when to retry", resp)
				}
				if n := len(wire.log()); n != writes {
					t.Fatalf("bus writes while the first was held: %v, want none after the first %d", wire.log(), writes)
				}
				select {
				case r := <-first:
					t.Fatalf("the first call answered %+v while held", r)
				default:
				}
				var busy, inDoubt int
				lines := func() {
					sink.mu.Lock()
					defer sink.mu.Unlock()
					for _, l := range sink.entries {
						busy += btoi(l.Tool == c.tool && l.Outcome == engine.OutcomeKeyBusy)
						inDoubt += btoi(l.Outcome == engine.OutcomeInDoubt)
					}
				}

				h.release()
				a := <-first
				if detached { // the first's transactions timed out meanwhile
					if lines(); busy != btoi(!c.otherRequest) {
						t.Fatalf("audit: %d key_busy lines for %s: %+v", busy, c.tool, sink.entries)
					}
					return
				}
				if a.failed && c.tool != "do_changeover" { // the changeover's third step is refused by design
					t.Fatalf("first call = %+v", a)
				}
				writes = len(wire.log())
				if again := c.first(context.Background(), e, arg); again != a {
					t.Fatalf("third call with the key = %+v, want the first's answer %+v", again, a)
				}
				if c.tool != "start_valve_move" && len(wire.log()) != writes { // a move's operation writes on its own
					t.Fatalf("the replay wrote: %v", wire.log()[writes:])
				}
				lines()
				if want := btoi(!c.otherRequest); busy != want || inDoubt != 0 {
					t.Fatalf("audit: %d key_busy lines for %s (want %d), %d in_doubt: %+v", busy, c.tool, want, inDoubt, sink.entries)
				}
			}
			t.Run(name, func(t *testing.T) {
				if detached { // in a bubble: it waits for seconds of the capabilities' timeouts
					synctest.Test(t, run)
				} else {
					run(t)
				}
			})
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
