package manifest

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/physmcp/physmcpd/internal/strictyaml"
)

var (
	nameGrammar = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	tagGrammar  = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)
	i2cDevice   = regexp.MustCompile(`^(?:/dev/i2c-)?([0-9]+)$`)
	// mutationWord is what the proMCP linter flags in a read_* description.
	mutationWord = regexp.MustCompile(`(?i)\b(create|update|delete|set|reset|trigger|send|write|insert|modify)\b`)
)

// genericNames make tools an agent cannot choose between (read_data, do_update).
var genericNames = []string{"data", "value", "values", "update", "info", "status", "state", "item", "thing", "result", "output", "input", "misc", "test"}

// Tool-density limits of the proMCP linter, per endpoint (one can_do included).
const (
	maxToolsPerEndpoint = 8
	maxDoPerEndpoint    = 5
	maxToolName         = 64
)

var roles = []Role{RoleNone, RoleOperator, RoleSupervisor, RoleAdmin}

// ValidRole reports whether r is one of none, operator, supervisor, admin.
func ValidRole(r Role) bool { return slices.Contains(roles, r) }

// RoleNames lists the roles for messages.
func RoleNames() string { return quoteList(roles) }

type validator struct {
	d       *strictyaml.Decoder
	m       *Manifest
	usedBus map[string]bool
	// dirLines are the RS-485 direction lines (gpioLineKey) and the bus each switches.
	dirLines map[string]string
}

func (v *validator) errorf(p strictyaml.Pos, path, format string, args ...any) {
	v.d.ErrorAt(p, path, format, args...)
}

func (v *validator) warnf(p strictyaml.Pos, path, format string, args ...any) {
	v.d.WarnAt(p, path, format, args...)
}

func (v *validator) run() {
	m := v.m
	if m.PhysMCPVersion != "" && m.PhysMCPVersion != Version {
		v.errorf(m.At.Of("physmcp_version"), "physmcp_version", "unsupported version %q; this physmcpd reads %q", m.PhysMCPVersion, Version)
	}
	v.device(&m.Device)
	if m.Network != nil {
		v.network(m.Network)
	}
	switch m.Profile {
	case "", "full", "lite", "proxy", "aggregator":
	default:
		v.errorf(m.At.Of("profile"), "profile", "must be full, lite, proxy or aggregator, got %q", m.Profile)
	}
	v.usedBus = map[string]bool{}
	v.dirLines = map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(m.Buses)) {
		v.bus(m.Buses[name])
	}
	if m.At.Has("capabilities") && len(m.Capabilities) == 0 && !m.Adopts() {
		v.errorf(m.At.Of("capabilities"), "capabilities", "the device declares no capabilities")
	}
	v.capabilities()
	v.operations()
	if m.Audit != nil {
		if m.Audit.RetentionDays < 0 {
			v.errorf(m.Audit.At.Of("retention_days"), "audit.retention_days", "must not be negative, got %d", m.Audit.RetentionDays)
		}
		if rs := m.Audit.RemoteSink; rs != nil {
			v.remoteSink(m.Audit, rs)
		}
	}
	if m.Telemetry != nil {
		v.telemetry(m.Telemetry)
	}
	if m.SafeState != nil {
		v.safeState(m)
	}
	for _, name := range slices.Sorted(maps.Keys(m.Buses)) {
		if b := m.Buses[name]; !v.usedBus[name] {
			v.warnf(b.At.Key, "buses."+name, "no capability uses this bus")
		}
	}
}

func (v *validator) device(dev *Device) {
	if dev.ID != "" && !nameGrammar.MatchString(dev.ID) {
		v.errorf(dev.At.Of("id"), "device.id", "%q must be lowercase letters, digits and _ and start with a letter (convention: <type>_<location>_<seq>)", dev.ID)
	}
	if dev.At.Has("type") && strings.TrimSpace(dev.Type) == "" {
		v.errorf(dev.At.Of("type"), "device.type", "must not be empty")
	}
	if dev.Location != nil && dev.Location.At.Has("zone") && strings.TrimSpace(dev.Location.Zone) == "" {
		v.errorf(dev.Location.At.Of("zone"), "device.location.zone", "must not be empty")
	}
}

func (v *validator) network(n *Network) {
	for i, p := range n.Protocols {
		path := fmt.Sprintf("network.protocols[%d]", i)
		switch p.Type {
		case "", "ip", "serial", "lora", "ble":
		default:
			v.errorf(p.At.Of("type"), path+".type", "must be ip, serial, lora or ble, got %q", p.Type)
		}
		switch p.Role {
		case "", "native", "proxy", "lite":
		default:
			v.errorf(p.At.Of("role"), path+".role", "must be native, proxy or lite, got %q", p.Role)
		}
		if p.At.Has("mcp_port") && (p.MCPPort < 1 || p.MCPPort > 65535) {
			v.errorf(p.At.Of("mcp_port"), path+".mcp_port", "must be a TCP port 1..65535, got %d", p.MCPPort)
		}
	}
	if n.Mesh != nil {
		v.mesh(n.Mesh)
	}
}

