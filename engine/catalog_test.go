package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// fakeSource is an adopted device: its values by read_ tool, a do_ tool
// writing the read_ of the same name, and whether it is known to be away.
type fakeSource struct {
	mu      sync.Mutex
	values  map[string]any
	writes  int
	offline error
	closed  atomic.Bool
}

func (s *fakeSource) Describe() string { return "fake source" }
func (s *fakeSource) Close() error     { s.closed.Store(true); return nil }

func (s *fakeSource) BindVirtual(c *manifest.Capability, _ drivers.BindOptions) (drivers.Point, error) {
	return &fakePoint{s: s, c: c}, nil
}

type fakePoint struct {
	s *fakeSource
	c *manifest.Capability
}

func (p *fakePoint) Describe() string                                { return "fake " + p.c.ToolName() }
func (p *fakePoint) Quantise(v drivers.Value) (drivers.Value, error) { return v, nil }

func (p *fakePoint) Read(context.Context) (drivers.Sample, error) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if p.s.offline != nil {
		return drivers.Sample{}, fmt.Errorf("%w: %v", drivers.ErrUnreachable, p.s.offline)
	}
	tool := p.c.Binding.Virtual.Tool
	if p.c.Kind == manifest.KindDo {
		tool = p.c.Binding.Virtual.ReadTool
	}
	return drivers.Sample{Value: p.s.values[tool], At: time.Now()}, nil
}

func (p *fakePoint) Write(_ context.Context, v drivers.Value) error {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	p.s.values[p.c.Binding.Virtual.ReadTool] = v
	p.s.writes++
	return nil
}

func (p *fakePoint) Offline() error {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	return p.s.offline
}

func adoptedCaps(bus string, names ...string) []*manifest.Capability {
	var caps []*manifest.Capability
	for _, n := range names {
		kind, name, _ := cutKind(n)
		c := &manifest.Capability{Name: name, Kind: kind, Description: "adopted " + name, DataType: manifest.TypeFloat,
			SemanticTags: []string{"fan", name}, Group: "zone_a",
			Binding: manifest.Binding{Bus: bus, Type: manifest.BusMCP, Virtual: &manifest.VirtualBinding{Tool: n}}}
		if kind == manifest.KindDo {
			c.Binding.Virtual.ReadTool = "read_" + name
			c.RequiresPermission = manifest.RoleOperator
			c.CooldownMs = 60000
		}
		caps = append(caps, c)
	}
	return caps
}

func cutKind(tool string) (manifest.Kind, string, bool) {
	for _, k := range []manifest.Kind{manifest.KindRead, manifest.KindDo} {
		if name, ok := strings.CutPrefix(tool, string(k)+"_"); ok {
			return k, name, true
		}
	}
	return "", tool, false
}

func toolNames(e *engine.Engine) []string {
	var out []string
	for _, t := range e.Tools() {
		out = append(out, t.Name)
	}
	return out
}

