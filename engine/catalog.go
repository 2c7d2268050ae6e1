package engine

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
)

// catalog is what the engine serves at one moment: the manifest as served,
// its tools and points, and the buses they are bound to. An aggregator
// adopts devices while it runs (a device joins the mesh, changes its
// capabilities, or is forgotten), so a catalog is never changed in place: a
// change builds a new one and swaps it in whole, and every call works on the
// catalog it took, untouched by a swap under way.
type catalog struct {
	// m is the manifest as served: the file's, plus the capabilities and
	// buses adopted since start-up.
	m      *manifest.Manifest
	tools  []Tool
	served map[string]bool   // the tools' names
	points map[string]*point // by tool name
	// byLocation groups points that address the same register or line.
	byLocation map[string][]*point
	// changes lists, by the location of a do point, the points whose cached
	// readings a write there may change, so a write invalidates the reads
	// that would otherwise hide it (seal).
	changes   map[string][]*point
	buses     map[string]drivers.Bus
	busCounts map[string]*busCounters // by bus name
	// unserved are m.NotServed, as can_do matches them (notserved.go).
	unserved []unserved
	// unmatched are the policy's names for adopted tools that apply to
	// none of tools (policy.Unmatched).
	unmatched []policy.Expected

	// index finds can_do's matches (cando_index.go).
	index struct {
		once sync.Once
		x    *canDoIndex
	}
}

func (e *Engine) catalog() *catalog { return e.cat.Load() }

// seal completes cat once its points are bound: its tools, the
// capabilities it does not serve, what each write changes, and the names of
// p that apply to none of the tools its devices offer (one not served is
// offered: the reason it is not served says why).
func (cat *catalog) seal(p *policy.Policy) {
	cat.linkWrites()
	cat.tools = toolList(cat.m)
	cat.unserved = unservedOf(cat.m)
	cat.served = make(map[string]bool, len(cat.tools))
	offered := make([]string, 0, len(cat.tools)+len(cat.unserved))
	for _, t := range cat.tools {
		cat.served[t.Name] = true
		offered = append(offered, t.Name)
	}
	for _, u := range cat.unserved {
		offered = append(offered, u.pt.tool)
	}
	cat.unmatched = p.Unmatched(offered)
}

// policyRefuses is c not served, because the policy's rules that apply to it
// cannot hold for it (a range guard outside its range, a rate rule on a
// read), or nil. Only adopted capabilities can be refused: the manifest's
// were checked when the policy was parsed. Refusing one leaves it blocked in
// can_do with the reason, instead of serving it without the rules the
// operator wrote for it.
func (e *Engine) policyRefuses(c *manifest.Capability, device string) *manifest.NotServed {
	diags := e.p.Adopted(c)
	for _, d := range diags.Warnings() {
		e.log.Warn("policy finding for an adopted tool", "tool", c.ToolName(), "finding", d.String())
	}
	errs := diags.Errors()
	if len(errs) == 0 {
		return nil
	}
	ns := &manifest.NotServed{Capability: c, Device: device, Reason: fmt.Sprintf(
		"policy_mismatch: %s of %s is not served: the policy's rules for it cannot hold for it: %s",
		c.ToolName(), device, strings.ReplaceAll(strings.TrimSpace(errs.String()), "\n", "; "))}
	e.log.Error("adopted capability not served", "tool", c.ToolName(), "reason", ns.Reason)
	return ns
}

// warnUnmatched logs the policy's names for adopted tools that apply to no
// tool offered yet, when they changed: a name with a typo in it is seen at
// start-up, and again after every adoption that leaves it unmatched.
func (e *Engine) warnUnmatched(cat *catalog) {
	now := strings.Join(cat.unmatchedNames(), " ")
	if now == e.unmatchedLogged {
		return
	}
	e.unmatchedLogged = now
	for _, x := range cat.unmatched {
		e.log.Warn("policy name that applies to no tool offered yet (checked when a source offers one)", "at", x.At.String(), "field", x.Field())
	}
}

// PolicyUnmatched lists the policy's names for adopted tools (tool names
// its manifest does not have, and patterns) that apply to no tool offered
// now, served or not.
func (e *Engine) PolicyUnmatched() []string { return e.catalog().unmatchedNames() }

func (cat *catalog) unmatchedNames() []string {
	names := make([]string, len(cat.unmatched))
	for i, x := range cat.unmatched {
		names[i] = x.Name
	}
	return names
}

// tool is the tool of that name; nil when there is none.
func (cat *catalog) tool(name string) *Tool {
	if i := slices.IndexFunc(cat.tools, func(t Tool) bool { return t.Name == name }); i >= 0 {
		return &cat.tools[i]
	}
	return nil
}

