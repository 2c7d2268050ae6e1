package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/testclock"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/promcp"
)

// rig is the engine under test with its simulated buses.
type rig struct {
	e     *engine.Engine
	clock *testclock.Clock
	buses map[string]drivers.Bus
}

var (
	quiet    = slog.New(slog.DiscardHandler)
	operator = engine.Caller{Identity: "test-operator", Role: manifest.RoleOperator}
	viewer   = engine.Caller{Identity: "test-viewer", Role: manifest.RoleNone}
)

func newRig(t *testing.T) *rig {
	t.Helper()
	return newRigFiles(t, "testdata/device.manifest.yml", "testdata/device.policy.yml")
}

func newRigFiles(t *testing.T, manifestPath, policyPath string) *rig {
	t.Helper()
	m, diags := manifest.Load(manifestPath)
	if m == nil {
		t.Fatalf("manifest: %s", diags)
	}
	var p *policy.Policy
	if policyPath != "" {
		p, diags = policy.Load(policyPath, m)
		if p == nil {
			t.Fatalf("policy: %s", diags)
		}
	}
	clk := testclock.New(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{Now: clk.Now}), true)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(m, p, buses, engine.Options{Now: clk.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return &rig{e: e, clock: clk, buses: buses}
}

// simBus is what every simulated bus offers tests.
type simBus interface {
	Writes() int64
	Transactions() int64
	SetOffline(bool)
	FailNext(n int, err error)
	SetLatency(time.Duration)
	SetValue(capability string, v any) error
	Value(capability string) any
}

func (r *rig) bus(t *testing.T, name string) simBus {
	t.Helper()
	b, ok := r.buses[name].(simBus)
	if !ok {
		t.Fatalf("bus %s (%T) is not a simulator", name, r.buses[name])
	}
	return b
}

func (r *rig) writes(t *testing.T) int64 {
	var n int64
	for name := range r.buses {
		n += r.bus(t, name).Writes()
	}
	return n
}

func (r *rig) do(t *testing.T, caller engine.Caller, tool string, value any, key string) promcp.DoResponse {
	t.Helper()
	resp, err := r.e.Do(context.Background(), caller, tool, promcp.DoRequest{Value: value, IdempotencyKey: key})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return resp
}

func (r *rig) read(t *testing.T, tool string) promcp.ReadResponse {
	t.Helper()
	resp, err := r.e.Read(context.Background(), operator, tool)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return resp
}

func (r *rig) canDo(t *testing.T, caller engine.Caller, in promcp.Intent) promcp.CapabilityReport {
	t.Helper()
	rep, err := r.e.CanDo(context.Background(), caller, promcp.CanDoRequest{Intent: in})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// permissionFor finds a tool's permission in a report (candidate or blocked).
func permissionFor(rep promcp.CapabilityReport, tool string) (promcp.Permission, bool) {
	for _, c := range rep.Candidates {
		if c.Capability == tool {
			return c.Permission, true
		}
	}
	for _, b := range rep.Blocked {
		if b.Capability == tool {
			return b.Permission, true
		}
	}
	return "", false
}

func TestDoAppliesReadsBackAndInvalidatesCache(t *testing.T) {
	r := newRig(t)
	if got := r.read(t, "read_boiler_setpoint"); got.Value != 40.0 || got.Quality != promcp.QualityGood {
		t.Fatalf("initial read = %+v, want 40 good", got)
	}
	resp := r.do(t, operator, "do_boiler_setpoint", 55.0, "k1")
	if resp.Status != promcp.StatusSuccess || resp.PreviousValue != 40.0 || resp.AppliedValue != 55.0 {
		t.Fatalf("do = %+v", resp)
	}
	if !resp.Compensable || resp.CompensationHint == nil || *resp.CompensationHint != "do_boiler_setpoint value=40" {
		t.Fatalf("compensation = %v %v", resp.Compensable, resp.CompensationHint)
	}
	if resp.Compensation == nil || resp.Compensation.Arguments["value"] != 40.0 {
		t.Fatalf("compensation data = %+v", resp.Compensation)
	}
	if len(resp.SideEffects) != 1 || resp.IdempotencyKey != "k1" {
		t.Fatalf("side effects / key = %v %q", resp.SideEffects, resp.IdempotencyKey)
	}
	// The read shares the register: the write must not be hidden by its cache.
	if got := r.read(t, "read_boiler_setpoint"); got.Value != 55.0 {
		t.Fatalf("read after write = %v, want 55", got.Value)
	}
	if w := r.bus(t, "mb").Writes(); w != 1 {
		t.Fatalf("writes = %d, want 1", w)
	}
}

func TestRetriedKeyWritesOnce(t *testing.T) {
	r := newRig(t)
	first := r.do(t, operator, "do_boiler_setpoint", 50.0, "retry-1")
	again := r.do(t, operator, "do_boiler_setpoint", 50.0, "retry-1")
	if first.Status != promcp.StatusSuccess || again.Status != first.Status || again.Timestamp != first.Timestamp {
		t.Fatalf("replay differs: %+v vs %+v", first, again)
	}
	// The replay spent no cooldown: a new key is refused by the cooldown of the first write only.
	if w := r.bus(t, "mb").Writes(); w != 1 {
		t.Fatalf("writes = %d, want 1", w)
	}
}

func TestConcurrentSameKeyWritesOnce(t *testing.T) {
	r := newRig(t)
	var wg sync.WaitGroup
	results := make([]promcp.DoResponse, 16)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = r.do(t, operator, "do_damper_position", 30.0, "same")
		}()
	}
	wg.Wait()
	for _, res := range results {
		if res.Status != promcp.StatusSuccess || res.Timestamp != results[0].Timestamp {
			t.Fatalf("result %+v differs from %+v", res, results[0])
		}
	}
	if w := r.bus(t, "mb").Writes(); w != 1 {
		t.Fatalf("writes = %d, want 1", w)
	}
}