func (v *validator) remoteSink(a *Audit, rs *RemoteSink) {
	if !a.Enabled {
		v.errorf(a.At.Of("remote_sink"), "audit.remote_sink", "ships the audit trail, and with audit.enabled false there is none: set enabled: true or remove remote_sink")
	}
	if _, err := rs.SinkURL(); err != nil {
		key := "address"
		if _, ok := sinkSchemes[rs.Type]; !ok {
			key = "type"
		}
		v.errorf(rs.At.Of(key), "audit.remote_sink."+key, "%v", err)
	}
}

func (v *validator) nonNegative(at Positions, path, key string, value int) {
	if value < 0 {
		v.errorf(at.Of(key), path+"."+key, "must not be negative, got %d", value)
	}
}

// timeout checks a bus timeout_ms: absent means the driver's default, and a
// written 0 would mean "never wait", which no bus can do.
func (v *validator) timeout(at Positions, path string, ms int) {
	if at.Has("timeout_ms") && ms < 1 {
		v.errorf(at.Of("timeout_ms"), path+".timeout_ms", "must be at least 1, got %d", ms)
	}
}

// maxGap checks max_gap and fills in its default, so a written 0 (merge only
// adjoining reads) is never mistaken for "not set".
func (v *validator) maxGap(at Positions, path string, gap *int) {
	switch {
	case !at.Has("max_gap"):
		*gap = DefaultMaxGap
	case *gap < 0 || *gap > 2000:
		v.errorf(at.Of("max_gap"), path+".max_gap", "must be 0..2000, got %d", *gap)
	}
}

// window checks a settle window key (late_write_ms, acknowledge_ms) and
// fills in its default: twice the timeout, within the range a written value
// keeps to, or 0 on a simulated bus, whose device applies every write at once.
func (v *validator) window(b *Bus, at Positions, path, key string, ms *int, timeoutMs int) {
	switch {
	case !at.Has(key):
		if !b.Simulated {
			*ms = min(LateWriteFactor*cmp.Or(timeoutMs, DefaultModbusTimeoutMs), MaxLateWriteMs)
		}
	case *ms < 0 || *ms > MaxLateWriteMs:
		v.errorf(at.Of(key), path+"."+key, "must be 0..%d, got %d", MaxLateWriteMs, *ms)
	}
}

func (v *validator) rate01(at Positions, path, key string, value float64) {
	if value < 0 || value > 1 {
		v.errorf(at.Of(key), path+"."+key, "is a probability and must be within 0..1, got %g", value)
	}
}

func (v *validator) bus(b *Bus) {
	path := "buses." + b.Name
	if !tagGrammar.MatchString(b.Name) {
		v.errorf(b.At.Key, path, "bus name %q must be lowercase letters, digits, _ and - and start with a letter", b.Name)
	}
	if s := b.Simulation; s != nil {
		if !b.Simulated {
			v.errorf(b.At.Of("simulation"), path+".simulation", "the bus is not simulated; add simulated: true or remove the simulation")
		}
		sp := path + ".simulation"
		if s.LatencyMs < 0 {
			v.errorf(s.At.Of("latency_ms"), sp+".latency_ms", "must not be negative, got %g", s.LatencyMs)
		}
		if s.JitterMs < 0 {
			v.errorf(s.At.Of("jitter_ms"), sp+".jitter_ms", "must not be negative, got %g", s.JitterMs)
		}
		v.rate01(s.At, sp, "timeout_rate", s.TimeoutRate)
		v.rate01(s.At, sp, "error_rate", s.ErrorRate)
	}
	switch {
	case b.I2C != nil:
		k := b.I2C
		if !i2cDevice.MatchString(k.Device) {
			v.errorf(k.At.Of("device"), path+".device", "must be the adapter number N or /dev/i2c-N, got %q", k.Device)
		}
		v.nonNegative(k.At, path, "retries", k.Retries)
		v.timeout(k.At, path, k.TimeoutMs)
	case b.GPIO != nil:
		k := b.GPIO
		switch {
		case k.Chip != "" && k.Path != "":
			v.errorf(k.At.Of("path"), path, "give the chip by label (chip) or by path, not both")
		case k.Chip == "" && k.Path == "":
			v.errorf(b.At.Self, path, "missing the GPIO chip: give chip (its label, e.g. pinctrl-bcm2711; preferred) or path (/dev/gpiochipN)")
		case k.Path != "" && !strings.HasPrefix(k.Path, "/dev/"):
			v.errorf(k.At.Of("path"), path+".path", "must be a device path such as /dev/gpiochip0, got %q", k.Path)
		case strings.HasPrefix(k.Chip, "gpiochip"):
			v.warnf(k.At.Of("chip"), path+".chip", "%q is a chip number, which can change between kernels; use the chip's label (see gpiodetect)", k.Chip)
		}
	case b.ModbusTCP != nil:
		k := b.ModbusTCP
		if host, port, err := net.SplitHostPort(k.Address); err != nil || host == "" {
			v.errorf(k.At.Of("address"), path+".address", "must be host:port, got %q", k.Address)
		} else if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			v.errorf(k.At.Of("address"), path+".address", "port %q must be 1..65535", port)
		}
		v.timeout(k.At, path, k.TimeoutMs)
		v.nonNegative(k.At, path, "retries", k.Retries)
		v.maxGap(k.At, path, &k.MaxGap)
		v.window(b, k.At, path, "late_write_ms", &k.LateWriteMs, k.TimeoutMs)
		v.window(b, k.At, path, "acknowledge_ms", &k.AcknowledgeMs, k.TimeoutMs)
	case b.ModbusRTU != nil:
		v.rtu(b, b.ModbusRTU, path)
	case b.MCP != nil:
		v.mcpBus(b, path)
	}
}

