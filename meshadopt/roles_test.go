package meshadopt_test

import (
	"context"
	"crypto/rand"
	"slices"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mesh"
	"github.com/physmcp/physmcpd/meshadopt"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/promcp"
)

const fan, temp = "do_greenhouse_controller_01_vent_fan", "read_greenhouse_controller_01_air_temperature"

// The aggregator asks of its own callers at least the roles the device asks
// of its callers, since the device sees the mesh role it gives the
// aggregator, never theirs. A device whose do_vent_fan needs a supervisor
// (and whose air temperature an operator), and which gives the mesh role
// supervisor so that the aggregator can adopt it: an operator is refused at
// the aggregator, nothing sent to the device; a viewer cannot read the
// temperature there; can_do does not offer the write to an operator; a
// supervisor passes. Before, adopted do_* needed operator and reads
// nothing, whatever the device asked: an operator's write reached the
// device as the mesh role's.
func TestAggregatorAsksTheRolesTheDeviceAsks(t *testing.T) {
	agg, dev := adoptGreenhouse(t, `identity: {mesh: {role: supervisor}}`, func(c *manifest.Capability) {
		switch c.ToolName() {
		case "do_vent_fan":
			c.RequiresPermission = manifest.RoleSupervisor
		case "read_air_temperature":
			c.RequiresPermission = manifest.RoleOperator
		}
	})
	ctx := context.Background()
	op := engine.Caller{Identity: "op", Role: manifest.RoleOperator}
	if r, err := agg.Do(ctx, op, fan, promcp.DoRequest{Value: true, IdempotencyKey: "k-op"}); err != nil || r.Permission != promcp.PermissionInsufficient {
		t.Errorf("an operator's %s: %+v %v; want permission_insufficient at the aggregator", fan, r, err)
	}
	if n, _ := calls(dev, "do_vent_fan"); n != 0 {
		t.Errorf("%d calls of do_vent_fan reached the device for an operator it refuses", n)
	}
	if agg.Permits(fan, manifest.RoleOperator) || !agg.Permits(fan, manifest.RoleSupervisor) {
		t.Errorf("the aggregator lets an operator call %s (%v), or not a supervisor (%v)", fan, agg.Permits(fan, manifest.RoleOperator), agg.Permits(fan, manifest.RoleSupervisor))
	}
	if agg.Permits(temp, manifest.RoleViewer) || !agg.Permits(temp, manifest.RoleOperator) {
		t.Errorf("the aggregator lets a viewer read %s (%v), or not an operator (%v)", temp, agg.Permits(temp, manifest.RoleViewer), agg.Permits(temp, manifest.RoleOperator))
	}
	intent := promcp.CanDoRequest{Intent: promcp.Intent{SemanticTags: []string{"fan"}, Action: "set", Value: true}}
	if rep := answeredCanDo(t, agg, op, intent); slices.ContainsFunc(rep.Candidates, func(c promcp.Candidate) bool { return c.Capability == fan }) {
		t.Errorf("can_do offers %s to an operator: %+v", fan, rep.Candidates)
	}

	sup := engine.Caller{Identity: "sup", Role: manifest.RoleSupervisor}
	rep := answeredCanDo(t, agg, sup, intent)
	if i := slices.IndexFunc(rep.Candidates, func(c promcp.Candidate) bool { return c.Capability == fan }); i < 0 || rep.Candidates[i].Constraints.MinRole != string(manifest.RoleSupervisor) {
		t.Errorf("can_do for a supervisor: %+v; want %s with min_role supervisor", rep, fan)
	}
	if r, err := agg.Do(ctx, sup, fan, promcp.DoRequest{Value: true, IdempotencyKey: "k-sup"}); err != nil || r.Status != promcp.StatusSuccess {
		t.Errorf("a supervisor's %s: %+v %v", fan, r, err)
	}
	if n, _ := calls(dev, "do_vent_fan"); n != 1 {
		t.Errorf("%d calls of do_vent_fan reached the device, want 1 (the supervisor's)", n)
	}
}

// A device that admits only some roles ([operator, admin], not supervisor)
// and gives the mesh role admin: the aggregator admits the same roles, so a
// supervisor is refused there (the device would take the call as admin's).
func TestAggregatorAdmitsOnlyTheRolesTheDeviceAdmits(t *testing.T) {
	agg, dev := adoptGreenhouse(t, `identity: {mesh: {role: admin}}
capabilities:
  do_vent_fan:
    rules: [{type: permission, require: [operator, admin]}]
`, nil)
	ctx := context.Background()
	sup := engine.Caller{Identity: "sup", Role: manifest.RoleSupervisor}
	if r, err := agg.Do(ctx, sup, fan, promcp.DoRequest{Value: true, IdempotencyKey: "k-sup"}); err != nil || r.Permission != promcp.PermissionInsufficient {
		t.Errorf("a supervisor's %s: %+v %v; want permission_insufficient at the aggregator", fan, r, err)
	}
	if n, _ := calls(dev, "do_vent_fan"); n != 0 {
		t.Errorf("%d calls of do_vent_fan reached the device for a supervisor it refuses", n)
	}
	for role, want := range map[manifest.Role]bool{manifest.RoleOperator: true, manifest.RoleSupervisor: false, manifest.RoleAdmin: true} {
		if got := agg.Permits(fan, role); got != want {
			t.Errorf("the aggregator lets %s call %s: %v, want %v", role, fan, got, want)
		}
	}
	op := engine.Caller{Identity: "op", Role: manifest.RoleOperator}
	if r, err := agg.Do(ctx, op, fan, promcp.DoRequest{Value: true, IdempotencyKey: "k-op"}); err != nil || r.Status != promcp.StatusSuccess {
		t.Errorf("an operator's %s: %+v %v", fan, r, err)
	}
}

// adoptGreenhouse serves the examples/mesh greenhouse controller under the
// policy text (edit, when not nil, changes its capabilities first) and
// returns the mesh aggregator that adopted it, and the device's engine.
func adoptGreenhouse(t *testing.T, devicePolicy string, edit func(*manifest.Capability)) (*engine.Engine, *engine.Engine) {
	t.Helper()
	key := make([]byte, 32)
	rand.Read(key)
	keys := [][]byte{key}
	dm, _ := load(t, "../examples/mesh/greenhouse")
	if edit != nil {
		for _, c := range dm.Capabilities {
			edit(c)
		}
	}
	dp, diags := policy.Parse("device.policy.yml", []byte("physmcp_policy_version: \"0.1\"\n"+devicePolicy), dm)
	if dp == nil || diags.HasErrors() {
		t.Fatal(diags)
	}
	url, dev := serveDevice(t, dm, dp, keys, make(chan string))
	m, p := load(t, "../examples/site/mesh-aggregator")
	agg := simEngine(t, m, p)
	a, err := meshadopt.New(meshadopt.Config{Source: m.MeshSource(), Node: "site_mesh_aggregator_01", Keys: keys, Logger: quiet}, &members{peers: []mesh.Peer{{
		NodeID: "greenhouse_controller_01", DeviceID: "greenhouse_controller_01", Zone: "greenhouse_a", Profile: "full",
		Endpoint: url, CapsHash: "h", State: mesh.Alive, Since: time.Now()}}}, agg)
	if err != nil {
		t.Fatal(err)
	}
	a.Sync(context.Background())
	if _, ok := served(agg)[fan]; !ok {
		t.Fatalf("%s is not served: %v", fan, served(agg))
	}
	return agg, dev
}
