package manifest

import (
	"strings"
	"testing"
)

const (
	proxyNode  = "../examples/proxy/proxy-node/physmcp.manifest.yml"
	aggregator = "../examples/site/aggregator/physmcp.manifest.yml"
)

// mcpEdits are findings about mcp buses and virtual bindings, each at the
// place in the file where it belongs.
var mcpEdits = []edit{
	{name: "mcp bus with two sources", base: proxyNode, old: "    baud: 115200\n", new: "    baud: 115200\n    url: http://10.0.0.7:8765/mcp\n", at: "http://10.0.0.7", msg: "give one source: port and url are both set"},
	{name: "mcp bus without a source", base: proxyNode, old: "    port: /tmp/physmcp-proxy/controller\n    baud: 115200\n", new: "    timeout_ms: 500\n", at: "type: mcp", msg: "an mcp bus needs its source"},
	{name: "mcp bus simulated", base: proxyNode, old: "    baud: 115200\n", new: "    baud: 115200\n    simulated: true\n", at: "simulated: ^true", msg: "never simulated"},
	{name: "mcp bus url with credentials", base: aggregator, old: "http://127.0.0.1:8771/mcp", new: "http://user:pw@127.0.0.1:8771/mcp", at: "http://user", msg: "token_file, not in the URL"},
	{name: "mcp bus baud over http", base: aggregator, old: "    token_file: device.token\n    adopt: {tools: all, group: greenhouse_a", new: "    baud: 9600\n    token_file: device.token\n    adopt: {tools: all, group: greenhouse_a", at: "9600", msg: "baud only applies to a serial source"},
	{name: "mcp bus unknown key", base: proxyNode, old: "    baud: 115200\n", new: "    baud: 115200\n    parity: none\n", at: "parity", msg: "parity"},
	{name: "adopt unknown tools", base: aggregator, old: "tools: all, group: plant_room", new: "tools: writes, group: plant_room", at: "writes", msg: "must be read (every read_* of the source) or all"},
	{name: "adopt bad group", base: aggregator, old: "group: plant_room", new: "group: Plant-Room", at: "Plant-Room", msg: "must be lowercase"},
	{name: "virtual read of a do tool", base: proxyNode, old: "tool: read_soil_moisture}", new: "tool: do_soil_moisture}", at: "do_soil_moisture", msg: `a read capability adopts a read_* tool, not "do_soil_moisture"`},
	{name: "virtual binding with a register", base: proxyNode, old: "tool: read_soil_moisture}", new: "tool: read_soil_moisture, register: 3}", at: "register", msg: "register"},
	{name: "virtual binding on a gpio bus", base: proxyNode, old: "{bus: gpio, line: GPIO22", new: "{bus: gpio, type: virtual, line: GPIO22", at: "virtual, line", msg: `binding type "virtual" does not match bus "gpio"`},
	{name: "virtual do without read_tool", base: proxyNode, old: "    binding: {bus: gpio, line: GPIO22, safe_level: low}\n", new: "    binding: {bus: soil_node, type: virtual, tool: do_irrigation_valve}\n", at: "{bus: soil_node, type: virtual, tool: do_irr", msg: "needs read_tool"},
}

func TestMCPBusFindings(t *testing.T) { runEdits(t, mcpEdits) }

// An aggregator's manifest may list no capabilities: its buses adopt them.
func TestAdoptingManifestNeedsNoCapabilities(t *testing.T) {
	m, diags := Parse("m.yml", []byte(readFile(t, aggregator)))
	if m == nil || diags.HasErrors() {
		t.Fatal(diags)
	}
	if !m.Adopts() || m.Buses["pump"].MCP.Protocol() != SourceHTTP || m.Buses["pump"].MCP.Adopt.Group != "plant_room" {
		t.Errorf("aggregator buses: %+v", m.Buses["pump"].MCP)
	}
	p, diags := Parse("m.yml", []byte(readFile(t, proxyNode)))
	if p == nil {
		t.Fatal(diags)
	}
	c := p.Capabilities[0]
	if from := p.AdoptedFrom(c); from == nil || from.SourceAddress != "/tmp/physmcp-proxy/controller" || from.SourceProtocol != SourceSerial ||
		c.Binding.Virtual.Tool != "read_soil_temperature" || p.Buses["soil_node"].MCP.Baud != 115200 {
		t.Errorf("adopted_from %+v, binding %+v", from, c.Binding.Virtual)
	}
}

