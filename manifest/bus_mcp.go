package manifest

import (
	"net/url"
	"slices"
	"strings"

	"github.com/physmcp/physmcpd/internal/strictyaml"
)

// BusMCP is a bus whose devices are other MCP servers: a physmcpd Lite on a
// serial line, any MCP server started as a command (stdio), or one over
// streamable HTTP. Its capabilities are adopted (PhysMCP's proxy entries:
// binding type virtual, adopted_from the bus's address and protocol).
const BusMCP BusType = "mcp"

// Source protocols of an mcp bus, as adopted_from.source_protocol names them.
const (
	SourceSerial = "serial"
	SourceStdio  = "stdio"
	SourceHTTP   = "http"
)

// MCPBus is the source an mcp bus adopts capabilities from: exactly one of
// port (a serial line speaking newline-delimited JSON-RPC, what serve
// --serial speaks), command (an MCP server on stdio), url (streamable HTTP)
// or mesh (every device of the PhysMCP mesh, learned from its membership
// while the daemon runs: an aggregator over the mesh).
type MCPBus struct {
	Port    string   `yaml:"port"`
	Baud    int      `yaml:"baud"`
	Command []string `yaml:"command"`
	URL     string   `yaml:"url"`
	Mesh    bool     `yaml:"mesh"`
	// TokenFile holds the bearer token sent to an HTTP source.
	TokenFile string `yaml:"token_file"`
	// TimeoutMs bounds connecting and initialising (default 2000); each call
	// is bounded by its capability's timeout_ms.
	TimeoutMs int `yaml:"timeout_ms"`
	// Adopt adopts a whole kind of the source's tools at start-up, instead of
	// (or besides) listing capabilities one by one.
	Adopt *Adopt `yaml:"adopt"`

	At Positions `yaml:"-"`
}

// Protocol is adopted_from.source_protocol: serial, stdio or http.
func (b *MCPBus) Protocol() string {
	switch {
	case b.Port != "":
		return SourceSerial
	case len(b.Command) > 0:
		return SourceStdio
	}
	return SourceHTTP
}

// Address is adopted_from.source_address: the serial line, the command
// line or the URL (without credentials).
func (b *MCPBus) Address() string {
	switch b.Protocol() {
	case SourceSerial:
		return b.Port
	case SourceStdio:
		return strings.Join(b.Command, " ")
	}
	if u, err := url.Parse(b.URL); err == nil {
		u.User = nil
		return u.String()
	}
	return b.URL
}

// AdoptTools is which of a source's tools adopt takes.
type AdoptTools string

const (
	// AdoptReads takes every read_* of the source.
	AdoptReads AdoptTools = "read"
	// AdoptAll takes every read_* and do_* (an aggregator over Full devices).
	AdoptAll AdoptTools = "all"
)

// Adopt takes all of a source's read_* (or read_* and do_*) as capabilities
// of this device, each named prefix + the names rule applied to the
// source's capability name (adopt_names.go).
type Adopt struct {
	Tools  AdoptTools `yaml:"tools,required"`
	Prefix string     `yaml:"prefix"`
	// Names is as_is, device_prefixed or a template (CapabilityName).
	Names        string   `yaml:"names"`
	SemanticTags []string `yaml:"semantic_tags"`
	CacheTTLMs   *int     `yaml:"cache_ttl_ms"`
	TimeoutMs    *int     `yaml:"timeout_ms"`
	Group        string   `yaml:"group"`
	// GroupBy puts each device of a mesh source in a group of its own
	// zone (GroupByZone) or device id (GroupByDevice).
	GroupBy string `yaml:"group_by"`

	At Positions `yaml:"-"`
}

// GroupBy values of a mesh source's adopt section.
const (
	GroupByZone   = "zone"
	GroupByDevice = "device"
)

// MeshSource is the mcp bus that adopts the devices of the mesh, or nil.
func (m *Manifest) MeshSource() *Bus {
	for _, b := range m.Buses {
		if b.MCP != nil && b.MCP.Mesh {
			return b
		}
	}
	return nil
}

// VirtualBinding is an adopted capability: the source's tool it calls, and
// for a do capability the source's read_* that reads the same value back
// (the engine reads before and after every write).
type VirtualBinding struct {
	Tool     string `yaml:"tool,required"`
	ReadTool string `yaml:"read_tool"`

	At Positions `yaml:"-"`
}

// AdoptedFrom is PhysMCP's adopted_from of a virtual binding's capability.
type AdoptedFrom struct {
	SourceAddress  string `json:"source_address"`
	SourceProtocol string `json:"source_protocol"`
}

