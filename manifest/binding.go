package manifest

import (
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/physmcp/physmcpd/internal/strictyaml"
	"gopkg.in/yaml.v3"
)

// bindingCommon holds the keys every binding has. type is optional: the bus
// already says what it is, and when type is written it must agree.
type bindingCommon struct {
	Bus  string `yaml:"bus,required"`
	Type string `yaml:"type"`

	At Positions `yaml:"-"`
}

// The structured keys of each kind of binding. The short address string is
// rewritten into these keys, so both forms go through one strict decoder.
type i2cBindingKeys struct {
	Address   *int     `yaml:"address,required"`
	Register  *int     `yaml:"register,required"`
	Width     *int     `yaml:"width"`
	ByteOrder string   `yaml:"byte_order"`
	Signed    bool     `yaml:"signed"`
	Shift     *int     `yaml:"shift"`
	Mask      *uint64  `yaml:"mask"`
	Scale     *float64 `yaml:"scale"`
	Offset    float64  `yaml:"offset"`

	At Positions `yaml:"-"`
}

type gpioBindingKeys struct {
	Line      string `yaml:"line"`
	Offset    *int   `yaml:"offset"`
	Direction string `yaml:"direction"`
	ActiveLow bool   `yaml:"active_low"`
	Bias      string `yaml:"bias"`
	SafeLevel string `yaml:"safe_level"`

	At Positions `yaml:"-"`
}

type modbusBindingKeys struct {
	Unit      *int        `yaml:"unit,required"`
	Table     string      `yaml:"table"`
	Address   *int        `yaml:"address"`
	Reference *modiconRef `yaml:"reference"`
	DataType  string      `yaml:"data_type"`
	Bit       *int        `yaml:"bit"`
	Length    *int        `yaml:"length"`
	ByteOrder string      `yaml:"byte_order"`
	WordOrder string      `yaml:"word_order"`
	Scale     *float64    `yaml:"scale"`
	Offset    float64     `yaml:"offset"`

	At Positions `yaml:"-"`
}

// bindingKind is what the binding's keys depend on: i2c, gpio or modbus.
type bindingKind string

const (
	kindI2C    bindingKind = "i2c"
	kindGPIO   bindingKind = "gpio"
	kindModbus bindingKind = "modbus"
	// kindVirtual: PhysMCP's binding type for an adopted capability.
	kindVirtual bindingKind = "virtual"
)

func kindOf(t BusType) bindingKind {
	switch t {
	case BusI2C:
		return kindI2C
	case BusGPIO:
		return kindGPIO
	case BusModbusTCP, BusModbusRTU:
		return kindModbus
	case BusMCP:
		return kindVirtual
	}
	return ""
}

// shortAliases maps the short-string spellings of PhysMCP's examples onto the
// structured keys ("" means the key carries no field: gpio mode=digital).
var shortAliases = map[bindingKind]map[string]string{
	kindI2C:    {"reg": "register"},
	kindGPIO:   {"pin": "offset", "mode": ""},
	kindModbus: {"slave": "unit", "reg": "reference", "addr": "address", "type": "table", "dtype": "data_type"},
}

var bindingKeyTypes = map[bindingKind]reflect.Type{
	kindI2C:    reflect.TypeFor[i2cBindingKeys](),
	kindGPIO:   reflect.TypeFor[gpioBindingKeys](),
	kindModbus: reflect.TypeFor[modbusBindingKeys](),
}

// UnmarshalStrict reads bus and type now and keeps the other keys for
// validation, which knows the type of the named bus.
func (b *Binding) UnmarshalStrict(d *strictyaml.Decoder, n *yaml.Node, path string) {
	if n.Kind != yaml.MappingNode {
		d.Errorf(n, path, "expected a mapping with bus and address (or structured keys), got %s", strictyaml.Describe(n))
		return
	}
	commonNode, rest := strictyaml.SplitMapping(n, strictyaml.Known(reflect.TypeFor[bindingCommon]())...)
	var c bindingCommon
	d.Decode(commonNode, &c, path)
	b.Bus = c.Bus
	b.At = strictyaml.Positions{Self: d.Pos(n), Values: c.At.Values}
	if b.At.Values == nil {
		b.At.Values = map[string]strictyaml.Pos{}
	}
	if c.Type != "" {
		b.Type = BusType(c.Type)
	}
	b.rest = rest
}

