package engine_test

import (
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// A viewer ranks with none for reading but is refused every do_*, even one
// that role none may call (do_night_pump requires no role; its time window
// is what blocks none).
func TestViewerNeverWrites(t *testing.T) {
	r := newRig(t)
	v := engine.Caller{Identity: "serial", Role: manifest.RoleViewer}
	none := engine.Caller{Identity: "anyone", Role: manifest.RoleNone}
	if !r.e.Permits("read_water_temperature", v.Role) || !r.e.Permits("can_do", v.Role) {
		t.Error("a viewer may not read or ask can_do")
	}
	if r.e.Permits("do_night_pump", v.Role) || !r.e.Permits("do_night_pump", none.Role) {
		t.Error("do_night_pump: want it hidden from a viewer only")
	}
	pump := promcp.Intent{SemanticTags: []string{"pump"}, Action: "set", Value: true}
	if got, _ := permissionFor(r.canDo(t, none, pump), "do_night_pump"); got != promcp.PolicyDenied {
		t.Fatalf("role none: %q, want the time window to block", got)
	}
	if got, _ := permissionFor(r.canDo(t, v, pump), "do_night_pump"); got != promcp.PermissionInsufficient {
		t.Errorf("viewer: can_do %q", got)
	}
	before := r.writes(t)
	if resp := r.do(t, v, "do_night_pump", true, "k1"); resp.Permission != promcp.PermissionInsufficient || !strings.Contains(resp.Reason, "role viewer") {
		t.Errorf("viewer do_: %+v", resp)
	}
	if r.writes(t) != before {
		t.Error("a viewer's do_ wrote")
	}
}
