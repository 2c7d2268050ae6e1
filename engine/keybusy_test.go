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
)

// A second call with a key whose first call is still on the wire waits for
// it only until its own deadline, then answers in doubt (nothing written,
// when to retry); the first completes as usual, and a third call replays its
// outcome. Before, the second waited for the first whatever its deadline.
func TestSameKeyWaitsOnlyUntilItsDeadline(t *testing.T) {
	w, s, hold, first := firstWriteHeld(t)

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
	w, s, hold, first := firstWriteHeld(t)

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
// frame is at the device; first gets the call's answer.
func firstWriteHeld(t *testing.T) (w *wireRig, s *modbusfault.TCP, hold chan struct{}, first chan promcp.DoResponse) {
	s = modbusfault.StartTCP(t)
	w = wireRigOn(t, s.Device, fmt.Sprintf("{type: modbus-tcp, address: %q, timeout_ms: 30000}", s.Addr()), engine.Options{})
	hold = make(chan struct{})
	s.Inject(modbusfault.Fault{Mode: modbusfault.Delay, Match: modbusfault.At(6, 0), Times: 1, Hold: hold})
	first = make(chan promcp.DoResponse, 1)
	go func() { first <- w.do(t, "do_flow_setpoint", 500, "A") }()
	w.await(t, func(ctx context.Context) error { return s.AwaitRequests(ctx, 6, 1) })
	return w, s, hold, first
}
