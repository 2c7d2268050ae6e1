package manifest

import "testing"

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
	{name: "mesh source without adopt", base: meshAggregator, old: "    adopt: {tools: all, group_by: zone, cache_ttl_ms: 2000}\n", new: "", at: "mesh: ^true", msg: "give adopt (tools, and group_by or group)"},
	{name: "mesh source without a group", base: meshAggregator, old: "group_by: zone, ", new: "", at: "{tools: all", msg: "give group_by: zone (or device), or group"},
	{name: "mesh source with group and group_by", base: meshAggregator, old: "group_by: zone,", new: "group_by: zone, group: site,", at: "zone, group", msg: "not both"},
	{name: "mesh source group_by unknown", base: meshAggregator, old: "group_by: zone", new: "group_by: area", at: "area", msg: `must be zone (a group per zone) or device (a group per device), got "area"`},
	{name: "mesh source with a token file", base: meshAggregator, old: "    mesh: true\n", new: "    mesh: true\n    token_file: device.token\n", at: "device.token", msg: "token_file only applies to an HTTP source"},
	{name: "mesh source unknown key", base: meshAggregator, old: "    mesh: true\n", new: "    mesh: true\n    zones: [greenhouse_a]\n", at: "zones", msg: "zones"},
	{name: "two mesh sources", base: meshAggregator, old: "capabilities: []\n", new: "  more:\n    type: mcp\n    mesh: true\n    adopt: {tools: read, group: all}\n\ncapabilities: []\n", at: "mesh: ^true\n    adopt: {tools: read", msg: "bus devices adopts the devices of the mesh already"},
	{name: "group_by on a url source", base: aggregator, old: "group: plant_room", new: "group_by: zone", at: "zone, semantic_tags: [plant_room]", msg: "group_by only applies to a mesh source"},
}

func TestMeshSourceFindings(t *testing.T) { runEdits(t, meshSourceEdits) }