func TestSameKeyOtherArgumentsFails(t *testing.T) {
	r := newRig(t)
	r.do(t, operator, "do_damper_position", 30.0, "k")
	resp := r.do(t, operator, "do_damper_position", 31.0, "k")
	if resp.Status != promcp.StatusFailed || resp.Reason == "" {
		t.Fatalf("reused key = %+v", resp)
	}
	// 30 and 30.0 are the same request.
	if resp := r.do(t, operator, "do_damper_position", float64(30), "k"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("same value replay = %+v", resp)
	}
	if w := r.bus(t, "mb").Writes(); w != 1 {
		t.Fatalf("writes = %d, want 1", w)
	}
}

func TestGeneratedKeyIsReturned(t *testing.T) {
	r := newRig(t)
	resp := r.do(t, operator, "do_damper_position", 30.0, "")
	if len(resp.IdempotencyKey) != 36 {
		t.Fatalf("generated key %q", resp.IdempotencyKey)
	}
}

func TestRefusalsWriteNothing(t *testing.T) {
	cases := []struct {
		name   string
		setup  func(t *testing.T, r *rig)
		caller engine.Caller
		tool   string
		tags   []string
		value  any
		want   promcp.Permission
	}{
		{name: "outside manifest range", caller: operator, tool: "do_boiler_setpoint", tags: []string{"boiler"}, value: 120.0, want: promcp.OutOfRange},
		{name: "outside deny guard", caller: operator, tool: "do_boiler_setpoint", tags: []string{"boiler"}, value: 85.0, want: promcp.OutOfRange},
		{name: "wrong role", caller: viewer, tool: "do_boiler_setpoint", tags: []string{"boiler"}, value: 50.0, want: promcp.PermissionInsufficient},
		{name: "closed window", caller: operator, tool: "do_night_pump", tags: []string{"pump"}, value: true, want: promcp.PolicyDenied},
		{name: "needs approval", caller: operator, tool: "do_purge_valve", tags: []string{"purge"}, value: true, want: promcp.RequiresHumanApproval},
		{name: "cooldown", caller: operator, tool: "do_boiler_setpoint", tags: []string{"boiler"}, value: 50.0, want: promcp.CooldownActive,
			setup: func(t *testing.T, r *rig) { r.do(t, operator, "do_boiler_setpoint", 45.0, "before") }},
		{name: "rate limit", caller: operator, tool: "do_boiler_setpoint", tags: []string{"boiler"}, value: 50.0, want: promcp.RateLimited,
			setup: func(t *testing.T, r *rig) {
				for i, v := range []float64{41, 42, 43} {
					if resp := r.do(t, operator, "do_boiler_setpoint", v, "rate-"+string(rune('a'+i))); resp.Status != promcp.StatusSuccess {
						t.Fatalf("setup write %d: %+v", i, resp)
					}
					r.clock.Advance(11 * time.Second) // past the cooldown, inside the minute
				}
			}},
		{name: "unreachable", caller: operator, tool: "do_boiler_setpoint", tags: []string{"boiler"}, value: 50.0, want: promcp.SourceUnreachable,
			setup: func(t *testing.T, r *rig) { r.bus(t, "mb").SetOffline(true) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			if tc.setup != nil {
				tc.setup(t, r)
			}
			before := r.writes(t)
			rep := r.canDo(t, tc.caller, promcp.Intent{SemanticTags: tc.tags, Action: "set", Value: tc.value})
			if got, ok := permissionFor(rep, tc.tool); !ok || got != tc.want {
				t.Fatalf("can_do permission for %s = %q (found %v), want %q; report %+v", tc.tool, got, ok, tc.want, rep)
			}
			if tc.want != promcp.RequiresHumanApproval && rep.Feasible {
				t.Fatalf("feasible with only a blocked candidate: %+v", rep)
			}
			if !rep.Feasible && !slices.ContainsFunc(rep.Blocked, func(b promcp.Blocked) bool {
				return b.Capability == tc.tool && b.Permission == tc.want && b.Reason != ""
			}) {
				t.Fatalf("feasible is false and blocked does not explain %s with %s: %+v", tc.tool, tc.want, rep.Blocked)
			}
			resp := r.do(t, tc.caller, tc.tool, tc.value, "refused-"+tc.name)
			if resp.Status != promcp.StatusFailed || resp.Permission != tc.want || resp.Reason == "" {
				t.Fatalf("do = %+v, want failed with %s", resp, tc.want)
			}
			if after := r.writes(t); after != before {
				t.Fatalf("a refused call wrote: %d -> %d", before, after)
			}
		})
	}
}

