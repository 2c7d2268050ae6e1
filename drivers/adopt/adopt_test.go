package adopt

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
)

// source is an MCP server over streamable HTTP whose answers the test sets.
type source struct {
	mu      sync.Mutex
	read    map[string]any // read_t's answer
	do      map[string]any // do_x's answer
	keys    []string       // idempotency keys do_x received
	srv     *httptest.Server
	calls   int
	canDoOK map[string]any // can_do's report
}

func newSource(t *testing.T) *source {
	s := &source{}
	m := server.NewMCPServer("source", "1")
	answer := func(get func() map[string]any) server.ToolHandlerFunc {
		return func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.calls++
			if k, ok := req.GetArguments()["idempotency_key"].(string); ok {
				s.keys = append(s.keys, k)
			}
			body := get()
			text, _ := json.Marshal(body)
			return mcp.NewToolResultStructured(body, string(text)), nil
		}
	}
	m.AddTool(mcp.NewTool("read_t"), answer(func() map[string]any { return s.read }))
	m.AddTool(mcp.NewTool("do_x"), answer(func() map[string]any { return s.do }))
	m.AddTool(mcp.NewTool("can_do"), answer(func() map[string]any { return s.canDoOK }))
	s.srv = httptest.NewServer(server.NewStreamableHTTPServer(m))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *source) set(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

func (s *source) bus(t *testing.T) *Bus {
	b := New("src", &manifest.MCPBus{URL: s.srv.URL}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { b.Close() })
	return b
}

func bind(t *testing.T, b *Bus, c *manifest.Capability) drivers.Point {
	t.Helper()
	p, err := b.BindVirtual(c, drivers.BindOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var (
	readT = &manifest.Capability{Name: "t", Kind: manifest.KindRead, DataType: manifest.TypeFloat,
		Binding: manifest.Binding{Bus: "src", Virtual: &manifest.VirtualBinding{Tool: "read_t"}}}
	doX = &manifest.Capability{Name: "x", Kind: manifest.KindDo, DataType: manifest.TypeInt,
		Binding: manifest.Binding{Bus: "src", Virtual: &manifest.VirtualBinding{Tool: "do_x", ReadTool: "read_t"}}}
)

// Reads keep the source's value, time, device and quality; error is a
// Declined answer (the source is there), not a transport failure.
func TestReadKeepsTheSourcesQuality(t *testing.T) {
	src := newSource(t)
	p := bind(t, src.bus(t), readT)
	measured := time.Now().Add(-3 * time.Second).UTC().Truncate(time.Millisecond)
	for _, tc := range []struct {
		quality     string
		at          time.Time
		value       any
		stale, flag bool
		declined    bool
		sourceTime  bool
	}{
		{quality: "good", at: measured, value: 21.5, sourceTime: true},
		{quality: "stale", at: measured, value: 21.5, stale: true, sourceTime: true},
		{quality: "degraded", at: measured, value: nil, flag: true, sourceTime: true},
		{quality: "error", declined: true},
		{quality: "good", at: time.Now().Add(time.Hour), value: 21.5}, // a clock ahead of ours
	} {
		src.set(func() {
			src.read = map[string]any{"value": 21.5, "unit": "°C", "timestamp": tc.at.Format(time.RFC3339Nano), "quality": tc.quality,
				"device_id": "node_01", "detail": "why"}
		})
		before := time.Now()
		s, err := p.Read(context.Background())
		var d *drivers.Declined
		switch {
		case tc.declined:
			if !errors.As(err, &d) || d.Reason != "why" {
				t.Errorf("%s: %v, want Declined with the source's detail", tc.quality, err)
			}
			continue
		case err != nil:
			t.Fatalf("%s: %v", tc.quality, err)
		}
		if s.Value != tc.value || s.Source != "node_01" || (s.Stale != "") != tc.stale || (s.Flag != "") != tc.flag {
			t.Errorf("%s: %+v", tc.quality, s)
		}
		if tc.sourceTime && !s.At.Equal(tc.at) || !tc.sourceTime && (s.At.Before(before) || s.At.After(time.Now())) {
			t.Errorf("%s: measured at %v, source said %v", tc.quality, s.At, tc.at)
		}
	}
}

// A write carries the caller's key; the source's refusals keep their
// permission and wrote nothing; anything that may have acted is in doubt.
func TestWriteMapsTheSourcesOutcome(t *testing.T) {
	src := newSource(t)
	p := bind(t, src.bus(t), doX)
	ctx := drivers.WithIdempotencyKey(context.Background(), "k-1")
	for _, tc := range []struct {
		answer  map[string]any
		check   func(error) bool
		meaning string
	}{
		{map[string]any{"status": "success"}, func(err error) bool { return err == nil }, "applied"},
		{map[string]any{"status": "partial"}, func(err error) bool { return err == nil }, "applied"},
		{map[string]any{"status": "failed", "permission": "cooldown_active", "reason": "wait"}, func(err error) bool {
			var d *drivers.Declined
			return errors.As(err, &d) && d.Permission == "cooldown_active" && !errors.Is(err, drivers.ErrInDoubt)
		}, "refused by the source"},
		{map[string]any{"status": "failed", "reason": "idempotency_key was already used for a different request"}, func(err error) bool {
			var d *drivers.Declined
			return errors.As(err, &d) && d.Permission == "policy_denied" && !errors.Is(err, drivers.ErrInDoubt)
		}, "refused by the source without a permission"},
		{map[string]any{"status": "failed", "permission": "source_unreachable", "reason": "outcome unknown"}, func(err error) bool {
			return errors.Is(err, drivers.ErrInDoubt)
		}, "in doubt at the source"},
		{map[string]any{"nonsense": true}, func(err error) bool { return errors.Is(err, drivers.ErrInDoubt) }, "no proMCP answer"},
	} {
		src.set(func() { src.do = tc.answer })
		if err := p.Write(ctx, int64(3)); !tc.check(err) {
			t.Errorf("%v: %v, want %s", tc.answer, err, tc.meaning)
		}
	}
	src.set(func() {
		for _, k := range src.keys {
			if k != "k-1" {
				t.Errorf("the source got key %q, want the caller's k-1", k)
			}
		}
		src.calls = 0
	})
	if err := p.Write(context.Background(), int64(3)); err == nil || errors.Is(err, drivers.ErrInDoubt) {
		t.Errorf("a write without a key: %v, want refused before sending", err)
	}
	src.set(func() {
		if src.calls != 0 {
			t.Errorf("a write without a key reached the source")
		}
	})
}

// A source that does not answer is unreachable (a write that never left is
// not in doubt), and the bus connects again once it answers.
func TestUnreachableThenBack(t *testing.T) {
	src := newSource(t)
	src.set(func() {
		src.read = map[string]any{"value": 1.0, "timestamp": time.Now().Format(time.RFC3339Nano), "quality": "good"}
	})
	b := New("src", &manifest.MCPBus{URL: "http://127.0.0.1:1/mcp", TimeoutMs: 200}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer b.Close()
	p := bind(t, b, doX)
	err := p.Write(drivers.WithIdempotencyKey(context.Background(), "k"), int64(1))
	if !errors.Is(err, drivers.ErrUnreachable) || errors.Is(err, drivers.ErrInDoubt) {
		t.Errorf("write to nothing: %v, want unreachable and not in doubt", err)
	}
	b.mu.Lock()
	b.src.URL = src.srv.URL // the source appears where the bus looks
	b.mu.Unlock()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err = p.Read(context.Background()); err == nil || time.Now().After(end) {
			break
		}
	}
	if err != nil {
		t.Errorf("the source answers again, the bus does not: %v", err)
	}
}

// can_do of an adopted do_ asks the source's can_do about the tool.
func TestAssessAsksTheSource(t *testing.T) {
	src := newSource(t)
	p := bind(t, src.bus(t), doX).(drivers.Assessor)
	src.set(func() {
		src.canDoOK = map[string]any{"candidates": []any{}, "blocked": []any{
			map[string]any{"capability": "do_x", "permission": "rate_limited", "reason": "6/hour used"}}}
	})
	if perm, reason, err := p.Assess(context.Background(), int64(2)); err != nil || perm != "rate_limited" || reason != "6/hour used" {
		t.Errorf("Assess: %q %q %v", perm, reason, err)
	}
	src.set(func() { src.canDoOK = map[string]any{"candidates": []any{}, "blocked": []any{}} })
	if perm, _, err := p.Assess(context.Background(), nil); err != nil || perm != "" {
		t.Errorf("no entry for the tool: %q %v, want no opinion", perm, err)
	}
}

// Adopted takes a source's tools as capabilities: typed from their schemas,
// a do_ only with its read_, and needing role operator here.
func TestAdoptedFromToolSchemas(t *testing.T) {
	raw := `[
	 {"name":"read_pump_speed","description":"The pump's speed. Observation only.","inputSchema":{"type":"object"},
	  "outputSchema":{"type":"object","properties":{"value":{"type":["integer","null"]},"unit":{"type":"string","const":"rpm"}}}},
	 {"name":"do_pump_speed","description":"Set the pump's speed. Acts on the device.","inputSchema":{"type":"object",
	  "properties":{"value":{"type":"integer","minimum":0,"maximum":2800},"idempotency_key":{"type":"string"}}}},
	 {"name":"do_valve","description":"Open the valve.","inputSchema":{"type":"object","properties":{"value":{"type":"boolean"}}}},
	 {"name":"read_mode","description":"Mode.","inputSchema":{"type":"object"},
	  "outputSchema":{"type":"object","properties":{"value":{"type":"string","enum":["auto","manual",null]},"unit":{"type":"null"}}}},
	 {"name":"can_do","description":"Dry run.","inputSchema":{"type":"object"}}]`
	var tools []mcp.Tool
	if err := json.Unmarshal([]byte(raw), &tools); err != nil {
		t.Fatal(err)
	}
	ttl := 2000
	all, _ := Adopted("skid", "skid", &manifest.Adopt{Tools: manifest.AdoptAll, Prefix: "skid_", SemanticTags: []string{"plant_room"}, CacheTTLMs: &ttl, Group: "plant"},
		tools, slog.New(slog.NewTextHandler(io.Discard, nil)))
	byTool := map[string]*manifest.Capability{}
	for _, c := range all {
		byTool[c.ToolName()] = c
	}
	if len(all) != 3 || byTool["do_skid_valve"] != nil {
		t.Fatalf("adopted %v; want read_skid_pump_speed, do_skid_pump_speed and read_skid_mode (do_valve has no read_)", keys(byTool))
	}
	r, d, mode := byTool["read_skid_pump_speed"], byTool["do_skid_pump_speed"], byTool["read_skid_mode"]
	if r.DataType != manifest.TypeInt || r.Unit != "rpm" || r.Description != "The pump's speed." || *r.CacheTTLMs != 2000 || r.Group != "plant" ||
		r.SemanticTags[0] != "plant_room" || r.Binding.Virtual.Tool != "read_pump_speed" {
		t.Errorf("read: %+v", r)
	}
	if d.Range == nil || *d.Range.Min != 0 || *d.Range.Max != 2800 || d.RequiresPermission != manifest.RoleOperator || d.Binding.Virtual.ReadTool != "read_pump_speed" {
		t.Errorf("do: %+v", d)
	}
	if mode.DataType != manifest.TypeEnum || len(mode.EnumValues) != 2 || mode.Unit != "" {
		t.Errorf("enum: %+v", mode)
	}
	reads, _ := Adopted("skid", "skid", &manifest.Adopt{Tools: manifest.AdoptReads}, tools, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(reads) != 2 {
		t.Errorf("tools: read adopted %d, want the 2 read_*", len(reads))
	}

	// named after the device, the verb in front; a name that would be too
	// long is not served, and says why
	long := "pump_station_north_field_row_three_controller_000001" // 52 characters: read_<long>_mode fits in 64, *_pump_speed does not
	named, unnamed := Adopted("devices/"+long, long, &manifest.Adopt{Tools: manifest.AdoptAll, Names: manifest.NamesDevicePrefixed}, tools, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(named) != 1 || named[0].ToolName() != "read_"+long+"_mode" || named[0].Binding.Virtual.Tool != "read_mode" ||
		!slices.Contains(named[0].SemanticTags, "mode") || slices.Contains(named[0].SemanticTags, "pump") {
		t.Errorf("device_prefixed: %v; want read_%s_mode alone, bound to read_mode and tagged with its own words", names(named), long)
	}
	if len(unnamed) != 2 || unnamed[0].Device != long || unnamed[0].Capability.ToolName() != "read_"+long+"_pump_speed" ||
		!strings.HasPrefix(unnamed[0].Reason, "invalid_name: read_pump_speed of "+long+" cannot be served: tool name read_"+long+"_pump_speed is 68 characters; the limit is 64") {
		t.Errorf("not served: %+v", unnamed)
	}
}

func names(caps []*manifest.Capability) []string {
	var out []string
	for _, c := range caps {
		out = append(out, c.ToolName())
	}
	return out
}

func keys(m map[string]*manifest.Capability) []string {
	var k []string
	for name := range m {
		k = append(k, name)
	}
	return k
}

// Adopted asks at least the roles the source's _meta says its tools ask: a
// higher min_role is taken, a lower one leaves operator for a do_, the
// roles a source admits are kept, and a role not known here, or roles that
// are no list, leave the tool unserved, with the reason.
func TestAdoptedAsksTheSourcesRoles(t *testing.T) {
	raw := `[
	 {"name":"read_speed","description":"Speed.","inputSchema":{"type":"object"},"_meta":{"physmcp/min_role":"operator"}},
	 {"name":"do_speed","description":"Set the speed.","inputSchema":{"type":"object"},"_meta":{"physmcp/min_role":"supervisor"}},
	 {"name":"read_valve","description":"Valve.","inputSchema":{"type":"object"}},
	 {"name":"do_valve","description":"Open the valve.","inputSchema":{"type":"object"},"_meta":{"physmcp/min_role":"none","physmcp/roles":["none","operator","admin"]}},
	 {"name":"read_mode","description":"Mode.","inputSchema":{"type":"object"},"_meta":{"physmcp/min_role":"root"}},
	 {"name":"read_level","description":"Level.","inputSchema":{"type":"object"},"_meta":{"physmcp/min_role":"operator","physmcp/roles":"admin"}}]`
	var tools []mcp.Tool
	if err := json.Unmarshal([]byte(raw), &tools); err != nil {
		t.Fatal(err)
	}
	caps, unserved := Adopted("skid", "skid", &manifest.Adopt{Tools: manifest.AdoptAll}, tools, slog.New(slog.NewTextHandler(io.Discard, nil)))
	byTool := map[string]*manifest.Capability{}
	for _, c := range caps {
		byTool[c.ToolName()] = c
	}
	for tool, want := range map[string]manifest.Role{"read_speed": manifest.RoleOperator, "do_speed": manifest.RoleSupervisor, "read_valve": "", "do_valve": manifest.RoleOperator} {
		if c := byTool[tool]; c == nil || c.RequiresPermission != want {
			t.Errorf("%s: %+v; want requires_permission %q", tool, c, want)
		}
	}
	if c := byTool["do_valve"]; c == nil || !slices.Equal(c.SourceRoles, []manifest.Role{manifest.RoleNone, manifest.RoleOperator, manifest.RoleAdmin}) || byTool["do_speed"].SourceRoles != nil {
		t.Errorf("source roles: do_valve %+v, do_speed %+v", c, byTool["do_speed"])
	}
	if len(unserved) != 2 || !strings.HasPrefix(unserved[0].Reason, "unknown_role: read_mode of skid cannot be served: the source asks role root") ||
		!strings.HasPrefix(unserved[1].Reason, "unknown_role: read_level of skid cannot be served: its _meta physmcp/roles is admin, not a list") {
		t.Errorf("not served: %+v", unserved)
	}
}
