package promcp

import (
	"fmt"
	"slices"
)

// DeriveFeasible sets rep.Feasible as proMCP derives it: true iff some
// candidate is allowed and nothing is unroutable. A feasible:false must be
// explained under blocked or unroutable, so when no candidate is allowed each
// candidate waiting for a person's approval is listed under blocked as well
// (a report of approval-only candidates would otherwise be bare); when one is
// allowed, such entries are left out again (a merged mesh report may have
// gathered them from a node where none was).
func DeriveFeasible(rep *CapabilityReport) {
	allowed := slices.ContainsFunc(rep.Candidates, func(c Candidate) bool { return c.Permission == Allowed })
	rep.Feasible = allowed && len(rep.Unroutable) == 0
	awaitsApproval := func(b Blocked) bool {
		return b.Permission == RequiresHumanApproval && slices.ContainsFunc(rep.Candidates, func(c Candidate) bool {
			return c.Permission == RequiresHumanApproval && c.Capability == b.Capability && c.Source == b.Source && c.DeviceID == b.DeviceID
		})
	}
	if allowed {
		rep.Blocked = slices.DeleteFunc(rep.Blocked, awaitsApproval)
		return
	}
	for _, c := range rep.Candidates {
		if c.Permission != RequiresHumanApproval {
			continue
		}
		b := Blocked{
			Capability: c.Capability, Source: c.Source, Permission: c.Permission,
			Reason:     fmt.Sprintf("a person must approve each call of %s before it acts; it is listed under candidates with its constraints", c.Capability),
			Confidence: c.Confidence, MatchReasons: c.MatchReasons, AdoptedFrom: c.AdoptedFrom, DeviceID: c.DeviceID, Endpoint: c.Endpoint,
		}
		if !slices.ContainsFunc(rep.Blocked, func(o Blocked) bool {
			return o.Permission == b.Permission && o.Capability == b.Capability && o.Source == b.Source && o.DeviceID == b.DeviceID
		}) {
			rep.Blocked = append(rep.Blocked, b)
		}
	}
}