func TestCooldownAndRateClearWithTime(t *testing.T) {
	r := newRig(t)
	r.do(t, operator, "do_boiler_setpoint", 45.0, "a")
	if resp := r.do(t, operator, "do_boiler_setpoint", 46.0, "b"); resp.Permission != promcp.CooldownActive {
		t.Fatalf("during cooldown: %+v", resp)
	}
	rep := r.canDo(t, operator, promcp.Intent{SemanticTags: []string{"boiler"}, Action: "set"})
	var clears string
	for _, b := range rep.Blocked {
		if b.Capability == "do_boiler_setpoint" {
			clears = b.ClearsAt
		}
	}
	if want := promcp.Time(r.clock.Now().Add(10 * time.Second)); clears != want {
		t.Fatalf("clears_at = %q, want %q", clears, want)
	}
	r.clock.Advance(10 * time.Second)
	if resp := r.do(t, operator, "do_boiler_setpoint", 46.0, "b"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("after cooldown: %+v", resp)
	}
	r.clock.Advance(10 * time.Second)
	r.do(t, operator, "do_boiler_setpoint", 47.0, "c")
	r.clock.Advance(10 * time.Second)
	if resp := r.do(t, operator, "do_boiler_setpoint", 48.0, "d"); resp.Permission != promcp.RateLimited {
		t.Fatalf("fourth write in a minute: %+v", resp)
	}
	// The first write leaves the one-minute window 60 s after it was made.
	r.clock.Advance(30 * time.Second)
	if resp := r.do(t, operator, "do_boiler_setpoint", 48.0, "d"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("after the window: %+v", resp)
	}
}

func TestTimeWindowOpens(t *testing.T) {
	r := newRig(t)
	r.clock.Advance(11 * time.Hour) // 23:00 UTC
	if resp := r.do(t, operator, "do_night_pump", true, "n"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("inside the window: %+v", resp)
	}
	rep := r.canDo(t, operator, promcp.Intent{SemanticTags: []string{"pump"}, Action: "toggle"})
	if len(rep.Candidates) != 1 {
		t.Fatalf("candidates = %+v", rep.Candidates)
	}
	// Never valid past the window's end at 06:00 — here the 60 s horizon is earlier.
	vu, _ := time.Parse(time.RFC3339, rep.Candidates[0].ValidUntil)
	if !vu.After(r.clock.Now()) || vu.After(r.clock.Now().Add(time.Minute)) {
		t.Fatalf("valid_until %s", vu)
	}
	r.clock.Advance(7*time.Hour - 30*time.Second) // 05:59:30
	rep = r.canDo(t, operator, promcp.Intent{SemanticTags: []string{"pump"}, Action: "toggle"})
	vu, _ = time.Parse(time.RFC3339, rep.Candidates[0].ValidUntil)
	if want := r.clock.Now().Add(30 * time.Second); !vu.Equal(want) {
		t.Fatalf("valid_until %s, want the window end %s", vu, want)
	}
}