type shortItem struct {
	written string // the key as written (maybe an alias)
	key     string // the structured key ("" for gpio mode)
	value   string
	keyPos  strictyaml.Pos
	valPos  strictyaml.Pos
}

// parseShort splits a short address ("0x48:reg=0x00:width=2") into items.
// Only an I2C binding may start with a bare item: the device address.
func parseShort(d *strictyaml.Decoder, n *yaml.Node, path string, kind bindingKind) []shortItem {
	text := n.Value
	col := n.Column
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		col++
	}
	at := func(offset int) strictyaml.Pos {
		return strictyaml.Pos{File: d.File, Line: n.Line, Col: col + utf8.RuneCountInString(text[:offset])}
	}
	known := strictyaml.Known(bindingKeyTypes[kind])
	var names []string
	names = append(names, known...)
	for alias := range shortAliases[kind] {
		names = append(names, alias)
	}
	slices.Sort(names)

	var items []shortItem
	offset := 0
	for i, raw := range strings.Split(text, ":") {
		start := offset
		offset += len(raw) + 1
		lead := len(raw) - len(strings.TrimLeft(raw, " \t"))
		item := strings.TrimSpace(raw)
		pos := at(start + lead)
		if item == "" {
			d.ErrorAt(pos, path, "short address %q has an empty item", text)
			continue
		}
		written, value, hasEq := strings.Cut(item, "=")
		written, value = strings.TrimSpace(written), strings.TrimSpace(value)
		if !hasEq {
			if i == 0 && kind == kindI2C {
				items = append(items, shortItem{written: "address", key: "address", value: item, keyPos: pos, valPos: pos})
				continue
			}
			d.ErrorAt(pos, path, "short address item %q must be key=value (only an I2C binding starts with a bare device address)", item)
			continue
		}
		eq := strings.Index(raw, "=")
		after := raw[eq+1:]
		valPos := at(start + eq + 1 + len(after) - len(strings.TrimLeft(after, " \t")))
		if written == "" || value == "" {
			d.ErrorAt(pos, path, "short address item %q needs both a key and a value", item)
			continue
		}
		key := written
		if alias, isAlias := shortAliases[kind][written]; isAlias {
			key = alias
		} else if !slices.Contains(known, written) {
			d.ErrorAt(pos, path, "unknown key %q in the short address%s", written, strictyaml.Suggest(written, names))
			continue
		}
		items = append(items, shortItem{written: written, key: key, value: value, keyPos: pos, valPos: valPos})
	}
	return items
}

// scalarNode builds a node for a short-string value, tagged as YAML would tag
// it, so the strict decoder applies the same number and boolean rules.
func scalarNode(value string, p strictyaml.Pos) *yaml.Node {
	var doc yaml.Node
	tag := "!!str"
	if err := yaml.Unmarshal([]byte(value), &doc); err == nil && len(doc.Content) == 1 && doc.Content[0].Kind == yaml.ScalarNode {
		switch t := doc.Content[0].Tag; t {
		case "!!int", "!!float", "!!bool":
			tag = t
		}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value, Line: p.Line, Column: p.Col}
}

