package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	gb "github.com/goburrow/modbus"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/modbus"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/benchround"
	"github.com/physmcp/physmcpd/internal/modbusfault"
	"github.com/physmcp/physmcpd/manifest"
)

// One holding register read through two capabilities: one cached, one not.
const benchManifest = `physmcp_version: "0.1"
device: {id: bench_rig, type: test_rig}
buses:
  plc: {type: modbus-tcp, address: %q}
capabilities:
  - name: level
    kind: read
    description: Tank level, cached.
    binding: {bus: plc, unit: 1, table: holding, address: 0, data_type: uint16}
    data_type: int
    unit: cm
    semantic_tags: [tank, level]
  - name: level_live
    kind: read
    description: Tank level, read from the device every time.
    binding: {bus: plc, unit: 1, table: holding, address: 0, data_type: uint16}
    data_type: int
    unit: cm
    semantic_tags: [tank, level]
    cacheable: false
`

// BenchmarkEngineUncachedRead is issue 12's "uncached Modbus TCP read" in
// process: engine.Read of a point that is never cached, the same point served
// from the cache, and a bare goburrow client reading the same register from
// the same loopback server (internal/modbusfault), interleaved in rounds of
// 200 calls each. (uncached-cached)/goburrow is the median over the rounds of
// what the engine adds to a read, against the bare read (goal ≤ 1.1).
// Run it with: go test -run - -bench EngineUncachedRead -benchtime 60x ./engine/
func BenchmarkEngineUncachedRead(b *testing.B) {
	srv := modbusfault.StartTCP(b)
	e := benchEngine(b, srv.Addr(), func(m *manifest.Manifest) drivers.Bus {
		bus, err := modbus.OpenTCP(context.Background(), m, m.Buses["plc"])
		if err != nil {
			b.Fatal(err)
		}
		return bus
	})
	h := gb.NewTCPClientHandler(srv.Addr())
	h.Timeout, h.SlaveId = time.Second, 1
	b.Cleanup(func() { h.Close() })
	bare := gb.NewClient(h)
	readBare := func(n int) {
		for range n {
			if _, err := bare.ReadHoldingRegisters(0, 1); err != nil {
				b.Fatal(err)
			}
		}
	}
	read := func(tool string) func(n int) {
		return func(n int) {
			for range n {
				benchRead(b, e, tool)
			}
		}
	}
	arms := []func(int){readBare, read("read_level_live"), read("read_level")}
	for _, arm := range arms {
		arm(100) // connect and warm up
	}
	ns := benchround.Rounds(b, 200, arms...)
	b.ReportMetric(benchround.Median(benchround.Ratios(ns, func(t []float64) float64 { return (t[1] - t[2]) / t[0] })), "(uncached-cached)/goburrow")
	b.ReportMetric(benchround.Median(benchround.Ratios(ns, func(t []float64) float64 { return t[1] / t[0] })), "uncached/goburrow")
	b.ReportMetric(benchround.Median(benchround.Column(ns, 0)), "goburrow-ns/read")
	b.ReportMetric(benchround.Median(benchround.Column(ns, 1)), "uncached-ns/read")
	b.ReportMetric(benchround.Median(benchround.Column(ns, 2)), "cached-ns/read")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkEngineReadOverhead is the engine's own cost per read, without I/O:
// the same two points on a bus that answers at once. live - cached is what
// an uncached read adds on top of the bus (profile it with -cpuprofile).
func BenchmarkEngineReadOverhead(b *testing.B) {
	e := benchEngine(b, "127.0.0.1:1", func(*manifest.Manifest) drivers.Bus { return instantBus{} })
	for _, tool := range []string{"read_level_live", "read_level"} {
		b.Run(tool, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				benchRead(b, e, tool)
			}
		})
	}
}

// benchEngine serves benchManifest with its bus at addr made by open.
func benchEngine(b *testing.B, addr string, open func(*manifest.Manifest) drivers.Bus) *engine.Engine {
	path := filepath.Join(b.TempDir(), "bench.manifest.yml")
	if err := os.WriteFile(path, fmt.Appendf(nil, benchManifest, addr), 0o600); err != nil {
		b.Fatal(err)
	}
	m, diags := manifest.Load(path)
	if m == nil {
		b.Fatalf("manifest: %s", diags)
	}
	e, err := engine.New(m, nil, map[string]drivers.Bus{"plc": open(m)}, engine.Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Close() })
	return e
}

func benchRead(b *testing.B, e *engine.Engine, tool string) {
	if r, err := e.Read(context.Background(), operator, tool); err != nil || r.Detail != "" {
		b.Fatalf("%s: %+v, %v", tool, r, err)
	}
}

// instantBus is a Modbus bus whose registers all hold 0 and answer at once.
type instantBus struct{}

func (instantBus) Describe() string { return "instant" }
func (instantBus) Close() error     { return nil }

func (instantBus) ReadBits(_ context.Context, _ uint8, _ manifest.ModbusTable, _, n uint16) ([]bool, error) {
	return make([]bool, n), nil
}

func (instantBus) ReadRegisters(_ context.Context, _ uint8, _ manifest.ModbusTable, _, n uint16) ([]uint16, error) {
	return make([]uint16, n), nil
}

func (instantBus) WriteCoils(context.Context, uint8, uint16, []bool) error       { return nil }
func (instantBus) WriteRegisters(context.Context, uint8, uint16, []uint16) error { return nil }