const meshAggregator = "../examples/site/mesh-aggregator/physmcp.manifest.yml"

// meshSourceEdits are findings about an mcp bus whose source is the mesh.
var meshSourceEdits = []edit{
	{name: "mesh source without the mesh", base: meshAggregator, old: "    enabled: true\n", new: "    enabled: false\n", at: "mesh: ^true", msg: "this device must join it (network.mesh.enabled: true"},
	{name: "mesh source without a keyring", base: meshAggregator, old: "    key_file: ../../mesh/mesh.key\n", new: "", at: "mesh: ^true", msg: "give network.mesh.key_file"},
	{name: "mesh source and a url", base: meshAggregator, old: "    mesh: true\n", new: "    mesh: true\n    url: http://10.0.0.7:8765/mcp\n", at: "mesh: ^true", msg: "give one source: url and mesh are both set"},
	{name: "mesh false", base: meshAggregator, old: "    mesh: true\n", new: "    mesh: false\n", at: "mesh: ^false", msg: "mesh: false adopts nothing"},
	{name: "mesh source without adopt", base: meshAggregator, old: "    adopt: {tools: all, group_by: zone, names: device_prefixed, cache_ttl_ms: 2000}\n", new: "", at: "mesh: ^true", msg: "give adopt (tools, and group_by or group)"},
	{name: "mesh source without a group", base: meshAggregator, old: "group_by: zone, ", new: "", at: "{tools: all", msg: "give group_by: zone (or device), or group"},
	{name: "mesh source with group and group_by", base: meshAggregator, old: "group_by: zone,", new: "group_by: zone, group: site,", at: "zone, group", msg: "not both"},
	{name: "mesh source group_by unknown", base: meshAggregator, old: "group_by: zone", new: "group_by: area", at: "area", msg: `must be zone (a group per zone) or device (a group per device), got "area"`},
	{name: "mesh source with a token file", base: meshAggregator, old: "    mesh: true\n", new: "    mesh: true\n    token_file: device.token\n", at: "device.token", msg: "token_file only applies to an HTTP source"},
	{name: "mesh source unknown key", base: meshAggregator, old: "    mesh: true\n", new: "    mesh: true\n    zones: [greenhouse_a]\n", at: "zones", msg: "zones"},
	{name: "two mesh sources", base: meshAggregator, old: "capabilities: []\n", new: "  more:\n    type: mcp\n    mesh: true\n    adopt: {tools: read, group: all}\n\ncapabilities: []\n", at: "mesh: ^true\n    adopt: {tools: read", msg: "bus devices adopts the devices of the mesh already"},
	{name: "group_by on a url source", base: aggregator, old: "group: plant_room", new: "group_by: zone", at: "zone, semantic_tags: [plant_room]", msg: "group_by only applies to a mesh source"},
}

func TestMeshSourceFindings(t *testing.T) { runEdits(t, meshSourceEdits) }

