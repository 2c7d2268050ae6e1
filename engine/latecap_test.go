package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers/modbus"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/modbusfault"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// In-doubt writes to more registers than a Modbus TCP bus keeps connections
// listening for late replies (modbus.MaxListening): the device never sees
// more than MaxListening+1 connections open, the keys still listened for
// are settled by the device's late replies, and a key whose listening was
// cut short is not: the device applied it, but nothing proved it, so its
// window stands (another key is refused, a retry that cannot wait writes
// nothing).
func TestLateReplyCapSettlesNoKeyWrongly(t *testing.T) {
	const n = modbus.MaxListening + 2
	s := modbusfault.StartTCP(t)
	var text strings.Builder
	fmt.Fprintf(&text, "physmcp_version: \"0.1\"\ndevice: {id: cap_rig, type: test_rig}\nbuses:\n  plc: {type: modbus-tcp, address: %q, timeout_ms: %d, late_write_ms: 60000}\ncapabilities:\n", s.Addr(), wireTimeout)
	for i := range n {
		fmt.Fprintf(&text, `  - name: valve_%d
    kind: do
    description: Valve setpoint.
    binding: {bus: plc, unit: 1, table: holding, address: %d, data_type: uint16}
    data_type: int
    range: {min: 0, max: 1000}
    semantic_tags: [valve]
    side_effects: ["moves a valve"]
`, i, i)
	}
	path := filepath.Join(t.TempDir(), "cap.manifest.yml")
	if err := os.WriteFile(path, []byte(text.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	m, diags := manifest.Load(path)
	if m == nil {
		t.Fatalf("manifest: %s", diags)
	}
	w := &wireRig{dev: s.Device, m: m}
	w.e = w.open(t, engine.Options{})

	var holds [n]chan struct{}
	for i := range n {
		holds[i] = make(chan struct{})
		s.Inject(modbusfault.Fault{Mode: modbusfault.LateApply, Match: modbusfault.At(6, uint16(i)), Times: 1, Hold: holds[i]})
		if r := w.do(t, fmt.Sprintf("do_valve_%d", i), 500, fmt.Sprint("K", i)); r.Status != promcp.StatusFailed || !strings.Contains(r.Reason, "late reply") {
			t.Fatalf("K%d answered %+v, want in doubt, listening for a late reply", i, r)
		}
	}
	if peak := s.PeakConns(); peak > modbus.MaxListening+1 {
		t.Fatalf("the device saw %d connections open at once, want at most %d", peak, modbus.MaxListening+1)
	}
	reads := s.Requests(3)
	for _, h := range holds {
		close(h)
	}
	w.await(t, func(ctx context.Context) error { return s.AwaitHandled(ctx, 6, n) })
	// Each key still listened for is settled with one read-back.
	w.await(t, func(ctx context.Context) error { return s.AwaitRequests(ctx, 3, reads+modbus.MaxListening) })
	for i := range n {
		tool, key := fmt.Sprintf("do_valve_%d", i), fmt.Sprint("K", i)
		if s.Writes(modbusfault.HoldingRegisters, uint16(i)) != 1 {
			t.Fatalf("%s: %d writes applied, want 1", key, s.Writes(modbusfault.HoldingRegisters, uint16(i)))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		retry, err := w.e.Do(ctx, operator, tool, promcp.DoRequest{Value: 500, IdempotencyKey: key})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if i >= n-modbus.MaxListening {
			if retry.Status != promcp.StatusSuccess {
				t.Fatalf("%s, heard out: retry = %+v, want its late reply's outcome", key, retry)
			}
			continue
		}
		if retry.Status != promcp.StatusFailed || !strings.Contains(retry.Reason, "could not wait") {
			t.Fatalf("%s, listening cut short: retry = %+v, want still in doubt", key, retry)
		}
		if b := w.do(t, tool, 700, "B"+key); b.Permission != promcp.CooldownActive || !strings.Contains(b.Reason, key) {
			t.Fatalf("another key on %s's register = %+v, want cooldown_active naming %s", key, b, key)
		}
	}
	if frames := s.Requests(6); frames != n {
		t.Fatalf("%d FC6 frames, want %d", frames, n)
	}
}
