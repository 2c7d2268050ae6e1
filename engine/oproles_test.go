package engine_test

import (
	"context"
	"slices"
	"testing"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// can_do's role constraints of an operation tool are what its call
// enforces: the operation's own minimum, and for a start_* or a sequence the
// role checks of each tool it writes (the policy's permission rules on
// do_oven_setpoint and do_transfer_pump). A cancel has only the operation's.
// The transports list the tools to the same roles (Permits).
func TestCanDoRolesOfOperations(t *testing.T) {
	m, diags := manifest.Load("testdata/operations.manifest.yml")
	if m == nil || diags.HasErrors() {
		t.Fatalf("manifest: %s", diags)
	}
	for _, c := range m.Capabilities {
		if c.Name == "tank_level" {
			c.Simulation = &manifest.PointSim{Initial: 50} // the changeover's last step is not interlocked
		}
	}
	e, wire := simEngineWith(t, m, `physmcp_policy_version: "0.1"
capabilities:
  do_oven_setpoint:
    rules: [{type: permission, require: [supervisor, admin]}]
  do_transfer_pump:
    rules: [{type: permission, require: [operator, admin]}]
`)
	ctx := context.Background()
	admin := engine.Caller{Identity: "admin", Role: manifest.RoleAdmin}
	for _, c := range []struct {
		tool    string
		intent  promcp.Intent
		minRole string
		roles   []string
	}{
		{"start_oven_ramp", promcp.Intent{SemanticTags: []string{"ramp"}, Action: "set", Value: 30.0}, "supervisor", nil},
		{"do_cancel_oven_ramp", promcp.Intent{SemanticTags: []string{"ramp"}, Action: "set"}, "operator", nil},
		{"do_changeover", promcp.Intent{SemanticTags: []string{"changeover"}, Action: "set"}, "operator", []string{"operator", "admin"}},
	} {
		rep, err := e.CanDo(ctx, admin, promcp.CanDoRequest{Intent: c.intent, Scope: []string{c.tool}})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(rep.Candidates, func(cand promcp.Candidate) bool { return cand.Capability == c.tool })
		if i < 0 {
			t.Errorf("%s is no candidate for an admin: %+v", c.tool, rep)
			continue
		}
		if got := rep.Candidates[i].Constraints; got.MinRole != c.minRole || !slices.Equal(got.Roles, c.roles) {
			t.Errorf("%s: min_role %q, roles %q; want %q, %q", c.tool, got.MinRole, got.Roles, c.minRole, c.roles)
		}
	}
	// the calls refuse the roles can_do leaves out, before anything is
	// written: the changeover's first step too, whose own role passes
	if r, _ := e.Start(ctx, operator, "start_oven_ramp", promcp.StartRequest{Value: 30.0, IdempotencyKey: "s1"}); r.Permission != promcp.PermissionInsufficient {
		t.Errorf("start_oven_ramp as an operator: %+v", r)
	}
	sup := engine.Caller{Identity: "sup", Role: manifest.RoleSupervisor}
	if r, _ := e.Sequence(ctx, sup, "do_changeover", promcp.SequenceRequest{IdempotencyKey: "q1"}); r.Permission != promcp.PermissionInsufficient {
		t.Errorf("do_changeover as a supervisor: %+v", r)
	}
	if w := wire.log(); len(w) != 0 {
		t.Errorf("writes: %v", w)
	}
	// and the transports list the tools as can_do reports them
	for tool, roles := range map[string][]manifest.Role{
		"start_oven_ramp":     {manifest.RoleSupervisor, manifest.RoleAdmin},
		"do_cancel_oven_ramp": {manifest.RoleOperator, manifest.RoleSupervisor, manifest.RoleAdmin},
		"do_changeover":       {manifest.RoleOperator, manifest.RoleAdmin},
	} {
		for _, r := range []manifest.Role{manifest.RoleNone, manifest.RoleOperator, manifest.RoleSupervisor, manifest.RoleAdmin} {
			if e.Permits(tool, r) != slices.Contains(roles, r) {
				t.Errorf("Permits(%s, %s) = %v", tool, r, e.Permits(tool, r))
			}
		}
	}
}
