package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/promcp"
)

func TestPeekReadsTheDeviceAtMostOncePerAge(t *testing.T) {
	r := newRig(t)
	i2c := r.bus(t, "i2c")
	peek := func(caller engine.Caller) promcp.ReadResponse {
		t.Helper()
		resp, err := r.e.Peek(context.Background(), caller, "read_water_temperature", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if got := peek(operator); got.Value != 55.0 || got.Quality != promcp.QualityGood {
		t.Fatalf("first peek: %+v", got)
	}
	// Past the capability's 1 s TTL but inside the 5 s age: no bus read.
	if err := i2c.SetValue("water_temperature", 60.0); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		r.clock.Advance(time.Second)
		if got := peek(operator); got.Value != 55.0 {
			t.Fatalf("inside the age: %+v", got)
		}
	}
	if n := i2c.Transactions(); n != 1 {
		t.Fatalf("peeks inside the age cost %d transactions", n)
	}
	r.clock.Advance(time.Second)
	if got := peek(operator); got.Value != 60.0 || got.Timestamp != promcp.Time(r.clock.Now()) {
		t.Fatalf("past the age: %+v", got)
	}
	// A read_* answers stay the engine's: quality and access as Read has them.
	i2c.FailNext(10, drivers.ErrTimeout)
	r.clock.Advance(10 * time.Second)
	if got := peek(operator); got.Quality != promcp.QualityStale || got.Value != 60.0 {
		t.Fatalf("device down: %+v", got)
	}
	if _, err := r.e.Peek(context.Background(), operator, "do_boiler_setpoint", time.Second); err == nil {
		t.Fatal("peek of a do_* tool: no error")
	}
}

func TestActionStateSaysWhenACallClears(t *testing.T) {
	r := newRig(t)
	action := func(caller engine.Caller, tool string) engine.ActionState {
		t.Helper()
		st, err := r.e.Action(caller, tool)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := action(operator, "do_boiler_setpoint"); st.Permission != promcp.Allowed || !st.LastWrite.IsZero() {
		t.Fatalf("before any write: %+v", st)
	}
	wrote := r.clock.Now()
	r.do(t, operator, "do_boiler_setpoint", 45.0, "a")
	r.clock.Advance(4 * time.Second)
	st := action(operator, "do_boiler_setpoint")
	if st.Permission != promcp.CooldownActive || !st.ClearsAt.Equal(wrote.Add(10*time.Second)) || !st.LastWrite.Equal(wrote) {
		t.Fatalf("in the cooldown: %+v", st)
	}
	r.clock.Advance(6 * time.Second)
	if st := action(operator, "do_boiler_setpoint"); st.Permission != promcp.Allowed {
		t.Fatalf("after the cooldown: %+v", st)
	}
	if st := action(viewer, "do_boiler_setpoint"); st.Permission != promcp.PermissionInsufficient {
		t.Fatalf("viewer: %+v", st)
	}
	if st := action(operator, "do_night_pump"); st.Permission != promcp.PolicyDenied || st.ClearsAt.IsZero() {
		t.Fatalf("outside the time window: %+v", st)
	}
	if st := action(operator, "do_purge_valve"); !st.Approval {
		t.Fatalf("approval-gated tool: %+v", st)
	}
}

func TestDevicesReportTheirBreakers(t *testing.T) {
	r := newTankRig(t)
	before := r.e.Devices()
	if len(before) == 0 {
		t.Fatal("no devices")
	}
	for _, d := range before {
		if d.State != engine.BreakerClosed || d.LastError != "" || len(d.Tools) == 0 {
			t.Fatalf("at start: %+v", d)
		}
	}
	r.net.setDown(2, true)
	for range engine.BreakerThreshold {
		r.clock.Advance(2 * time.Second)
		r.read(t, "read_tank_level")
	}
	var unit2 *engine.DeviceHealth
	for _, d := range r.e.Devices() {
		if d.Device == "plc unit 2" {
			unit2 = &d
		} else if d.State != engine.BreakerClosed {
			t.Errorf("another device's breaker: %+v", d)
		}
	}
	if unit2 == nil || unit2.State != engine.BreakerOpen || unit2.Failures != engine.BreakerThreshold ||
		unit2.LastError == "" || !unit2.RetryAt.Equal(r.clock.Now().Add(engine.BreakerCooloff)) || !strings.Contains(strings.Join(unit2.Tools, " "), "read_tank_level") {
		t.Fatalf("unit 2 down: %+v", unit2)
	}
}