func TestClampIsPartial(t *testing.T) {
	r := newRig(t)
	resp := r.do(t, operator, "do_damper_position", 95.0, "c")
	if resp.Status != promcp.StatusPartial || resp.AppliedValue != 90.0 || len(resp.Warnings) == 0 {
		t.Fatalf("clamped do = %+v", resp)
	}
}

func TestCanDoFindsSetpoint(t *testing.T) {
	r := newRig(t)
	rep := r.canDo(t, operator, promcp.Intent{SemanticTags: []string{"heating", "setpoint"}, Action: "set", Target: "boiler_setpoint", Value: 50.0, Location: "lab"})
	if !rep.Feasible || len(rep.Candidates) == 0 {
		t.Fatalf("report %+v", rep)
	}
	c := rep.Candidates[0]
	if c.Capability != "do_boiler_setpoint" || c.Confidence < 0.7 || c.Permission != promcp.Allowed {
		t.Fatalf("best candidate %+v", c)
	}
	vu, err := time.Parse(time.RFC3339, c.ValidUntil)
	if err != nil || !vu.After(r.clock.Now()) || vu.After(r.clock.Now().Add(30*time.Second)) {
		t.Fatalf("valid_until %q under a rate limit and cooldown", c.ValidUntil)
	}
	if c.CurrentState.Value != 40.0 || *c.Constraints.Min != 10 || *c.Constraints.Max != 80 {
		t.Fatalf("state %+v constraints %+v", c.CurrentState, c.Constraints)
	}
	if len(rep.Context.RelatedReads) == 0 {
		t.Fatalf("no related reads")
	}
	if w := r.writes(t); w != 0 {
		t.Fatalf("can_do wrote %d times", w)
	}
}

func TestCanDoUnroutable(t *testing.T) {
	r := newRig(t)
	rep := r.canDo(t, operator, promcp.Intent{SemanticTags: []string{"espresso"}, Action: "set"})
	if rep.Feasible || len(rep.Unroutable) != 1 || rep.Unroutable[0].Reason != promcp.NoProducer {
		t.Fatalf("report %+v", rep)
	}
	rep = r.canDo(t, operator, promcp.Intent{Action: "set"})
	if rep.Feasible || len(rep.Unroutable) != 1 || rep.Unroutable[0].Reason != promcp.MalformedRequest {
		t.Fatalf("report %+v", rep)
	}
	rep = r.canDo(t, operator, promcp.Intent{SemanticTags: []string{"boiler"}, Action: "explode"})
	if rep.Feasible || len(rep.Unroutable) != 1 || rep.Unroutable[0].Reason != promcp.MalformedRequest {
		t.Fatalf("report %+v", rep)
	}
}

func TestReadCacheAndCollapse(t *testing.T) {
	r := newRig(t)
	i2c := r.bus(t, "i2c")
	r.read(t, "read_water_temperature")
	r.read(t, "read_water_temperature")
	if n := i2c.Transactions(); n != 1 {
		t.Fatalf("two reads inside the TTL cost %d transactions", n)
	}
	r.clock.Advance(time.Second)
	i2c.SetLatency(50 * time.Millisecond)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := r.read(t, "read_water_temperature"); got.Quality != promcp.QualityGood {
				t.Errorf("read %+v", got)
			}
		}()
	}
	wg.Wait()
	if n := i2c.Transactions(); n > 3 {
		t.Fatalf("20 concurrent reads cost %d transactions", n-1)
	}
}

