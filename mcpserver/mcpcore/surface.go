package mcpcore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// Surface is the tools of one endpoint (a group's, see GroupTools) and the
// way read_* and can_do calls on them reach the engine.
type Surface struct {
	e     *engine.Engine
	m     *manifest.Manifest
	group string
	// site: an aggregator's site endpoint (SiteGroup), whose can_do names
	// the endpoint of each tool.
	site bool
	now  func() time.Time
	// view is the endpoint's tools; Refresh replaces it when the engine's
	// tools change (an aggregator adopting a device).
	view atomic.Pointer[surfaceView]
}

type surfaceView struct {
	tools []engine.Tool
	caps  map[string]*manifest.Capability // by tool name
	// served names the tools of this endpoint when it serves only some of
	// the device's (a group); nil when it serves them all.
	served map[string]bool
}

// NewSurface is group's endpoint of e; now is the clock for the bodies the
// surface writes itself (nil: time.Now).
func NewSurface(e *engine.Engine, group string, now func() time.Time) (*Surface, error) {
	tools, err := GroupTools(e, group)
	if err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	s := &Surface{e: e, m: e.Manifest(), group: group, now: now, site: group == SiteGroup}
	s.set(tools, len(tools) < len(e.Tools()) && !s.site)
	return s, nil
}

// Refresh takes the engine's tools again, after they changed. A group
// whose capabilities are all gone keeps its endpoint with can_do alone.
func (s *Surface) Refresh() {
	tools, err := GroupTools(s.e, s.group)
	if err != nil { // no capability left in the group
		all := s.e.Tools()
		tools = all[len(all)-1:] // can_do
	}
	s.set(tools, err != nil || len(tools) < len(s.e.Tools()) && !s.site)
}

func (s *Surface) set(tools []engine.Tool, partial bool) {
	v := &surfaceView{tools: tools, caps: map[string]*manifest.Capability{}}
	if partial {
		v.served = map[string]bool{}
	}
	for _, t := range tools {
		v.caps[t.Name] = t.Capability
		if v.served != nil {
			v.served[t.Name] = true
		}
	}
	s.view.Store(v)
}

// Tools are the endpoint's engine tools, in the engine's order.
func (s *Surface) Tools() []engine.Tool { return s.view.Load().tools }

// Capability is the capability behind a read_* or do_* tool of the endpoint.
func (s *Surface) Capability(tool string) *manifest.Capability { return s.view.Load().caps[tool] }

// Read answers a read_* call. problem, when not empty, says why the
// arguments are unusable (see Arguments); a read takes none. isError marks a
// body whose quality is error; err is for failures with no body at all.
func (s *Surface) Read(ctx context.Context, caller engine.Caller, name string, args map[string]any, problem string) (body promcp.ReadResponse, isError bool, err error) {
	if problem != "" || len(args) > 0 {
		if problem == "" {
			problem = fmt.Sprintf("%s takes no arguments (got %s)", name, strings.Join(slices.Sorted(maps.Keys(args)), ", "))
		}
		var unit *string
		if c := s.Capability(name); c != nil && c.Unit != "" {
			unit = &c.Unit
		}
		return promcp.ReadResponse{Value: nil, Unit: unit, Timestamp: promcp.Time(s.now()),
			Quality: promcp.QualityError, DeviceID: s.m.Device.ID, Detail: problem}, true, nil
	}
	resp, err := s.e.Read(ctx, caller, name)
	if err != nil {
		return promcp.ReadResponse{}, false, err
	}
	return resp, resp.Quality == promcp.QualityError, nil
}

// CanDo answers a can_do call on the endpoint's tools. A malformed request is
// not an error: the report itself explains what to fix.
func (s *Surface) CanDo(ctx context.Context, caller engine.Caller, args map[string]any, problem string) (promcp.CapabilityReport, error) {
	var cr promcp.CanDoRequest
	if problem == "" {
		var err error
		if cr, err = promcp.ParseCanDo(args); err != nil {
			problem = err.Error()
		}
	}
	if problem != "" {
		return promcp.MalformedRequestReport(problem, s.m.Device.ID, s.now()), nil
	}
	if empty := s.scopeCanDo(&cr); empty != "" {
		rep := promcp.MalformedRequestReport(empty, s.m.Device.ID, s.now())
		rep.Unroutable[0].Reason = promcp.NoProducer
		return rep, nil
	}
	rep, err := s.e.CanDo(ctx, caller, cr)
	if err != nil {
		return rep, err
	}
	s.trimReport(&rep)
	promcp.CapReads(&rep, cr.Limit())
	if s.site {
		s.nameEndpoints(&rep)
	}
	return rep, nil
}

// nameEndpoints says, on the site endpoint, which endpoint serves each tool.
func (s *Surface) nameEndpoints(rep *promcp.CapabilityReport) {
	group := map[string]string{}
	for _, t := range s.e.Tools() {
		if t.Capability != nil {
			group[t.Name] = t.Capability.Group
		}
	}
	for i := range rep.Candidates {
		rep.Candidates[i].Endpoint = GroupPath(group[rep.Candidates[i].Capability])
	}
	for i := range rep.Blocked {
		if rep.Blocked[i].Permission != promcp.NotServed { // no endpoint serves it
			rep.Blocked[i].Endpoint = GroupPath(group[rep.Blocked[i].Capability])
		}
	}
}

// Arguments returns a call's arguments as an object; missing ones are
// empty, anything else is a problem described in words.
func Arguments(raw any) (map[string]any, string) {
	switch args := raw.(type) {
	case nil:
		return map[string]any{}, ""
	case map[string]any:
		return args, ""
	default:
		return nil, "arguments must be a JSON object"
	}
}

// scopeCanDo limits a can_do request to the tools this endpoint serves. A
// scope the caller gave keeps the entries that name those tools (the device id
// names them all); when none is left, empty says why nothing can match.
func (s *Surface) scopeCanDo(req *promcp.CanDoRequest) (empty string) {
	served := s.view.Load().served
	if served == nil {
		return ""
	}
	var names []string
	for name := range served {
		if name != "can_do" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "this endpoint serves no capability at the moment (its devices are no longer adopted)"
	}
	if len(req.Scope) == 0 {
		req.Scope = names
		return ""
	}
	var kept []string
	for _, sc := range req.Scope {
		switch {
		case sc == s.m.Device.ID:
			kept = append(kept, names...)
		case served[sc] || served["read_"+sc] || served["do_"+sc]:
			kept = append(kept, sc)
		}
	}
	if len(kept) == 0 {
		return fmt.Sprintf("scope [%s] names nothing this endpoint serves (%s)", strings.Join(req.Scope, ", "), strings.Join(names, ", "))
	}
	req.Scope = kept
	return ""
}

// trimReport drops related reads this endpoint does not serve: a client
// connected here cannot call them.
func (s *Surface) trimReport(rep *promcp.CapabilityReport) {
	served := s.view.Load().served
	if served == nil {
		return
	}
	reads := rep.Context.RelatedReads[:0]
	for _, r := range rep.Context.RelatedReads {
		if served[r] {
			reads = append(reads, r)
		}
	}
	rep.Context.RelatedReads = reads
	for tool := range rep.Context.CurrentObservations {
		if !served[tool] {
			delete(rep.Context.CurrentObservations, tool)
		}
	}
}
