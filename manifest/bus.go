package manifest

import (
	"reflect"

	"github.com/physmcp/physmcpd/internal/strictyaml"
	"gopkg.in/yaml.v3"
)

// busCommon holds the keys every bus has; the rest belong to the bus's type.
type busCommon struct {
	Type       BusType `yaml:"type,required"`
	Simulated  bool    `yaml:"simulated"`
	Simulation *BusSim `yaml:"simulation"`

	At Positions `yaml:"-"`
}

// busTypes are the bus types in the order messages list them.
var busTypes = []BusType{BusI2C, BusGPIO, BusModbusTCP, BusModbusRTU, BusMCP}

// SetKey gives a bus the name it has in the buses section.
func (b *Bus) SetKey(key string) { b.Name = key }

// UnmarshalStrict reads the common keys, then decodes the remaining keys
// strictly into the part for the bus's type, so a key that belongs to another
// type of bus (baud on an I2C bus) is reported as unknown.
func (b *Bus) UnmarshalStrict(d *strictyaml.Decoder, n *yaml.Node, path string) {
	if n.Kind != yaml.MappingNode {
		d.Errorf(n, path, "expected a mapping, got %s", strictyaml.Describe(n))
		return
	}
	commonNode, rest := strictyaml.SplitMapping(n, strictyaml.Known(reflect.TypeFor[busCommon]())...)
	var c busCommon
	d.Decode(commonNode, &c, path)
	b.Type, b.Simulated, b.Simulation = c.Type, c.Simulated, c.Simulation
	b.At = strictyaml.Positions{Self: d.Pos(n), Values: c.At.Values}
	if b.At.Values == nil {
		b.At.Values = map[string]strictyaml.Pos{}
	}
	var kind any
	switch c.Type {
	case BusI2C:
		b.I2C = &I2CBus{}
		kind = b.I2C
	case BusGPIO:
		b.GPIO = &GPIOBus{}
		kind = b.GPIO
	case BusModbusTCP:
		b.ModbusTCP = &ModbusTCPBus{}
		kind = b.ModbusTCP
	case BusModbusRTU:
		b.ModbusRTU = &ModbusRTUBus{}
		kind = b.ModbusRTU
	case BusMCP:
		b.MCP = &MCPBus{}
		kind = b.MCP
	case "":
		return // missing type: already reported
	default:
		d.ErrorAt(c.At.Of("type"), path+".type", "unknown bus type %q; expected one of %s", c.Type, quoteList(busTypes))
		return
	}
	d.Decode(rest, kind, path)
	for i := 0; i+1 < len(rest.Content); i += 2 {
		b.At.Values[rest.Content[i].Value] = d.Pos(rest.Content[i+1])
	}
}