func (v *validator) rtu(b *Bus, k *ModbusRTUBus, path string) {
	if k.Port == "" {
		v.errorf(k.At.Of("port"), path+".port", "must not be empty")
	} else if !strings.HasPrefix(k.Port, "/dev/serial/by-id/") && !b.Simulated {
		v.warnf(k.At.Of("port"), path+".port", "%q may name another adapter after a re-plug or reboot; prefer its /dev/serial/by-id/... path", k.Port)
	}
	if k.Baud <= 0 {
		v.errorf(k.At.Of("baud"), path+".baud", "must be a positive baud rate, got %d", k.Baud)
	}
	switch k.DataBits {
	case 0:
		k.DataBits = 8
	case 7, 8:
	default:
		v.errorf(k.At.Of("data_bits"), path+".data_bits", "must be 7 or 8, got %d", k.DataBits)
	}
	switch k.Parity {
	case "none", "even", "odd":
	default:
		if k.At.Has("parity") {
			v.errorf(k.At.Of("parity"), path+".parity", "must be none, even or odd, got %q", k.Parity)
		}
	}
	if k.At.Has("stop_bits") && k.StopBits != 1 && k.StopBits != 2 {
		v.errorf(k.At.Of("stop_bits"), path+".stop_bits", "must be 1 or 2, got %d", k.StopBits)
	}
	if k.Parity == "none" && k.StopBits == 1 {
		v.warnf(k.At.Of("stop_bits"), path+".stop_bits", "the Modbus serial-line standard asks for 2 stop bits without parity; check the device's setting")
	}
	v.timeout(k.At, path, k.TimeoutMs)
	v.nonNegative(k.At, path, "retries", k.Retries)
	v.maxGap(k.At, path, &k.MaxGap)
	v.window(b, k.At, path, "acknowledge_ms", &k.AcknowledgeMs, k.TimeoutMs)
	if k.RS485 != nil {
		v.rs485(b, k, path+".rs485")
	}
}

// maxRS485DelayUs is the kernel's cap on RS-485 RTS delays (100 ms); the
// user-space modes keep it, so a delay never eats a frame's whole timeout.
const maxRS485DelayUs = 100_000

// portKind tells a USB adapter or a pseudo-terminal from its path, where the
// path says so ("" otherwise: an on-board UART or a name it cannot tell).
func portKind(port string) string {
	switch {
	case strings.HasPrefix(port, "/dev/ttyUSB"), strings.HasPrefix(port, "/dev/ttyACM"),
		strings.HasPrefix(port, "/dev/serial/by-id/usb-"),
		strings.HasPrefix(port, "/dev/serial/by-path/") && strings.Contains(port, "usb"):
		return "usb"
	case strings.HasPrefix(port, "/dev/pts/"), port == "/dev/ptmx":
		return "pty"
	}
	return ""
}

func (v *validator) rs485(b *Bus, k *ModbusRTUBus, path string) {
	r := k.RS485
	at := r.At
	modeKey := "direction"
	switch {
	case at.Has("direction") && at.Has("enabled"):
		v.errorf(at.Of("enabled"), path+".enabled", "enabled is the older spelling of direction (true: kernel, false: auto); remove it")
	case at.Has("enabled"):
		modeKey = "enabled"
		v.warnf(at.Of("enabled"), path+".enabled", "enabled: %v is direction: %s; write that instead", r.Enabled, r.Mode())
	}
	mode := r.Mode()
	if !slices.Contains(rs485Directions, mode) {
		v.errorf(at.Of("direction"), path+".direction", "must be %s, got %q", quoteList(rs485Directions), mode)
		return
	}
	switch kind := portKind(k.Port); {
	case mode == DirKernel && kind == "usb":
		v.errorf(at.Of(modeKey), path+"."+modeKey, "%q is a USB adapter: USB adapters have no kernel RS-485 mode (TIOCSRS485 fails with \"inappropriate ioctl for device\"); use direction: auto for a dongle that switches by itself (FTDI, CH340 RS-485 dongles), or rts", k.Port)
	case mode == DirKernel && kind == "pty":
		v.errorf(at.Of(modeKey), path+"."+modeKey, "%q is a pseudo-terminal, which has no kernel RS-485 mode; use direction: auto", k.Port)
	case mode == DirRTS && kind == "pty":
		v.errorf(at.Of(modeKey), path+"."+modeKey, "%q is a pseudo-terminal, which has no RTS line; use direction: auto", k.Port)
	case mode == DirRTS && kind == "usb":
		v.warnf(at.Of(modeKey), path+"."+modeKey, "%q is a USB adapter: RTS set over USB lands a millisecond or more after the last stop bit, late for a device that answers quickly; prefer an adapter that switches by itself (direction: auto)", k.Port)
	}
	rtsMode := mode == DirKernel || mode == DirRTS
	if rtsMode && r.RTSOnSend == r.RTSAfterSend {
		v.errorf(at.Of(modeKey), path, "direction %s needs the RTS level while sending: exactly one of rts_on_send: true (RTS asserted while sending, the usual wiring) or rts_after_send: true (asserted after sending, for an inverting driver-enable); the kernel would replace neither or both with rts_on_send", mode)
	}
	for _, o := range []struct {
		key string
		set bool
	}{{"rts_on_send", r.RTSOnSend}, {"rts_after_send", r.RTSAfterSend}} {
		if key := o.key; o.set && !rtsMode {
			v.errorf(at.Of(key), path+"."+key, "applies to direction kernel and rts; direction %s does not drive RTS", mode)
		}
	}
	if r.RXDuringTX && mode != DirKernel {
		v.errorf(at.Of("rx_during_tx"), path+".rx_during_tx", "applies to direction kernel only")
	}
	for _, d := range []struct {
		key string
		us  int
	}{{"delay_rts_before_send_us", r.DelayRTSBeforeSendUs}, {"delay_rts_after_send_us", r.DelayRTSAfterSendUs}} {
		switch key, us := d.key, d.us; {
		case !at.Has(key):
		case mode == DirAuto:
			v.errorf(at.Of(key), path+"."+key, "direction auto: the adapter switches by itself, so a delay has no effect; remove it")
		case us < 0 || us > maxRS485DelayUs:
			v.errorf(at.Of(key), path+"."+key, "must be 0..%d (100 ms), got %d", maxRS485DelayUs, us)
		}
	}
	switch {
	case mode == DirGPIO && r.GPIO == nil:
		v.errorf(at.Of(modeKey), path, "direction gpio needs gpio: {bus: <a gpio bus>, line: <the driver-enable line's name>}")
	case mode != DirGPIO && r.GPIO != nil:
		v.errorf(at.Of("gpio"), path+".gpio", "applies to direction gpio only")
	case r.GPIO != nil:
		v.rs485Line(b, r.GPIO, path+".gpio")
	}
}