// decodeKeys turns the short address (if any) and the structured keys into
// one mapping and decodes it strictly into out.
func (b *Binding) decodeKeys(d *strictyaml.Decoder, path string, kind bindingKind, out any) {
	rest := b.rest
	merged := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: rest.Line, Column: rest.Column}
	short := map[string]shortItem{}
	for i := 0; i+1 < len(rest.Content); i += 2 {
		k, v := rest.Content[i], rest.Content[i+1]
		if k.Value != "address" || v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
			continue
		}
		b.Short = v.Value
		items := parseShort(d, v, path+".address", kind)
		for _, it := range items {
			if first, dup := short[it.key]; dup && it.key != "" {
				d.ErrorAt(it.keyPos, path+".address", "%s is given twice in the short address (first as %q)", it.key, first.written)
				continue
			}
			if it.key == "" { // gpio mode: digital is the only mode a GPIO line has
				if it.value != "digital" {
					d.ErrorAt(it.valPos, path+".address", "mode %q is not supported; a GPIO line is digital (mode=digital)", it.value)
				}
				continue
			}
			short[it.key] = it
			merged.Content = append(merged.Content,
				&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: it.key, Line: it.keyPos.Line, Column: it.keyPos.Col},
				scalarNode(it.value, it.valPos))
		}
	}
	for i := 0; i+1 < len(rest.Content); i += 2 {
		k, v := rest.Content[i], rest.Content[i+1]
		if k.Value == "address" && v.Kind == yaml.ScalarNode && v.Tag == "!!str" {
			continue
		}
		if it, dup := short[k.Value]; dup {
			d.Errorf(k, path, "%s is given both in the short address (as %q) and as a key; give it once", k.Value, it.written)
			continue
		}
		merged.Content = append(merged.Content, k, v)
	}
	d.Decode(merged, out, path)
	for i := 0; i+1 < len(merged.Content); i += 2 {
		b.At.Values[merged.Content[i].Value] = d.Pos(merged.Content[i+1])
	}
}

// resolve decodes the binding's keys for the type of bus it names and checks
// them against the capability, filling exactly one typed part.
func (b *Binding) resolve(d *strictyaml.Decoder, path string, bus *Bus, c *Capability) {
	if b.rest == nil {
		return
	}
	kind := kindOf(bus.Type)
	if b.Type != "" {
		if written := BusType(b.Type); kindOf(written) == "" && written != "modbus" && written != "virtual" {
			d.ErrorAt(b.At.Of("type"), path+".type", "unknown binding type %q; expected i2c, gpio, modbus or virtual", written)
		} else if written != bus.Type && !(written == "modbus" && kind == kindModbus) && !(written == "virtual" && kind == kindVirtual) {
			d.ErrorAt(b.At.Of("type"), path+".type", "binding type %q does not match bus %q, which is %s", written, bus.Name, bus.Type)
		}
	}
	b.Type = bus.Type
	defer func() { b.rest = nil }() // resolved once
	errs := len(d.Diags.Errors())
	switch kind {
	case kindI2C:
		var k i2cBindingKeys
		b.decodeKeys(d, path, kind, &k)
		if len(d.Diags.Errors()) == errs {
			b.I2C = k.check(d, path, c)
		}
	case kindGPIO:
		var k gpioBindingKeys
		b.decodeKeys(d, path, kind, &k)
		if len(d.Diags.Errors()) == errs {
			b.GPIO = k.check(d, path, c)
		}
	case kindModbus:
		var k modbusBindingKeys
		b.decodeKeys(d, path, kind, &k)
		if len(d.Diags.Errors()) == errs {
			b.Modbus = k.check(d, path, c, bus)
		}
	case kindVirtual:
		b.resolveVirtual(d, path, c)
	}
}

// checker reports findings about one decoded binding and remembers whether any was an error.
type checker struct {
	d      *strictyaml.Decoder
	at     Positions
	path   string
	failed bool
}

// bad reports an error at key's value, or at the binding itself when key is "".
func (c *checker) bad(key, format string, args ...any) {
	path := c.path
	if key != "" {
		path += "." + key
	}
	c.d.ErrorAt(c.at.Of(key), path, format, args...)
	c.failed = true
}

