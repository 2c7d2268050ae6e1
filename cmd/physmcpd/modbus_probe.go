package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/codec"
	"github.com/physmcp/physmcpd/drivers/modbus"
	"github.com/physmcp/physmcpd/manifest"
)

func init() {
	register("modbus", "talk to a Modbus device directly (modbus probe: raw registers decoded every way)", runModbus)
}

func runModbus(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "probe" {
		fmt.Fprintln(stderr, "usage: physmcpd modbus probe --bus NAME --unit N --table TABLE --address A --count C [--manifest FILE]")
		return 2
	}
	return runModbusProbe(args[1:], stdout, stderr)
}

// runModbusProbe reads a range from a real device and prints it raw and
// decoded under every type and byte/word order: the tool for a vague datasheet.
func runModbusProbe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("modbus probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	manifestPath := fs.String("manifest", "physmcp.manifest.yml", "the device manifest that defines the bus")
	busName := fs.String("bus", "", "the bus, by its name in the manifest's buses section; required")
	unit := fs.Uint("unit", 1, "unit (slave) id")
	table := fs.String("table", "holding", "coil, discrete_input, holding or input")
	addr := fs.Uint("address", 0, "0-based protocol address (register 40001 is holding address 0)")
	count := fs.Uint("count", 4, "registers (or bits) to read")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: physmcpd modbus probe --bus NAME --unit N --table TABLE --address A --count C [--manifest FILE]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	t := manifest.ModbusTable(*table)
	switch {
	case fs.NArg() > 0 || *busName == "":
		fs.Usage()
		return 2
	case *unit > 255 || *addr > 0xFFFF || *count == 0 || *count > 2000:
		fmt.Fprintln(stderr, "physmcpd modbus probe: unit must be 0..255, address 0..65535, count 1..2000")
		return 2
	case t != manifest.TableCoil && t != manifest.TableDiscreteInput && t != manifest.TableHolding && t != manifest.TableInput:
		fmt.Fprintf(stderr, "physmcpd modbus probe: table %q: want coil, discrete_input, holding or input\n", *table)
		return 2
	}
	m, diags := manifest.Load(*manifestPath)
	if diags.HasErrors() {
		fmt.Fprint(stderr, diags.String())
		return 1
	}
	b := m.Buses[*busName]
	var open drivers.Opener
	switch {
	case b == nil:
		fmt.Fprintf(stderr, "physmcpd modbus probe: %s has no bus %q\n", *manifestPath, *busName)
		return 1
	case b.Simulated:
		fmt.Fprintf(stderr, "physmcpd modbus probe: bus %q is simulated in %s; the probe only talks to real devices\n", *busName, *manifestPath)
		return 1
	case b.Type == manifest.BusModbusTCP:
		open = modbus.OpenTCP
	case b.Type == manifest.BusModbusRTU:
		open = modbus.OpenRTU
	default:
		fmt.Fprintf(stderr, "physmcpd modbus probe: bus %q is %s, not Modbus\n", *busName, b.Type)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	opened, err := open(ctx, m, b)
	if err != nil {
		fmt.Fprintf(stderr, "physmcpd modbus probe: %v\n", err)
		return 1
	}
	defer opened.Close()
	if err := probe(ctx, stdout, opened.(drivers.ModbusBus), uint8(*unit), t, uint16(*addr), uint16(*count)); err != nil {
		fmt.Fprintf(stderr, "physmcpd modbus probe: %v\n", err)
		var exc *drivers.ModbusException
		if errors.As(err, &exc) && exc.Code == 2 {
			fmt.Fprintln(stderr, "(illegal data address: the device maps no such range; try a smaller count or another address, and check whether its manual counts from 0 or 1)")
		}
		return 1
	}
	return 0
}

// probe reads the range and prints it.
func probe(ctx context.Context, w io.Writer, bus drivers.ModbusBus, unit uint8, t manifest.ModbusTable, addr, count uint16) error {
	start := time.Now()
	if t.IsBits() {
		bits, err := bus.ReadBits(ctx, unit, t, addr, count)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s unit %d %s %d..%d, read in %v\n\n", bus.Describe(), unit, t, addr, int(addr)+len(bits)-1, time.Since(start).Round(time.Microsecond))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "address\tvalue\t")
		for i, v := range bits {
			fmt.Fprintf(tw, "%d\t%v\t\n", int(addr)+i, v)
		}
		return tw.Flush()
	}
	regs, err := bus.ReadRegisters(ctx, unit, t, addr, count)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s unit %d %s %d..%d, read in %v\n\n", bus.Describe(), unit, t, addr, int(addr)+len(regs)-1, time.Since(start).Round(time.Microsecond))
	writeRaw(w, addr, regs)
	fmt.Fprintln(w)
	writeDecoded(w, t, addr, regs)
	return nil
}

func writeRaw(w io.Writer, addr uint16, regs []uint16) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "address\thex\tuint16\tint16\tascii\t")
	for i, r := range regs {
		fmt.Fprintf(tw, "%d\t0x%04X\t%d\t%d\t%q\t\n", int(addr)+i, r, r, int16(r), printable(byte(r>>8))+printable(byte(r)))
	}
	tw.Flush()
}

