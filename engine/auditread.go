package engine

import (
	"time"

	"github.com/physmcp/physmcpd/promcp"
)

// OutcomeRead marks a read_* call in the audit trail (policy
// defaults.audit_all); OutcomeRefused marks a read the policy refused.
const OutcomeRead = "read"

// auditReads reports whether the policy asks for reads in the audit trail.
func (e *Engine) auditReads() bool {
	return e.auditFn != nil && e.p != nil && e.p.Defaults != nil && e.p.Defaults.AuditAll
}

// auditRead records one read_* answer, cached ones included: the trail says
// who read what, and a cached answer is still something a caller learned.
func (e *Engine) auditRead(caller Caller, pt *point, resp promcp.ReadResponse, refused bool, took time.Duration) {
	outcome := OutcomeRead
	if refused {
		outcome = OutcomeRefused
	}
	e.audit(AuditEntry{
		Time:       e.now(),
		Caller:     caller.Identity,
		Role:       caller.Role,
		Tool:       pt.tool,
		Arguments:  map[string]any{},
		Outcome:    outcome,
		Reason:     resp.Detail,
		Applied:    resp.Value,
		Quality:    string(resp.Quality),
		DurationMs: float64(took.Microseconds()) / 1000,
	})
}