// AdoptedFrom is where the capability is adopted from, or nil when it is
// bound to a bus of this device.
func (m *Manifest) AdoptedFrom(c *Capability) *AdoptedFrom {
	if c.Binding.Virtual == nil {
		return nil
	}
	b := m.Buses[c.Binding.Bus]
	if b == nil || b.MCP == nil {
		return nil
	}
	return &AdoptedFrom{SourceAddress: b.MCP.Address(), SourceProtocol: b.MCP.Protocol()}
}

// Adopts reports whether some bus adopts a kind of tools at start-up, so the
// capabilities section may be empty.
func (m *Manifest) Adopts() bool {
	for _, b := range m.Buses {
		if b.MCP != nil && b.MCP.Adopt != nil {
			return true
		}
	}
	return false
}

// resolveVirtual decodes a virtual binding's keys.
func (b *Binding) resolveVirtual(d *strictyaml.Decoder, path string, c *Capability) {
	var k VirtualBinding
	d.Decode(b.rest, &k, path)
	for i := 0; i+1 < len(b.rest.Content); i += 2 {
		b.At.Values[b.rest.Content[i].Value] = d.Pos(b.rest.Content[i+1])
	}
	if k.Tool == "" {
		return // missing: already reported
	}
	bad := func(key, format string, args ...any) { d.ErrorAt(b.At.Of(key), path+"."+key, format, args...) }
	ok := true
	want := string(c.Kind) + "_"
	switch {
	case !nameGrammar.MatchString(k.Tool):
		bad("tool", "%q is not a tool name (lowercase letters, digits and _)", k.Tool)
		ok = false
	case c.Kind != "" && !strings.HasPrefix(k.Tool, want):
		bad("tool", "a %s capability adopts a %s* tool, not %q", c.Kind, want, k.Tool)
		ok = false
	}
	switch {
	case c.Kind == KindDo && k.ReadTool == "":
		bad("", "an adopted do capability needs read_tool: the source's read_* of the same value, which physmcpd reads before and after every write")
		ok = false
	case c.Kind == KindRead && k.ReadTool != "":
		bad("read_tool", "read_tool only applies to do capabilities")
		ok = false
	case k.ReadTool != "" && (!nameGrammar.MatchString(k.ReadTool) || !strings.HasPrefix(k.ReadTool, "read_")):
		bad("read_tool", "must name one of the source's read_* tools, got %q", k.ReadTool)
		ok = false
	}
	if ok {
		b.Virtual = &k
	}
}

