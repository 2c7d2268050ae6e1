//go:build !lite

package mcpserver_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/policy"
)

// roleSession is an in-process mcp-go session with e whose caller has the
// role role holds at each call, on the endpoint of group.
func roleSession(t *testing.T, e *engine.Engine, group string) (*session, *atomic.Value) {
	t.Helper()
	var role atomic.Value
	role.Store(manifest.RoleNone)
	s, err := mcpserver.New(e, mcpserver.Options{Version: "test", Logger: quietLogger(), Group: group, Caller: func(context.Context) engine.Caller {
		return engine.Caller{Identity: "tester", Role: role.Load().(manifest.Role)}
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, sess := listTools(t, inProcessClient(t, s))
	return sess, &role
}

// can_do's constraints name the roles the do_* call itself lets through,
// whatever says so: the manifest's requires_permission, or a policy
// permission rule of the tool's own entry (pump_run: supervisor, admin, over
// the manifest's operator) or of a pattern an adopted tool matches. Where the
// roles that pass are not a role and every role above it ([operator, admin]),
// constraints.roles lists them.
func TestCanDoReportsTheRolesTheCallEnforces(t *testing.T) {
	t.Run("policy entry", func(t *testing.T) {
		s, role := roleSession(t, pumpSkid(t), "operation")
		checkRoles(t, s, role, map[string]any{"semantic_tags": []any{"pump"}, "action": "set", "value": true},
			"do_pump_run", map[string]any{"value": false}, "supervisor", nil)
	})
	t.Run("adopted tool under a pattern", func(t *testing.T) {
		m, diags := manifest.Load("../examples/site/aggregator/physmcp.manifest.yml")
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		path := filepath.Join(t.TempDir(), "agg.policy.yml")
		if err := os.WriteFile(path, []byte(`physmcp_policy_version: "0.1"
capabilities:
  "do_*_pump_speed":
    rules: [{type: permission, require: [operator, admin]}]
`), 0o644); err != nil {
			t.Fatal(err)
		}
		p, diags := policy.Load(path, m)
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		m.Buses, m.Capabilities = nil, nil // adopted below
		e := simEngine(t, m, p, nil)
		adoptInto(t, e, "pump", siteSource(t, "pump"), "plant_room")
		s, role := roleSession(t, e, "plant_room")
		checkRoles(t, s, role, map[string]any{"semantic_tags": []any{"pump"}, "action": "set", "value": 40},
			"do_circulation_pump_speed", map[string]any{"value": 40}, "operator", []any{"operator", "admin"})
	})
}

// checkRoles asks can_do about tool (intent) as every role, then calls it
// with args as each (after the questions: a write may start a cooldown): the
// roles can_do offers it to, with the constraints minRole and roles, are
// those the call does not refuse the role of, and can_do blocks it for the
// others with permission_insufficient.
func checkRoles(t *testing.T, s *session, role *atomic.Value, intent map[string]any, tool string, args map[string]any, minRole string, roles []any) {
	t.Helper()
	every := []manifest.Role{manifest.RoleNone, manifest.RoleOperator, manifest.RoleSupervisor, manifest.RoleAdmin}
	var offered, passing []manifest.Role
	for _, r := range every {
		role.Store(r)
		rep := answeredCanDo(s, intent, tool)
		if cand := findEntry(rep["candidates"], tool); cand != nil {
			offered = append(offered, r)
			c := cand["constraints"].(map[string]any)
			if c["min_role"] != minRole || !slices.Equal(asList(c["roles"]), roles) {
				t.Errorf("can_do as %s: min_role %v, roles %v; want %s, %v", r, c["min_role"], c["roles"], minRole, roles)
			}
		} else if b := findEntry(rep["blocked"], tool); b == nil || b["permission"] != "permission_insufficient" {
			t.Errorf("can_do as %s: %s is neither a candidate nor blocked by role: %v", r, tool, rep)
		}
	}
	for i, r := range every {
		role.Store(r)
		if !refusesRole(t, s, tool, maps(args, "idempotency_key", fmt.Sprintf("k%d", i))) {
			passing = append(passing, r)
		}
	}
	if !slices.Equal(offered, passing) || len(passing) == 0 || string(passing[0]) != minRole {
		t.Errorf("can_do offers %s to %v with min_role %s; the call lets %v through", tool, offered, minRole, passing)
	}
}

// answeredCanDo is s's can_do about intent once the answer about tool is
// in: an aggregator waits engine.AssessTimeout for the device behind an
// adopted tool, and a loaded host can take longer; the late answer then
// stands for the next can_do (engine.LateAnswerTTL).
func answeredCanDo(s *session, intent map[string]any, tool string) map[string]any {
	s.t.Helper()
	deadline := time.Now().Add(engine.LateAnswerTTL)
	for {
		// unscoped: a report of pump_run alone would hold a candidate that
		// needs approval and nothing else, which s.call's invariants refuse
		rep := s.call("can_do", map[string]any{"intent": intent}, false)
		b := findEntry(rep["blocked"], tool)
		late := b != nil && b["permission"] == "source_unreachable" && strings.Contains(fmt.Sprint(b["reason"]), "no answer within can_do's")
		if !late || time.Now().After(deadline) {
			return rep
		}
	}
}

// refusesRole calls tool as s.call does, whether it fails or not, and
// reports whether the role was refused: by the engine (permission_insufficient)
// or before, by mcp-go's tool filter, which answers a tool the role may not
// call as not found (the HTTP edge answers 403).
func refusesRole(t *testing.T, s *session, tool string, args map[string]any) bool {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = tool, args
	res, err := s.c.CallTool(context.Background(), req)
	if err != nil {
		if !strings.Contains(err.Error(), "not found") {
			t.Fatalf("%s: %v", tool, err)
		}
		return true
	}
	out, _ := res.StructuredContent.(map[string]any)
	return out["permission"] == "permission_insufficient"
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// maps is m with k set to v, m unchanged.
func maps(m map[string]any, k string, v any) map[string]any {
	out := map[string]any{k: v}
	for key, val := range m {
		out[key] = val
	}
	return out
}
