//go:build !lite

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/benchround"
	"github.com/physmcp/physmcpd/internal/mcpdial"
	"github.com/physmcp/physmcpd/internal/serialline"
)

// benchProxy adopts the node's read uncached (every read goes to the node)
// and cached, beside a local simulated point with the same cache TTL.
const benchProxy = `physmcp_version: "0.1"
profile: proxy
device: {id: controller_01, type: greenhouse_controller}
buses:
  node: {type: mcp, port: %s, baud: %d}
  i2c1: {type: i2c, device: "1", simulated: true}
capabilities:
  - {name: uncached, kind: read, description: The node's soil temperature read afresh., data_type: float, unit: "°C",
     binding: {bus: node, type: virtual, tool: read_soil_temperature}, semantic_tags: [soil], cacheable: false}
  - {name: cached, kind: read, description: The node's soil temperature from cache., data_type: float, unit: "°C",
     binding: {bus: node, type: virtual, tool: read_soil_temperature}, semantic_tags: [soil], cache_ttl_ms: 3600000}
  - {name: local, kind: read, description: A local sensor from cache., data_type: float, unit: "°C",
     binding: {bus: i2c1, address: "0x48:reg=0x00"}, semantic_tags: [air], cache_ttl_ms: 3600000, simulation: {initial: 20}}
`

// benchBaud is the baud rate the lines are configured with. A pty ignores
// it, so its wire time is computed and reported beside the measured times.
const benchBaud = 115200

// BenchmarkProxyRead measures what adopting costs per read. Every peer is a
// real process on its own socat pty pair, and every client is an mcp-go
// client on a serial line, so the proxy's path differs from the direct one
// by the proxy alone: its process, its MCP server, its engine, its client to
// the node, and the second line it is reached over.
//
//   - uncached: direct is a client on a line to a Lite node calling its
//     read_* (not cacheable); proxy is a client on a line to a proxy
//     (physmcpd serve --serial, profile proxy), whose read_uncached calls a
//     second Lite node's read_* on its own line (cacheable: false);
//   - cached: the proxy's read_cached (adopted, within its TTL) against its
//     read_local (its own simulated sensor, within the same TTL), both over
//     the client's line; engine-cached is the same in an in-process proxy's
//     engine, without lines or MCP.
//
// The arms run in interleaved rounds (benchround), and each ratio is the
// median of the rounds' ratios: the machine is shared and its load drifts.
// A pty has no baud rate: the bytes each line carries per read are counted
// (at the client, and in /proc/PID/io of the adopted node), and -wire-µs is
// their time on a cable at benchBaud, 10 bits a byte (8N1), which a real
// line adds to each path. proxy/direct@115200 counts the node's line as such
// a cable and the client's line to the proxy as a link without wire time
// (the proxy's usual transport is its network); every process's CPU time
// per read is reported too, as the load of the machine changes it least.
func BenchmarkProxyRead(b *testing.B) {
	full, lite := buildBinary(b, ""), buildBinary(b, "lite")
	dir := b.TempDir()
	node := writeFile(b, dir, "node.yml", strings.Replace(soilNode, "cache_ttl_ms: 100", "cacheable: false", 1))
	startNode := func() (*ptyPair, int) {
		line := newPtyPair(b)
		_, cmd := startCommand(b, lite, "serve", "--manifest", node, "--simulate", "--serial", line.a, "--baud", strconv.Itoa(benchBaud), "--log-level", "warn")
		return line, cmd.Process.Pid
	}
	directLine, directPid := startNode()
	direct, directBytes := dialSerial(b, directLine.b)

	nodeLine, nodePid := startNode()
	clientLine := newPtyPair(b)
	_, proxyCmd := startCommand(b, full, "serve", "--manifest", writeFile(b, dir, "proxy.yml", fmt.Sprintf(benchProxy, nodeLine.b, benchBaud)),
		"--simulate", "--serial", clientLine.a, "--baud", strconv.Itoa(benchBaud), "--log-level", "warn")
	proxyPid := proxyCmd.Process.Pid
	proxy, clientBytes := dialSerial(b, clientLine.b)

	// engine-cached: an in-process proxy's engine, adopting a third node
	engineLine, _ := startNode()
	e, _ := proxyInProcess(b, writeFile(b, dir, "proxy-engine.yml", fmt.Sprintf(benchProxy, engineLine.b, benchBaud)), "")

	caller := engine.Caller{Identity: "bench", Role: "operator"}
	mcpReads := func(c *client.Client, tool string) func(n int) {
		return func(n int) {
			for range n {
				if got := toolJSON(b, c, tool, nil); got["quality"] != "good" {
					b.Fatalf("%s: %v", tool, got)
				}
			}
		}
	}
	engineReads := func(tool string) func(n int) {
		return func(n int) {
			for range n {
				if r, err := e.Read(context.Background(), caller, tool); err != nil || r.Quality != "good" {
					b.Fatalf("%s: %v %v", tool, r, err)
				}
			}
		}
	}
	// the nodes and the proxy open their lines a moment after they start
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		d := toolJSON(b, direct, "read_soil_temperature", nil)
		p := toolJSON(b, proxy, "read_uncached", nil)
		r, err := e.Read(context.Background(), caller, "read_cached")
		if d["quality"] == "good" && p["quality"] == "good" && err == nil && r.Quality == "good" {
			break
		}
		if time.Now().After(end) {
			b.Fatalf("the nodes do not answer: %v %v %v %v", d, p, r, err)
		}
	}
	b.Run("uncached", func(b *testing.B) {
		arms := []func(int){mcpReads(direct, "read_soil_temperature"), mcpReads(proxy, "read_uncached")}
		for _, arm := range arms {
			arm(20) // warm up
		}
		pids := []int{directPid, proxyPid, nodePid}
		cpu0, nodeIO0 := make([]time.Duration, len(pids)), procIO(b, nodePid)
		for i, pid := range pids {
			cpu0[i] = procCPU(b, pid)
		}
		directBytes.Store(0)
		clientBytes.Store(0)
		ns := benchround.Rounds(b, 50, arms...)
		reads := float64(50 * len(ns))
		// Every byte on the node's line is written at one end and read at
		// the other: the node's reads and writes are all the line's bytes.
		perRead := map[string]float64{
			"direct": float64(directBytes.Load()) / reads,
			"client": float64(clientBytes.Load()) / reads,
			"node":   float64(procIO(b, nodePid)-nodeIO0) / reads,
		}
		wire := map[string]float64{}
		for line, bytes := range perRead {
			wire[line] = bytes * 10 / benchBaud * 1e9 // ns
			b.ReportMetric(bytes, line+"-line-B/read")
			b.ReportMetric(wire[line]/1e3, line+"-wire-µs")
		}
		b.ReportMetric(benchround.Median(benchround.Column(ns, 0))/1e3, "direct-µs/read")
		b.ReportMetric(benchround.Median(benchround.Column(ns, 1))/1e3, "proxy-µs/read")
		b.ReportMetric(benchround.Median(benchround.Ratios(ns, func(t []float64) float64 { return t[1] / t[0] })), "proxy/direct")
		b.ReportMetric(benchround.Median(benchround.Ratios(ns, func(t []float64) float64 {
			return (t[1] + wire["node"]) / (t[0] + wire["direct"])
		})), "proxy/direct@115200")
		for i, name := range []string{"direct-node", "proxy", "adopted-node"} {
			b.ReportMetric(float64((procCPU(b, pids[i])-cpu0[i]).Microseconds())/reads, name+"-cpu-µs/read")
		}
		b.ReportMetric(float64(len(ns)), "rounds")
		b.ReportMetric(0, "ns/op")
	})
	b.Run("cached", func(b *testing.B) {
		ns := benchround.Rounds(b, 50, mcpReads(proxy, "read_local"), mcpReads(proxy, "read_cached"))
		reportCached(b, ns)
	})
	b.Run("engine-cached", func(b *testing.B) {
		ns := benchround.Rounds(b, 2000, engineReads("read_local"), engineReads("read_cached"))
		reportCached(b, ns)
	})
}

