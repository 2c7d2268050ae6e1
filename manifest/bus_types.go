package manifest

import (
	"time"

	"gopkg.in/yaml.v3"
)

// BusType names a kind of bus.
type BusType string

const (
	BusI2C       BusType = "i2c"
	BusGPIO      BusType = "gpio"
	BusModbusTCP BusType = "modbus-tcp"
	BusModbusRTU BusType = "modbus-rtu"
)

// IsModbus reports whether the bus speaks Modbus (TCP or RTU).
func (t BusType) IsModbus() bool { return t == BusModbusTCP || t == BusModbusRTU }

// Bus is one named entry of the manifest's buses section (a physmcpd extension
// to PhysMCP v0.1). Exactly one of the kind-specific parts is set, by Type.
type Bus struct {
	Name       string
	Type       BusType
	Simulated  bool
	Simulation *BusSim

	I2C       *I2CBus
	GPIO      *GPIOBus
	ModbusTCP *ModbusTCPBus
	ModbusRTU *ModbusRTUBus
	MCP       *MCPBus

	At Positions
}

// BusSim is how a simulated bus misbehaves.
type BusSim struct {
	LatencyMs   float64 `yaml:"latency_ms"`
	JitterMs    float64 `yaml:"jitter_ms"`
	TimeoutRate float64 `yaml:"timeout_rate"`
	ErrorRate   float64 `yaml:"error_rate"`
	Offline     bool    `yaml:"offline"`
	// Seed makes the random faults and noise repeatable; 0 picks one from the clock.
	Seed int64 `yaml:"seed"`
	// WriteLog is a file the simulator appends every applied write to (fsync'd)
	// and restores the device memory from when the bus is opened again, so the
	// simulated device outlives a daemon restart as real hardware does.
	WriteLog string `yaml:"write_log"`

	At Positions `yaml:"-"`
}

// Latency is latency_ms as a duration.
func (s *BusSim) Latency() time.Duration {
	if s == nil {
		return 0
	}
	return time.Duration(s.LatencyMs * float64(time.Millisecond))
}

// LateWrite is how long after physmcpd gave up on a write frame the device
// may still apply it (late_write_ms): 0 but on a modbus-tcp bus. A serial
// line delivers frames in order, and GPIO, I2C and adopted calls (which pass
// the idempotency key on) have no frame that can arrive late.
func (b *Bus) LateWrite() time.Duration {
	if b == nil || b.ModbusTCP == nil {
		return 0
	}
	return time.Duration(b.ModbusTCP.LateWriteMs) * time.Millisecond
}

// Acknowledge is how long after a device answered a write with exception 5
// (acknowledge: accepted, to be acted on later) it may still act on it
// (acknowledge_ms): 0 but on a Modbus bus.
func (b *Bus) Acknowledge() time.Duration {
	switch {
	case b == nil:
		return 0
	case b.ModbusTCP != nil:
		return time.Duration(b.ModbusTCP.AcknowledgeMs) * time.Millisecond
	case b.ModbusRTU != nil:
		return time.Duration(b.ModbusRTU.AcknowledgeMs) * time.Millisecond
	}
	return 0
}

// I2CBus is a Linux I2C adapter.
type I2CBus struct {
	// Device is the adapter: a number N or a path /dev/i2c-N.
	Device    string `yaml:"device,required"`
	Retries   int    `yaml:"retries"`
	TimeoutMs int    `yaml:"timeout_ms"`

	At Positions `yaml:"-"`
}

// GPIOBus is one GPIO character-device chip, found by label (preferred,
// stable across kernels) or by path.
type GPIOBus struct {
	Chip string `yaml:"chip"`
	Path string `yaml:"path"`

	At Positions `yaml:"-"`
}

// DefaultMaxGap is max_gap when the manifest does not set it: reads of points
// up to 8 registers (or bits) apart are merged into one request.
const DefaultMaxGap = 8

// DefaultModbusTimeoutMs is a Modbus bus's timeout_ms when the manifest
// does not set it.
const DefaultModbusTimeoutMs = 1000

