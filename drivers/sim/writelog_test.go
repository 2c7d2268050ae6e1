package sim_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
)

func setpoint(name string, addr uint16, dt manifest.DataType) *manifest.Capability {
	return &manifest.Capability{Name: name, Kind: manifest.KindDo, DataType: dt,
		Range: &manifest.Range{Min: fptr(0), Max: fptr(1000)},
		Binding: manifest.Binding{Bus: "meter", Modbus: &manifest.ModbusBinding{Unit: 1, Table: manifest.TableHolding, Address: addr,
			DataType: manifest.MBUint16, ByteOrder: manifest.BigEndian, WordOrder: manifest.BigEndian, Scale: 1}}}
}

// The write log records every applied write durably and is the simulated
// device's memory across a restart of the daemon.
func TestWriteLogRecordsAndRestores(t *testing.T) {
	path := filepath.Join(t.TempDir(), "writes.jsonl")
	b := tcpBus(1)
	b.Simulation.WriteLog = path
	flow, level := setpoint("flow", 0, manifest.TypeInt), setpoint("level", 1, manifest.TypeFloat)
	write := func(bus drivers.Bus, c *manifest.Capability, v any) {
		t.Helper()
		p, err := drivers.Bind(bus, c)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Write(context.Background(), v); err != nil {
			t.Fatal(err)
		}
	}
	bus, err := openBus(t, &clock{t0}, b, flow, level)
	if err != nil {
		t.Fatal(err)
	}
	write(bus, flow, int64(42))
	write(bus, level, 7.0)
	write(bus, flow, int64(43))
	bus.Close()
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], `"capability":"flow","value":42`) || !strings.Contains(lines[2], `"value":43`) {
		t.Fatalf("write log:\n%s", data)
	}
	// a line torn by a crash is dropped, and the log keeps working
	os.WriteFile(path, append(data, `{"time":"2025-`...), 0o600)

	bus, err = openBus(t, &clock{t0}, b, flow, level)
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, bus, flow); got != int64(43) {
		t.Fatalf("flow after reopen = %v (%T), want 43 from the log", got, got)
	}
	if got := read(t, bus, level); got != 7.0 {
		t.Fatalf("level after reopen = %v, want 7", got)
	}
	write(bus, level, 8.0)
	data, _ = os.ReadFile(path)
	if lines := strings.Split(strings.TrimSpace(string(data)), "\n"); len(lines) != 4 || !strings.Contains(lines[3], `"value":8`) {
		t.Fatalf("write log after the torn line:\n%s", data)
	}
}