func TestReadQualityIsHonest(t *testing.T) {
	r := newRig(t)
	i2c := r.bus(t, "i2c")
	good := r.read(t, "read_water_temperature")
	if good.Quality != promcp.QualityGood || good.Value != 55.0 || good.Unit == nil || *good.Unit != "°C" {
		t.Fatalf("good read %+v", good)
	}
	if good.Timestamp != promcp.Time(r.clock.Now()) {
		t.Fatalf("timestamp %s, want the measurement time %s", good.Timestamp, promcp.Time(r.clock.Now()))
	}
	measured := good.Timestamp

	// Past the TTL the device stops answering: the last good value, stale, with its own time.
	r.clock.Advance(2 * time.Second)
	i2c.FailNext(1, drivers.ErrTimeout)
	stale := r.read(t, "read_water_temperature")
	if stale.Quality != promcp.QualityStale || stale.Value != 55.0 || stale.Timestamp != measured {
		t.Fatalf("stale read %+v", stale)
	}

	// Long after, the old value is no longer an observation.
	r.clock.Advance(5 * time.Minute)
	i2c.SetOffline(true)
	if gone := r.read(t, "read_water_temperature"); gone.Quality != promcp.QualityError || gone.Value != nil || gone.Detail == "" {
		t.Fatalf("offline read %+v", gone)
	}

	// Back online but implausible: degraded.
	i2c.SetOffline(false)
	if err := i2c.SetValue("water_temperature", 126.0); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(2 * time.Second)
	if deg := r.read(t, "read_water_temperature"); deg.Quality != promcp.QualityDegraded || deg.Detail == "" {
		t.Fatalf("implausible read %+v", deg)
	}
}

// inDoubt returns an engine whose store already holds an in-doubt intent to
// write 30 to do_damper_position under key, as a crash between the write and
// its record would leave it.
func inDoubt(t *testing.T, key string) (*engine.Engine, simBus) {
	t.Helper()
	r := newRig(t)
	store := engine.NewMemoryStore(r.clock.Now)
	e, err := engine.New(r.e.Manifest(), r.e.Policy(), r.buses, engine.Options{Now: r.clock.Now, Idempotency: store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	err = store.Save(key, engine.Record{
		Fingerprint: engine.Fingerprint("do_damper_position", 30.0),
		At:          r.clock.Now().Add(-time.Minute),
		InDoubt:     true,
		Response:    promcp.DoResponse{Status: promcp.StatusFailed, IdempotencyKey: key, AppliedValue: 30.0, PreviousValue: 20.0, SideEffects: []string{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return e, r.bus(t, "mb")
}

func TestInDoubtWriteThatDidNotLandIsWrittenOnce(t *testing.T) {
	// The write's outcome was lost and the device still shows the old value.
	e, mb := inDoubt(t, "lost")
	for range 2 {
		resp, err := e.Do(context.Background(), operator, "do_damper_position", promcp.DoRequest{Value: 30.0, IdempotencyKey: "lost"})
		if err != nil || resp.Status != promcp.StatusSuccess || resp.AppliedValue != 30.0 {
			t.Fatalf("retry = %+v %v", resp, err)
		}
	}
	if w := mb.Writes(); w != 1 {
		t.Fatalf("writes = %d, want 1", w)
	}
}

func TestInDoubtWriteThatLandedIsNotRepeated(t *testing.T) {
	// The device already shows the value: the write happened.
	e, mb := inDoubt(t, "landed")
	if err := mb.SetValue("damper_position", 30.0); err != nil {
		t.Fatal(err)
	}
	resp, err := e.Do(context.Background(), operator, "do_damper_position", promcp.DoRequest{Value: 30.0, IdempotencyKey: "landed"})
	if err != nil || resp.Status != promcp.StatusSuccess || resp.AppliedValue != 30.0 {
		t.Fatalf("resolved in-doubt = %+v %v", resp, err)
	}
	if w := mb.Writes(); w != 0 {
		t.Fatalf("writes = %d, want 0 (the device already had the value)", w)
	}
}

func TestUnknownTool(t *testing.T) {
	r := newRig(t)
	if _, err := r.e.Read(context.Background(), operator, "read_nothing"); !errors.Is(err, engine.ErrUnknownTool) {
		t.Fatalf("err = %v", err)
	}
	if _, err := r.e.Do(context.Background(), operator, "read_water_temperature", promcp.DoRequest{Value: 1.0}); !errors.Is(err, engine.ErrUnknownTool) {
		t.Fatalf("do on a read tool: err = %v", err)
	}
}

func TestBadValuesAreRefused(t *testing.T) {
	r := newRig(t)
	for _, v := range []any{"warm", true, nil, map[string]any{"v": 1}} {
		if resp := r.do(t, operator, "do_boiler_setpoint", v, ""); resp.Status != promcp.StatusFailed || resp.Reason == "" {
			t.Fatalf("value %v: %+v", v, resp)
		}
	}
	if w := r.writes(t); w != 0 {
		t.Fatalf("writes = %d", w)
	}
}
