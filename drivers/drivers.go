// Package drivers is what a bound capability needs from a bus. Each bus kind
// has a small transport interface (I2CBus, GPIOChip, ModbusBus) implemented
// twice: by the real driver (drivers/i2c, drivers/gpio, drivers/modbus) and by
// the simulator (drivers/sim). Points (point.go) turn a manifest binding plus a
// transport into typed reads and writes, so the encoding code is the same for
// simulated and real hardware. Drivers know nothing about MCP.
package drivers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/physmcp/physmcpd/manifest"
)

// Bus is an opened transport. Its concrete interface depends on the bus kind.
type Bus interface {
	// Describe names the bus for logs and errors ("i2c /dev/i2c-1", "modbus-tcp 10.0.0.5:502").
	Describe() string
	Close() error
}

// I2CBus performs combined write-then-read transactions on one adapter.
// Implementations serialise transactions.
type I2CBus interface {
	Bus
	// Tx writes w then reads len(r) bytes from the 7-bit address addr.
	Tx(ctx context.Context, addr uint16, w, r []byte) error
}

// LineConfig is how a GPIO line is requested.
type LineConfig struct {
	Direction manifest.GPIODirection
	ActiveLow bool
	Bias      string
	// Initial is the logical level an output starts at (its safe level).
	Initial bool
}

// GPIOChip hands out lines on one chip.
type GPIOChip interface {
	Bus
	// Line finds a line by name, or by offset when name is empty, and requests it.
	Line(name string, offset int, cfg LineConfig) (GPIOLine, error)
}

// GPIOLine is one requested line. Levels are logical (active-low already applied).
type GPIOLine interface {
	// Read returns the input level; for an output, the level it drives.
	Read(ctx context.Context) (bool, error)
	Write(ctx context.Context, level bool) error
}

// ModbusBus performs Modbus transactions. Implementations run one
// transaction at a time per bus and map exception replies to *ModbusException.
type ModbusBus interface {
	Bus
	// ReadBits reads coils (FC1) or discrete inputs (FC2).
	ReadBits(ctx context.Context, unit uint8, table manifest.ModbusTable, addr, count uint16) ([]bool, error)
	// ReadRegisters reads holding (FC3) or input (FC4) registers.
	ReadRegisters(ctx context.Context, unit uint8, table manifest.ModbusTable, addr, count uint16) ([]uint16, error)
	// WriteCoils writes one coil (FC5) or several (FC15).
	WriteCoils(ctx context.Context, unit uint8, addr uint16, values []bool) error
	// WriteRegisters writes one holding register (FC6) or several (FC16).
	WriteRegisters(ctx context.Context, unit uint8, addr uint16, values []uint16) error
}

// ModbusException is an exception reply from a Modbus device.
type ModbusException struct {
	Function uint8
	Code     uint8
}

var modbusExceptionNames = map[uint8]string{
	1:  "illegal function",
	2:  "illegal data address",
	3:  "illegal data value",
	4:  "server device failure",
	5:  "acknowledge",
	6:  "server device busy",
	8:  "memory parity error",
	10: "gateway path unavailable",
	11: "gateway target device failed to respond",
}

func (e *ModbusException) Error() string {
	name := modbusExceptionNames[e.Code]
	if name == "" {
		name = "unknown exception"
	}
	return fmt.Sprintf("modbus exception %d (%s) to function %d", e.Code, name, e.Function)
}

// Errors a transport returns (wrapped with context) so the engine can tell a
// dead device from a refused request.
var (
	// ErrTimeout: the device did not answer in time.
	ErrTimeout = errors.New("timeout")
	// ErrUnreachable: the bus or device is offline (not connected, not present).
	ErrUnreachable = errors.New("unreachable")
	// ErrInDoubt: a write left for the device but no reply confirmed or
	// refused it (reply lost, link dropped after sending, deadline passed).
	// The device may or may not have applied it. Transports never resend such
	// a write; they wrap this error (besides ErrTimeout or ErrUnreachable) so
	// the engine can settle the outcome by reading the device instead.
	// A write that returns any other error was not applied.
	ErrInDoubt = errors.New("write outcome unknown")
	// ErrNotSent: a write certainly did not start (its deadline passed, or
	// it was cancelled, while it waited for the bus, the read of a
	// read-modify-write failed, a Modbus connection could not be made, or
	// no byte of the frame was handed to the connection or serial port).
	// It is not applied, whatever else the error
	// wraps (ErrTimeout, context.DeadlineExceeded), unless it wraps
	// ErrInDoubt too.
	ErrNotSent = errors.New("not sent")
)

// Value is a capability value as clients see it: float64, int64, bool or string.
type Value = any

// Sample is one measurement.
type Sample struct {
	Value Value
	// At is when the value was measured (not when it was served).
	At time.Time
	// Flag, when not empty, says the device answered but the value is not
	// usable as it stands (NaN or infinity from a meter, an enum index with no
	// name, a sensor error code); Value is then nil. The engine reports it as
	// quality degraded.
	Flag string
	// Stale, when not empty, says the value is the last good one of an
	// adopted source whose own live read failed (why); quality stale.
	Stale string
	// Source names the device that measured the value when it is not this
	// one (an adopted capability): the source's device_id.
	Source string
}

// Point is a capability bound to its transport: typed reads and writes with the
// binding's encoding applied.
type Point interface {
	Read(ctx context.Context) (Sample, error)
	// Write sets the value. It fails with ErrNotWritable for inputs.
	Write(ctx context.Context, v Value) error
	// Quantise returns the value the device holds once v is written, as a
	// read returns it: v rounded to what the binding's encoding can hold
	// (scale steps, integer registers, float32). It touches no bus, so the
	// engine can check its bounds on what will really be written.
	Quantise(v Value) (Value, error)
	// Describe names the point ("modbus-rtu /dev/ttyUSB0 unit 1 holding 10 float32").
	Describe() string
}

// ErrNotWritable: the binding names an input (discrete input, input register, GPIO input).
var ErrNotWritable = errors.New("point is not writable")

// Opener opens one bus of the manifest. Simulators read the capabilities bound
// to the bus to model their values, so the whole manifest is passed.
type Opener func(ctx context.Context, m *manifest.Manifest, b *manifest.Bus) (Bus, error)

// Openers maps each bus type to its real driver.
type Openers map[manifest.BusType]Opener

// AsFloat returns a numeric value of any Go number type as float64. Values
// arrive as float64 from JSON, int64 from codecs and int from YAML.
func AsFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int8:
		return float64(n), true
	case int16:
		return float64(n), true
	case int32:
		return float64(n), true
	case int64:
		return float64(n), true
	case uint:
		return float64(n), true
	case uint8:
		return float64(n), true
	case uint16:
		return float64(n), true
	case uint32:
		return float64(n), true
	case uint64:
		return float64(n), true
	}
	return 0, false
}