// namesEdits are findings about adopt.names, at the key.
var namesEdits = []edit{
	{name: "names unknown", base: aggregator, old: "group: plant_room", new: "group: plant_room, names: by_device", at: "by_device", msg: `must be as_is, device_prefixed or a template with {device} and {capability} such as {device}_{capability}, got "by_device"`},
	{name: "names template without device", base: meshAggregator, old: "names: device_prefixed", new: "names: \"site_{capability}\"", at: "\"site_", msg: "must hold {device} exactly once"},
	{name: "names template without capability", base: aggregator, old: "group: plant_room", new: "group: plant_room, names: \"{device}_pump\"", at: "\"{device}_pump", msg: "must hold {capability} exactly once"},
	{name: "names template twice", base: aggregator, old: "group: plant_room", new: "group: plant_room, names: \"{device}_{capability}_{capability}\"", at: "\"{device}_{capability}_{cap", msg: "must hold {capability} exactly once"},
	{name: "names template side by side", base: meshAggregator, old: "names: device_prefixed", new: "names: \"{device}{capability}\"", at: "\"{device}{cap", msg: "put a separator such as _ between {device} and {capability}"},
	{name: "names template unknown placeholder", base: meshAggregator, old: "names: device_prefixed", new: "names: \"{zone}_{device}_{capability}\"", at: "\"{zone}", msg: "unknown placeholder {zone}"},
	{name: "names template unclosed", base: meshAggregator, old: "names: device_prefixed", new: "names: \"{device}_{capability\"", at: "\"{device}_{capability\"", msg: "a { without its }"},
	{name: "names template upper case", base: meshAggregator, old: "names: device_prefixed", new: "names: \"{device}-{capability}\"", at: "\"{device}-", msg: `"-" may hold only lowercase letters`},
	{name: "names template starts with a digit", base: meshAggregator, old: "names: device_prefixed", new: "names: \"1_{device}_{capability}\"", at: "\"1_", msg: "must start with a letter or a placeholder"},
	{name: "names by device on a bus named with a dash", base: aggregator, old: "  pump:\n    type: mcp\n    url: http://127.0.0.1:8773/mcp\n    token_file: device.token\n    adopt: {tools: all,",
		new: "  pump-1:\n    type: mcp\n    url: http://127.0.0.1:8773/mcp\n    token_file: device.token\n    adopt: {tools: all, names: device_prefixed,", at: "device_prefixed", msg: `bus name "pump-1" is not a name`},
}

func TestAdoptNamesFindings(t *testing.T) { runEdits(t, namesEdits) }

// The names rules: the defaults (device_prefixed for the mesh source, as_is
// for a listed one), the read_/do_ verb in front, prefix before the rest,
// and templates that put the device before or after.
func TestAdoptNames(t *testing.T) {
	m, diags := Parse("m.yml", []byte(strings.Replace(readFile(t, meshAggregator), "names: device_prefixed, ", "", 1)))
	if m == nil {
		t.Fatal(diags)
	}
	if a := m.Buses["devices"].MCP.Adopt; a.Names != NamesDevicePrefixed || a.CapabilityName("gh1", "air_temperature") != "gh1_air_temperature" {
		t.Errorf("mesh source default: names %q, air_temperature of gh1 → %q", a.Names, a.CapabilityName("gh1", "air_temperature"))
	}
	if m, diags = Parse("m.yml", []byte(readFile(t, aggregator))); m == nil {
		t.Fatal(diags)
	}
	if a := m.Buses["pump"].MCP.Adopt; a.Names != NamesAsIs || a.CapabilityName("pump", "speed") != "speed" {
		t.Errorf("listed source default: names %q, speed of pump → %q", a.Names, a.CapabilityName("pump", "speed"))
	}
	for _, tc := range []struct{ names, prefix, want string }{
		{NamesAsIs, "", "vent_fan"},
		{NamesAsIs, "site_", "site_vent_fan"},
		{NamesDevicePrefixed, "", "gh1_vent_fan"},
		{NamesDevicePrefixed, "site_", "site_gh1_vent_fan"},
		{"{capability}_{device}", "", "vent_fan_gh1"},
		{"site_{device}__{capability}_x", "", "site_gh1__vent_fan_x"},
	} {
		a := &Adopt{Names: tc.names, Prefix: tc.prefix}
		c := &Capability{Kind: KindDo, Name: a.CapabilityName("gh1", "vent_fan")}
		if c.Name != tc.want || c.ToolName() != "do_"+tc.want || namesProblem(tc.names) != "" {
			t.Errorf("names %q prefix %q: %q (tool %s, problem %q), want %q", tc.names, tc.prefix, c.Name, c.ToolName(), namesProblem(tc.names), tc.want)
		}
	}
	for tool, want := range map[string]string{
		"read_gh1_air_temperature":        "",
		"read_Gh1":                        "is not a tool name",
		"read_" + strings.Repeat("x", 60): "the limit is 64",
	} {
		if got := ToolNameProblem(tool); want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("ToolNameProblem(%q) = %q, want %q", tool, got, want)
		}
	}
}