// rs485Line checks the direction line of direction gpio and claims it, so no
// capability binds it too.
func (v *validator) rs485Line(b *Bus, l *RS485Line, path string) {
	gb := v.m.Buses[l.Bus]
	switch {
	case l.Bus == "":
		return // missing bus: already reported
	case gb == nil:
		v.errorf(l.At.Of("bus"), path+".bus", "unknown bus %q", l.Bus)
		return
	case gb.GPIO == nil:
		v.errorf(l.At.Of("bus"), path+".bus", "bus %q is %s, not gpio", l.Bus, gb.Type)
		return
	case gb.Simulated && !b.Simulated:
		v.errorf(l.At.Of("bus"), path+".bus", "bus %q is simulated, so it cannot switch the real transceiver of bus %q", l.Bus, b.Name)
	}
	v.usedBus[l.Bus] = true
	switch {
	case l.At.Has("line") == l.At.Has("offset"):
		v.errorf(l.At.Self, path, "give the line by name (line, preferred) or by offset, exactly one")
		return
	case l.Offset < 0:
		v.errorf(l.At.Of("offset"), path+".offset", "must not be negative, got %d", l.Offset)
		return
	}
	v.dirLines[gpioLineKey(l.Bus, l.Line, l.At.Has("offset"), l.Offset)] = "buses." + b.Name + ".rs485"
}

// gpioLineKey identifies a line on a bus as the manifest names it.
func gpioLineKey(bus, line string, hasOffset bool, offset int) string {
	if hasOffset {
		return bus + "\x00#" + strconv.Itoa(offset)
	}
	return bus + "\x00" + line
}

func (v *validator) capabilities() {
	tools := map[string]*Capability{}
	doNames := map[string]*Capability{}
	for _, c := range v.m.Capabilities {
		if c.Kind == KindDo {
			doNames[c.Name] = c
		}
	}
	gpioLines := map[string]*Capability{}
	for i, c := range v.m.Capabilities {
		path := fmt.Sprintf("capabilities[%d]", i)
		v.capability(path, c)
		if nameGrammar.MatchString(c.Name) && (c.Kind == KindRead || c.Kind == KindDo) {
			tool := c.ToolName()
			if first, dup := tools[tool]; dup {
				v.errorf(c.At.Of("name"), path+".name", "tool %s is already defined by the capability at line %d; a name may appear once as read and once as do", tool, first.At.Self.Line)
			} else {
				tools[tool] = c
			}
		}
		v.binding(path, c)
		v.encoding(path, c)
		v.simulation(path, c, doNames)
		v.interlocks(path, c)
		if g := c.Binding.GPIO; g != nil {
			key := gpioLineKey(c.Binding.Bus, g.Line, g.HasOffset, g.Offset)
			if owner, dir := v.dirLines[key]; dir {
				v.errorf(c.Binding.At.Self, path+".binding", "the GPIO line is the RS-485 direction line of %s; a line can be requested only once", owner)
			} else if first, dup := gpioLines[key]; dup {
				v.errorf(c.Binding.At.Self, path+".binding", "the GPIO line is already bound by %s (line %d); a line can be requested only once", first.ToolName(), first.At.Self.Line)
			} else {
				gpioLines[key] = c
			}
		}
	}
	v.writeOverlaps()
	v.density()
}

