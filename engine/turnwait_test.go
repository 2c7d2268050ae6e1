package engine_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/promcp"
)

// A do_* waiting its turn to write a register behind a write wedged in its
// driver (a hung adapter: the transaction ignores its context) gives up
// once the wedged write is past every transaction it may run under the turn
// (three of its 5 s timeout) and engine.WedgeMargin, or at its own deadline
// when that comes first: it answers source_unreachable and writes nothing;
// its key stays free for a retry. Over MCP a do_* runs without a deadline,
// and before it waited for the wedged write for good, its client with it.
func TestWriteTurnIsNotWaitedForBehindAWedgedWrite(t *testing.T) {
	for _, c := range []struct {
		name     string
		deadline time.Duration // 0: none, as over MCP
		want     time.Duration // how long the second call waits
	}{
		{name: "without a deadline", want: 3*5*time.Second + engine.WedgeMargin},
		{name: "with a deadline", deadline: 2 * time.Second, want: 2 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, wrap := newHoldBus()
				e, wire := opsRigOn(t, "", engine.Options{}, wrap)
				t.Cleanup(h.release) // before the engine closes
				h.arm("reg2=")
				first := make(chan promcp.DoResponse, 1)
				go func() {
					r, _ := e.Do(context.WithoutCancel(context.Background()), operator, "do_valve_command", promcp.DoRequest{Value: 40, IdempotencyKey: "A"})
					first <- r
				}()
				<-h.held
				writes := len(wire.log())

				ctx := context.Background()
				if c.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, c.deadline)
					defer cancel()
				} else {
					ctx = context.WithoutCancel(ctx)
				}
				began := time.Now()
				second := make(chan promcp.DoResponse, 1)
				go func() {
					r, _ := e.Do(ctx, operator, "do_valve_command", promcp.DoRequest{Value: 60, IdempotencyKey: "B"})
					second <- r
				}()
				var resp promcp.DoResponse
				select {
				case resp = <-second:
				case <-time.After(10 * time.Minute):
					h.release()
					t.Fatal("the second write was still waiting for the wedged one after 10 minutes")
				}
				if took := time.Since(began); took != c.want {
					t.Errorf("the second write waited %v, want %v", took, c.want)
				}
				if resp.Status != promcp.StatusFailed || resp.Permission != promcp.SourceUnreachable || !strings.Contains(resp.Reason, "nothing was written") {
					t.Fatalf("second write behind a wedged one = %+v, want source_unreachable, nothing written", resp)
				}
				if n := len(wire.log()); n != writes {
					t.Fatalf("bus transactions while the first was wedged: %v, want none after the first %d", wire.log(), writes)
				}
				select {
				case r := <-first:
					t.Fatalf("the wedged write answered %+v", r)
				default:
				}
				h.release()
				<-first
				if again, _ := e.Do(context.Background(), operator, "do_valve_command", promcp.DoRequest{Value: 60, IdempotencyKey: "B"}); again.Status != promcp.StatusSuccess {
					t.Fatalf("retry of the refused key once the wedge cleared = %+v, want success", again)
				}
			})
		})
	}
}
