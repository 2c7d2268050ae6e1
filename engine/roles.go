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
			return t.Kind == ToolStatus || e.opAccess(t.Operation, role).permission == promcp.Allowed
		}
	}
	pt, ok := cat.points[tool]
	return ok && e.roleAccess(pt, role).permission == promcp.Allowed
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
	for _, r := range pt.rules {
		if r.Permission != nil && !slices.Contains(r.Permission.Require, role) {
			return deny(promcp.PermissionInsufficient, "the policy allows %s only to roles %s; the caller has %s", pt.tool, roleList(r.Permission.Require), roleName(role))
		}
	}
	return allow()
}
