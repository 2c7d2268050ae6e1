package engine_test

import (
	"slices"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/promcp"
)

func toolStats(t *testing.T, s engine.Stats, tool string) engine.ToolStats {
	t.Helper()
	i := slices.IndexFunc(s.Tools, func(ts engine.ToolStats) bool { return ts.Tool == tool })
	if i < 0 {
		t.Fatalf("no stats for %s in %+v", tool, s.Tools)
	}
	return s.Tools[i]
}

func refusals(ts engine.ToolStats, p promcp.Permission) uint64 {
	return ts.Refusals[slices.Index(engine.RefusalPermissions[:], p)]
}

func busErrors(bs engine.BusStats, kind string) uint64 {
	return bs.Errors[slices.Index(engine.BusErrorKinds[:], kind)]
}

func TestStatsCountCallsTransactionsAndFaults(t *testing.T) {
	r := newTankRig(t)
	r.read(t, "read_tank_level") // from the device
	r.read(t, "read_tank_level") // from the cache
	r.net.setDown(2, true)
	for range engine.BreakerThreshold {
		r.clock.Advance(2 * time.Second)
		r.read(t, "read_tank_level") // times out: stale
	}
	r.clock.Advance(2 * time.Second)
	r.read(t, "read_tank_level") // refused by the open breaker: stale
	r.net.setPanic(1, true)
	r.do(t, operator, "do_inlet_valve", 20.0, "panics")
	r.net.setPanic(1, false)
	r.net.setDown(2, false)
	r.clock.Advance(engine.BreakerCooloff)
	r.do(t, operator, "do_inlet_valve", 200.0, "too-much")
	if resp := r.do(t, operator, "do_inlet_valve", 20.0, "once"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("do: %+v", resp)
	}
	r.do(t, operator, "do_inlet_valve", 20.0, "once") // replayed
	r.canDo(t, operator, promcp.Intent{SemanticTags: []string{"valve"}, Action: "set", Value: 10.0})

	s := r.e.Stats()
	level := toolStats(t, s, "read_tank_level")
	if level.Calls != 8 || level.CacheHits != 1 || level.CacheMisses != 7 {
		t.Errorf("read_tank_level calls %d, cache hits %d, misses %d; want 8, 1, 7", level.Calls, level.CacheHits, level.CacheMisses)
	}
	if q := level.Qualities; q != [4]uint64{2, 6, 0, 0} {
		t.Errorf("read_tank_level by quality (good, stale, degraded, error): %v", q)
	}
	valve := toolStats(t, s, "do_inlet_valve")
	if valve.Calls != 4 || valve.Replays != 1 || refusals(valve, promcp.OutOfRange) != 1 || refusals(valve, promcp.SourceUnreachable) != 1 {
		t.Errorf("do_inlet_valve: %+v", valve)
	}
	if cd := toolStats(t, s, "can_do"); cd.Calls != 1 || cd.Kind != engine.ToolCanDo {
		t.Errorf("can_do: %+v", cd)
	}
	for verb, want := range map[engine.ToolKind]uint64{engine.ToolRead: 8, engine.ToolDo: 4, engine.ToolCanDo: 1} {
		if n := s.CallLatency[verb].Count(); n != want {
			t.Errorf("%s latency observations: %d, want %d", verb, n, want)
		}
	}

	if len(s.Buses) != 1 {
		t.Fatalf("buses: %+v", s.Buses)
	}
	plc := s.Buses[0]
	// Reads: 1 + 5 timed out + the panicking read before the write + the
	// successful call's read before the write, its interlock's read of the
	// level, and its read-back. The breaker's refusal and the replay never
	// reached the driver.
	if plc.Bus != "plc" || plc.Type != "modbus-tcp" || plc.Writes != 1 || plc.Reads != 10 {
		t.Errorf("plc transactions: %+v", plc)
	}
	if busErrors(plc, "timeout") != engine.BreakerThreshold || busErrors(plc, "circuit_open") != 1 || busErrors(plc, "panic") != 1 {
		t.Errorf("plc errors by kind %v: %v", engine.BusErrorKinds, plc.Errors)
	}
	// A transaction that panicked has no duration.
	if n := plc.Latency.Count(); n != plc.Reads+plc.Writes-1 {
		t.Errorf("plc latency observations %d, transactions %d", n, plc.Reads+plc.Writes)
	}
}

// Every refusal a do_* can answer has a counter of its own.
func TestRefusalPermissionsCoverTheEnum(t *testing.T) {
	want := slices.Concat(promcp.Permissions[1:], promcp.ExtensionPermissions, []promcp.Permission{engine.KeyBusy, engine.PermissionNone})
	if !slices.Equal(engine.RefusalPermissions[:], want) {
		t.Fatalf("RefusalPermissions %v, want %v", engine.RefusalPermissions, want)
	}
}
