//go:build !lite

package mcpserver_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
)

// panickyModbus is a Modbus bus whose driver panics while armed.
type panickyModbus struct {
	drivers.ModbusBus
	armed atomic.Bool
}

func (p *panickyModbus) check() {
	if p.armed.Load() {
		panic("driver bug: index out of range")
	}
}

func (p *panickyModbus) ReadRegisters(ctx context.Context, unit uint8, t manifest.ModbusTable, addr, n uint16) ([]uint16, error) {
	p.check()
	return p.ModbusBus.ReadRegisters(ctx, unit, t, addr, n)
}

func (p *panickyModbus) WriteRegisters(ctx context.Context, unit uint8, addr uint16, v []uint16) error {
	p.check()
	return p.ModbusBus.WriteRegisters(ctx, unit, addr, v)
}

// Panics become isError results for the one call, with the tool's body, and
// the server keeps serving: a driver panic (recovered in the engine) and a
// panic in the adapter's own path (recovered at the handler).
func TestPanicsBecomeErrorResults(t *testing.T) {
	m, p := loadExample(t)
	var rs485 *panickyModbus
	e := simEngine(t, m, p, func(buses map[string]drivers.Bus) {
		rs485 = &panickyModbus{ModbusBus: buses["rs485"].(drivers.ModbusBus)}
		buses["rs485"] = rs485
	})
	s, err := mcpserver.New(e, mcpserver.Options{Logger: quietLogger(), Caller: func(context.Context) engine.Caller {
		return engine.Caller{Identity: "local", Role: p.LocalRole()}
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, sess := listTools(t, inProcessClient(t, s))

	rs485.armed.Store(true)
	body := sess.call("do_heater_setpoint", map[string]any{"value": 21.0}, true)
	if body["status"] != "failed" || !strings.Contains(body["reason"].(string), "driver panic") {
		t.Errorf("do with a panicking driver: %v", body)
	}
	body = sess.call("read_heater_flow_temperature", nil, true)
	if body["quality"] != "error" || !strings.Contains(body["detail"].(string), "driver panic") {
		t.Errorf("read with a panicking driver: %v", body)
	}
	rs485.armed.Store(false)
	if body := sess.call("read_heater_flow_temperature", nil, false); body["quality"] != "good" {
		t.Errorf("read after the driver recovered: %v", body)
	}
	if body := sess.call("do_heater_setpoint", map[string]any{"value": 21.0}, false); body["status"] != "success" {
		t.Errorf("do after the panic: %v", body)
	}
}

// A panic in the engine's own path (here the approval callback, which runs
// inside do_*) becomes an isError do_* body, and the next call works.
func TestEnginePanicBecomesErrorResult(t *testing.T) {
	m, p := loadDevice(t, pumpManifest, pumpPolicy)
	e := simEngine(t, m, p, nil)
	var approvalPanics atomic.Bool
	approvalPanics.Store(true)
	s, err := mcpserver.New(e, mcpserver.Options{Logger: quietLogger(), Group: "operation", Caller: func(context.Context) engine.Caller {
		return engine.Caller{Identity: "local", Role: p.LocalRole(), Approve: func(context.Context, engine.ApprovalRequest) (engine.Approval, error) {
			if approvalPanics.Load() {
				panic("approval bug")
			}
			return engine.Approval{Approved: true}, nil
		}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, sess := listTools(t, inProcessClient(t, s))
	body := sess.call("do_pump_run", map[string]any{"value": true, "idempotency_key": "k1"}, true)
	if body["status"] != "failed" || !strings.Contains(body["reason"].(string), "internal error") {
		t.Errorf("do with a panicking engine: %v", body)
	}
	approvalPanics.Store(false)
	if body := sess.call("do_pump_run", map[string]any{"value": true, "idempotency_key": "k1"}, false); body["status"] != "success" {
		t.Errorf("the same key after the panic: %v", body)
	}
}
