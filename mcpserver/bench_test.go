//go:build !lite

package mcpserver_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/manifest"
)

// benchCapabilities is the size of the generated benchmark device.
const benchCapabilities = 50

// benchManifest is a device with benchCapabilities capabilities on one
// zero-latency simulated Modbus bus: half do_ setpoints without cooldown or
// rate limits, half read_ temperatures (one of them uncached).
func benchManifest() string {
	var b strings.Builder
	b.WriteString(`physmcp_version: "0.1"
device: {id: bench_rig_01, type: bench_rig, location: {zone: lab}}
buses:
  mb:
    type: modbus-tcp
    address: 127.0.0.1:1502
    simulated: true
    simulation: {latency_ms: 0, seed: 1}
capabilities:
`)
	for i := range benchCapabilities / 2 {
		fmt.Fprintf(&b, `  - name: setpoint_%02d
    kind: do
    description: Zone %d heating setpoint.
    binding: {bus: mb, unit: 1, table: holding, address: %d, data_type: float32, byte_order: big, word_order: big}
    data_type: float
    unit: "°C"
    range: {min: 0, max: 100}
    semantic_tags: [heating, setpoint, zone_%02d]
    side_effects: ["zone %d heats or cools"]
    simulation: {initial: 20}
  - name: temperature_%02d
    kind: read
    description: Zone %d air temperature.
    binding: {bus: mb, unit: 1, table: input, address: %d, data_type: float32, byte_order: big, word_order: big}
    data_type: float
    unit: "°C"
    range: {min: -40, max: 125}
    semantic_tags: [temperature, air, zone_%02d]
    %s
    simulation: {initial: 21}
`, i, i, 2*i, i, i, i, i, 2*i, i, cacheSetting(i))
	}
	return b.String()
}

func cacheSetting(i int) string {
	if i == 0 {
		return "cacheable: false"
	}
	return "cache_ttl_ms: 3600000"
}

func benchSession(b *testing.B) *client.Client {
	b.Helper()
	path := filepath.Join(b.TempDir(), "bench.manifest.yml")
	if err := os.WriteFile(path, []byte(benchManifest()), 0o644); err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	m, diags := manifest.Parse(path, data)
	if diags.HasErrors() {
		b.Fatalf("generated manifest: %v", diags)
	}
	if len(m.Capabilities) != benchCapabilities {
		b.Fatalf("%d capabilities", len(m.Capabilities))
	}
	_, s := startDevice(b, m, nil)
	return inProcessClient(b, s)
}

func callTool(b *testing.B, c *client.Client, name string, args map[string]any) {
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := c.CallTool(context.Background(), req)
	if err != nil {
		b.Fatal(err)
	}
	if res.IsError {
		b.Fatalf("%s: %v", name, res.Content)
	}
}

func BenchmarkReadCached(b *testing.B) {
	c := benchSession(b)
	callTool(b, c, "read_temperature_01", nil) // fills the cache
	for b.Loop() {
		callTool(b, c, "read_temperature_01", nil)
	}
}

func BenchmarkReadCachedParallel(b *testing.B) {
	c := benchSession(b)
	callTool(b, c, "read_temperature_01", nil)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			callTool(b, c, "read_temperature_01", nil)
		}
	})
}

func BenchmarkReadUncached(b *testing.B) {
	c := benchSession(b)
	for b.Loop() {
		callTool(b, c, "read_temperature_00", nil)
	}
}

func BenchmarkDo(b *testing.B) {
	c := benchSession(b)
	i := 0
	for b.Loop() {
		callTool(b, c, "do_setpoint_07", map[string]any{"value": float64(i % 100), "idempotency_key": fmt.Sprintf("bench-%d", i)})
		i++
	}
}

func BenchmarkCanDo(b *testing.B) {
	c := benchSession(b)
	intent := map[string]any{"intent": map[string]any{
		"semantic_tags": []any{"heating", "setpoint", "zone_07"}, "action": "set", "target": "setpoint_07", "value": 22,
	}}
	for b.Loop() {
		callTool(b, c, "can_do", intent)
	}
}
