package engine

import (
	"context"
	"time"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// Read-only views for a status page. None of them writes, and only Peek may
// read from a device, no more often than its maxAge allows.

// Peek answers like Read, with the same access checks, but serves the latest
// reading while it is younger than maxAge or the capability's cache TTL,
// whichever is longer: however many pages poll it, a point is read from its
// device at most once per that age.
func (e *Engine) Peek(ctx context.Context, caller Caller, tool string, maxAge time.Duration) (promcp.ReadResponse, error) {
	pt, err := e.lookup(tool, manifest.KindRead)
	if err != nil {
		return promcp.ReadResponse{}, err
	}
	if d := e.access(pt, caller); d.permission == promcp.Allowed {
		pt.mu.Lock()
		r := pt.last
		pt.mu.Unlock()
		if r != nil && e.now().Sub(r.at) < max(maxAge, pt.c.CacheTTL()) {
			return e.answer(pt, r), nil
		}
	}
	return e.Read(ctx, caller, tool)
}

// ActionState is what stands between a caller and a do_* call now, before
// any value is given: role and time window, then rate limits and cooldown.
type ActionState struct {
	// Permission is allowed, or why a call would be refused now.
	Permission promcp.Permission
	Reason     string
	// ClearsAt is when the refusal clears by itself (zero: it does not).
	ClearsAt time.Time
	// LastWrite is the latest write charged to the point (zero: none known).
	LastWrite time.Time
	// Approval: each call waits for a person's approval.
	Approval bool
}

// Action reports caller's ActionState for the do_* tool.
func (e *Engine) Action(caller Caller, tool string) (ActionState, error) {
	pt, err := e.lookup(tool, manifest.KindDo)
	if err != nil {
		return ActionState{}, err
	}
	d := e.access(pt, caller)
	if d.permission == promcp.Allowed {
		d = e.limits(pt)
	}
	pt.mu.Lock()
	last := pt.lastWrite
	pt.mu.Unlock()
	return ActionState{Permission: d.permission, Reason: d.reason, ClearsAt: d.clearsAt, LastWrite: last, Approval: e.needsApproval(pt)}, nil
}

// Breaker states as DeviceHealth reports them.
const (
	BreakerClosed  = "closed"
	BreakerOpen    = "open"
	BreakerProbing = "probing"
)

// DeviceHealth is one device's circuit breaker (see breaker.go).
type DeviceHealth struct {
	// Device names it: "rs485 unit 1", "i2c1 address 0x48", "gpio".
	Device string
	// Bus is the manifest's bus the device is on.
	Bus   string
	State string
	// Failures counts consecutive transport failures; LastError is the
	// latest of them ("" once the device answers again).
	Failures  int
	LastError string
	// RetryAt is when an open breaker lets the next attempt through.
	RetryAt time.Time
	// Tools are the device's read_* and do_* tools, in manifest order.
	Tools []string
}

// Devices reports every device's breaker, in the order of the manifest's
// capabilities.
func (e *Engine) Devices() []DeviceHealth {
	var out []DeviceHealth
	index := map[*device]int{}
	cat := e.catalog()
	for _, t := range cat.tools {
		pt := cat.points[t.Name]
		if pt == nil {
			continue // can_do
		}
		d := e.device(pt)
		i, seen := index[d]
		if !seen {
			i = len(out)
			index[d] = i
			out = append(out, d.health(pt.c.Binding.Bus))
		}
		out[i].Tools = append(out[i].Tools, t.Name)
	}
	return out
}

func (d *device) health(bus string) DeviceHealth {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := DeviceHealth{Device: d.name, Bus: bus, State: BreakerClosed, Failures: d.failures}
	switch d.state {
	case open:
		h.State, h.RetryAt = BreakerOpen, d.openUntil
	case probing:
		h.State = BreakerProbing
	}
	if d.lastErr != nil {
		h.LastError = d.lastErr.Error()
	}
	return h
}