// reportCached reports rounds of local and cached reads.
func reportCached(b *testing.B, ns [][]float64) {
	b.ReportMetric(benchround.Median(benchround.Column(ns, 0))/1e3, "local-µs/read")
	b.ReportMetric(benchround.Median(benchround.Column(ns, 1))/1e3, "cached-µs/read")
	b.ReportMetric(benchround.Median(benchround.Ratios(ns, func(t []float64) float64 { return t[1] / t[0] })), "cached/local")
	b.ReportMetric(float64(len(ns)), "rounds")
	b.ReportMetric(0, "ns/op")
}

// dialSerial is an initialised mcp-go client on the serial line path, and
// the count of the bytes it has written and read there. It speaks the
// protocol of the initialize handshake (2025-11-25), the newest a Lite node
// speaks, to the proxy too: on 2026-07-28 every request would carry its
// protocol version and client in _meta, and the two paths would differ by
// more than the proxy.
func dialSerial(b *testing.B, path string) (*client.Client, *atomic.Int64) {
	line, err := serialline.Open(path, benchBaud)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { line.Close() })
	counted := &countingLine{line: line}
	c := client.NewClient(transport.NewIO(counted, counted, io.NopCloser(strings.NewReader(""))), client.WithLegacyProtocolOnly())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	if err := mcpdial.Handshake(ctx, c, "bench"); err != nil {
		b.Fatal(err)
	}
	return c, &counted.n
}

// countingLine counts the bytes that cross a line.
type countingLine struct {
	line *serialline.Line
	n    atomic.Int64
}

func (c *countingLine) Read(p []byte) (int, error) {
	n, err := c.line.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingLine) Write(p []byte) (int, error) {
	n, err := c.line.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingLine) Close() error { return c.line.Close() }

// procIO is the bytes process pid has read and written so far.
func procIO(b *testing.B, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		b.Fatal(err)
	}
	var sum int64
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		if k == "rchar" || k == "wchar" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatalf("/proc/%d/io: %q", pid, line)
			}
			sum += n
		}
	}
	return sum
}

// procCPU is the CPU time process pid has used so far (user and system,
// all its threads), from /proc/PID/stat in clock ticks (USER_HZ, 100 on
// Linux).
func procCPU(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// the fields after the command name, which is in parentheses
	i := strings.LastIndexByte(string(data), ')')
	f := strings.Fields(string(data[i+1:]))
	if i < 0 || len(f) < 13 {
		b.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