// Serves reports whether tool is one of the engine's tools now.
func (e *Engine) Serves(tool string) bool { return e.catalog().served[tool] }

// Adopt serves caps, bound to b, as the capabilities of bus (an mcp bus:
// src says where it adopts from), in place of whatever bus served before:
// a device learned while the daemon runs, or adopted again after its
// capabilities changed. A tool its bus served before (kept across the
// change, or retired by an earlier Unadopt or adoption) keeps its cooldown
// and rate-limit history; a tool new to this run gets its persisted
// history back. Every tool name must be free on this device. notServed are
// the device's capabilities it does not serve (their names are others', or
// no tool names): can_do lists them blocked. A bus object replaced by b is
// closed; b itself is closed by Unadopt or Close.
func (e *Engine) Adopt(src *manifest.Bus, b drivers.Bus, caps []*manifest.Capability, notServed []*manifest.NotServed) error {
	if src == nil || src.Name == "" || src.MCP == nil {
		return errors.New("adopt: an mcp bus with a name is required")
	}
	e.adoptMu.Lock()
	defer e.adoptMu.Unlock()
	old := e.catalog()
	if ob, ok := old.m.Buses[src.Name]; ok && ob.MCP == nil {
		return fmt.Errorf("adopt: bus %s is a %s bus of the manifest", src.Name, ob.Type)
	}
	next, retired := old.without(src.Name)
	for _, c := range caps {
		if c.Binding.Bus != src.Name {
			return fmt.Errorf("adopt: capability %s is bound to bus %s, not %s", c.ToolName(), c.Binding.Bus, src.Name)
		}
		if pt, taken := next.points[c.ToolName()]; taken {
			return fmt.Errorf("adopt: %s is already served from bus %s", c.ToolName(), pt.c.Binding.Bus)
		}
	}
	for _, ns := range notServed {
		if ns.Capability.Binding.Bus != src.Name {
			return fmt.Errorf("adopt: capability %s (not served) is bound to bus %s, not %s", ns.Capability.ToolName(), ns.Capability.Binding.Bus, src.Name)
		}
	}
	var kept []*manifest.Capability
	for _, c := range caps {
		if ns := e.policyRefuses(c, src.Name); ns != nil {
			notServed = append(notServed, ns)
		} else {
			kept = append(kept, c)
		}
	}
	caps = kept
	next.m.NotServed = append(next.m.NotServed, notServed...)
	next.m.Buses[src.Name] = src
	next.buses[src.Name] = b
	var history map[string]WriteHistory
	for _, c := range caps {
		if err := e.bind(next, c, b); err != nil {
			return fmt.Errorf("adopt: %w", err)
		}
		next.m.Capabilities = append(next.m.Capabilities, c)
		pt := next.points[c.ToolName()]
		if c.Kind != manifest.KindDo {
			continue
		}
		if before := cmp.Or(old.points[pt.tool], e.left[pt.tool]); before != nil && before.c.Binding.Bus == src.Name {
			before.mu.Lock()
			pt.writes, pt.lastWrite = slices.Clone(before.writes), before.lastWrite
			before.mu.Unlock()
			continue
		}
		if history == nil && e.history != nil {
			h, err := e.history.LoadWrites()
			if err != nil {
				return fmt.Errorf("adopt: load the write history (cooldowns, rate limits): %w", err)
			}
			history = h
		}
		if h, ok := history[pt.tool]; ok {
			pt.writes, pt.lastWrite = slices.Clone(h.Writes), h.Last
			pt.site.note(pt.tool, Write{At: h.Last, Value: h.LastValue, Seq: h.Seq, Key: h.Key})
		}
	}
	e.keepHistory(retired)
	next.seal(e.p)
	e.warnUnmatched(next)
	// The new bus starts with a closed breaker: a device that came back,
	// or moved, is tried at once.
	e.faults.devices.Delete(src.Name)
	e.cat.Store(next)
	e.retire(retired, "its device was adopted again")
	if ob := old.buses[src.Name]; ob != nil && ob != b {
		if err := ob.Close(); err != nil {
			e.log.Debug("closing a replaced adopted bus", "bus", src.Name, "err", err)
		}
	}
	e.log.Info("adopted", "bus", src.Name, "tools", len(caps), "not_served", len(notServed), "served", len(next.points))
	e.changed()
	return nil
}