func printable(b byte) string {
	if b >= 0x20 && b < 0x7F {
		return string(rune(b))
	}
	return "."
}

// probeOrders are the four byte/word order combinations, named as the
// manifest's byte_order and word_order keys and as the usual letters.
var probeOrders = []struct {
	byteOrder, wordOrder manifest.ByteOrder
	name                 string
}{
	{manifest.BigEndian, manifest.BigEndian, "big/big (ABCD)"},
	{manifest.BigEndian, manifest.LittleEndian, "big/little (CDAB)"},
	{manifest.LittleEndian, manifest.BigEndian, "little/big (BADC)"},
	{manifest.LittleEndian, manifest.LittleEndian, "little/little (DCBA)"},
}

var probeTypes = []manifest.ModbusType{
	manifest.MBInt16, manifest.MBUint16, manifest.MBInt32, manifest.MBUint32, manifest.MBFloat32,
	manifest.MBInt64, manifest.MBUint64, manifest.MBFloat64,
}

// writeDecoded decodes the registers from the first address under every type
// and order with the same codec the daemon uses, so what the probe shows is
// what a binding with those settings will read.
func writeDecoded(w io.Writer, t manifest.ModbusTable, addr uint16, regs []uint16) {
	fmt.Fprintf(w, "decoded from address %d (columns: byte_order/word_order):\n", addr)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "type\t"
	for _, o := range probeOrders {
		header += o.name + "\t"
	}
	fmt.Fprintln(tw, header)
	for _, typ := range probeTypes {
		row := string(typ) + "\t"
		n := typ.Registers(0)
		for _, o := range probeOrders {
			if n > len(regs) {
				row += "-\t"
				continue
			}
			row += decodeCell(t, addr, typ, o.byteOrder, o.wordOrder, regs[:n]) + "\t"
		}
		fmt.Fprintln(tw, row)
	}
	// Word order does not apply to strings: one row per byte order.
	for _, bo := range []manifest.ByteOrder{manifest.BigEndian, manifest.LittleEndian} {
		fmt.Fprintf(tw, "string, byte_order %s\t%s\t\n", bo, decodeCell(t, addr, manifest.MBString, bo, "", regs))
	}
	tw.Flush()
}

func decodeCell(t manifest.ModbusTable, addr uint16, typ manifest.ModbusType, bo, wo manifest.ByteOrder, regs []uint16) string {
	b := &manifest.ModbusBinding{Table: t, Address: addr, DataType: typ, ByteOrder: bo, WordOrder: wo, Scale: 1, Length: len(regs)}
	c := &manifest.Capability{DataType: manifest.TypeFloat}
	switch typ {
	case manifest.MBString:
		c.DataType = manifest.TypeString
	case manifest.MBFloat32, manifest.MBFloat64:
	default:
		c.DataType = manifest.TypeInt
	}
	v, flag, err := codec.DecodeRegisters(b, c, regs)
	switch {
	case err != nil:
		return "error: " + err.Error()
	case flag != "":
		return strings.ReplaceAll(flag, "\t", " ")
	case typ == manifest.MBString:
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprint(v)
}
