package manifest

import (
	"os"

	"github.com/physmcp/physmcpd/internal/strictyaml"
)

// Version is the PhysMCP manifest version this physmcpd reads.
const Version = "0.1"

// Parse decodes and validates a manifest. It returns every finding at once,
// sorted by position; the manifest is nil when any finding is an error.
// On success every binding has its typed part filled with defaults applied.
func Parse(file string, data []byte) (*Manifest, strictyaml.Diags) {
	root, diags := strictyaml.Parse(file, data)
	if root == nil {
		return nil, diags
	}
	m := &Manifest{File: file}
	d := strictyaml.NewDecoder(file, &diags)
	splitOperations(d, root, m)
	d.Decode(root, m, "")
	(&validator{d: d, m: m}).run()
	diags.Sort()
	if diags.HasErrors() {
		return nil, diags
	}
	return m, diags
}

// Load reads and parses the manifest at path.
func Load(path string) (*Manifest, strictyaml.Diags) {
	data, err := os.ReadFile(path)
	if err != nil {
		var diags strictyaml.Diags
		diags.Errorf(strictyaml.Pos{File: path}, "cannot read the manifest: %v", err)
		return nil, diags
	}
	return Parse(path, data)
}

// Bus returns the bus named name, or nil.
func (m *Manifest) Bus(name string) *Bus {
	if m == nil {
		return nil
	}
	return m.Buses[name]
}

// Tool returns the capability that becomes the tool named tool, or nil.
func (m *Manifest) Tool(tool string) *Capability {
	if m == nil {
		return nil
	}
	for _, c := range m.Capabilities {
		if c.ToolName() == tool {
			return c
		}
	}
	return nil
}