func (c *checker) ok() bool { return !c.failed }

func byteOrder(d *strictyaml.Decoder, at Positions, path, key, value string) (ByteOrder, bool) {
	switch ByteOrder(value) {
	case BigEndian, LittleEndian:
		return ByteOrder(value), true
	}
	d.ErrorAt(at.Of(key), path+"."+key, "must be big or little, got %q", value)
	return "", false
}

func (k *i2cBindingKeys) check(d *strictyaml.Decoder, path string, c *Capability) *I2CBinding {
	at := k.At
	chk := &checker{d: d, at: at, path: path}
	bad := chk.bad
	b := &I2CBinding{Width: 1, Scale: 1, Signed: k.Signed, Offset: k.Offset}
	if a := *k.Address; a < 0x03 || a > 0x77 {
		bad("address", "I2C address %#x is outside the 7-bit device range 0x03..0x77", a)
	} else {
		b.Address = uint16(a)
	}
	if r := *k.Register; r < 0 || r > 0xff {
		bad("register", "register %#x is outside 0x00..0xff", r)
	} else {
		b.Register = uint8(r)
	}
	if k.Width != nil {
		if *k.Width < 1 || *k.Width > 4 {
			bad("width", "width must be 1..4 bytes, got %d", *k.Width)
		} else {
			b.Width = *k.Width
		}
	}
	if k.ByteOrder != "" {
		if o, good := byteOrder(d, at, path, "byte_order", k.ByteOrder); good {
			b.ByteOrder = o
		} else {
			chk.failed = true
		}
	} else if b.Width > 1 {
		bad("width", "a %d-byte register needs byte_order (big or little, from the datasheet); physmcpd does not guess it", b.Width)
	}
	bits := 8 * b.Width
	if k.Shift != nil {
		if *k.Shift < 0 || *k.Shift >= bits {
			bad("shift", "shift must be 0..%d for a %d-byte register, got %d", bits-1, b.Width, *k.Shift)
		} else {
			b.Shift = uint(*k.Shift)
		}
	}
	if k.Mask != nil {
		if *k.Mask == 0 || (bits < 64 && *k.Mask >= 1<<bits) {
			bad("mask", "mask %#x must be non-zero and fit in %d bits", *k.Mask, bits)
		} else {
			b.Mask = *k.Mask
		}
	}
	if chk.ok() {
		// The codec reads the field as (register & mask) >> shift, so a mask
		// that is not one run starting at bit shift would drop or keep stray bits.
		if n := b.fieldBits(); b.Mask != 0 && b.Mask != (1<<n-1)<<b.Shift {
			bad("mask", "mask %#x is not one contiguous run of bits starting at bit %d: the mask selects the field in the register as read, before shift moves it down (e.g. mask 0x0ff0 with shift 4)", b.Mask, b.Shift)
		} else if b.Signed && n < 2 {
			bad("signed", "a signed field needs at least 2 bits; this one has %d", n)
		}
	}
	if k.Scale != nil {
		if *k.Scale == 0 {
			bad("scale", "scale must not be 0")
		} else {
			b.Scale = *k.Scale
		}
	}
	if c.DataType == TypeString {
		d.ErrorAt(c.At.Of("data_type"), path, "an I2C register holds a number; data_type string cannot bind to it")
		chk.failed = true
	}
	if (c.DataType == TypeBool || c.DataType == TypeEnum) && (k.Scale != nil || k.Offset != 0) {
		bad("scale", "scale and offset only apply to numeric capabilities, not %s", c.DataType)
	}
	if !chk.ok() {
		return nil
	}
	return b
}

