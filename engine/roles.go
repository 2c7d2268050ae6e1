package engine

import (
	"slices"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// Permits reports whether role may call tool at all: the roles the manifest
// and the policy require, without the time windows and limits that change
// from one moment to the next. Transports use it to list only the tools a
// caller may use and to refuse the others before they reach the engine.
// can_do is open to every role.
func (e *Engine) Permits(tool string, role manifest.Role) bool {
	if tool == "can_do" {
		return true
	}
	cat := e.catalog()
	for _, t := range cat.tools {
		if t.Name == tool && t.Kind == ToolStream {
			return e.roleAccess(cat.points[t.Capability.ToolName()], role).permission == promcp.Allowed
		}
		if t.Name == tool && t.Operation != nil {
			// read_status_* observes; the others act
			return t.Kind == ToolStatus || e.opRoleAccess(t.Operation, t.Kind, role).permission == promcp.Allowed
		}
	}
	pt, ok := cat.points[tool]
	return ok && e.roleAccess(pt, role).permission == promcp.Allowed
}

// Roles is what a call of tool asks of the caller's role, as can_do's
// constraints say it: the lowest role Permits lets through, and, when some
// role above it is refused, every role that passes.
func (e *Engine) Roles(tool string) (min string, roles []string) {
	return roleConstraint(func(r manifest.Role) bool { return e.Permits(tool, r) })
}

// roleAccess checks the caller's role against the tool's minimum role and the
// policy's permission rules (any-of).
func (e *Engine) roleAccess(pt *point, role manifest.Role) decision {
	if role == manifest.RoleViewer && pt.c.Kind == manifest.KindDo {
		return deny(promcp.PermissionInsufficient, "%s changes the device; the caller has role viewer (read_* and can_do only)", pt.tool)
	}
	if min := e.minRole(pt.c); !role.AtLeast(min) {
		return deny(promcp.PermissionInsufficient, "%s requires role %s or higher; the caller has %s", pt.tool, min, roleName(role))
	}
	if only := pt.c.SourceRoles; only != nil && !slices.Contains(only, role) && !(role == manifest.RoleViewer && slices.Contains(only, manifest.RoleNone)) {
		return deny(promcp.PermissionInsufficient, "the device of %s admits only roles %s; the caller has %s", pt.tool, roleList(only), roleName(role))
	}
	for _, r := range pt.rules {
		if r.Permission != nil && !slices.Contains(r.Permission.Require, role) {
			return deny(promcp.PermissionInsufficient, "the policy allows %s only to roles %s; the caller has %s", pt.tool, roleList(r.Permission.Require), roleName(role))
		}
	}
	return allow()
}

// opRoleAccess is the part of an operation tool's checks that looks at the
// caller's role, as its call makes them: the operation's minimum role, then
// the role checks of each tool it writes (a start_*'s driven point, each
// step of a sequence, a started step's operation too). A cancel has only
// its operation's.
func (e *Engine) opRoleAccess(o *manifest.Operation, kind ToolKind, role manifest.Role) decision {
	if d := e.opAccess(o, role); d.permission != promcp.Allowed {
		return d
	}
	points := e.catalog().points
	switch kind {
	case ToolStart:
		return e.roleAccess(points[o.Target.ToolName()], role)
	case ToolSequence:
		for i, s := range o.Steps {
			d, target := allow(), s.Tool
			if s.Start != nil {
				target = s.Start.Target.ToolName()
				d = e.opAccess(s.Start, role)
			}
			if d.permission == promcp.Allowed {
				d = e.roleAccess(points[target], role)
			}
			if d.permission != promcp.Allowed {
				return deny(d.permission, "step %d (%s): %s", i+1, s.Tool, d.reason)
			}
		}
	}
	return allow()
}

// actingRoles are the roles a tool can require, lowest first (viewer ranks
// with none but never acts).
var actingRoles = [...]manifest.Role{manifest.RoleNone, manifest.RoleOperator, manifest.RoleSupervisor, manifest.RoleAdmin}

// roleConstraint is what can_do reports of the roles a tool admits, given
// the role checks its call makes (passes): the lowest role that passes them
// all, and, only when some role above that one does not pass (a permission
// rule [operator, admin]), every role that does, since min_role alone reads
// as "this role or higher". A candidate always has a role that passes (the
// caller's), so min is empty only for a tool no role may call.
func roleConstraint(passes func(manifest.Role) bool) (min string, roles []string) {
	var ok [len(actingRoles)]bool
	lowest, gap := -1, false
	for i, r := range actingRoles {
		ok[i] = passes(r)
		switch {
		case ok[i] && lowest < 0:
			lowest = i
		case !ok[i] && lowest >= 0:
			gap = true
		}
	}
	if lowest < 0 {
		return "", nil
	}
	if gap { // the list only then: every do_* candidate asks, few tools have a gap
		for i, r := range actingRoles {
			if ok[i] {
				roles = append(roles, string(r))
			}
		}
	}
	return string(actingRoles[lowest]), roles
}