// LateWriteFactor gives late_write_ms and acknowledge_ms when the manifest
// does not set them, as a multiple of the bus's timeout_ms (docs/engine.md,
// "In-doubt writes"), and MaxLateWriteMs bounds them: a write to the
// register waits that long.
const (
	LateWriteFactor = 2
	MaxLateWriteMs  = 600_000
)

// ModbusTCPBus is a Modbus TCP server (or gateway).
type ModbusTCPBus struct {
	Address   string `yaml:"address,required"` // host:port
	TimeoutMs int    `yaml:"timeout_ms"`
	Retries   int    `yaml:"retries"`
	// MaxGap is the largest hole (in registers or bits) merged into one read when coalescing.
	MaxGap int `yaml:"max_gap"`
	// LateWriteMs is how long after physmcpd gave up on a write frame the
	// server, or a gateway's queue, may still apply it. Validation fills
	// in its default (LateWriteFactor times the timeout; 0 when simulated).
	LateWriteMs int `yaml:"late_write_ms"`
	// AcknowledgeMs is how long after the device answered a write with
	// exception 5 (acknowledge) it may still act on it. Validation fills in
	// its default (LateWriteFactor times the timeout; 0 when simulated).
	AcknowledgeMs int `yaml:"acknowledge_ms"`

	At Positions `yaml:"-"`
}

// ModbusRTUBus is a serial line speaking Modbus RTU (usually RS-485).
type ModbusRTUBus struct {
	// Port is best a /dev/serial/by-id/... path, which survives re-plugging.
	Port      string `yaml:"port,required"`
	Baud      int    `yaml:"baud,required"`
	DataBits  int    `yaml:"data_bits"`          // default 8
	Parity    string `yaml:"parity,required"`    // none|even|odd
	StopBits  int    `yaml:"stop_bits,required"` // 1|2
	TimeoutMs int    `yaml:"timeout_ms"`
	Retries   int    `yaml:"retries"`
	MaxGap    int    `yaml:"max_gap"`
	RS485     *RS485 `yaml:"rs485"`
	// AcknowledgeMs: as for ModbusTCPBus.
	AcknowledgeMs int `yaml:"acknowledge_ms"`

	At Positions `yaml:"-"`
}

// RS485Direction is how an RS-485 transceiver is switched between transmit
// and receive (its driver-enable pin).
type RS485Direction string

const (
	// DirAuto: the adapter switches by itself (most USB RS-485 dongles); nothing to do.
	DirAuto RS485Direction = "auto"
	// DirKernel: the UART driver drives RTS around each frame (TIOCSRS485).
	DirKernel RS485Direction = "kernel"
	// DirRTS: physmcpd drives RTS from user space around each frame.
	DirRTS RS485Direction = "rts"
	// DirGPIO: physmcpd drives a GPIO line around each frame.
	DirGPIO RS485Direction = "gpio"
)

var rs485Directions = []RS485Direction{DirAuto, DirKernel, DirRTS, DirGPIO}

// RS485 is how the transceiver's direction is switched.
type RS485 struct {
	Direction RS485Direction `yaml:"direction"`
	// Enabled is the older spelling: true is direction kernel, false auto.
	Enabled              bool       `yaml:"enabled"`
	RTSOnSend            bool       `yaml:"rts_on_send"`
	RTSAfterSend         bool       `yaml:"rts_after_send"`
	DelayRTSBeforeSendUs int        `yaml:"delay_rts_before_send_us"`
	DelayRTSAfterSendUs  int        `yaml:"delay_rts_after_send_us"`
	RXDuringTX           bool       `yaml:"rx_during_tx"`
	GPIO                 *RS485Line `yaml:"gpio"`

	At Positions `yaml:"-"`
}

// Mode is the direction in effect: direction when given, else what the older
// enabled key meant. A nil section is auto.
func (r *RS485) Mode() RS485Direction {
	switch {
	case r == nil || r.Direction == "" && !r.Enabled:
		return DirAuto
	case r.Direction == "":
		return DirKernel
	}
	return r.Direction
}

// RS485Line is the GPIO line wired to the transceiver's driver-enable (and
// usually its receiver-enable): high (logical) while transmitting.
type RS485Line struct {
	Bus       string `yaml:"bus,required"` // a gpio bus of this manifest
	Line      string `yaml:"line"`         // line name, preferred
	Offset    int    `yaml:"offset"`       // used when line is not given
	ActiveLow bool   `yaml:"active_low"`

	At Positions `yaml:"-"`
}

