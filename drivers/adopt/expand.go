package adopt

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// expandRetry is the wait between attempts to list a source's tools at start-up.
const expandRetry = time.Second

// Device is a source whose tools are adopted wholesale (its Adopt section
// says which, and into which group): an mcp bus of the manifest, or a
// device found some other way.
type Device struct {
	Bus    string
	Source *manifest.MCPBus
}

// DeviceSource lists the devices an aggregator (or proxy) adopts wholesale.
// Static is the manifest's own list; a mesh is another source.
type DeviceSource interface {
	Devices(ctx context.Context) ([]Device, error)
}

// Static is the manifest's mcp buses that have an adopt section (but for
// the mesh source, whose devices are learned while serving: package
// meshadopt).
type Static struct{ M *manifest.Manifest }

func (s Static) Devices(context.Context) ([]Device, error) {
	var out []Device
	for _, name := range slices.Sorted(maps.Keys(s.M.Buses)) {
		if b := s.M.Buses[name]; b.MCP != nil && b.MCP.Adopt != nil && !b.MCP.Mesh {
			out = append(out, Device{Bus: name, Source: b.MCP})
		}
	}
	return out, nil
}

// Expand adds to m a capability for each tool that src's devices adopt,
// listing each device's tools through its bus in buses (opened here, and
// added to buses and m, for a device that is not a bus of m yet). It waits
// for each device until it answers or ctx ends. A tool whose name is taken
// already (by the manifest's own capabilities, or by a device before it in
// bus name order) or is no tool name is not served: it goes to
// m.NotServed, with the reason, and is logged.
func Expand(ctx context.Context, m *manifest.Manifest, buses map[string]drivers.Bus, src DeviceSource, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	devices, err := src.Devices(ctx)
	if err != nil {
		return err
	}
	owner := map[string]string{}
	for _, c := range m.Capabilities {
		owner[c.ToolName()] = "this device's own capability (bus " + c.Binding.Bus + ")"
	}
	for _, d := range devices {
		if d.Source == nil || d.Source.Adopt == nil {
			return fmt.Errorf("device %s: nothing to adopt", d.Bus)
		}
		if _, known := m.Buses[d.Bus]; !known {
			if m.Buses == nil {
				m.Buses = map[string]*manifest.Bus{}
			}
			m.Buses[d.Bus] = &manifest.Bus{Name: d.Bus, Type: manifest.BusMCP, MCP: d.Source}
			buses[d.Bus] = New(d.Bus, d.Source, logger)
		}
		bus, ok := buses[d.Bus].(*Bus)
		if !ok {
			return fmt.Errorf("bus %s: not an mcp bus", d.Bus)
		}
		tools, err := bus.listTools(ctx, logger)
		if err != nil {
			return fmt.Errorf("bus %s: adopt: %w", d.Bus, err)
		}
		caps, refused := Adopted(d.Bus, d.Bus, d.Source.Adopt, tools, logger)
		var added []string
		for _, c := range caps {
			if o, taken := owner[c.ToolName()]; taken {
				refused = append(refused, Collision(c, d.Bus, "bus "+d.Bus, o))
				continue
			}
			owner[c.ToolName()] = "bus " + d.Bus + " (first in bus name order)"
			added = append(added, c.ToolName())
			m.Capabilities = append(m.Capabilities, c)
		}
		for _, ns := range refused {
			logger.Warn("adopted capability not served", "bus", d.Bus, "tool", ns.Capability.ToolName(), "reason", ns.Reason)
		}
		m.NotServed = append(m.NotServed, refused...)
		logger.Info("adopted", "bus", d.Bus, "source", bus.Describe(), "tools", strings.Join(added, " "))
	}
	return nil
}

// Collision is c of device (called who in the reason) not served because
// owner serves its name already.
func Collision(c *manifest.Capability, device, who, owner string) *manifest.NotServed {
	return &manifest.NotServed{Capability: c, Device: device, Reason: fmt.Sprintf(
		"name_collision: %s of %s is not served: %s serves that name; name the devices apart with adopt.names: %s",
		c.ToolName(), who, owner, manifest.NamesDevicePrefixed)}
}

// listTools waits for the source and lists its tools.
func (b *Bus) listTools(ctx context.Context, logger *slog.Logger) ([]mcp.Tool, error) {
	var last string
	for {
		tools, err := b.tools(ctx)
		if err == nil {
			return tools, nil
		}
		if err.Error() != last {
			logger.Warn("waiting for an adopted source to list its tools", "bus", b.name, "source", b.Describe(), "err", err)
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the source never answered: %v", err)
		case <-time.After(expandRetry):
		}
	}
}

func (b *Bus) tools(ctx context.Context) ([]mcp.Tool, error) {
	c, err := b.client(ctx)
	if err != nil {
		return nil, err
	}
	res, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		b.drop(c, err)
		return nil, err
	}
	return res.Tools, nil
}

