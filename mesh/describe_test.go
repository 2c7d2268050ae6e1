package mesh_test

import (
	"slices"
	"testing"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mesh"
)

// The manifest's descriptive keys change no behaviour, so physmcp/manifest
// is where a user sees them.
func TestDescribeShowsDescriptiveKeys(t *testing.T) {
	m := &manifest.Manifest{
		Device: manifest.Device{ID: "d1", Type: "pump", FirmwareVersion: "2.4.1", HardwareRevision: "C",
			Certification: []string{"CE", "UL508"}},
		Network: &manifest.Network{Protocols: []*manifest.Protocol{{Type: "ip", Address: "192.0.2.10", MCPPort: 8080, Role: "native"}}},
	}
	d := mesh.Describe(m, "full", nil).Device
	if d.FirmwareVersion != "2.4.1" || d.HardwareRevision != "C" || !slices.Equal(d.Certification, []string{"CE", "UL508"}) {
		t.Errorf("device = %+v, want firmware 2.4.1, hardware C, certification CE UL508", d)
	}
	want := []mesh.DocumentProtocol{{Type: "ip", Address: "192.0.2.10", MCPPort: 8080, Role: "native"}}
	if !slices.Equal(d.Protocols, want) {
		t.Errorf("protocols = %+v, want %+v", d.Protocols, want)
	}
}