func (k *gpioBindingKeys) check(d *strictyaml.Decoder, path string, c *Capability) *GPIOBinding {
	at := k.At
	chk := &checker{d: d, at: at, path: path}
	bad := chk.bad
	b := &GPIOBinding{Line: k.Line, ActiveLow: k.ActiveLow, Bias: "as-is"}
	switch {
	case k.Line != "" && k.Offset != nil:
		bad("offset", "give the line by name (line) or by number (offset/pin), not both")
	case k.Line == "" && k.Offset == nil:
		bad("", "missing the GPIO line: give line (its name, preferred) or offset")
	case k.Offset != nil && *k.Offset < 0:
		bad("offset", "line offset must not be negative, got %d", *k.Offset)
	case k.Offset != nil:
		b.Offset, b.HasOffset = *k.Offset, true
	}
	want := DirInput
	if c.Kind == KindDo {
		want = DirOutput
	}
	switch GPIODirection(k.Direction) {
	case "":
		b.Direction = want
	case DirInput, DirOutput:
		b.Direction = GPIODirection(k.Direction)
		if c.Kind != "" && b.Direction != want {
			bad("direction", "a %s capability needs direction %s, not %s", c.Kind, want, b.Direction)
		}
	default:
		bad("direction", "must be input or output, got %q", k.Direction)
	}
	switch k.Bias {
	case "":
	case "as-is", "disable", "pull-up", "pull-down":
		b.Bias = k.Bias
		if b.Direction == DirOutput && k.Bias != "as-is" {
			// the line request's bias flags apply to inputs only
			bad("bias", "bias %s only applies to input lines: the kernel cannot set a bias on an output (leave bias out, or as-is)", k.Bias)
		}
	default:
		bad("bias", "must be as-is, disable, pull-up or pull-down, got %q", k.Bias)
	}
	switch k.SafeLevel {
	case "":
		if b.Direction == DirOutput {
			bad("", "an output line needs safe_level (low or high): the level it is driven to at start-up, shutdown and on faults; physmcpd never guesses it")
		}
	case "low", "high":
		if b.Direction == DirInput {
			bad("safe_level", "safe_level only applies to output lines")
		}
		level := k.SafeLevel == "high"
		b.SafeLevel = &level
	default:
		bad("safe_level", "must be low or high, got %q", k.SafeLevel)
	}
	if c.DataType != "" && c.DataType != TypeBool {
		d.ErrorAt(c.At.Of("data_type"), path, "a GPIO line is on or off; its capability needs data_type bool, not %s", c.DataType)
		chk.failed = true
	}
	if !chk.ok() {
		return nil
	}
	return b
}

// modiconRef is a Modicon reference such as 40001 or 00001: decimal digits
// whose leading zeros are part of the convention, not an octal prefix.
type modiconRef int

var digits = regexp.MustCompile(`^[0-9]{1,6}$`)

// UnmarshalStrict reads the reference as decimal digits, quoted or not.
func (r *modiconRef) UnmarshalStrict(d *strictyaml.Decoder, n *yaml.Node, path string) {
	if n.Kind != yaml.ScalarNode || !digits.MatchString(n.Value) {
		d.Errorf(n, path, "expected a Modicon reference (digits such as 40001), got %s", strictyaml.Describe(n))
		return
	}
	v, _ := strconv.Atoi(n.Value)
	*r = modiconRef(v)
}

// modicon maps a 1-based Modicon reference to its table and 0-based address.
func modicon(ref int) (ModbusTable, int, bool) {
	switch {
	case ref >= 1 && ref <= 9999:
		return TableCoil, ref - 1, true
	case ref >= 10001 && ref <= 19999:
		return TableDiscreteInput, ref - 10001, true
	case ref >= 30001 && ref <= 39999:
		return TableInput, ref - 30001, true
	case ref >= 40001 && ref <= 49999:
		return TableHolding, ref - 40001, true
	case ref >= 100001 && ref <= 165536:
		return TableDiscreteInput, ref - 100001, true
	case ref >= 300001 && ref <= 365536:
		return TableInput, ref - 300001, true
	case ref >= 400001 && ref <= 465536:
		return TableHolding, ref - 400001, true
	}
	return "", 0, false
}