func (v *validator) capability(path string, c *Capability) {
	at := c.At
	if c.Name != "" {
		switch {
		case !nameGrammar.MatchString(c.Name):
			v.errorf(at.Of("name"), path+".name", "%q must be lowercase letters, digits and _ and start with a letter", c.Name)
		case len(c.ToolName()) > maxToolName:
			v.errorf(at.Of("name"), path+".name", "tool name %s is %d characters; the limit is %d", c.ToolName(), len(c.ToolName()), maxToolName)
		case slices.Contains(genericNames, c.Name):
			v.warnf(at.Of("name"), path+".name", "%q is a generic name; an agent choosing among tools needs a specific one (e.g. air_temperature)", c.Name)
		}
	}
	kindOK := c.Kind == KindRead || c.Kind == KindDo
	if c.Kind != "" && !kindOK {
		v.errorf(at.Of("kind"), path+".kind", "must be read, do, start or sequence, got %q", c.Kind)
	}
	if at.Has("description") && strings.TrimSpace(c.Description) == "" {
		v.errorf(at.Of("description"), path+".description", "must not be empty; agents choose tools by their descriptions")
	}
	if c.Kind == KindRead {
		if w := mutationWord.FindString(c.Description); w != "" {
			v.warnf(at.Of("description"), path+".description", "a read_ description should not sound like a change (%q); the proMCP linter flags it", w)
		}
	}
	typeOK := true
	switch c.DataType {
	case TypeFloat, TypeInt, TypeBool, TypeString, TypeEnum:
	case "":
		typeOK = false
	default:
		typeOK = false
		v.errorf(at.Of("data_type"), path+".data_type", "must be float, int, bool, string or enum, got %q", c.DataType)
	}
	if at.Has("semantic_tags") && len(c.SemanticTags) == 0 {
		v.errorf(at.Of("semantic_tags"), path+".semantic_tags", "needs at least one tag; can_do finds capabilities by them")
	}
	seenTag := map[string]bool{}
	for j, t := range c.SemanticTags {
		switch {
		case !tagGrammar.MatchString(t):
			v.errorf(at.Of("semantic_tags"), fmt.Sprintf("%s.semantic_tags[%d]", path, j), "tag %q must be lowercase letters, digits, _ and - and start with a letter", t)
		case seenTag[t]:
			v.warnf(at.Of("semantic_tags"), fmt.Sprintf("%s.semantic_tags[%d]", path, j), "tag %q is listed twice", t)
		}
		seenTag[t] = true
	}
	if typeOK && c.IsNumeric() && c.Unit == "" {
		v.warnf(at.Self, path, "a numeric capability without a unit; proMCP requires one for physical quantities")
	}
	v.rangeAndValues(path, c, typeOK)
	// Parsed only to name it: nothing samples at a rate, and a key that
	// does nothing must not look as if it did (issue 13).
	if at.Has("sample_rate_hz") {
		v.errorf(at.Of("sample_rate_hz"), path+".sample_rate_hz", "is not implemented; bound how often the bus is read with cache_ttl_ms (and cacheable) or, for subscriptions, min_update_interval_ms")
	}
	if c.RequiresPermission != "" && !ValidRole(c.RequiresPermission) {
		v.errorf(at.Of("requires_permission"), path+".requires_permission", "unknown role %q; expected one of %s", c.RequiresPermission, RoleNames())
	}
	if c.TimeoutMs != nil && *c.TimeoutMs < 1 {
		v.errorf(at.Of("timeout_ms"), path+".timeout_ms", "must be at least 1, got %d", *c.TimeoutMs)
	}
	if c.CacheTTLMs != nil && *c.CacheTTLMs < 0 {
		v.errorf(at.Of("cache_ttl_ms"), path+".cache_ttl_ms", "must not be negative, got %d", *c.CacheTTLMs)
	}
	if c.Cacheable != nil && !*c.Cacheable && c.CacheTTLMs != nil {
		v.errorf(at.Of("cache_ttl_ms"), path+".cache_ttl_ms", "the capability is not cacheable (cacheable: false), so a cache TTL would be ignored")
	}
	if d := c.Deadband; d != nil {
		switch {
		case typeOK && !c.IsNumeric():
			v.errorf(at.Of("deadband"), path+".deadband", "a deadband only applies to float and int capabilities, not %s: every change of another type is notified", c.DataType)
		case *d < 0 || math.IsNaN(*d) || math.IsInf(*d, 0):
			v.errorf(at.Of("deadband"), path+".deadband", "must be a number >= 0 (in the capability's unit), got %g", *d)
		}
	}
	if c.Streamable && len(c.StreamTool()) > maxToolName {
		v.errorf(at.Of("streamable"), path+".streamable", "tool name %s is %d characters; the limit is %d", c.StreamTool(), len(c.StreamTool()), maxToolName)
	}
	if n := c.MinUpdateIntervalMs; n != nil && *n < MinUpdateIntervalFloorMs {
		v.errorf(at.Of("min_update_interval_ms"), path+".min_update_interval_ms", "must be at least %d, got %d", MinUpdateIntervalFloorMs, *n)
	}
	if c.CooldownMs < 0 {
		v.errorf(at.Of("cooldown_ms"), path+".cooldown_ms", "must not be negative, got %d", c.CooldownMs)
	}
	if c.RequiresQuorum && !at.Has("quorum_size") {
		v.errorf(at.Of("requires_quorum"), path+".requires_quorum", "requires_quorum needs quorum_size (the number of nodes, this one included)")
	}
	if at.Has("quorum_size") {
		if !c.RequiresQuorum {
			v.errorf(at.Of("quorum_size"), path+".quorum_size", "quorum_size only applies with requires_quorum: true")
		} else if c.QuorumSize < 1 {
			v.errorf(at.Of("quorum_size"), path+".quorum_size", "must be at least 1, got %d", c.QuorumSize)
		}
	}
	if at.Has("group") && !nameGrammar.MatchString(c.Group) {
		v.errorf(at.Of("group"), path+".group", "%q must be lowercase letters, digits and _ and start with a letter", c.Group)
	}
	for j, s := range c.SideEffects {
		if strings.TrimSpace(s) == "" {
			v.errorf(at.Of("side_effects"), fmt.Sprintf("%s.side_effects[%d]", path, j), "must not be empty")
		}
	}
	switch c.Kind {
	case KindRead:
		for _, key := range []string{"side_effects", "rate_limit", "cooldown_ms", "requires_quorum", "quorum_size", "safe_value", "compensable"} {
			if at.Has(key) {
				msg := "only applies to do capabilities"
				if key == "side_effects" {
					msg = "a read capability must not have side effects (proMCP); if reading changes something, make it a do capability"
				}
				v.errorf(at.Of(key), path+"."+key, "%s", msg)
			}
		}
	case KindDo:
		for _, key := range []string{"cacheable", "cache_ttl_ms", "deadband", "min_update_interval_ms", "streamable"} {
			if at.Has(key) {
				v.errorf(at.Of(key), path+"."+key, "only applies to read capabilities")
			}
		}
		if len(c.SideEffects) == 0 {
			v.warnf(at.Self, path, "do_%s declares no side_effects; say what acting changes in the world", c.Name)
		}
	}
}