// mcpBus checks an mcp bus.
func (v *validator) mcpBus(b *Bus, path string) {
	k := b.MCP
	given := slices.DeleteFunc([]string{"port", "command", "url", "mesh"}, func(key string) bool { return !k.At.Has(key) })
	switch {
	case len(given) == 0:
		v.errorf(b.At.Self, path, "an mcp bus needs its source: port (a serial line), command (an MCP server on stdio), url (streamable HTTP) or mesh: true (the devices of the mesh)")
	case len(given) > 1:
		v.errorf(k.At.Of(given[1]), path+"."+given[1], "give one source: %s and %s are both set", given[0], given[1])
	}
	if k.At.Has("baud") && k.Port == "" {
		v.errorf(k.At.Of("baud"), path+".baud", "baud only applies to a serial source (port)")
	}
	if k.Port != "" && !k.At.Has("baud") {
		k.Baud = 115200
	}
	if k.At.Has("baud") && k.Baud <= 0 {
		v.errorf(k.At.Of("baud"), path+".baud", "must be a positive baud rate, got %d", k.Baud)
	}
	if k.At.Has("command") && (len(k.Command) == 0 || k.Command[0] == "") {
		v.errorf(k.At.Of("command"), path+".command", "must name the program to run, e.g. [physmcpd, serve, --manifest, node.yml, --stdio]")
	}
	if k.URL != "" {
		if u, err := url.Parse(k.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.errorf(k.At.Of("url"), path+".url", "must be an http:// or https:// URL such as http://10.0.0.7:8765/mcp, got %q", k.URL)
		} else if u.User != nil {
			v.errorf(k.At.Of("url"), path+".url", "put the credentials in token_file, not in the URL")
		}
	}
	if k.TokenFile != "" && k.URL == "" {
		v.errorf(k.At.Of("token_file"), path+".token_file", "token_file only applies to an HTTP source (url)")
	}
	if k.At.Has("mesh") {
		v.meshSource(b, path)
	}
	v.timeout(k.At, path, k.TimeoutMs)
	if b.Simulated {
		v.errorf(b.At.Of("simulated"), path+".simulated", "an mcp bus is never simulated: simulate its source (serve the source with --simulate) instead")
	}
	if a := k.Adopt; a != nil {
		ap := path + ".adopt"
		switch a.Tools {
		case AdoptReads, AdoptAll:
		case "":
		default:
			v.errorf(a.At.Of("tools"), ap+".tools", "must be read (every read_* of the source) or all (read_* and do_*), got %q", a.Tools)
		}
		if a.Prefix != "" && !nameGrammar.MatchString(a.Prefix) {
			v.errorf(a.At.Of("prefix"), ap+".prefix", "%q must be lowercase letters, digits and _ and start with a letter", a.Prefix)
		}
		for i, t := range a.SemanticTags {
			if !tagGrammar.MatchString(t) {
				v.errorf(a.At.Of("semantic_tags"), ap+".semantic_tags", "tag %d %q must be lowercase letters, digits, _ and -", i, t)
			}
		}
		if a.CacheTTLMs != nil && *a.CacheTTLMs < 0 {
			v.errorf(a.At.Of("cache_ttl_ms"), ap+".cache_ttl_ms", "must not be negative, got %d", *a.CacheTTLMs)
		}
		if a.TimeoutMs != nil && *a.TimeoutMs < 1 {
			v.errorf(a.At.Of("timeout_ms"), ap+".timeout_ms", "must be at least 1, got %d", *a.TimeoutMs)
		}
		if a.Group != "" && !nameGrammar.MatchString(a.Group) {
			v.errorf(a.At.Of("group"), ap+".group", "%q must be lowercase letters, digits and _ and start with a letter", a.Group)
		}
		if a.At.Has("group_by") && !k.Mesh {
			v.errorf(a.At.Of("group_by"), ap+".group_by", "group_by only applies to a mesh source (mesh: true); give this device's group in group")
		}
		v.checkNames(b, a, ap)
		v.usedBus[b.Name] = true
	}
}

// meshSource checks an mcp bus whose source is the mesh: the node must be in
// a mesh, the devices are adopted wholesale into groups, and they are called
// with the mesh credential (no token_file).
func (v *validator) meshSource(b *Bus, path string) {
	k := b.MCP
	at := k.At.Of("mesh")
	if !k.Mesh {
		v.errorf(at, path+".mesh", "mesh: false adopts nothing: remove it, or give the source (port, command or url)")
		return
	}
	switch n := v.m.Network; {
	case n == nil || n.Mesh == nil || !n.Mesh.Enabled:
		v.errorf(at, path+".mesh", "the devices of the mesh are learned from its membership: this device must join it (network.mesh.enabled: true, docs/mesh.md)")
	case n.Mesh.KeyFile == "":
		v.errorf(at, path+".mesh", "the devices of the mesh are called with the mesh credential, signed with the mesh keyring: give network.mesh.key_file")
	}
	for name, other := range v.m.Buses {
		if other != b && other.MCP != nil && other.MCP.Mesh && name < b.Name {
			v.errorf(at, path+".mesh", "bus %s adopts the devices of the mesh already; one mesh source adopts them all", name)
		}
	}
	a := k.Adopt
	if a == nil {
		v.errorf(at, path+".adopt", "a mesh source adopts every device's tools wholesale: give adopt (tools, and group_by or group)")
		return
	}
	ap := path + ".adopt"
	switch {
	case a.At.Has("group_by") && a.Group != "":
		v.errorf(a.At.Of("group_by"), ap+".group_by", "give group_by (a group per zone or device) or group (one group for all), not both")
	case a.At.Has("group_by") && a.GroupBy != GroupByZone && a.GroupBy != GroupByDevice:
		v.errorf(a.At.Of("group_by"), ap+".group_by", "must be %s (a group per zone) or %s (a group per device), got %q", GroupByZone, GroupByDevice, a.GroupBy)
	case !a.At.Has("group_by") && a.Group == "":
		v.errorf(a.At.Self, ap, "the devices of the mesh come and go, each into a group: give group_by: %s (or %s), or group", GroupByZone, GroupByDevice)
	}
}

// IsName reports whether s is a name as the manifest writes them (groups,
// capabilities): lowercase letters, digits and _, starting with a letter.
func IsName(s string) bool { return nameGrammar.MatchString(s) }