var modbusTypes = []ModbusType{MBBool, MBBit, MBInt16, MBUint16, MBInt32, MBUint32, MBInt64, MBUint64, MBFloat32, MBFloat64, MBString}

func (t ModbusType) isInteger() bool {
	switch t {
	case MBInt16, MBUint16, MBInt32, MBUint32, MBInt64, MBUint64:
		return true
	}
	return false
}

func (t ModbusType) isNumeric() bool { return t.isInteger() || t == MBFloat32 || t == MBFloat64 }

func (k *modbusBindingKeys) check(d *strictyaml.Decoder, path string, c *Capability, bus *Bus) *ModbusBinding {
	at := k.At
	chk := &checker{d: d, at: at, path: path}
	bad := chk.bad
	b := &ModbusBinding{Scale: 1, Offset: k.Offset}

	unit := *k.Unit
	switch {
	case bus.Type == BusModbusRTU && (unit < 1 || unit > 247):
		bad("unit", "a Modbus RTU unit id is 1..247 (0 is broadcast, which no device answers), got %d", unit)
	case bus.Type == BusModbusTCP && (unit < 0 || (unit > 247 && unit != 255)):
		bad("unit", "a Modbus TCP unit id is 0..247 or 255, got %d", unit)
	default:
		b.Unit = uint8(unit)
	}

	switch ModbusTable(k.Table) {
	case "":
	case TableCoil, TableDiscreteInput, TableHolding, TableInput:
		b.Table = ModbusTable(k.Table)
	case "discrete":
		b.Table = TableDiscreteInput
	default:
		bad("table", "must be coil, discrete_input, holding or input, got %q", k.Table)
	}
	switch {
	case k.Address != nil && k.Reference != nil:
		bad("reference", "give the 0-based address or the 1-based Modicon reference, not both")
	case k.Address == nil && k.Reference == nil:
		bad("", "missing the register: give address (0-based) or reference (Modicon, e.g. 40001)")
	case k.Address != nil:
		if *k.Address < 0 || *k.Address > 65535 {
			bad("address", "a Modbus address is 0..65535, got %d", *k.Address)
		} else {
			b.Address = uint16(*k.Address)
		}
		if k.Table == "" {
			bad("", "missing table (coil, discrete_input, holding or input)")
		}
	default:
		table, addr, good := modicon(int(*k.Reference))
		switch {
		case !good:
			bad("reference", "%d is not a Modicon reference (00001-09999 coils, 10001-19999 discrete inputs, 30001-39999 input registers, 40001-49999 holding registers, or the 6-digit forms 100001-165536, 300001-365536, 400001-465536)", *k.Reference)
		case b.Table != "" && b.Table != table:
			bad("table", "table %s disagrees with reference %d, which is in the %s table", k.Table, *k.Reference, table)
		default:
			b.Table, b.Address = table, uint16(addr)
		}
	}

	dt := ModbusType(k.DataType)
	switch {
	case k.DataType == "" && b.Table.IsBits():
		dt = MBBool
	case k.DataType == "" && b.Table != "":
		// PhysMCP's own example ("slave=1:reg=40001:type=holding") names no
		// type: one register is read as the protocol's native uint16, and the
		// manifest's author is told so.
		dt = MBUint16
		d.WarnAt(at.Self, path, "no data_type for the %s register: it is read as uint16; write dtype=/data_type: (one of %s) if the device encodes it otherwise", b.Table, quoteList(modbusTypes[1:]))
	case !slices.Contains(modbusTypes, dt):
		bad("data_type", "unknown Modbus data type %q; expected one of %s", k.DataType, quoteList(modbusTypes))
		dt = ""
	}
	b.DataType = dt
	if dt != "" && b.Table != "" {
		if b.Table.IsBits() && dt != MBBool {
			bad("data_type", "a %s holds single bits; its data_type is bool, not %s", b.Table, dt)
		}
		if !b.Table.IsBits() && dt == MBBool {
			bad("data_type", "bool is for coils and discrete inputs; for one bit of a %s register use data_type bit with bit: N", b.Table)
		}
	}

	if k.Bit != nil {
		switch {
		case dt != MBBit:
			bad("bit", "bit only applies to data_type bit")
		case *k.Bit < 0 || *k.Bit > 15:
			bad("bit", "bit must be 0..15, got %d", *k.Bit)
		default:
			b.Bit = *k.Bit
		}
	} else if dt == MBBit {
		bad("", "data_type bit needs bit (0 = least significant .. 15)")
	}
	if k.Length != nil {
		switch {
		case dt != MBString:
			bad("length", "length only applies to data_type string")
		case *k.Length < 1 || *k.Length > 125:
			bad("length", "a string spans 1..125 registers, got %d", *k.Length)
		default:
			b.Length = *k.Length
		}
	} else if dt == MBString {
		bad("", "data_type string needs length (the number of registers it spans)")
	}

	regs := dt.Registers(b.Length)
	if k.ByteOrder != "" {
		if dt == MBBool {
			bad("byte_order", "byte_order does not apply to single bits")
		} else if o, good := byteOrder(d, at, path, "byte_order", k.ByteOrder); good {
			b.ByteOrder = o
		} else {
			chk.failed = true
		}
	} else if dt != MBBool && dt != "" {
		if regs > 1 || dt == MBString {
			bad("", "%s needs byte_order (big or little); physmcpd does not guess it", dt)
		} else {
			b.ByteOrder = BigEndian // the protocol's own order for a single register
		}
	}
	if k.WordOrder != "" {
		if dt != "" && regs < 2 {
			bad("word_order", "word_order only applies to values of two or more registers; %s has %d", dt, max(regs, 1))
		} else if o, good := byteOrder(d, at, path, "word_order", k.WordOrder); good {
			b.WordOrder = o
		} else {
			chk.failed = true
		}
	} else if regs >= 2 {
		bad("", "%s spans %d registers and needs word_order (big = most significant register first, or little); physmcpd does not guess it", dt, regs)
	}
	if k.Scale != nil || k.Offset != 0 {
		key := "offset"
		if k.Scale != nil {
			key = "scale"
		}
		switch {
		case dt == MBBool || dt == MBBit || dt == MBString:
			bad(key, "scale and offset only apply to numeric data types, not %s", dt)
		case k.Scale != nil && *k.Scale == 0:
			bad("scale", "scale must not be 0")
		case k.Scale != nil:
			b.Scale = *k.Scale
		}
	}
	if regs > 0 && int(b.Address)+regs-1 > 65535 {
		bad("address", "%s at address %d runs past the last address 65535", dt, b.Address)
	}
	if c.Kind == KindDo && b.Table != "" && !b.Table.Writable() {
		bad("table", "a do capability must write a coil or holding register; the %s table is read-only", b.Table)
	}
	if dt != "" && c.DataType != "" && !compatible(c.DataType, dt) {
		d.ErrorAt(c.At.Of("data_type"), path, "data_type %s cannot be carried by a Modbus %s", c.DataType, dt)
		chk.failed = true
	}
	if !chk.ok() {
		return nil
	}
	return b
}

// compatible says whether a capability's value type can be carried by a Modbus encoding.
func compatible(c DataType, m ModbusType) bool {
	switch c {
	case TypeBool:
		return m != MBString // non-zero registers read as true
	case TypeFloat, TypeInt:
		return m.isNumeric()
	case TypeString:
		return m == MBString
	case TypeEnum:
		return m.isInteger() // the value is the index into enum_values
	}
	return false
}

func quoteList[T ~string](items []T) string {
	q := make([]string, len(items))
	for i, it := range items {
		q[i] = strconv.Quote(string(it))
	}
	return strings.Join(q, ", ")
}