func (v *validator) rangeAndValues(path string, c *Capability, typeOK bool) {
	at := c.At
	if r := c.Range; r != nil {
		switch {
		case typeOK && !c.IsNumeric():
			v.errorf(at.Of("range"), path+".range", "range only applies to float and int capabilities, not %s", c.DataType)
		case r.Min == nil && r.Max == nil:
			v.errorf(at.Of("range"), path+".range", "give min, max or both")
		case r.Min != nil && r.Max != nil && *r.Min > *r.Max:
			v.errorf(r.At.Of("min"), path+".range.min", "min %g is greater than max %g", *r.Min, *r.Max)
		}
	}
	if typeOK && c.Kind == KindDo && c.IsNumeric() && (c.Range == nil || c.Range.Min == nil || c.Range.Max == nil) {
		key := "range"
		if !at.Has("range") {
			key = "data_type"
		}
		v.errorf(at.Of(key), path+".range", "a numeric do capability needs a range with both min and max: it is the hard limit nothing is written past")
	}
	if c.Precision != nil {
		if typeOK && !c.IsNumeric() {
			v.errorf(at.Of("precision"), path+".precision", "precision only applies to float and int capabilities")
		} else if *c.Precision < 0 || *c.Precision > 15 {
			v.errorf(at.Of("precision"), path+".precision", "must be 0..15 decimal places, got %d", *c.Precision)
		}
	}
	if c.DataType == TypeEnum {
		if len(c.EnumValues) == 0 {
			key := "enum_values"
			if !at.Has(key) {
				key = "data_type"
			}
			v.errorf(at.Of(key), path+".enum_values", "an enum capability needs enum_values")
		}
		seen := map[string]bool{}
		for j, e := range c.EnumValues {
			if e == "" || seen[e] {
				v.errorf(at.Of("enum_values"), fmt.Sprintf("%s.enum_values[%d]", path, j), "enum values must be non-empty and unique, got %q", e)
			}
			seen[e] = true
		}
	} else if typeOK && at.Has("enum_values") {
		v.errorf(at.Of("enum_values"), path+".enum_values", "enum_values only applies to data_type enum")
	}
	if c.SafeValue != nil && c.Kind == KindDo && typeOK {
		if msg := c.checkValue(c.SafeValue); msg != "" {
			v.errorf(at.Of("safe_value"), path+".safe_value", "%s", msg)
		}
	}
}

// checkValue says what is wrong with x as a value of the capability ("" when nothing).
func (c *Capability) checkValue(x any) string {
	switch c.DataType {
	case TypeBool:
		if _, ok := x.(bool); !ok {
			return fmt.Sprintf("must be true or false, got %v", x)
		}
	case TypeString:
		if _, ok := x.(string); !ok {
			return fmt.Sprintf("must be a string, got %v", x)
		}
	case TypeEnum:
		s, ok := x.(string)
		if len(c.EnumValues) > 0 && (!ok || !slices.Contains(c.EnumValues, s)) {
			return fmt.Sprintf("must be one of enum_values (%s), got %v", strings.Join(c.EnumValues, ", "), x)
		}
	case TypeFloat, TypeInt:
		f, ok := number(x)
		if !ok {
			return fmt.Sprintf("must be a number, got %v", x)
		}
		if math.IsNaN(f) || math.IsInf(f, 0) { // NaN compares false with any bound
			return fmt.Sprintf("must be a finite number, got %v", x)
		}
		if c.DataType == TypeInt && f != math.Trunc(f) {
			return fmt.Sprintf("must be a whole number, got %v", x)
		}
		if r := c.Range; r != nil && ((r.Min != nil && f < *r.Min) || (r.Max != nil && f > *r.Max)) {
			return fmt.Sprintf("%v is outside the range %s", x, r)
		}
	}
	return ""
}

