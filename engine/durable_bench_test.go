package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
	"github.com/physmcp/physmcpd/state"
)

// BenchmarkDurableDo is do_* with the Full profile's state store (bbolt,
// fsync'd) on a simulated device with 16 setpoints, one caller each (writes
// to one register take turns, so callers on one register cannot share
// commits), and with one caller. It reports the store's commits per call
// (each is one fdatasync of its log) and the process's CPU time per call,
// user and system: most of what a durable call costs beyond one without a
// store is the kernel's, around the fdatasyncs.
func BenchmarkDurableDo(b *testing.B) {
	for _, callers := range []int{1, 16} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) { benchmarkDurableDo(b, callers) })
	}
}

func benchmarkDurableDo(b *testing.B, callers int) {
	var caps strings.Builder
	for i := range callers {
		fmt.Fprintf(&caps, `  - name: zone%d_setpoint
    kind: do
    description: Zone %d setpoint.
    binding: {bus: mb, unit: 1, table: holding, address: %d, data_type: uint16, scale: 0.1}
    data_type: float
    unit: "°C"
    range: {min: 0, max: 100}
    semantic_tags: [zone%d, setpoint]
    side_effects: ["heats zone %d"]
`, i, i, i, i, i)
	}
	path := filepath.Join(b.TempDir(), "m.yml")
	text := "physmcp_version: \"0.1\"\ndevice: {id: zones, type: test_rig}\nbuses:\n  mb: {type: modbus-tcp, address: 127.0.0.1:1502, simulated: true}\ncapabilities:\n" + caps.String()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		b.Fatal(err)
	}
	m, diags := manifest.Load(path)
	if m == nil {
		b.Fatal(diags)
	}
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{}), true)
	if err != nil {
		b.Fatal(err)
	}
	store, err := state.Open(b.TempDir(), nil, quiet)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	e, err := engine.New(m, nil, buses, engine.Options{Idempotency: store, Limits: store, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	var caller, n atomic.Int64
	work := func(tool string) {
		i := n.Add(1)
		resp, err := e.Do(context.Background(), operator, tool, promcp.DoRequest{Value: float64(20 + i%50), IdempotencyKey: fmt.Sprintf("k%d", i)})
		if err != nil || resp.Status == promcp.StatusFailed {
			b.Errorf("do: %+v %v", resp, err)
		}
	}
	before, cpu := store.Commits(), cpuTime(b)
	b.ResetTimer()
	if callers == 1 {
		for range b.N {
			work("do_zone0_setpoint")
		}
	} else {
		// RunParallel starts parallelism × GOMAXPROCS callers.
		b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			tool := fmt.Sprintf("do_zone%d_setpoint", caller.Add(1)%int64(callers))
			for pb.Next() {
				work(tool)
			}
		})
	}
	b.ReportMetric(float64(store.Commits()-before)/float64(b.N), "commits/op")
	b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		b.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