// Unadopt stops serving the capabilities adopted on bus and closes it (a
// device the mesh forgot). It is a no-op for a bus the engine does not have.
func (e *Engine) Unadopt(bus string) error {
	e.adoptMu.Lock()
	defer e.adoptMu.Unlock()
	old := e.catalog()
	ob, ok := old.m.Buses[bus]
	if !ok {
		return nil
	}
	if ob.MCP == nil {
		return fmt.Errorf("unadopt: bus %s is a %s bus of the manifest", bus, ob.Type)
	}
	next, retired := old.without(bus)
	e.keepHistory(retired)
	delete(next.m.Buses, bus)
	delete(next.buses, bus)
	delete(next.busCounts, bus)
	next.seal(e.p)
	e.warnUnmatched(next)
	e.faults.devices.Delete(bus)
	e.cat.Store(next)
	e.retire(retired, "its device is no longer adopted")
	e.log.Info("no longer adopted", "bus", bus, "tools", len(retired))
	e.changed()
	if b := old.buses[bus]; b != nil {
		return b.Close()
	}
	return nil
}

// OnToolsChange registers f, called after every change of the tools served
// (Adopt, Unadopt), one change at a time, so transports can list them
// again. f may register more listeners (a new endpoint for a new group);
// they hear of the next change.
func (e *Engine) OnToolsChange(f func()) {
	e.onChangeMu.Lock()
	defer e.onChangeMu.Unlock()
	e.onChange = append(e.onChange, f)
}

// changed calls the OnToolsChange listeners; adoptMu is held.
func (e *Engine) changed() {
	e.onChangeMu.Lock()
	listeners := slices.Clone(e.onChange)
	e.onChangeMu.Unlock()
	for _, f := range listeners {
		f()
	}
}

// retire stops what runs on points no longer served: their operations and
// watchers. Calls already under way on them finish.
func (e *Engine) retire(pts []*point, why string) {
	if len(pts) == 0 {
		return
	}
	e.stopOperations(func(pt *point) bool { return slices.Contains(pts, pt) }, why)
	e.watches.mu.Lock()
	defer e.watches.mu.Unlock()
	for _, pt := range pts {
		if w := pt.watch.Load(); w != nil {
			w.cancel()
		}
	}
}

// keepHistory keeps the retired do points pts in e.left (under adoptMu),
// whose write history Adopt gives back to their tools.
func (e *Engine) keepHistory(pts []*point) {
	for _, pt := range pts {
		if pt.c.Kind == manifest.KindDo {
			e.left[pt.tool] = pt
		}
	}
}

// without is a copy of c with nothing bound to bus, served or not (its bus entries stay):
// the copy's maps, slices and manifest are its own, the points shared.
func (c *catalog) without(bus string) (*catalog, []*point) {
	m := *c.m
	m.Buses = maps.Clone(c.m.Buses)
	if m.Buses == nil {
		m.Buses = map[string]*manifest.Bus{}
	}
	m.Capabilities = slices.DeleteFunc(slices.Clone(c.m.Capabilities), func(cap *manifest.Capability) bool { return cap.Binding.Bus == bus })
	m.NotServed = slices.DeleteFunc(slices.Clone(c.m.NotServed), func(ns *manifest.NotServed) bool { return ns.Capability.Binding.Bus == bus })
	next := &catalog{m: &m, points: map[string]*point{}, byLocation: map[string][]*point{},
		buses: maps.Clone(c.buses), busCounts: maps.Clone(c.busCounts)}
	if next.buses == nil {
		next.buses = map[string]drivers.Bus{}
	}
	var retired []*point
	for name, pt := range c.points {
		if pt.c.Binding.Bus == bus {
			retired = append(retired, pt)
			continue
		}
		next.points[name] = pt
		next.byLocation[pt.location] = append(next.byLocation[pt.location], pt)
	}
	return next, retired
}

// linkWrites fills cat.changes: for each do point's location, the points at
// that register or line, and those whose registers or bytes overlap the do
// point's from another start address (a uint32 read at holding 0 and a
// uint16 do at 1, a 2-byte I2C read at 0x10 and a 1-byte do at 0x11:
// manifest.Span). Two do points at one location add both their spans. It
// runs once per catalog, so a write only walks its list.
func (cat *catalog) linkWrites() {
	spans := map[*point]manifest.Span{}
	bySpace := map[manifest.Space][]*point{}
	for _, pt := range cat.points {
		if s, ok := pt.c.Binding.Span(); ok {
			spans[pt] = s
			bySpace[s.Space] = append(bySpace[s.Space], pt)
		}
	}
	cat.changes = map[string][]*point{}
	for _, pt := range cat.points {
		if pt.c.Kind != manifest.KindDo {
			continue
		}
		changed, ok := cat.changes[pt.location]
		if !ok {
			changed = slices.Clone(cat.byLocation[pt.location])
		}
		if s, spanned := spans[pt]; spanned {
			for _, other := range bySpace[s.Space] {
				if s.Overlaps(spans[other]) && !slices.Contains(changed, other) {
					changed = append(changed, other)
				}
			}
		}
		cat.changes[pt.location] = changed
	}
}