func number(x any) (float64, bool) {
	switch n := x.(type) {
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case uint64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// String renders a range as min..max, with an open end where a bound is missing.
func (r *Range) String() string {
	if r == nil {
		return ""
	}
	bound := func(b *float64) string {
		if b == nil {
			return ""
		}
		return strconv.FormatFloat(*b, 'g', -1, 64)
	}
	return bound(r.Min) + ".." + bound(r.Max)
}

func (v *validator) binding(path string, c *Capability) {
	b := &c.Binding
	bp := path + ".binding"
	if b.Bus == "" {
		return // missing: already reported
	}
	bus := v.m.Buses[b.Bus]
	if bus == nil {
		known := slices.Sorted(maps.Keys(v.m.Buses))
		if len(known) == 0 {
			v.errorf(b.At.Of("bus"), bp+".bus", "no bus named %q: the manifest declares no buses (add a buses section)", b.Bus)
		} else {
			v.errorf(b.At.Of("bus"), bp+".bus", "no bus named %q%s", b.Bus, strictyaml.SuggestAmong(b.Bus, known, "buses"))
		}
		return
	}
	v.usedBus[b.Bus] = true
	if kindOf(bus.Type) == "" {
		return // the bus's type is wrong: already reported
	}
	b.resolve(v.d, bp, bus, c)
	if g := b.GPIO; g != nil && g.SafeLevel != nil {
		if safe, ok := c.SafeValue.(bool); ok && (safe != g.ActiveLow) != *g.SafeLevel {
			v.errorf(c.At.Of("safe_value"), path+".safe_value", "safe_value %v disagrees with the binding's safe_level %s (active_low %v)", safe, level(*g.SafeLevel), g.ActiveLow)
		}
	}
}

// encoding checks the capability against what its binding can carry
// (Encoding). A do range is the write limit, so a bound the binding cannot
// hold is an error (a value inside the range would be refused by the codec); a
// bound between two values it holds is a warning naming the effective bound.
// A read range is only a plausibility limit: one wider than the binding is a
// warning, as it usually means a wrong signed, scale or offset.
func (v *validator) encoding(path string, c *Capability) {
	enc, ok := c.encoding()
	if !ok {
		return
	}
	if c.DataType == TypeEnum && enc.Step > 0 && float64(len(c.EnumValues)-1) > enc.Max {
		v.errorf(c.At.Of("enum_values"), path+".enum_values", "%d enum values need indexes up to %d, but the binding (%s) does not hold them", len(c.EnumValues), len(c.EnumValues)-1, enc)
	}
	if !c.IsNumeric() {
		return
	}
	b := &c.Binding
	if c.DataType == TypeInt && enc.Step > 0 {
		key, x := "scale", enc.scaleF
		if x == math.Trunc(x) {
			key, x = "offset", enc.offsetF
		}
		if x != math.Trunc(x) {
			v.errorf(b.At.Of(key), path+".binding."+key, "%s %g makes readings that are not whole numbers (%s in steps of %g), and data_type int would round them; use data_type float (with precision), or a whole-number scale and offset", key, x, enc, enc.Step)
		}
	}
	if x, isNum := number(c.SafeValue); isNum && c.Kind == KindDo && enc.Step > 0 {
		if q, fits := enc.Quantize(x); fits && q != x {
			v.warnf(c.At.Of("safe_value"), path+".safe_value", "%g is not a value the binding holds (%s in steps of %g); it is written as %g", x, enc, enc.Step, q)
		}
	}
	r := c.Range
	if r == nil {
		return
	}
	report := v.warnf
	if c.Kind == KindDo {
		report = v.errorf
	}
	beyond := false
	if r.Min != nil && *r.Min < enc.Min {
		report(r.At.Of("min"), path+".range.min", "min %g is below what the binding can carry (%s)", *r.Min, enc)
		beyond = true
	}
	if r.Max != nil && *r.Max > enc.Max {
		report(r.At.Of("max"), path+".range.max", "max %g is above what the binding can carry (%s)", *r.Max, enc)
		beyond = true
	}
	if beyond || c.Kind != KindDo || enc.Step == 0 || r.Min == nil || r.Max == nil || *r.Min > *r.Max {
		return
	}
	lo, hi, some := enc.Within(*r.Min, *r.Max)
	if !some {
		v.errorf(c.At.Of("range"), path+".range", "the binding holds no value in %s (%s in steps of %g), so nothing could be written", r, enc, enc.Step)
		return
	}
	if lo != *r.Min {
		v.warnf(r.At.Of("min"), path+".range.min", "min %g is not a value the binding holds (%s in steps of %g); the least value that can be written is %g", *r.Min, enc, enc.Step, lo)
	}
	if hi != *r.Max {
		v.warnf(r.At.Of("max"), path+".range.max", "max %g is not a value the binding holds (%s in steps of %g); the greatest value that can be written is %g", *r.Max, enc, enc.Step, hi)
	}
}

func level(high bool) string {
	if high {
		return "high"
	}
	return "low"
}

func (v *validator) simulation(path string, c *Capability, doNames map[string]*Capability) {
	s := c.Simulation
	if s == nil {
		return
	}
	sp := path + ".simulation"
	if bus := v.m.Buses[c.Binding.Bus]; bus != nil && !bus.Simulated {
		v.errorf(c.At.Of("simulation"), sp, "bus %q is not simulated (simulated: true), so this simulation would be ignored", bus.Name)
	}
	numeric := c.IsNumeric()
	if s.Initial != nil {
		if msg := c.checkValue(s.Initial); msg != "" {
			v.errorf(s.At.Of("initial"), sp+".initial", "%s", msg)
		}
	}
	if s.Noise < 0 {
		v.errorf(s.At.Of("noise"), sp+".noise", "must not be negative, got %g", s.Noise)
	}
	v.rate01(s.At, sp, "implausible_rate", s.Implausible)
	if s.Implausible > 0 && (c.Range == nil || (c.Range.Min == nil && c.Range.Max == nil)) {
		v.errorf(s.At.Of("implausible_rate"), sp+".implausible_rate", "implausible values lie outside the range, so the capability needs one")
	}
	for _, key := range []string{"noise", "waveform", "implausible_rate"} {
		if !s.At.Has(key) {
			continue
		}
		if c.DataType != "" && !numeric {
			v.errorf(s.At.Of(key), sp+"."+key, "only applies to float and int capabilities")
		} else if c.Kind == KindDo {
			v.errorf(s.At.Of(key), sp+"."+key, "only applies to read capabilities; a do point holds what was written")
		}
	}
	if w := s.Wave; w != nil {
		switch w.Shape {
		case "sine", "triangle", "square", "sawtooth", "":
		default:
			v.errorf(w.At.Of("shape"), sp+".waveform.shape", "must be sine, triangle, square or sawtooth, got %q", w.Shape)
		}
		if w.Amplitude < 0 {
			v.errorf(w.At.Of("amplitude"), sp+".waveform.amplitude", "must not be negative, got %g", w.Amplitude)
		}
		if w.At.Has("period_s") && w.PeriodS <= 0 {
			v.errorf(w.At.Of("period_s"), sp+".waveform.period_s", "must be positive, got %g", w.PeriodS)
		}
	}
	if s.Follows != "" {
		switch {
		case c.Kind == KindDo:
			v.errorf(s.At.Of("follows"), sp+".follows", "only a read capability can follow a do capability")
		case doNames[s.Follows] == nil:
			v.errorf(s.At.Of("follows"), sp+".follows", "no do capability named %q%s", s.Follows, strictyaml.SuggestAmong(s.Follows, slices.Sorted(maps.Keys(doNames)), "do capabilities"))
		}
	}
}

// density warns where the proMCP linter would: too many tools on one endpoint.
// Capabilities with the same group share an endpoint, and each endpoint has a can_do.
func (v *validator) density() {
	type endpoint struct {
		tools, do int
		first     *Capability
	}
	eps := map[string]*endpoint{}
	var order []string
	for _, c := range v.m.Capabilities {
		e := eps[c.Group]
		if e == nil {
			e = &endpoint{first: c}
			eps[c.Group] = e
			order = append(order, c.Group)
		}
		e.tools++
		if c.Kind == KindDo {
			e.do++
		}
	}
	for _, o := range v.m.Operations {
		e := eps[o.Group]
		if e == nil {
			e = &endpoint{}
			eps[o.Group] = e
			order = append(order, o.Group)
		}
		for _, t := range o.ToolNames() {
			e.tools++
			if strings.HasPrefix(t, "do_") {
				e.do++
			}
		}
	}
	for _, g := range order {
		e := eps[g]
		name := "the device's endpoint"
		if g != "" {
			name = fmt.Sprintf("group %q", g)
		}
		if e.tools+1 > maxToolsPerEndpoint {
			v.warnf(v.m.At.Of("capabilities"), "capabilities", "%s has %d tools with can_do (more than %d); split capabilities into groups", name, e.tools+1, maxToolsPerEndpoint)
		}
		if e.do > maxDoPerEndpoint {
			v.warnf(v.m.At.Of("capabilities"), "capabilities", "%s has %d do_ tools (more than %d); split capabilities into groups", name, e.do, maxDoPerEndpoint)
		}
	}
	if v.m.Profile == "lite" {
		for _, c := range v.m.Capabilities {
			if c.Kind == KindDo {
				v.warnf(c.At.Of("kind"), "profile", "the lite profile serves no do_ tools; %s will not be exposed", c.ToolName())
			}
		}
	}
}

// safeState checks the safe_state section: a dead man needs a positive
// timeout and something to drive to a safe value, or it would silently do nothing.
func (v *validator) safeState(m *Manifest) {
	s := m.SafeState
	if s.At.Has("dead_man_timeout_ms") && s.DeadManTimeoutMs <= 0 {
		v.errorf(s.At.Of("dead_man_timeout_ms"), "safe_state.dead_man_timeout_ms", "must be a positive number of milliseconds, got %d", s.DeadManTimeoutMs)
	}
	for _, c := range m.Capabilities {
		if c.Kind == KindDo && (c.SafeValue != nil || c.Binding.GPIO != nil && c.Binding.GPIO.SafeLevel != nil) {
			return
		}
	}
	v.errorf(s.At.Self, "safe_state", "no do capability declares a safe_value (or a GPIO safe_level), so the dead man would have nothing to apply")
}