// Binding ties a capability to a point on a named bus. It is written either
// with PhysMCP's short address string ("0x48:reg=0x00") or in structured form;
// both normalise to exactly one of the typed parts below.
type Binding struct {
	Bus  string
	Type BusType // the bus's type, filled in by validation
	// Short is the original short address string, when one was given.
	Short string

	I2C    *I2CBinding
	GPIO   *GPIOBinding
	Modbus *ModbusBinding
	// Virtual is an adopted capability (an mcp bus).
	Virtual *VirtualBinding

	At Positions

	// rest holds the keys other than bus and type until validation, which
	// knows the bus's type, decodes them into the typed part.
	rest *yaml.Node
}

// ByteOrder is the order of bytes within a register (or an I2C word).
type ByteOrder string

const (
	BigEndian    ByteOrder = "big"
	LittleEndian ByteOrder = "little"
)

// I2CBinding reads or writes one register of a 7-bit-addressed device.
type I2CBinding struct {
	Address   uint16 // 7-bit
	Register  uint8
	Width     int       // bytes, 1..4 (default 1)
	ByteOrder ByteOrder // required when Width > 1
	Signed    bool
	Shift     uint
	Mask      uint64 // 0 = all bits
	Scale     float64
	Offset    float64
}

// GPIODirection is a line's direction.
type GPIODirection string

const (
	DirInput  GPIODirection = "input"
	DirOutput GPIODirection = "output"
)

// GPIOBinding is one line on the bus's chip.
type GPIOBinding struct {
	Line      string // line name, preferred
	Offset    int    // used when Line is empty
	HasOffset bool
	Direction GPIODirection
	ActiveLow bool
	Bias      string // as-is|disable|pull-up|pull-down
	// SafeLevel is the level an output returns to at start-up, on shutdown and on fault; required for outputs.
	SafeLevel *bool
}

// ModbusTable is one of the four Modbus data tables.
type ModbusTable string

const (
	TableCoil          ModbusTable = "coil"
	TableDiscreteInput ModbusTable = "discrete_input"
	TableHolding       ModbusTable = "holding"
	TableInput         ModbusTable = "input"
)

// Writable reports whether clients may write this table.
func (t ModbusTable) Writable() bool { return t == TableCoil || t == TableHolding }

// IsBits reports whether the table holds single bits rather than 16-bit registers.
func (t ModbusTable) IsBits() bool { return t == TableCoil || t == TableDiscreteInput }

// ModbusType is how a value is encoded in registers.
type ModbusType string

const (
	MBBool    ModbusType = "bool" // a coil or discrete input
	MBBit     ModbusType = "bit"  // one bit of a register
	MBInt16   ModbusType = "int16"
	MBUint16  ModbusType = "uint16"
	MBInt32   ModbusType = "int32"
	MBUint32  ModbusType = "uint32"
	MBInt64   ModbusType = "int64"
	MBUint64  ModbusType = "uint64"
	MBFloat32 ModbusType = "float32"
	MBFloat64 ModbusType = "float64"
	MBString  ModbusType = "string"
)

// Registers is how many 16-bit registers (or bits, for bool) the type spans.
func (t ModbusType) Registers(stringLen int) int {
	switch t {
	case MBBool, MBBit, MBInt16, MBUint16:
		return 1
	case MBInt32, MBUint32, MBFloat32:
		return 2
	case MBInt64, MBUint64, MBFloat64:
		return 4
	case MBString:
		return stringLen
	}
	return 0
}

// ModbusBinding is one value in a Modbus device.
type ModbusBinding struct {
	Unit     uint8
	Table    ModbusTable
	Address  uint16 // 0-based protocol address
	DataType ModbusType
	Bit      int // for MBBit: 0 (LSB) .. 15
	Length   int // for MBString: registers
	// ByteOrder is the order of the two bytes in each register; WordOrder the
	// order of registers in a multi-register value. Both are required for
	// multi-register types: guessing them is the most common field bug.
	ByteOrder ByteOrder
	WordOrder ByteOrder
	Scale     float64 // default 1
	Offset    float64
}
