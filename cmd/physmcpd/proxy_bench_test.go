//go:build !lite

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"go.bug.st/serial"

	"github.com/physmcp/physmcpd/engine"
)

// benchProxy adopts the node's read uncached (every read goes to the node)
// and cached, beside a local simulated point with the same cache TTL.
const benchProxy = `physmcp_version: "0.1"
profile: proxy
device: {id: controller_01, type: greenhouse_controller}
buses:
  node: {type: mcp, port: %s, baud: 115200}
  i2c1: {type: i2c, device: "1", simulated: true}
capabilities:
  - {name: uncached, kind: read, description: The node's soil temperature read afresh., data_type: float, unit: "°C",
     binding: {bus: node, type: virtual, tool: read_soil_temperature}, semantic_tags: [soil], cacheable: false}
  - {name: cached, kind: read, description: The node's soil temperature from cache., data_type: float, unit: "°C",
     binding: {bus: node, type: virtual, tool: read_soil_temperature}, semantic_tags: [soil], cache_ttl_ms: 3600000}
  - {name: local, kind: read, description: A local sensor from cache., data_type: float, unit: "°C",
     binding: {bus: i2c1, address: "0x48:reg=0x00"}, semantic_tags: [air], cache_ttl_ms: 3600000, simulation: {initial: 20}}
`

// BenchmarkProxyRead measures what adopting costs per read, against Lite
// nodes (real processes) on socat pty pairs, each pair of reads timed
// alternately in one loop so that the machine's load drifts equally over
// both. A pty has no baud rate, so the serial wire time (10 bits per byte
// each way at the line's baud rate) comes on top of both "direct" and
// "uncached" on a real cable.
//
//   - uncached: an MCP client calls the proxy's read_* (in process), which
//     calls the node's over its line (cacheable: false), against "direct":
//     an MCP client on a line to a second node calls the node's read_*;
//   - cached: the proxy's read_* of an adopted capability within its TTL,
//     against "local": the proxy's read_* of its own simulated sensor
//     within its TTL; engine-cached is the same without the MCP adapter.
func BenchmarkProxyRead(b *testing.B) {
	lite := buildBinary(b, "lite")
	dir := b.TempDir()
	nodeManifest := writeFile(b, dir, "node.yml", strings.Replace(soilNode, "cache_ttl_ms: 100", "cacheable: false", 1))

	line := newPtyPair(b)
	startProcess(b, lite, "serve", "--manifest", nodeManifest, "--simulate", "--serial", line.a, "--log-level", "warn")
	port, err := serial.Open(line.b, &serial.Mode{BaudRate: 115200})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { port.Close() })
	direct := dialMCP(b, transport.NewIO(port, portCloser{port}, io.NopCloser(strings.NewReader(""))))

	adopted := newPtyPair(b)
	startProcess(b, lite, "serve", "--manifest", nodeManifest, "--simulate", "--serial", adopted.a, "--log-level", "warn")
	e, proxy := proxyInProcess(b, writeFile(b, dir, "proxy.yml", fmt.Sprintf(benchProxy, adopted.b)), "")

	mcpRead := func(c *client.Client, tool string) func() {
		return func() {
			if got := toolJSON(b, c, tool, nil); got["quality"] != "good" {
				b.Fatalf("%s: %v", tool, got)
			}
		}
	}
	engineRead := func(tool string) func() {
		caller := engine.Caller{Identity: "bench", Role: "operator"}
		return func() {
			if r, err := e.Read(context.Background(), caller, tool); err != nil || r.Quality != "good" {
				b.Fatalf("%s: %v %v", tool, r, err)
			}
		}
	}
	// the nodes open their lines a moment after they start
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		d := toolJSON(b, direct, "read_soil_temperature", nil)
		p := toolJSON(b, proxy, "read_uncached", nil)
		if d["quality"] == "good" && p["quality"] == "good" {
			break
		}
		if time.Now().After(end) {
			b.Fatalf("the nodes do not answer: %v %v", d, p)
		}
	}
	wire := wireTime(b, direct, 115200)
	b.Run("uncached", func(b *testing.B) {
		tb, to := alternate(b, "direct", mcpRead(direct, "read_soil_temperature"), "uncached", mcpRead(proxy, "read_uncached"))
		// the goal on a real 115200 baud cable, where both pay the wire time
		b.ReportMetric(float64(wire.Microseconds()), "wire-µs@115200")
		b.ReportMetric(float64(to+wire)/float64(tb+wire), "uncached/direct@115200")
	})
	b.Run("cached", func(b *testing.B) {
		alternate(b, "local", mcpRead(proxy, "read_local"), "cached", mcpRead(proxy, "read_cached"))
	})
	b.Run("engine-cached", func(b *testing.B) {
		alternate(b, "local", engineRead("read_local"), "cached", engineRead("read_cached"))
	})
}

// alternate times base and other in turns (each first every other time)
// and reports each one's mean time and other's as a multiple of base's.
func alternate(b *testing.B, baseName string, base func(), otherName string, other func()) (meanBase, meanOther time.Duration) {
	var tb, to time.Duration
	timed := func(f func()) time.Duration {
		t0 := time.Now()
		f()
		return time.Since(t0)
	}
	n := 0
	for b.Loop() {
		if n%2 == 0 {
			tb += timed(base)
			to += timed(other)
		} else {
			to += timed(other)
			tb += timed(base)
		}
		n++
	}
	b.ReportMetric(float64(tb.Microseconds())/float64(n), baseName+"-µs/read")
	b.ReportMetric(float64(to.Microseconds())/float64(n), otherName+"-µs/read")
	b.ReportMetric(float64(to)/float64(tb), otherName+"/"+baseName)
	return tb / time.Duration(n), to / time.Duration(n)
}

// wireTime is how long one read's request and answer take on a serial line
// at baud (8N1: 10 bits a byte), from the sizes of a real exchange.
func wireTime(b *testing.B, c *client.Client, baud int) time.Duration {
	res, err := callTool(b, c, "read_soil_temperature", map[string]any{})
	if err != nil {
		b.Fatal(err)
	}
	answer, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1000, "result": res})
	if err != nil {
		b.Fatal(err)
	}
	request := `{"jsonrpc":"2.0","id":1000,"method":"tools/call","params":{"name":"read_soil_temperature","arguments":{}}}`
	bytes := len(request) + 1 + len(answer) + 1
	return time.Duration(bytes) * 10 * time.Second / time.Duration(baud)
}