// Adopted turns the tools of a source (device, as names calls it) into
// capabilities of this device as adopt says: named by adopt's prefix and
// names rule, described by the first sentence of the source's description,
// typed and bounded by its schemas, tagged with adopt's tags and the words
// of the source's name. A do_ tool is taken only with the source's read_ of
// the same name, which reads it back; adopted do_ tools need at least role
// operator here, whatever the source asks. A tool whose name here would be
// no tool name (too long, say) is returned as not served.
func Adopted(bus, device string, a *manifest.Adopt, tools []mcp.Tool, logger *slog.Logger) (caps []*manifest.Capability, unnamed []*manifest.NotServed) {
	reads := map[string]bool{}
	for _, t := range tools {
		if strings.HasPrefix(t.Name, "read_") {
			reads[t.Name] = true
		}
	}
	for _, t := range tools {
		kind, name, ok := strings.Cut(t.Name, "_")
		if !ok || (kind != "read" && kind != "do") || (kind == "do" && a.Tools != manifest.AdoptAll) {
			continue
		}
		c := &manifest.Capability{
			Name:         a.CapabilityName(device, name),
			Kind:         manifest.Kind(kind),
			Description:  firstSentence(t.Description),
			SemanticTags: tags(a.SemanticTags, name),
			CacheTTLMs:   a.CacheTTLMs,
			TimeoutMs:    a.TimeoutMs,
			Group:        a.Group,
			Binding:      manifest.Binding{Bus: bus, Type: manifest.BusMCP, Virtual: &manifest.VirtualBinding{Tool: t.Name}},
		}
		schema := t.OutputSchema.Properties
		if kind == "do" {
			if !reads["read_"+name] {
				logger.Warn("not adopted: a do_ tool needs the source's read_ of the same name to read it back", "bus", bus, "tool", t.Name)
				continue
			}
			c.Binding.Virtual.ReadTool = "read_" + name
			c.RequiresPermission = manifest.RoleOperator
			schema = t.InputSchema.Properties
		}
		typeFrom(c, schema)
		if err := sourceRoles(c, t.Meta); err != nil {
			unnamed = append(unnamed, &manifest.NotServed{Capability: c, Device: device,
				Reason: fmt.Sprintf("unknown_role: %s of %s cannot be served: %v", t.Name, device, err)})
			continue
		}
		if problem := manifest.ToolNameProblem(c.ToolName()); problem != "" {
			unnamed = append(unnamed, &manifest.NotServed{Capability: c, Device: device,
				Reason: fmt.Sprintf("invalid_name: %s of %s cannot be served: %s", t.Name, device, problem)})
			continue
		}
		caps = append(caps, c)
	}
	return caps, unnamed
}

// sourceRoles makes c ask of this node's callers at least the roles the
// source asks of its own for the tool (meta, its _meta in tools/list): the
// source sees the role it gives this node (a token's, the mesh's), never
// the caller's, so without this an operator here would reach a tool the
// source keeps for supervisors. A role not known here is an error: the
// tool is not served rather than guessed open.
func sourceRoles(c *manifest.Capability, meta *mcp.Meta) error {
	if meta == nil {
		return nil
	}
	if raw, ok := meta.AdditionalFields[promcp.MetaMinRole]; ok {
		min, _ := raw.(string)
		if !manifest.ValidRole(manifest.Role(min)) {
			return fmt.Errorf("the source asks role %v (_meta %s), which is not a role here (%s)", raw, promcp.MetaMinRole, manifest.RoleNames())
		}
		if manifest.Role(min).Rank() > c.RequiresPermission.Rank() {
			c.RequiresPermission = manifest.Role(min)
		}
	}
	if raw, ok := meta.AdditionalFields[promcp.MetaRoles]; ok {
		list, ok := raw.([]any)
		if !ok {
			return fmt.Errorf("its _meta %s is %v, not a list of roles", promcp.MetaRoles, raw)
		}
		c.SourceRoles = []manifest.Role{}
		for _, r := range list {
			s, _ := r.(string)
			if !manifest.ValidRole(manifest.Role(s)) {
				return fmt.Errorf("the source admits role %v (_meta %s), which is not a role here (%s)", r, promcp.MetaRoles, manifest.RoleNames())
			}
			c.SourceRoles = append(c.SourceRoles, manifest.Role(s))
		}
	}
	return nil
}

// typeFrom sets the data type, unit, enum values and range from a tool's
// schema properties (the value, and a read's unit).
func typeFrom(c *manifest.Capability, props map[string]any) {
	var value struct {
		Type    any      `json:"type"`
		Enum    []any    `json:"enum"`
		Minimum *float64 `json:"minimum"`
		Maximum *float64 `json:"maximum"`
	}
	var unit struct {
		Const string `json:"const"`
	}
	remarshal(props["value"], &value)
	remarshal(props["unit"], &unit)
	types := []string{}
	switch t := value.Type.(type) {
	case string:
		types = append(types, t)
	case []any:
		for _, x := range t {
			if s, ok := x.(string); ok {
				types = append(types, s)
			}
		}
	}
	switch {
	case slices.Contains(types, "integer"):
		c.DataType = manifest.TypeInt
	case slices.Contains(types, "number"):
		c.DataType = manifest.TypeFloat
	case slices.Contains(types, "boolean"):
		c.DataType = manifest.TypeBool
	case len(value.Enum) > 0:
		c.DataType = manifest.TypeEnum
		for _, v := range value.Enum {
			if s, ok := v.(string); ok {
				c.EnumValues = append(c.EnumValues, s)
			}
		}
	default:
		c.DataType = manifest.TypeString
	}
	c.Unit = unit.Const
	if value.Minimum != nil || value.Maximum != nil {
		c.Range = &manifest.Range{Min: value.Minimum, Max: value.Maximum}
	}
}

func remarshal(in, out any) {
	if in == nil {
		return
	}
	if b, err := json.Marshal(in); err == nil {
		_ = json.Unmarshal(b, out)
	}
}

func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i >= 0 {
		return s[:i+1]
	}
	return strings.TrimSpace(s)
}

func tags(extra []string, name string) []string {
	out := slices.Clone(extra)
	for _, w := range strings.Split(name, "_") {
		if w != "" && !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}
