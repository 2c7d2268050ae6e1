package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/manifest"
)

// probeBus answers every register read with regs.
type probeBus struct{ regs []uint16 }

func (p *probeBus) Describe() string { return "modbus-fake" }
func (p *probeBus) Close() error     { return nil }
func (p *probeBus) ReadBits(context.Context, uint8, manifest.ModbusTable, uint16, uint16) ([]bool, error) {
	return []bool{true, false}, nil
}
func (p *probeBus) ReadRegisters(_ context.Context, _ uint8, _ manifest.ModbusTable, _, count uint16) ([]uint16, error) {
	return p.regs[:count], nil
}
func (p *probeBus) WriteCoils(context.Context, uint8, uint16, []bool) error       { return nil }
func (p *probeBus) WriteRegisters(context.Context, uint8, uint16, []uint16) error { return nil }

func TestProbeDecodesEveryOrder(t *testing.T) {
	var out bytes.Buffer
	// 200.0 as a float32 is 0x4348 0x0000 in big/big order.
	if err := probe(context.Background(), &out, &probeBus{regs: []uint16{0x4348, 0x0000}}, 1, manifest.TableHolding, 0, 2); err != nil {
		t.Fatal(err)
	}
	lines := map[string][]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			lines[f[0]] = f[1:]
		}
	}
	for typ, want := range map[string]string{
		"float32": "200 2.4136e-41 199680 2.5923e-41",
		"uint32":  "1128792064 17224 1212350464 18499",
		"int16":   "17224 17224 18499 18499",
		"float64": "- - - -", // needs 4 registers
	} {
		if got := strings.Join(lines[typ], " "); got != want {
			t.Errorf("%s row = %q, want %q\n%s", typ, got, want, out.String())
		}
	}
	if !strings.Contains(out.String(), `0x4348`) || !strings.Contains(out.String(), `"CH"`) {
		t.Errorf("raw view lacks hex or ascii:\n%s", out.String())
	}
}

func TestProbeUsage(t *testing.T) {
	for _, args := range [][]string{
		{"modbus"},
		{"modbus", "probe"},
		{"modbus", "probe", "--bus", "mb", "--table", "holdings"},
		{"modbus", "probe", "--bus", "mb", "--count", "0"},
	} {
		var out, errb bytes.Buffer
		if rc := run(args, &out, &errb); rc != 2 {
			t.Errorf("%v: rc %d, want 2 (usage)", args, rc)
		}
	}
	var out, errb bytes.Buffer
	if rc := run([]string{"modbus", "probe", "--bus", "mb", "--manifest", "/nonexistent.yml"}, &out, &errb); rc != 1 || !strings.Contains(errb.String(), "nonexistent") {
		t.Errorf("missing manifest: rc %d, %s", rc, errb.String())
	}
}
