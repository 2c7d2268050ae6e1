package manifest

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/physmcp/physmcpd/internal/strictyaml"
)

const (
	greenhouse = "../examples/physmcp.manifest.yml"
	pumpSkid   = "../examples/pump-skid/physmcp.manifest.yml"
	roadmapEx  = "../examples/roadmap/physmcp.manifest.yml"
)

func readFile(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// edit is one change to a known-good file and the finding it must cause.
type edit struct {
	name     string
	base     string // file to start from
	old, new string // old must occur exactly once in base ("" appends new)
	at       string // the finding stands where this text first occurs in or after new
	msg      string // a part of the finding's message
	warning  bool
}

// apply returns the edited text and the expected position of the finding.
func (e edit) apply(t *testing.T) (string, strictyaml.Pos) {
	t.Helper()
	text := readFile(t, e.base)
	start := len(text)
	if e.old == "" {
		text += e.new
	} else {
		if n := strings.Count(text, e.old); n != 1 {
			t.Fatalf("%q occurs %d times in %s, want once", e.old, n, e.base)
		}
		start = strings.Index(text, e.old)
		text = text[:start] + e.new + text[start+len(e.old):]
	}
	off := markerOffset(t, text, start, e.at)
	line := strings.Count(text[:off], "\n") + 1
	col := utf8.RuneCountInString(text[strings.LastIndex(text[:off], "\n")+1:off]) + 1
	return text, strictyaml.Pos{File: "m.yml", Line: line, Col: col}
}

// markerOffset finds at in text: first after start, else (uniquely) anywhere.
// A "^" in at marks the exact spot within it ("width=^2").
func markerOffset(t *testing.T, text string, start int, at string) int {
	t.Helper()
	pre, post, hasCaret := strings.Cut(at, "^")
	if !hasCaret {
		pre, post = "", at
	}
	marker := pre + post
	if i := strings.Index(text[start:], marker); i >= 0 {
		return start + i + len(pre)
	}
	if n := strings.Count(text, marker); n != 1 {
		t.Fatalf("marker %q occurs %d times, want once", marker, n)
	}
	return strings.Index(text, marker) + len(pre)
}

func checkFinding(t *testing.T, diags strictyaml.Diags, want strictyaml.Pos, msg string, warning bool) {
	t.Helper()
	sev := strictyaml.Error
	if warning {
		sev = strictyaml.Warning
	}
	for _, d := range diags {
		if d.Pos == want && d.Severity == sev && strings.Contains(d.Msg, msg) {
			return
		}
	}
	t.Errorf("want a finding at %s containing %q; got:\n%s", want, msg, diags)
}

func TestExamplesAreValid(t *testing.T) {
	for _, path := range []string{greenhouse, pumpSkid, roadmapEx} {
		m, diags := Load(path)
		if m == nil {
			t.Fatalf("%s: %s", path, diags)
		}
		if len(diags) != 0 {
			t.Errorf("%s: want no findings, got:\n%s", path, diags)
		}
	}
}

func TestGreenhouseNormalised(t *testing.T) {
	m, diags := Load(greenhouse)
	if m == nil {
		t.Fatal(diags)
	}
	if m.Device.ID != "greenhouse_controller_01" || len(m.Capabilities) != 7 {
		t.Fatalf("device %q with %d capabilities", m.Device.ID, len(m.Capabilities))
	}
	for _, name := range []string{"i2c1", "gpio", "rs485"} {
		b := m.Bus(name)
		if b == nil || b.Name != name || !b.Simulated {
			t.Fatalf("bus %s: %+v", name, b)
		}
	}
	if rtu := m.Bus("rs485").ModbusRTU; rtu.DataBits != 8 || rtu.RS485.Mode() != DirAuto {
		t.Errorf("rs485 defaults: %+v", rtu)
	}
	i2c := m.Tool("read_air_temperature").Binding
	want := I2CBinding{Address: 0x48, Register: 0, Width: 2, ByteOrder: BigEndian, Signed: true, Shift: 4, Scale: 0.0625}
	if i2c.Type != BusI2C || i2c.I2C == nil || *i2c.I2C != want || i2c.Short == "" {
		t.Errorf("air_temperature binding: %+v %+v", i2c, i2c.I2C)
	}
	fan := m.Tool("do_vent_fan").Binding.GPIO
	if fan == nil || fan.Line != "GPIO17" || fan.Direction != DirOutput || fan.Bias != "as-is" || fan.SafeLevel == nil || *fan.SafeLevel {
		t.Errorf("vent_fan binding: %+v", fan)
	}
	door := m.Tool("read_door_closed").Binding.GPIO
	if door == nil || door.Direction != DirInput || !door.ActiveLow || door.Bias != "pull-up" || door.SafeLevel != nil {
		t.Errorf("door_closed binding: %+v", door)
	}
	// The short and the structured form of the same register normalise to the same binding.
	do, read := m.Tool("do_heater_setpoint").Binding, m.Tool("read_heater_setpoint").Binding
	if do.Modbus == nil || read.Modbus == nil || *do.Modbus != *read.Modbus {
		t.Errorf("setpoint bindings differ: %+v vs %+v", do.Modbus, read.Modbus)
	}
	if got := *do.Modbus; got != (ModbusBinding{Unit: 1, Table: TableHolding, Address: 0, DataType: MBFloat32, ByteOrder: BigEndian, WordOrder: BigEndian, Scale: 1}) {
		t.Errorf("setpoint binding: %+v", got)
	}
	if e := m.Tool("read_heater_energy").Binding.Modbus; e.Scale != 0.01 || e.DataType != MBUint32 || e.Table != TableInput || e.Address != 10 {
		t.Errorf("energy binding: %+v", e)
	}
	if c := m.Tool("do_heater_setpoint"); c.RateLimit == nil || c.RateLimit.Count != 6 || c.Cooldown().Seconds() != 10 {
		t.Errorf("setpoint limits: %+v", c)
	}
}

func TestModicon(t *testing.T) {
	for _, tc := range []struct {
		ref   int
		table ModbusTable
		addr  int
		ok    bool
	}{
		{1, TableCoil, 0, true}, {9999, TableCoil, 9998, true}, {10001, TableDiscreteInput, 0, true},
		{30001, TableInput, 0, true}, {40001, TableHolding, 0, true}, {49999, TableHolding, 9998, true},
		{100001, TableDiscreteInput, 0, true}, {365536, TableInput, 65535, true}, {400001, TableHolding, 0, true},
		{465536, TableHolding, 65535, true}, {0, "", 0, false}, {20001, "", 0, false}, {50001, "", 0, false},
		{465537, "", 0, false}, {10000, "", 0, false},
	} {
		table, addr, ok := modicon(tc.ref)
		if table != tc.table || addr != tc.addr || ok != tc.ok {
			t.Errorf("modicon(%d) = %s %d %v, want %s %d %v", tc.ref, table, addr, ok, tc.table, tc.addr, tc.ok)
		}
	}
}

func TestShortFormsNormalise(t *testing.T) {
	text := readFile(t, pumpSkid)
	m, diags := Parse("m.yml", []byte(text))
	if m == nil {
		t.Fatal(diags)
	}
	run := m.Tool("do_pump_run").Binding.Modbus
	if run == nil || run.Table != TableCoil || run.Address != 0 || run.DataType != MBBool || run.Unit != 1 {
		t.Errorf("pump_run (unit=1:reg=00001): %+v", run)
	}
	speed := m.Tool("read_pump_speed").Binding.Modbus
	if speed == nil || speed.Table != TableHolding || speed.Address != 100 || speed.ByteOrder != BigEndian || speed.Scale != 0.1 {
		t.Errorf("pump_speed (unit=1:reg=40101): %+v", speed)
	}
	if p := m.Tool("read_discharge_pressure").Binding.Modbus; p.ByteOrder != LittleEndian || p.WordOrder != BigEndian {
		t.Errorf("discharge_pressure orders: %+v", p)
	}
	// The spec's GPIO example, with the safe level an output needs.
	gpio := strings.Replace(readFile(t, greenhouse), "      line: GPIO17\n      safe_level: low", `      address: "pin=14:mode=digital:safe_level=low"`, 1)
	m, diags = Parse("m.yml", []byte(gpio))
	if m == nil {
		t.Fatal(diags)
	}
	if g := m.Tool("do_vent_fan").Binding.GPIO; !g.HasOffset || g.Offset != 14 || g.Line != "" || *g.SafeLevel {
		t.Errorf("pin=14: %+v", g)
	}
	// The spec's Modbus example names no data type: read as uint16, with a warning.
	mb := strings.Replace(readFile(t, greenhouse), `"slave=1:reg=40001:type=holding:dtype=float32:byte_order=big:word_order=big"`, `"slave=1:reg=40001:type=holding"`, 1)
	m, diags = Parse("m.yml", []byte(mb))
	if m == nil {
		t.Fatal(diags)
	}
	if b := m.Tool("read_heater_setpoint").Binding.Modbus; b.Table != TableHolding || b.Address != 0 || b.DataType != MBUint16 || b.Unit != 1 {
		t.Errorf("slave=1:reg=40001:type=holding: %+v", b)
	}
	if w := diags.Warnings().String(); !strings.Contains(w, "read as uint16") {
		t.Errorf("no warning about the assumed data type:\n%s", diags)
	}
}

// speedRange is do_pump_speed's binding scale, type and range in the pump-skid example.
const speedRange = "      scale: 0.1\n    data_type: float\n    unit: \"%\"\n    range: {min: 0, max: 100}"

// Each error class, with the line and column it must be reported at.
var manifestEdits = []edit{
	// Decoding.
	{name: "yaml syntax", base: greenhouse, old: "  i2c1:\n", new: "  i2c1: [\n", at: "  i2c1: [", msg: "YAML syntax error"},
	{name: "unknown top-level key", base: greenhouse, old: "audit:", new: "audits:", at: "audits", msg: `unknown key "audits" (did you mean "audit"?)`},
	{name: "unknown capability key", base: greenhouse, old: "    precision: 2\n", new: "    precission: 2\n", at: "precission", msg: `did you mean "precision"`},
	{name: "key given twice", base: greenhouse, old: "    precision: 2\n", new: "    precision: 2\n    precision: 3\n", at: "precision: 3", msg: "given twice"},
	{name: "wrong type", base: greenhouse, old: "{min: -40, max: 125}", new: "{min: -40, max: hot}", at: "hot", msg: `expected a number, got "hot"`},
	{name: "wrong type list", base: greenhouse, old: "semantic_tags: [door, contact, security]", new: "semantic_tags: door", at: "door", msg: "expected a list"},
	{name: "missing required key", base: greenhouse, old: "    description: Whether the greenhouse door is closed (true) or open (false).\n", new: "", at: "name: door_closed", msg: `missing required key "description"`},
	{name: "empty list item", base: greenhouse, old: "capabilities:\n", new: "capabilities:\n  -\n", at: "\n  - name: air_temperature", msg: "list item is empty"},
	{name: "leading zero", base: greenhouse, old: "      address: 10\n", new: "      address: 010\n", at: "010", msg: "leading zero"},
	{name: "yes is not a bool", base: greenhouse, old: "      active_low: true", new: "      active_low: yes", at: "yes", msg: "expected true or false"},
	{name: "two documents", base: greenhouse, new: "---\nphysmcp_version: \"0.1\"\n", at: "---", msg: "more than one YAML document"},
	{name: "unsupported version", base: greenhouse, old: `physmcp_version: "0.1"`, new: `physmcp_version: "2.0"`, at: `"2.0"`, msg: "unsupported version"},
	{name: "bad profile", base: greenhouse, old: "audit:", new: "profile: tiny\naudit:", at: "tiny", msg: "must be full, lite, proxy or aggregator"},
	{name: "remote sink type", base: greenhouse, old: "  retention_days: 30", new: "  retention_days: 30\n  remote_sink: {type: kafka, address: \"kafka://h:9092\"}", at: "kafka,", msg: `audit.remote_sink.type: type must be syslog, http or mqtt, got "kafka"`},
	{name: "remote sink scheme", base: greenhouse, old: "  retention_days: 30", new: "  retention_days: 30\n  remote_sink: {type: syslog, address: \"ftp://h:514\"}", at: "\"ftp:", msg: "a syslog sink's scheme is one of syslog+tcp, syslog+udp"},
	{name: "remote sink mqtt topic", base: greenhouse, old: "  retention_days: 30", new: "  retention_days: 30\n  remote_sink: {type: mqtt, address: \"mqtt://broker:1883\"}", at: "\"mqtt:", msg: "names no topic"},
	{name: "remote sink without a trail", base: greenhouse, old: "  enabled: true\n  retention_days: 30", new: "  enabled: false\n  remote_sink: {type: http, address: \"https://logs.example/audit\"}", at: "{type: http", msg: "with audit.enabled false there is none"},
	{name: "mesh beyond loopback without a keyring", base: greenhouse, old: "audit:", new: "network:\n  mesh: {enabled: true, seed_peers: [hall-02]}\naudit:", at: "true", msg: "needs key_file"},
	{name: "mesh bind_address not loopback without a keyring", base: greenhouse, old: "audit:", new: "network:\n  mesh: {enabled: true, bind_address: 192.0.2.1}\naudit:", at: "192.0.2.1", msg: "needs key_file"},
	{name: "mesh heartbeat too fast", base: greenhouse, old: "audit:", new: "network:\n  mesh: {heartbeat_interval_ms: 10}\naudit:", at: "10", msg: "must be 100..60000"},
	{name: "mesh bind_port out of range", base: greenhouse, old: "audit:", new: "network:\n  mesh: {bind_port: 70000}\naudit:", at: "70000", msg: "must be a port"},
	{name: "mesh bind_address not an IP", base: greenhouse, old: "audit:", new: "network:\n  mesh: {bind_address: eth0}\naudit:", at: "eth0", msg: "must be an IP address"},
	{name: "mesh advertise_address unspecified", base: greenhouse, old: "audit:", new: "network:\n  mesh: {advertise_address: 0.0.0.0}\naudit:", at: "0.0.0.0", msg: "where no peer can reach"},
	{name: "mesh seed peer bad port", base: greenhouse, old: "audit:", new: "network:\n  mesh: {seed_peers: [\"hall:99999\"]}\naudit:", at: "[", msg: "seed_peers[0]"},
	{name: "mesh max_peers negative", base: greenhouse, old: "audit:", new: "network:\n  mesh: {max_peers: -1}\naudit:", at: "-1", msg: "must not be negative"},
	{name: "mesh empty key_file", base: greenhouse, old: "audit:", new: "network:\n  mesh: {key_file: \"\"}\naudit:", at: "\"\"", msg: "must not be empty"},
	{name: "telemetry scheme", base: greenhouse, old: "  retention_days: 30", new: "  retention_days: 30\ntelemetry:\n  mqtt: {broker: \"tcp://broker.lan\"}", at: "\"tcp:", msg: "the scheme is mqtt or mqtts"},
	{name: "telemetry password in url", base: greenhouse, old: "  retention_days: 30", new: "  retention_days: 30\ntelemetry:\n  mqtt: {broker: \"mqtt://u:secret@broker.lan\"}", at: "\"mqtt:", msg: "put it in password_file"},
	{name: "telemetry topic in url", base: greenhouse, old: "  retention_days: 30", new: "  retention_days: 30\ntelemetry:\n  mqtt: {broker: \"mqtt://broker.lan/site\"}", at: "\"mqtt:", msg: "topics come from topic_prefix"},
	{name: "telemetry qos 2", base: greenhouse, old: "  retention_days: 30", new: "  retention_days: 30\ntelemetry:\n  mqtt: {broker: \"mqtt://broker.lan\", qos: 2}", at: "2}", msg: "must be 0 or 1"},
	{name: "telemetry wildcard prefix", base: greenhouse, old: "  retention_days: 30", new: "  retention_days: 30\ntelemetry:\n  mqtt: {broker: \"mqtt://broker.lan\", topic_prefix: \"site/+\"}", at: "\"site/+\"", msg: "without wildcards"},
	{name: "telemetry password without user", base: greenhouse, old: "  retention_days: 30", new: "  retention_days: 30\ntelemetry:\n  mqtt: {broker: \"mqtt://broker.lan\", password_file: pw}", at: "pw}", msg: "a password needs a user name"},
	{name: "telemetry ca_file in clear", base: greenhouse, old: "  retention_days: 30", new: "  retention_days: 30\ntelemetry:\n  mqtt: {broker: \"mqtt://broker.lan\", ca_file: ca.pem}", at: "ca.pem}", msg: "verifies an mqtts broker"},
	{name: "telemetry without mqtt", base: greenhouse, old: "  retention_days: 30", new: "  retention_days: 30\ntelemetry: {}", at: "{}", msg: `missing required key "mqtt"`},
	// Names.
	{name: "bad device id", base: greenhouse, old: "id: greenhouse_controller_01", new: "id: Greenhouse-01", at: "Greenhouse-01", msg: "lowercase"},
	{name: "bad capability name", base: greenhouse, old: "name: door_closed", new: "name: DoorClosed", at: "DoorClosed", msg: "lowercase"},
	{name: "tool name too long", base: greenhouse, old: "name: door_closed", new: "name: door_closed_" + strings.Repeat("x", 50), at: "door_closed_", msg: "the limit is 64"},
	{name: "tool name collision", base: greenhouse, old: "name: heater_flow_temperature", new: "name: air_temperature", at: "air_temperature\n    kind: read\n    description: Temperature of the hot", msg: "read_air_temperature is already defined by the capability at line 45"},
	{name: "bad tag", base: greenhouse, old: "[door, contact, security]", new: "[door, Contact]", at: "[door", msg: `tag "Contact"`},
	{name: "empty tags", base: greenhouse, old: "[door, contact, security]", new: "[]", at: "[]", msg: "at least one tag"},
	{name: "bad bus name", base: greenhouse, old: "  i2c1:\n", new: "  I2C_1:\n    type: i2c\n    device: \"2\"\n  i2c1:\n", at: "I2C_1", msg: `bus name "I2C_1"`},
	// Capability rules.
	{name: "bad kind", base: greenhouse, old: "    kind: read\n    description: Whether", new: "    kind: watch\n    description: Whether", at: "watch", msg: "must be read, do, start or sequence"},
	{name: "bad data type", base: greenhouse, old: "    data_type: float\n    unit: kWh", new: "    data_type: double\n    unit: kWh", at: "double", msg: "must be float, int, bool, string or enum"},
	{name: "read with side effects", base: greenhouse, old: "    semantic_tags: [door, contact, security]\n", new: "    semantic_tags: [door, contact, security]\n    side_effects: [beeps]\n", at: "[beeps]", msg: "must not have side effects"},
	{name: "read with rate limit", base: greenhouse, old: "    semantic_tags: [door, contact, security]\n", new: "    semantic_tags: [door, contact, security]\n    rate_limit: 1/second\n", at: "1/second", msg: "only applies to do capabilities"},
	{name: "read with cooldown", base: greenhouse, old: "    semantic_tags: [door, contact, security]\n", new: "    semantic_tags: [door, contact, security]\n    cooldown_ms: 5\n", at: "5\n", msg: "only applies to do capabilities"},
	{name: "read with safe value", base: greenhouse, old: "    semantic_tags: [door, contact, security]\n", new: "    semantic_tags: [door, contact, security]\n    safe_value: true\n", at: "true\n", msg: "only applies to do capabilities"},
	{name: "do with cache ttl", base: greenhouse, old: "    cooldown_ms: 2000\n", new: "    cooldown_ms: 2000\n    cache_ttl_ms: 10\n", at: "10\n", msg: "only applies to read capabilities"},
	{name: "numeric do without range", base: greenhouse, old: "    range: {min: 5, max: 35}\n    precision: 1\n", new: "    precision: 1\n", at: "float\n    unit: \"°C\"\n    precision: 1", msg: "needs a range with both min and max"},
	{name: "numeric do with half range", base: greenhouse, old: "    range: {min: 5, max: 35}\n    precision: 1\n", new: "    range: {min: 5}\n    precision: 1\n", at: "{min: 5}", msg: "needs a range with both min and max"},
	{name: "min greater than max", base: greenhouse, old: "range: {min: 0, max: 90}", new: "range: {min: 95, max: 90}", at: "95", msg: "min 95 is greater than max 90"},
	{name: "range on bool", base: greenhouse, old: "    semantic_tags: [door, contact, security]\n", new: "    semantic_tags: [door, contact, security]\n    range: {min: 0, max: 1}\n", at: "{min: 0", msg: "range only applies to float and int"},
	{name: "bad rate grammar", base: greenhouse, old: "rate_limit: 6/minute", new: "rate_limit: 6 per minute", at: "6 per minute", msg: "not of the form N/second"},
	{name: "zero rate", base: greenhouse, old: "rate_limit: 6/minute", new: "rate_limit: 0/minute", at: "0/minute", msg: "at least 1"},
	{name: "bad role", base: greenhouse, old: "    requires_permission: operator\n    safe_value: false", new: "    requires_permission: root\n    safe_value: false", at: "root", msg: `unknown role "root"`},
	{name: "quorum size without quorum", base: greenhouse, old: "    cooldown_ms: 2000\n", new: "    cooldown_ms: 2000\n    quorum_size: 2\n", at: "2\n", msg: "only applies with requires_quorum"},
	{name: "quorum without size", base: greenhouse, old: "    cooldown_ms: 2000\n", new: "    cooldown_ms: 2000\n    requires_quorum: true\n", at: "true\n", msg: "needs quorum_size"},
	{name: "bus timeout zero", base: greenhouse, old: "    timeout_ms: 500\n", new: "    timeout_ms: 0\n", at: "timeout_ms: ^0", msg: "at least 1"},
	{name: "late_write_ms negative", base: pumpSkid, old: "    retries: 1\n", new: "    retries: 1\n    late_write_ms: -1\n", at: "late_write_ms: ^-1", msg: "0..600000"},
	{name: "late_write_ms too large", base: pumpSkid, old: "    retries: 1\n", new: "    retries: 1\n    late_write_ms: 600001\n", at: "late_write_ms: ^600001", msg: "0..600000"},
	{name: "late_write_ms on rtu", base: greenhouse, old: "    timeout_ms: 500\n", new: "    timeout_ms: 500\n    late_write_ms: 100\n", at: "late_write_ms", msg: `unknown key "late_write_ms"`},
	{name: "acknowledge_ms negative on rtu", base: greenhouse, old: "    timeout_ms: 500\n", new: "    timeout_ms: 500\n    acknowledge_ms: -5\n", at: "acknowledge_ms: ^-5", msg: "buses.rs485.acknowledge_ms: must be 0..600000"},
	{name: "acknowledge_ms too large on tcp", base: pumpSkid, old: "    retries: 1\n", new: "    retries: 1\n    acknowledge_ms: 600001\n", at: "acknowledge_ms: ^600001", msg: "acknowledge_ms: must be 0..600000"},
	{name: "max_gap too large", base: greenhouse, old: "    timeout_ms: 500\n", new: "    timeout_ms: 500\n    max_gap: 2001\n", at: "max_gap: ^2001", msg: "0..2000"},
	{name: "timeout zero", base: greenhouse, old: "    cache_ttl_ms: 1000\n", new: "    cache_ttl_ms: 1000\n    timeout_ms: 0\n", at: "timeout_ms: ^0", msg: "at least 1"},
	{name: "deadband on bool", base: greenhouse, old: "    semantic_tags: [door, contact, security]\n", new: "    semantic_tags: [door, contact, security]\n    deadband: 1\n", at: "1\n", msg: "a deadband only applies to float and int capabilities, not bool"},
	{name: "negative deadband", base: greenhouse, old: "    cache_ttl_ms: 1000\n", new: "    cache_ttl_ms: 1000\n    deadband: -0.5\n", at: "-0.5", msg: "must be a number >= 0"},
	{name: "update interval too short", base: greenhouse, old: "    cache_ttl_ms: 1000\n", new: "    cache_ttl_ms: 1000\n    min_update_interval_ms: 50\n", at: "50", msg: "must be at least 100, got 50"},
	{name: "sample rate not implemented", base: greenhouse, old: "    cache_ttl_ms: 1000\n", new: "    cache_ttl_ms: 1000\n    sample_rate_hz: 2\n", at: "2\n", msg: "sample_rate_hz: is not implemented; bound how often the bus is read with cache_ttl_ms"},
	{name: "do with deadband", base: greenhouse, old: "    cooldown_ms: 2000\n", new: "    cooldown_ms: 2000\n    deadband: 1\n", at: "1\n", msg: "only applies to read capabilities"},
	{name: "cache ttl without cacheable", base: greenhouse, old: "    cache_ttl_ms: 1000\n", new: "    cache_ttl_ms: 1000\n    cacheable: false\n", at: "1000", msg: "not cacheable"},
	{name: "enum without values", base: pumpSkid, old: "    enum_values: [\"off\", manual, auto, fault]\n", new: "", at: "enum\n", msg: "needs enum_values"},
	{name: "enum duplicate value", base: pumpSkid, old: "[\"off\", manual, auto, fault]", new: "[\"off\", manual, \"off\"]", at: "[\"off", msg: "unique"},
	{name: "safe value outside range", base: greenhouse, old: "safe_value: 12", new: "safe_value: 40", at: "40", msg: "outside the range 5..35"},
	{name: "safe value not a number", base: pumpSkid, old: "    requires_permission: operator\n    safe_value: 0\n", new: "    requires_permission: operator\n    safe_value: .nan\n", at: ".nan", msg: "must be a finite number, got NaN"},
	{name: "safe value wrong type", base: greenhouse, old: "safe_value: false", new: "safe_value: 0", at: "0\n", msg: "must be true or false"},
	{name: "safe value vs safe level", base: greenhouse, old: "      safe_level: low", new: "      safe_level: high", at: "false\n", msg: "disagrees with the binding's safe_level high"},
	// Buses.
	{name: "unknown bus type", base: greenhouse, old: "type: i2c\n", new: "type: spi\n", at: "spi", msg: `unknown bus type "spi"`},
	{name: "key of another bus type", base: greenhouse, old: "    device: \"1\"\n", new: "    device: \"1\"\n    baud: 9600\n", at: "baud", msg: `unknown key "baud"`},
	{name: "bad i2c device", base: greenhouse, old: "    device: \"1\"\n", new: "    device: i2c-one\n", at: "i2c-one", msg: "number N or /dev/i2c-N"},
	{name: "gpio chip and path", base: greenhouse, old: "    chip: pinctrl-bcm2711\n", new: "    chip: pinctrl-bcm2711\n    path: /dev/gpiochip0\n", at: "/dev/gpiochip0", msg: "not both"},
	{name: "bad parity", base: greenhouse, old: "parity: even", new: "parity: mark", at: "mark", msg: "none, even or odd"},
	{name: "bad stop bits", base: greenhouse, old: "stop_bits: 1", new: "stop_bits: 3", at: "3", msg: "must be 1 or 2"},
	{name: "bad data bits", base: greenhouse, old: "    baud: 9600\n", new: "    baud: 9600\n    data_bits: 5\n", at: "5\n", msg: "must be 7 or 8"},
	{name: "zero baud", base: greenhouse, old: "baud: 9600", new: "baud: 0", at: "0\n", msg: "positive baud rate"},
	{name: "tcp address", base: pumpSkid, old: "address: 127.0.0.1:1502", new: "address: 127.0.0.1", at: "127.0.0.1", msg: "must be host:port"},
	{name: "fault rate", base: pumpSkid, old: "error_rate: 0.01", new: "error_rate: 1.5", at: "1.5", msg: "within 0..1"},
	{name: "simulation on real bus", base: greenhouse, old: "    device: \"1\"\n    simulated: true\n", new: "    device: \"1\"\n    simulation: {latency_ms: 1}\n", at: "{latency_ms", msg: "not simulated"},
	{name: "point simulation on real bus", base: greenhouse, old: "    device: \"1\"\n    simulated: true\n", new: "    device: \"1\"\n    simulated: false\n", at: "initial: 21.5", msg: `bus "i2c1" is not simulated`},
	{name: "binding to undeclared bus", base: greenhouse, old: "bus: i2c1", new: "bus: i2c0", at: "i2c0", msg: `no bus named "i2c0" (did you mean "i2c1"?)`},
	{name: "binding type mismatch", base: greenhouse, old: "      bus: i2c1\n", new: "      bus: i2c1\n      type: modbus\n", at: "modbus\n", msg: "does not match bus"},
	// I2C bindings.
	{name: "i2c address out of range", base: greenhouse, old: `"0x48:reg=0x00`, new: `"0x78:reg=0x00`, at: "0x78", msg: "outside the 7-bit device range"},
	{name: "i2c width without byte order", base: greenhouse, old: ":width=2:byte_order=big:", new: ":width=2:", at: "width=^2", msg: "needs byte_order"},
	{name: "i2c width too wide", base: greenhouse, old: ":width=2:", new: ":width=5:", at: "5:", msg: "width must be 1..4"},
	{name: "i2c shift too far", base: greenhouse, old: ":shift=4:", new: ":shift=16:", at: "16", msg: "shift must be 0..15"},
	{name: "short unknown key", base: greenhouse, old: ":signed=true:", new: ":sign=true:", at: "sign=", msg: `unknown key "sign" in the short address (did you mean "signed"?)`},
	{name: "short empty item", base: greenhouse, old: "0x48:reg=0x00:", new: "0x48::reg=0x00:", at: ":reg=0x00", msg: "empty item"},
	{name: "short given twice", base: greenhouse, old: ":shift=4:", new: ":shift=4:shift=3:", at: "shift=3", msg: "shift is given twice"},
	{name: "short and structured", base: greenhouse, old: "scale=0.0625\"\n", new: "scale=0.0625\"\n      scale: 2\n", at: "scale: 2", msg: "given both in the short address"},
	// GPIO bindings.
	{name: "gpio output without safe level", base: greenhouse, old: "      line: GPIO17\n      safe_level: low\n", new: "      line: GPIO17\n", at: "bus: gpio\n      line: GPIO17\n    data_type", msg: "needs safe_level"},
	{name: "gpio safe level on input", base: greenhouse, old: "      bias: pull-up\n", new: "      bias: pull-up\n      safe_level: low\n", at: "low\n", msg: "only applies to output"},
	{name: "gpio direction mismatch", base: greenhouse, old: "      bias: pull-up\n", new: "      bias: pull-up\n      direction: output\n", at: "output", msg: "needs direction input"},
	{name: "gpio bad bias", base: greenhouse, old: "bias: pull-up", new: "bias: pullup", at: "pullup", msg: "as-is, disable, pull-up or pull-down"},
	{name: "gpio line and offset", base: greenhouse, old: "      line: GPIO27\n", new: "      line: GPIO27\n      offset: 27\n", at: "27\n      bias", msg: "not both"},
	{name: "gpio not bool", base: greenhouse, old: "    data_type: bool\n    semantic_tags: [door", new: "    data_type: int\n    semantic_tags: [door", at: "int\n", msg: "needs data_type bool"},
	// Two do capabilities on overlapping registers (do_heater_setpoint is a float32 at holding 0-1).
	{name: "do registers overlap", base: greenhouse, old: "  - name: heater_setpoint\n    kind: read\n", new: boostCapability("1", "uint16"), at: "bus: rs485\n      unit: 1\n      table: holding\n      address: 1", msg: "do_heater_boost writes holding address 1 of unit 1 on bus rs485, overlapping do_heater_setpoint (line 93), which writes holding addresses 0-1"},
	{name: "gpio line bound twice", base: greenhouse, old: "line: GPIO27", new: "line: GPIO17", at: "bus: gpio\n      line: GPIO17\n      bias", msg: "already bound by do_vent_fan"},
	{name: "gpio bad mode", base: greenhouse, old: "      line: GPIO27\n", new: "      address: \"pin=27:mode=analog\"\n", at: "analog", msg: "mode \"analog\" is not supported"},
	{name: "gpio bare short item", base: greenhouse, old: "      line: GPIO27\n", new: "      address: \"27\"\n", at: "27", msg: "must be key=value"},
	// RS-485 direction.
	{name: "rs485 kernel on a USB adapter", base: greenhouse, old: "direction: auto", new: "direction: kernel\n      rts_on_send: true", at: "kernel", msg: "USB adapters have no kernel RS-485 mode"},
	{name: "rs485 enabled on a USB adapter", base: greenhouse, old: "direction: auto", new: "enabled: true\n      rts_on_send: true", at: "true", msg: "use direction: auto"},
	{name: "rs485 enabled and direction", base: greenhouse, old: "direction: auto", new: "direction: auto\n      enabled: false", at: "false", msg: "older spelling of direction"},
	{name: "rs485 kernel without RTS level", base: greenhouse, old: "direction: auto", new: "direction: kernel", at: "kernel", msg: "exactly one of rts_on_send: true"},
	{name: "rs485 unknown direction", base: greenhouse, old: "direction: auto", new: "direction: hardware", at: "hardware", msg: `must be "auto", "kernel", "rts", "gpio"`},
	{name: "rs485 unknown key", base: greenhouse, old: "direction: auto", new: "direction: auto\n      mode: rts", at: "mode", msg: `unknown key "mode"`},
	{name: "rs485 rts on a USB adapter", base: greenhouse, old: "direction: auto", new: "direction: rts\n      rts_on_send: true", at: "rts\n", msg: "RTS set over USB lands a millisecond or more after", warning: true},
	{name: "rs485 delay under auto", base: greenhouse, old: "direction: auto", new: "direction: auto\n      delay_rts_after_send_us: 100", at: "100", msg: "a delay has no effect"},
	{name: "rs485 rts level under gpio", base: greenhouse, old: "direction: auto", new: "direction: gpio\n      gpio: {bus: gpio, line: RS485_DE}\n      rts_on_send: true", at: "rts_on_send: ^true", msg: "applies to direction kernel and rts"},
	{name: "rs485 gpio without line", base: greenhouse, old: "direction: auto", new: "direction: gpio", at: "gpio", msg: "direction gpio needs gpio:"},
	{name: "rs485 gpio line on a non-gpio bus", base: greenhouse, old: "direction: auto", new: "direction: gpio\n      gpio: {bus: i2c1, line: RS485_DE}", at: "i2c1", msg: `bus "i2c1" is i2c, not gpio`},
	{name: "rs485 gpio line bound by a capability", base: greenhouse, old: "direction: auto", new: "direction: gpio\n      gpio: {bus: gpio, line: GPIO17}", at: "bus: gpio\n      line: GPIO17\n      safe", msg: "RS-485 direction line of buses.rs485.rs485"},
	{name: "rs485 gpio line by name and offset", base: greenhouse, old: "direction: auto", new: "direction: gpio\n      gpio: {bus: gpio, line: RS485_DE, offset: 4}", at: "{bus: gpio, line", msg: "exactly one"},
	{name: "rs485 kernel delay over the cap", base: greenhouse, old: "direction: auto", new: "direction: rts\n      rts_on_send: true\n      delay_rts_before_send_us: 200000", at: "200000", msg: "must be 0..100000"},
	{name: "rs485 rx_during_tx outside kernel", base: greenhouse, old: "direction: auto", new: "direction: rts\n      rts_on_send: true\n      rx_during_tx: true", at: "rx_during_tx: ^true", msg: "applies to direction kernel only"},
	// Modbus bindings.
	{name: "modbus multi-register without byte order", base: greenhouse, old: "      data_type: uint32\n      byte_order: big\n", new: "      data_type: uint32\n", at: "bus: rs485\n      unit: 1\n      table: input\n      address: 10", msg: "uint32 needs byte_order"},
	{name: "modbus multi-register without word order", base: greenhouse, old: "      data_type: uint32\n      byte_order: big\n      word_order: big\n", new: "      data_type: uint32\n      byte_order: big\n", at: "bus: rs485\n      unit: 1\n      table: input\n      address: 10", msg: "needs word_order"},
	{name: "modbus short without orders", base: greenhouse, old: ":dtype=float32:byte_order=big:word_order=big\"", new: ":dtype=float32\"", at: "bus: rs485\n      address: \"slave", msg: "float32 needs byte_order"},
	{name: "modbus word order on one register", base: pumpSkid, old: "      data_type: int16\n", new: "      data_type: int16\n      word_order: big\n", at: "big", msg: "only applies to values of two or more registers"},
	{name: "modbus reference and table disagree", base: greenhouse, old: "reg=40001:type=holding", new: "reg=30001:type=holding", at: "holding:", msg: "disagrees with reference 30001"},
	{name: "modbus bad reference", base: greenhouse, old: "reg=40001", new: "reg=20001", at: "20001", msg: "not a Modicon reference"},
	{name: "modbus address and reference", base: greenhouse, old: "      address: 2\n", new: "      address: 2\n      reference: 30003\n", at: "30003", msg: "not both"},
	{name: "modbus missing table", base: greenhouse, old: "      table: input\n      address: 2\n", new: "      address: 2\n", at: "bus: rs485\n      unit: 1\n      address: 2", msg: "missing table"},
	{name: "modbus bool on register", base: greenhouse, old: "      data_type: uint32\n", new: "      data_type: bool\n", at: "bool\n", msg: "bool is for coils"},
	{name: "modbus register type on coil", base: pumpSkid, old: "      table: discrete_input\n      address: 0\n", new: "      table: discrete_input\n      address: 0\n      data_type: uint16\n", at: "uint16", msg: "holds single bits"},
	{name: "modbus do on read-only table", base: greenhouse, old: "      table: holding\n      address: 0\n", new: "      table: input\n      address: 0\n", at: "input\n      address: 0", msg: "read-only"},
	{name: "modbus data type assumed", base: pumpSkid, old: "      address: 6\n      data_type: uint16\n", new: "      address: 6\n", at: "bus: plc\n      unit: 1\n      table: input\n      address: 6", msg: "read as uint16", warning: true},
	{name: "modbus unknown data type", base: pumpSkid, old: "      address: 6\n      data_type: uint16\n", new: "      address: 6\n      data_type: word\n", at: "word", msg: "unknown Modbus data type"},
	{name: "modbus bit without bit", base: pumpSkid, old: "      address: 6\n      data_type: uint16\n", new: "      address: 6\n      data_type: bit\n", at: "bus: plc\n      unit: 1\n      table: input\n      address: 6", msg: "needs bit"},
	{name: "modbus string without length", base: pumpSkid, old: "      address: 6\n      data_type: uint16\n", new: "      address: 6\n      data_type: string\n      byte_order: big\n", at: "bus: plc\n      unit: 1\n      table: input\n      address: 6", msg: "needs length"},
	{name: "modbus data type incompatible", base: pumpSkid, old: "      address: 6\n      data_type: uint16\n", new: "      address: 6\n      data_type: float32\n      byte_order: big\n      word_order: big\n", at: "enum\n", msg: "data_type enum cannot be carried by a Modbus float32"},
	{name: "modbus rtu unit zero", base: greenhouse, old: "slave=1:", new: "slave=0:", at: "0:", msg: "0 is broadcast"},
	{name: "modbus scale zero", base: greenhouse, old: "scale: 0.01", new: "scale: 0", at: "0\n", msg: "scale must not be 0"},
	{name: "modbus past the end", base: greenhouse, old: "      address: 10\n", new: "      address: 65535\n", at: "65535", msg: "runs past the last address"},
	{name: "modbus bad byte order", base: greenhouse, old: "      byte_order: big\n      word_order: big\n      scale", new: "      byte_order: middle\n      word_order: big\n      scale", at: "middle", msg: "must be big or little"},
	// What the binding can carry (Encoding).
	{name: "do range above the register", base: pumpSkid, old: speedRange, new: strings.Replace(speedRange, "max: 100", "max: 7000", 1), at: "7000", msg: "max 7000 is above what the binding can carry (uint16 × 0.1 holds 0..6553.5)"},
	{name: "do range below the register", base: pumpSkid, old: speedRange, new: strings.Replace(speedRange, "min: 0", "min: -5", 1), at: "-5", msg: "min -5 is below what the binding can carry (uint16 × 0.1 holds 0..6553.5)"},
	{name: "read range wider than the register", base: pumpSkid, old: "      scale: 0.01\n    data_type: float\n    unit: \"%\"\n    range: {min: 0, max: 100}", new: "      scale: 0.01\n    data_type: float\n    unit: \"%\"\n    range: {min: 0, max: 400}", at: "400", msg: "max 400 is above what the binding can carry (int16 × 0.01 holds -327.68..327.67)", warning: true},
	{name: "do range bound between steps", base: pumpSkid, old: speedRange, new: strings.Replace(speedRange, "max: 100", "max: 99.95", 1), at: "99.95", msg: "the greatest value that can be written is 99.9", warning: true},
	{name: "do range between two steps", base: pumpSkid, old: speedRange, new: "      scale: 10\n    data_type: float\n    unit: \"%\"\n    range: {min: 1, max: 9}", at: "{min: 1", msg: "the binding holds no value in 1..9 (uint16 × 10 holds 0..655350 in steps of 10)"},
	{name: "safe value between steps", base: pumpSkid, old: "    requires_permission: operator\n    safe_value: 0\n", new: "    requires_permission: operator\n    safe_value: 0.05\n", at: "0.05", msg: "0.05 is not a value the binding holds (uint16 × 0.1 holds 0..6553.5 in steps of 0.1); it is written as 0.1", warning: true},
	{name: "int on a fractional scale", base: pumpSkid, old: "      scale: 0.1\n    data_type: float", new: "      scale: 0.1\n    data_type: int", at: "0.1\n    data_type: int", msg: "scale 0.1 makes readings that are not whole numbers"},
	{name: "int on a fractional scale, short form", base: pumpSkid, old: "scale=0.1\"\n    data_type: float", new: "scale=0.1\"\n    data_type: int", at: "scale=^0.1", msg: "data_type int would round them"},
	{name: "int on a fractional offset", base: pumpSkid, old: "      scale: 0.1\n    data_type: float", new: "      offset: 0.5\n    data_type: int", at: "0.5", msg: "offset 0.5 makes readings that are not whole numbers"},
	{name: "i2c mask not a run from shift", base: greenhouse, old: ":shift=4:", new: ":shift=4:mask=0xff:", at: "mask=^0xff", msg: "not one contiguous run of bits starting at bit 4"},
	{name: "i2c signed field of one bit", base: greenhouse, old: ":shift=4:", new: ":shift=15:", at: "signed=^true", msg: "a signed field needs at least 2 bits; this one has 1"},
	{name: "enum beyond the i2c field", base: greenhouse, old: "audit:", new: "  - name: window_mode\n    kind: read\n    description: The window controller's mode.\n    binding: {bus: i2c1, address: \"0x20:reg=0x01:mask=0x03\"}\n    data_type: enum\n    enum_values: [closed, vent, half, open, storm]\n    semantic_tags: [window]\naudit:", at: "[closed", msg: "5 enum values need indexes up to 4, but the binding (unsigned 2-bit I2C field holds 0..3) does not hold them"},
	// Simulation.
	{name: "follows unknown", base: pumpSkid, old: "follows: pump_run", new: "follows: pump_rum", at: "pump_rum", msg: `no do capability named "pump_rum" (did you mean "pump_run"?)`},
	{name: "simulation initial type", base: greenhouse, old: "      initial: true", new: "      initial: 1", at: "1\n", msg: "must be true or false"},
	{name: "simulation noise on bool", base: greenhouse, old: "      initial: true", new: "      initial: true\n      noise: 0.1", at: "0.1", msg: "only applies to float and int"},
	{name: "waveform shape", base: greenhouse, old: "shape: sine", new: "shape: wobble", at: "wobble", msg: "sine, triangle, square or sawtooth"},
	{name: "waveform period", base: greenhouse, old: "period_s: 600", new: "period_s: 0", at: "0}", msg: "must be positive"},
	// Operations (kind start and sequence).
	{name: "step on another device", base: roadmapEx, old: "{tool: do_outlet_valve, value: true}", new: "{tool: do_outlet_valve, value: true, device: pump_skid_plant_01}", at: "pump_skid_plant_01", msg: "need the mesh"},
	{name: "step of an unknown tool", base: roadmapEx, old: "{tool: do_outlet_valve, value: true}", new: "{tool: do_outlet_vlave, value: true}", at: "do_outlet_vlave", msg: "no do capability serves do_outlet_vlave"},
	{name: "step value", base: roadmapEx, old: "{tool: do_outlet_valve, value: true}", new: "{tool: do_outlet_valve, value: 3}", at: "3}", msg: "must be true or false"},
	{name: "start drives nothing", base: roadmapEx, old: "drives: oven_setpoint", new: "drives: oven_setpiont", at: "oven_setpiont", msg: `no do capability named "oven_setpiont"`},
	{name: "start drives a point without a safe value", base: roadmapEx, old: "    safe_value: 20\n", new: "", at: "oven_setpoint\n    ramp", msg: "has no safe_value"},
	{name: "ramp faster than the cooldown", base: roadmapEx, old: "    safe_value: 20\n", new: "    safe_value: 20\n    cooldown_ms: 60000\n", at: "10000}", msg: "shorter than do_oven_setpoint's cooldown_ms 60000"},
	{name: "start with two shapes", base: roadmapEx, old: "ramp: {rate_per_minute: 6, step_ms: 10000}", new: "ramp: {rate_per_minute: 6, step_ms: 10000}\n    run: {max_duration_ms: 100}", at: "name: oven_ramp", msg: "exactly one of ramp, run and move"},
	{name: "streamable do", base: roadmapEx, old: "    safe_value: 20\n", new: "    safe_value: 20\n    streamable: true\n", at: "true\n    simulation: {initial: 20}", msg: "only applies to read capabilities"},
	// Warnings: legal but suspicious.
	{name: "generic name", base: greenhouse, old: "name: door_closed", new: "name: value", at: "value", msg: "generic name", warning: true},
	{name: "read description sounds like a write", base: greenhouse, old: "description: Whether the greenhouse door", new: "description: Reset whether the greenhouse door", at: "Reset", msg: `("Reset")`, warning: true},
	{name: "unused bus", base: greenhouse, old: "capabilities:\n", new: "  spare:\n    type: i2c\n    device: \"3\"\n\ncapabilities:\n", at: "spare", msg: "no capability uses this bus", warning: true},
	{name: "too many tools", base: greenhouse, old: "audit:", new: "  - name: soil_moisture\n    kind: read\n    description: Soil moisture.\n    binding: {bus: rs485, address: \"unit=1:reg=30021:dtype=uint16\"}\n    data_type: int\n    unit: \"%\"\n    semantic_tags: [soil]\naudit:", at: "- name: air_temperature", msg: "9 tools with can_do", warning: true},
	{name: "gpio chip by number", base: greenhouse, old: "chip: pinctrl-bcm2711", new: "chip: gpiochip0", at: "gpiochip0", msg: "chip number", warning: true},
}

func TestManifestFindings(t *testing.T) { runEdits(t, manifestEdits) }

// boostCapability is a do capability on the greenhouse's controller, at a
// holding register address of the given type, placed before
// read_heater_setpoint (do_heater_setpoint is a float32 at holding 0-1).
func boostCapability(address, modbusType string) string {
	order := "      byte_order: big\n"
	if modbusType != "uint16" {
		order += "      word_order: big\n"
	}
	return "  - name: heater_boost\n    kind: do\n    description: Raise the heating controller's boost level.\n" +
		"    binding:\n      bus: rs485\n      unit: 1\n      table: holding\n      address: " + address + "\n      data_type: " + modbusType + "\n" + order +
		"    data_type: int\n    unit: \"%\"\n    range: {min: 0, max: 3}\n    semantic_tags: [heating, boost]\n    side_effects: [heater power draw changes]\n" +
		"    requires_permission: operator\n    safe_value: 0\n\n  - name: heater_setpoint\n    kind: read\n"
}

// dacCapabilities are two do capabilities, do_dac_level then do_dac_trim,
// at the two I2C short addresses on bus i2c1, placed before do_vent_fan.
func dacCapabilities(level, trim string) string {
	var b strings.Builder
	for _, c := range [][2]string{{"level", level}, {"trim", trim}} {
		b.WriteString("  - name: dac_" + c[0] + "\n    kind: do\n    description: Set the DAC's output " + c[0] + ".\n" +
			"    binding: {bus: i2c1, address: \"" + c[1] + "\"}\n    data_type: int\n    range: {min: 0, max: 200}\n" +
			"    semantic_tags: [dac, output]\n    side_effects: [output voltage changes]\n    requires_permission: operator\n    safe_value: 0\n\n")
	}
	return b.String() + "  - name: vent_fan\n"
}

// Two do capabilities may share a start address (they take turns) or sit side
// by side in Modbus registers; only a partial overlap is refused
// (manifestEdits).
func TestDoRegistersSharedOrApart(t *testing.T) {
	text := readFile(t, greenhouse)
	for _, at := range [][2]string{{"0", "uint64"}, {"0", "uint16"}, {"2", "uint32"}} {
		edited := strings.Replace(text, "  - name: heater_setpoint\n    kind: read\n", boostCapability(at[0], at[1]), 1)
		if m, diags := Parse("m.yml", []byte(edited)); m == nil {
			t.Errorf("%s at holding %s beside do_heater_setpoint's float32 at 0: %s", at[1], at[0], diags)
		}
	}
	// An I2C register address is a pointer whose width is the chip's own:
	// 16-bit registers at consecutive addresses (an ADS1115's thresholds at
	// 0x02 and 0x03) are separate registers, so no I2C pair is refused; those
	// whose bytes may overlap write at the first one's site (WritesWith).
	word := "0x60:reg=0x10:width=2:byte_order=big"
	for trim, shared := range map[string]bool{"0x60:reg=0x10": true, "0x60:reg=0x11": true, "0x60:reg=0x11:width=2:byte_order=big": true, "0x60:reg=0x12": false, "0x61:reg=0x11": false} {
		edited := strings.Replace(text, "  - name: vent_fan\n", dacCapabilities(word, trim), 1)
		m, diags := Parse("m.yml", []byte(edited))
		if m == nil {
			t.Errorf("I2C %s beside %s: %s", trim, word, diags)
			continue
		}
		level, trimCap := m.Tool("do_dac_level"), m.Tool("do_dac_trim")
		if got := trimCap.WritesWith == level; got != shared || level.WritesWith != nil {
			t.Errorf("I2C %s beside %s: do_dac_trim writes with do_dac_level = %v, want %v (do_dac_level's WritesWith %v)", trim, word, got, shared, level.WritesWith)
		}
	}
}

// runEdits parses each edited manifest and checks its one expected finding.
func runEdits(t *testing.T, edits []edit) {
	for _, e := range edits {
		t.Run(e.name, func(t *testing.T) {
			text, want := e.apply(t)
			m, diags := Parse("m.yml", []byte(text))
			if !e.warning && m != nil {
				t.Errorf("want the manifest rejected")
			}
			if e.warning && m == nil {
				t.Errorf("a warning must not reject the manifest:\n%s", diags)
			}
			checkFinding(t, diags, want, e.msg, e.warning)
		})
	}
}

// max_gap's default is filled in, and a written 0 (adjoining reads only) stays 0.
func TestMaxGapDefault(t *testing.T) {
	text := readFile(t, greenhouse)
	m, diags := Parse("m.yml", []byte(text))
	if m == nil {
		t.Fatal(diags)
	}
	if got := m.Buses["rs485"].ModbusRTU.MaxGap; got != DefaultMaxGap {
		t.Fatalf("max_gap not written = %d, want %d", got, DefaultMaxGap)
	}
	m, diags = Parse("m.yml", []byte(strings.Replace(text, "    timeout_ms: 500\n", "    timeout_ms: 500\n    max_gap: 0\n", 1)))
	if m == nil {
		t.Fatal(diags)
	}
	if got := m.Buses["rs485"].ModbusRTU.MaxGap; got != 0 {
		t.Fatalf("max_gap: 0 = %d", got)
	}
}

// late_write_ms defaults to twice the timeout on a real modbus-tcp bus, to
// 0 on a simulated one, and a written value (0 too) stays; no other bus has
// a window. acknowledge_ms is alike on modbus-tcp and modbus-rtu buses.
func TestLateWriteDefault(t *testing.T) {
	const text = `physmcp_version: "0.1"
device: {id: late, type: test_rig}
buses:
  plc: %s
capabilities:
  - name: flow_setpoint
    kind: do
    description: Flow setpoint.
    binding: {bus: plc, unit: 1, table: holding, address: 0, data_type: uint16}
    data_type: int
    range: {min: 0, max: 1000}
    semantic_tags: [flow]
`
	for _, c := range []struct {
		bus       string
		want, ack time.Duration
	}{
		{"{type: modbus-tcp, address: 192.0.2.1:502, timeout_ms: 700}", 1400 * time.Millisecond, 1400 * time.Millisecond},
		{"{type: modbus-tcp, address: 192.0.2.1:502}", 2 * time.Second, 2 * time.Second},
		{"{type: modbus-tcp, address: 192.0.2.1:502, late_write_ms: 0}", 0, 2 * time.Second},
		{"{type: modbus-tcp, address: 192.0.2.1:502, acknowledge_ms: 5000}", 2 * time.Second, 5 * time.Second},
		{"{type: modbus-tcp, address: 192.0.2.1:502, simulated: true}", 0, 0},
		{"{type: modbus-tcp, address: 192.0.2.1:502, simulated: true, late_write_ms: 1500}", 1500 * time.Millisecond, 0},
		{"{type: modbus-rtu, port: /dev/serial/by-id/x, baud: 9600, parity: even, stop_bits: 1}", 0, 2 * time.Second},
		{"{type: modbus-rtu, port: /dev/serial/by-id/x, baud: 9600, parity: even, stop_bits: 1, timeout_ms: 300}", 0, 600 * time.Millisecond},
		{"{type: modbus-rtu, port: /dev/serial/by-id/x, baud: 9600, parity: even, stop_bits: 1, acknowledge_ms: 0}", 0, 0},
		{"{type: modbus-rtu, port: /dev/x, baud: 9600, parity: even, stop_bits: 1, simulated: true}", 0, 0},
		// the default stays within the range a written value must keep to
		{"{type: modbus-tcp, address: 192.0.2.1:502, timeout_ms: 400000}", 600 * time.Second, 600 * time.Second},
		{"{type: modbus-rtu, port: /dev/serial/by-id/x, baud: 9600, parity: even, stop_bits: 1, timeout_ms: 400000}", 0, 600 * time.Second},
	} {
		m, diags := Parse("m.yml", []byte(fmt.Sprintf(text, c.bus)))
		if m == nil {
			t.Fatalf("%s: %s", c.bus, diags)
		}
		if got := m.Buses["plc"].LateWrite(); got != c.want {
			t.Errorf("%s: late write window %s, want %s", c.bus, got, c.want)
		}
		if got := m.Buses["plc"].Acknowledge(); got != c.ack {
			t.Errorf("%s: acknowledge window %s, want %s", c.bus, got, c.ack)
		}
	}
}

// A simulated RTU bus may use any port name; a real one is warned about.
func TestRTUPortWarning(t *testing.T) {
	text := strings.Replace(readFile(t, greenhouse), "port: /dev/serial/by-id/usb-FTDI_FT232R_USB_UART_A10K1234-if00-port0", "port: /dev/ttyUSB0", 1)
	text = strings.Replace(text, "    simulated: true\n    simulation:\n      latency_ms: 5\n", "", 1)
	for _, sim := range []string{"      initial: 18\n", "      initial: 45\n      noise: 0.2\n", "      initial: 1234.56\n"} {
		text = strings.Replace(text, "    simulation:\n"+sim, "", 1)
	}
	m, diags := Parse("m.yml", []byte(text))
	if m == nil {
		t.Fatal(diags)
	}
	if w := diags.Warnings(); len(w) != 1 || !strings.Contains(w[0].Msg, "by-id") {
		t.Errorf("want one by-id warning, got:\n%s", diags)
	}
}

func TestDoDensityWarning(t *testing.T) {
	text := readFile(t, pumpSkid)
	// Put every tool on one endpoint: 8 tools + can_do, and 2 do tools.
	text = strings.NewReplacer("    group: operation\n", "", "    group: monitoring\n", "").Replace(text)
	m, diags := Parse("m.yml", []byte(text))
	if m == nil {
		t.Fatal(diags)
	}
	if !strings.Contains(diags.String(), "9 tools with can_do") {
		t.Errorf("want a density warning, got:\n%s", diags)
	}
}

func TestEmptyAndNonMapping(t *testing.T) {
	for _, text := range []string{"", "# only a comment\n", "- a\n- b\n", "just text"} {
		m, diags := Parse("m.yml", []byte(text))
		if m != nil || !diags.HasErrors() {
			t.Errorf("%q: want an error, got %v", text, diags)
		}
	}
}

// validate tells which RS-485 directions fit a port, where its path says
// what it is.
func TestRS485PortKinds(t *testing.T) {
	for _, c := range []struct {
		port, rs485, msg string
		warning          bool
	}{
		{"/dev/ttyUSB0", "direction: kernel, rts_on_send: true", "USB adapters have no kernel RS-485 mode", false},
		{"/dev/ttyACM0", "direction: kernel, rts_on_send: true", "USB adapters have no kernel RS-485 mode", false},
		{"/dev/ttyAMA0", "enabled: true, rts_on_send: true", "enabled: true is direction: kernel; write that instead", true},
		{"/dev/serial/by-path/platform-3f980000.usb-usb-0:1.2:1.0-port0", "direction: kernel, rts_after_send: true", "USB adapters", false},
		{"/dev/pts/3", "direction: kernel, rts_on_send: true", "pseudo-terminal, which has no kernel RS-485 mode", false},
		{"/dev/pts/3", "direction: rts, rts_on_send: true", "pseudo-terminal, which has no RTS line", false},
		{"/dev/ttyUSB0", "direction: rts, rts_on_send: true", "RTS set over USB", true},
		{"/dev/ttyAMA0", "direction: kernel, rts_on_send: true, delay_rts_after_send_us: 500", "", false},
		{"/dev/ttyAMA0", "direction: rts, rts_after_send: true", "", false},
		{"/dev/pts/3", "direction: gpio, gpio: {bus: gpio, offset: 4, active_low: true}", "", false},
		{"/dev/ttyUSB0", "direction: auto", "", false},
	} {
		text := strings.NewReplacer(
			"/dev/serial/by-id/usb-FTDI_FT232R_USB_UART_A10K1234-if00-port0", c.port,
			"    rs485:\n      direction: auto\n", "    rs485: {"+c.rs485+"}\n",
		).Replace(readFile(t, greenhouse))
		m, diags := Parse("m.yml", []byte(text))
		var found []string
		for _, d := range diags {
			if !strings.Contains(d.Msg, "by-id") {
				found = append(found, d.Msg)
			}
		}
		switch {
		case c.msg == "" && (m == nil || len(found) > 0):
			t.Errorf("%s with {%s}: want no findings, got:\n%s", c.port, c.rs485, diags)
		case c.msg != "" && (len(found) != 1 || !strings.Contains(found[0], c.msg) || c.warning == diags.HasErrors()):
			t.Errorf("%s with {%s}: want one %s containing %q, got:\n%s", c.port, c.rs485, map[bool]string{true: "warning", false: "error"}[c.warning], c.msg, diags)
		}
	}
}