// A device adopted while the engine runs is served at once (before can_do,
// which stays last), is adopted again with its cooldowns kept when its
// capabilities change, is blocked as unreachable when known to be away, and
// goes away when no longer adopted; calls under way meanwhile are unharmed.
func TestAdoptWhileServing(t *testing.T) {
	r := newRig(t)
	e := r.e
	changes := atomic.Int32{}
	e.OnToolsChange(func() { changes.Add(1) })
	src := &fakeSource{values: map[string]any{"read_fan_speed": 10.0, "read_fan_power": 3.0}}
	bus := &manifest.Bus{Name: "dev1", Type: manifest.BusMCP, MCP: &manifest.MCPBus{URL: "http://127.0.0.1:9/mcp"}}

	// readers run throughout: a swap must never be seen half done (-race)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			_, _ = e.Read(ctx, operator, "read_fan_speed")
			_, _ = e.CanDo(ctx, operator, promcp.CanDoRequest{Intent: promcp.Intent{SemanticTags: []string{"fan"}}})
			_ = e.Stats()
			_ = e.Manifest().Capabilities
		}
	})
	defer func() { cancel(); wg.Wait() }()

	if err := e.Adopt(bus, src, adoptedCaps("dev1", "read_fan_speed", "do_fan_speed", "read_fan_power"), nil); err != nil {
		t.Fatal(err)
	}
	names := toolNames(e)
	if !slices.Contains(names, "read_fan_speed") || !slices.Contains(names, "do_fan_speed") || names[len(names)-1] != "can_do" {
		t.Fatalf("tools after adopting: %v", names)
	}
	if got := e.Manifest().AdoptedFrom(e.Manifest().Capabilities[len(e.Manifest().Capabilities)-1]); got == nil || got.SourceAddress != "http://127.0.0.1:9/mcp" {
		t.Errorf("adopted_from %v", got)
	}
	if rd, err := e.Read(ctx, operator, "read_fan_speed"); err != nil || rd.Value != 10.0 {
		t.Fatalf("read: %v %v", rd, err)
	}
	if res, err := e.Do(ctx, operator, "do_fan_speed", promcp.DoRequest{Value: 20.0, IdempotencyKey: "k1"}); err != nil || res.Status != promcp.StatusSuccess {
		t.Fatalf("do: %+v %v", res, err)
	}

	// the device changes: read_fan_power is gone; do_fan_speed keeps its cooldown
	if err := e.Adopt(bus, src, adoptedCaps("dev1", "read_fan_speed", "do_fan_speed"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Read(ctx, operator, "read_fan_power"); !errors.Is(err, engine.ErrUnknownTool) {
		t.Errorf("read_fan_power after the device dropped it: %v", err)
	}
	if res, _ := e.Do(ctx, operator, "do_fan_speed", promcp.DoRequest{Value: 30.0, IdempotencyKey: "k2"}); res.Permission != promcp.CooldownActive {
		t.Errorf("a do right after re-adoption: %+v; want cooldown_active (the history is kept)", res)
	}
	if res, _ := e.Do(ctx, operator, "do_fan_speed", promcp.DoRequest{Value: 20.0, IdempotencyKey: "k1"}); res.Status != promcp.StatusSuccess || src.writes != 1 {
		t.Errorf("the first key retried after re-adoption: %+v, %d writes; want its first outcome and one write", res, src.writes)
	}

	// a name another bus serves is refused, and nothing changes
	other := &manifest.Bus{Name: "dev2", Type: manifest.BusMCP, MCP: &manifest.MCPBus{URL: "http://127.0.0.1:10/mcp"}}
	if err := e.Adopt(other, &fakeSource{}, adoptedCaps("dev2", "read_fan_speed"), nil); err == nil {
		t.Error("adopting a tool name already served: no error")
	}
	if err := e.Adopt(other, &fakeSource{}, adoptedCaps("dev2", "read_boiler_setpoint"), nil); err == nil {
		t.Error("adopting a name of the manifest's own: no error")
	}

	// known to be away: blocked at once, though its reading is cached
	src.mu.Lock()
	src.offline = errors.New("dev1 is dead in the mesh")
	src.mu.Unlock()
	rep, err := e.CanDo(ctx, operator, promcp.CanDoRequest{Intent: promcp.Intent{SemanticTags: []string{"fan"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Candidates) != 0 || len(rep.Blocked) != 2 || rep.Blocked[0].Permission != promcp.SourceUnreachable {
		t.Errorf("can_do with the device away: %+v", rep)
	}
	src.mu.Lock()
	src.offline = nil
	src.mu.Unlock()

	before := changes.Load()
	if err := e.Unadopt("dev1"); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(toolNames(e), "read_fan_speed") || !src.closed.Load() || changes.Load() != before+1 {
		t.Errorf("after unadopt: tools %v, closed %v, changes %d→%d", toolNames(e), src.closed.Load(), before, changes.Load())
	}
	if err := e.Unadopt("mb"); err == nil {
		t.Error("unadopting a bus of the manifest: no error")
	}
}

// A device's capability given as not served (its name is another
// device's) is no tool, but can_do lists it blocked physmcp:not_served with
// the reason, the device and where it is adopted from, until the device is
// no longer adopted.
func TestAdoptNotServed(t *testing.T) {
	e := newRig(t).e
	ctx := context.Background()
	dev1 := &manifest.Bus{Name: "dev1", Type: manifest.BusMCP, MCP: &manifest.MCPBus{URL: "http://127.0.0.1:9/mcp"}}
	dev2 := &manifest.Bus{Name: "dev2", Type: manifest.BusMCP, MCP: &manifest.MCPBus{URL: "http://127.0.0.1:10/mcp"}}
	if err := e.Adopt(dev1, &fakeSource{values: map[string]any{"read_fan_speed": 1.0}}, adoptedCaps("dev1", "read_fan_speed"), nil); err != nil {
		t.Fatal(err)
	}
	lost := &manifest.NotServed{Capability: adoptedCaps("dev2", "read_fan_speed")[0], Device: "gh2", Reason: "name_collision: dev1 serves that name"}
	if err := e.Adopt(dev2, &fakeSource{}, nil, []*manifest.NotServed{{Capability: adoptedCaps("dev1", "read_fan_power")[0]}}); err == nil {
		t.Error("a capability not served bound to another bus: no error")
	}
	if err := e.Adopt(dev2, &fakeSource{}, nil, []*manifest.NotServed{lost}); err != nil {
		t.Fatal(err)
	}
	if n := len(slices.DeleteFunc(toolNames(e), func(n string) bool { return n != "read_fan_speed" })); n != 1 {
		t.Errorf("tools: %v; read_fan_speed is served once", toolNames(e))
	}
	intent := promcp.CanDoRequest{Intent: promcp.Intent{SemanticTags: []string{"fan"}, Action: "read"}}
	rep, err := e.CanDo(ctx, operator, intent)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Candidates) != 1 || rep.Candidates[0].AdoptedFrom.SourceAddress != "http://127.0.0.1:9/mcp" {
		t.Errorf("candidates: %+v; want dev1's read_fan_speed", rep.Candidates)
	}
	if len(rep.Blocked) != 1 || rep.Blocked[0].Capability != "read_fan_speed" || rep.Blocked[0].Permission != promcp.NotServed ||
		rep.Blocked[0].Reason != lost.Reason || rep.Blocked[0].DeviceID != "gh2" || rep.Blocked[0].AdoptedFrom.SourceAddress != "http://127.0.0.1:10/mcp" {
		t.Errorf("blocked: %+v; want dev2's read_fan_speed not served", rep.Blocked)
	}
	if err := e.Unadopt("dev2"); err != nil {
		t.Fatal(err)
	}
	if rep, _ := e.CanDo(ctx, operator, intent); len(rep.Blocked) != 0 || len(e.Manifest().NotServed) != 0 {
		t.Errorf("after dev2 is no longer adopted: blocked %+v, not served %v", rep.Blocked, e.Manifest().NotServed)
	}
}
