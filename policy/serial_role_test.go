package policy

import (
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/manifest"
)

// A serial peer is not a local user: viewer unless the policy says otherwise,
// and the key is checked like the other roles, at its FILE:LINE:COL.
func TestSerialRole(t *testing.T) {
	m := loadManifest(t, greenhouseM)
	base := readFile(t, greenhouse)
	with := func(role string) string {
		return strings.Replace(base, "  local_role: operator\n", "  local_role: operator\n  serial_role: "+role+"\n", 1)
	}
	p, diags := Parse(greenhouse, []byte(base), m)
	if p == nil || diags.HasErrors() {
		t.Fatal(diags)
	}
	if p.SerialRole() != manifest.RoleViewer || p.LocalRole() != manifest.RoleOperator {
		t.Errorf("default serial role %s (local %s), want viewer", p.SerialRole(), p.LocalRole())
	}
	if (*Policy)(nil).SerialRole() != manifest.RoleViewer {
		t.Error("without a policy the serial role is not viewer")
	}
	for _, role := range []manifest.Role{manifest.RoleViewer, manifest.RoleOperator} {
		p, diags := Parse(greenhouse, []byte(with(string(role))), m)
		if p == nil || len(diags) != 0 || p.SerialRole() != role {
			t.Errorf("serial_role %s: %v %s", role, p.SerialRole(), diags)
		}
	}
	_, diags = Parse(greenhouse, []byte(with("root")), m)
	want := greenhouse + `:15:16: identity.serial_role: unknown role "root"; expected "viewer" or one of`
	if len(diags) != 1 || !strings.HasPrefix(diags[0].String(), want) {
		t.Errorf("serial_role root:\n%s\nwant %s", diags, want)
	}
}
