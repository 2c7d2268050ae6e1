// Package meshadopt is an aggregator's mesh source: it adopts the devices
// of the PhysMCP mesh as the membership (package mesh) learns them, instead
// of a list of endpoints in the manifest. Each eligible peer (a physmcpd
// with an MCP endpoint that is not itself an aggregator) gets an mcp bus of
// its own, authenticated with the mesh credential (never a caller's token);
// its tools are listed, named as adopt.names says (by default after the
// device, so identical devices are served side by side) and adopted
// (drivers/adopt) into the group of its zone or device, and served by the
// engine from then on; a name two devices still offer is served from the
// one of lower device id, the other's blocked as not served. It follows the
// membership: a device that joins is adopted, one whose capabilities hash or
// endpoint changes is adopted again, one the mesh lists dead or departed is
// marked away (its capabilities stay, blocked as device_offline, readings
// stale then error) and adopted afresh when it comes back, and one the mesh
// forgets (ten minutes after its death) is no longer served.
package meshadopt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/adopt"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mesh"
	"github.com/physmcp/physmcpd/profiles"
)

// Members is the membership as this node sees it (a *mesh.Mesh).
type Members interface {
	Self() mesh.Peer
	Peers() []mesh.Peer
	Subscribe(buffer int) (events <-chan mesh.Event, cancel func())
}

// Target serves what is adopted (an *engine.Engine).
type Target interface {
	Adopt(src *manifest.Bus, b drivers.Bus, caps []*manifest.Capability, notServed []*manifest.NotServed) error
	Unadopt(bus string) error
	// Serves reports whether a tool is served now, from any bus.
	Serves(tool string) bool
}

// Config is the mesh source of one aggregator.
type Config struct {
	// Source is the manifest's mcp bus with mesh: true; its name prefixes
	// each device's bus ("devices/pump_01"), its adopt section says what is
	// adopted, under which names and into which group, its timeout_ms
	// bounds connecting.
	Source *manifest.Bus
	// Node is this node's id, the subject of its mesh credentials; Keys the
	// mesh keyring that signs them.
	Node string
	Keys [][]byte
	// Retry is how often the membership is read again besides its events,
	// and a device that could not be listed is tried again (default 1 s).
	Retry  time.Duration
	Logger *slog.Logger
	// Now is the clock of the credentials (default time.Now).
	Now func() time.Time
}

// listTimeout bounds listing one device's tools, so that one slow device
// does not hold up the others.
const listTimeout = 5 * time.Second

// Adopter follows the membership and keeps the target's adopted devices in
// step with it.
type Adopter struct {
	cfg     Config
	members Members
	target  Target
	devices map[string]*device // by device id
}

// device is one peer as listed and adopted (or tried).
type device struct {
	id      string
	busName string
	// listed is the endpoint, capabilities hash and group of the latest
	// listing ("": none yet, or it must be listed again); entry, caps and
	// unnamed are what it gave: the device's bus entry, its capabilities
	// as named here, and those whose names are no tool names.
	listed  string
	entry   *manifest.Bus
	caps    []*manifest.Capability
	unnamed []*manifest.NotServed
	// bus is the connection the target serves the device through (nil:
	// never adopted); next, a new one listed through and not adopted yet
	// (the device came back, or moved).
	bus, next *adopt.Bus
	endpoint  string // bus's
	away      bool   // marked offline since it was adopted
	// placed says what the target was last given: the bus, the tools
	// served and the reasons of those not served (placement.key).
	placed  string
	served  map[string]bool
	reasons string // of the capabilities not served, as last logged
	// After a failure (the device does not list its tools yet, or the
	// target refuses them), the same device is tried again after wait,
	// doubling up to maxWait, and at once when it changes.
	failed  string
	nextTry time.Time
	wait    time.Duration
	problem string // the latest failure, logged once
}

// maxWait bounds the wait between attempts to adopt a device that fails.
const maxWait = 30 * time.Second

// New is an adopter of members' devices into target.
func New(cfg Config, members Members, target Target) (*Adopter, error) {
	if cfg.Source == nil || cfg.Source.MCP == nil || !cfg.Source.MCP.Mesh || cfg.Source.MCP.Adopt == nil {
		return nil, errors.New("meshadopt: the source must be an mcp bus with mesh: true and adopt")
	}
	if len(cfg.Keys) == 0 {
		return nil, errors.New("meshadopt: the devices are called with the mesh credential: a mesh keyring is needed (network.mesh.key_file)")
	}
	if cfg.Retry <= 0 {
		cfg.Retry = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Adopter{cfg: cfg, members: members, target: target, devices: map[string]*device{}}, nil
}

// Run follows the membership until ctx ends: at once on every membership
// event, and every Retry besides (events may be lost, listings fail).
func (a *Adopter) Run(ctx context.Context) {
	events, cancel := a.members.Subscribe(64)
	defer cancel()
	tick := time.NewTicker(a.cfg.Retry)
	defer tick.Stop()
	for {
		a.Sync(ctx)
		select {
		case <-ctx.Done():
			return
		case _, ok := <-events:
			if !ok {
				return // the mesh closed
			}
		case <-tick.C:
		}
	}
}

// Sync brings the adopted devices in step with the membership once: it
// lists the devices that are new, changed or back, then places every
// device's capabilities (place).
func (a *Adopter) Sync(ctx context.Context) {
	self := a.members.Self()
	listed := map[string]bool{}
	for _, p := range a.members.Peers() {
		if p.NodeID == self.NodeID || p.Endpoint == "" || p.Profile == profiles.Aggregator.Name {
			continue // an aggregator serves others' tools: adopting it would serve them twice
		}
		listed[p.DeviceID] = true
		a.follow(ctx, p)
	}
	for id, d := range a.devices {
		if listed[id] {
			continue
		}
		// the mesh forgot it (long dead, or gone for good)
		if d.bus != nil {
			if err := a.target.Unadopt(d.busName); err != nil {
				a.cfg.Logger.Error("mesh source: cannot stop serving a device the mesh forgot", "device", id, "err", err)
				continue
			}
			a.cfg.Logger.Info("mesh source: device forgotten by the mesh, no longer served", "device", id)
		}
		if d.next != nil {
			d.next.Close()
		}
		delete(a.devices, id)
	}
	a.place()
}

// follow lists one peer's tools when what the mesh says of it changed.
func (a *Adopter) follow(ctx context.Context, p mesh.Peer) {
	d := a.devices[p.DeviceID]
	if d == nil {
		d = &device{id: p.DeviceID, busName: a.cfg.Source.Name + "/" + p.DeviceID}
		a.devices[p.DeviceID] = d
	}
	if !p.Reachable() {
		if d.bus != nil && !d.away {
			d.bus.SetOffline(fmt.Errorf("%s is %s in the mesh since %s", p.DeviceID, p.State, p.Since.UTC().Format(time.RFC3339)))
			d.away = true
		}
		return
	}
	group, gerr := a.group(p)
	key := p.Endpoint + " " + p.CapsHash + " " + group
	if d.listed == key && (!d.away || d.next != nil) {
		return
	}
	now := time.Now()
	if d.failed == key && now.Before(d.nextTry) {
		return
	}
	err := gerr
	if err == nil {
		err = a.list(ctx, d, p, group)
	}
	if err != nil {
		// The membership may list it before it answers; until it is
		// listed afresh it stays as it was (away, if so).
		a.failure(d, key, err)
		return
	}
	d.listed = key
}

// failure notes that d could not be adopted as key says, and when to try again.
func (a *Adopter) failure(d *device, key string, err error) {
	d.failed = key
	d.wait = min(max(2*d.wait, a.cfg.Retry), maxWait)
	d.nextTry = time.Now().Add(d.wait)
	if msg := err.Error(); msg != d.problem {
		a.cfg.Logger.Warn("mesh source: device not adopted (yet)", "device", d.id, "attempt", key, "err", err)
		d.problem = msg
	}
}

// list lists p's tools, through a new connection when it has none, came
// back or moved, and names them.
func (a *Adopter) list(ctx context.Context, d *device, p mesh.Peer, group string) error {
	src := *a.cfg.Source.MCP
	src.Mesh, src.URL = false, p.Endpoint
	adoptCfg := *src.Adopt
	adoptCfg.Group, adoptCfg.GroupBy = group, ""
	src.Adopt = &adoptCfg
	bus := d.bus
	if bus == nil || d.away || d.endpoint != p.Endpoint {
		if d.next != nil {
			d.next.Close()
			d.next = nil
		}
		bus = adopt.New(d.busName, &src, a.cfg.Logger)
		audience := p.DeviceID
		bus.Authenticate(func(context.Context) map[string]string {
			tok, _, err := auth.MeshCredential(a.cfg.Keys, a.cfg.Node, audience, a.cfg.Now())
			if err != nil {
				return nil
			}
			return map[string]string{"Authorization": "Bearer " + tok}
		})
	}
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	tools, err := bus.ListTools(lctx)
	if err != nil {
		if bus != d.bus {
			bus.Close()
		}
		return fmt.Errorf("listing its tools: %w", err)
	}
	if bus != d.bus {
		d.next = bus
	}
	d.entry = &manifest.Bus{Name: d.busName, Type: manifest.BusMCP, MCP: &src}
	d.caps, d.unnamed = adopt.Adopted(d.busName, p.DeviceID, src.Adopt, tools, a.cfg.Logger)
	d.placed = "" // the capabilities are new (their units, ranges, ... may have changed): given again
	a.cfg.Logger.Info("mesh source: device listed", "device", p.DeviceID, "zone", p.Zone, "group", group, "endpoint", p.Endpoint,
		"capabilities_hash", p.CapsHash, "again", d.bus != nil)
	return nil
}

// placement is what one device is given to serve.
type placement struct {
	caps      []*manifest.Capability
	notServed []*manifest.NotServed
}

// key tells placements apart: the bus they are served through, the tools
// served and the reasons of the others.
func (pl placement) key(bus *adopt.Bus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%p", bus)
	for _, c := range pl.caps {
		b.WriteString(" " + c.ToolName())
	}
	b.WriteString(pl.reasons())
	return b.String()
}

func (pl placement) reasons() string {
	var b strings.Builder
	for _, ns := range pl.notServed {
		b.WriteString("\n" + ns.Reason)
	}
	return b.String()
}

// place gives every listed device its capabilities to serve. A tool name
// two devices offer is served from one, the same one whatever the order
// they joined in: the aggregator's own capabilities (its manifest's, and
// the sources it lists) first, then the devices in device id order. The
// other device's capability is given as not served (blocked in can_do,
// with the reason). A device that drops a name gives it up before the
// device that gains it takes it: the target never serves a name twice.
func (a *Adopter) place() {
	var ids []string
	servedBy := map[string]*device{} // as the target serves them now
	for id, d := range a.devices {
		if d.entry != nil && d.serving() != nil {
			ids = append(ids, id)
		}
		for name := range d.served {
			servedBy[name] = d
		}
	}
	slices.Sort(ids)
	owner := map[string]*device{}
	plans := map[string]placement{}
	for _, id := range ids {
		d := a.devices[id]
		pl := placement{notServed: slices.Clone(d.unnamed)}
		for _, c := range d.caps {
			name := c.ToolName()
			switch o := owner[name]; {
			case o != nil:
				pl.notServed = append(pl.notServed, adopt.Collision(c, d.id, d.id, o.id+" (first in device id order)"))
			case servedBy[name] == nil && a.target.Serves(name):
				pl.notServed = append(pl.notServed, adopt.Collision(c, d.id, d.id, "the aggregator itself (its manifest, or a source it lists)"))
			default:
				owner[name] = d
				pl.caps = append(pl.caps, c)
			}
		}
		plans[id] = pl
	}
	// First every device serves what it keeps and what is free; then the
	// devices that got less than their placement take the rest.
	now := time.Now()
	var later []string
	for _, id := range ids {
		d, pl := a.devices[id], plans[id]
		if pl.key(d.serving()) == d.placed || d.failed != "" && now.Before(d.nextTry) {
			continue
		}
		first := pl
		first.caps = slices.DeleteFunc(slices.Clone(pl.caps), func(c *manifest.Capability) bool {
			o := servedBy[c.ToolName()]
			return o != nil && o != d
		})
		if !a.give(d, first) {
			continue
		}
		for name, o := range servedBy {
			if o == d && !d.served[name] {
				delete(servedBy, name)
			}
		}
		for name := range d.served {
			servedBy[name] = d
		}
		if len(first.caps) < len(pl.caps) {
			later = append(later, id)
		}
	}
	for _, id := range later {
		a.give(a.devices[id], plans[id])
	}
}

// serving is the connection d is to be served through.
func (d *device) serving() *adopt.Bus {
	if d.next != nil {
		return d.next
	}
	return d.bus
}

// give has the target serve pl for d, through d's new connection if it
// has one; on failure d is listed again later.
func (a *Adopter) give(d *device, pl placement) bool {
	bus := d.serving()
	if err := a.target.Adopt(d.entry, bus, pl.caps, pl.notServed); err != nil {
		if d.next != nil {
			d.next.Close()
			d.next = nil
		}
		key := d.listed
		d.listed = ""
		a.failure(d, key, err)
		return false
	}
	names := make([]string, len(pl.caps))
	d.served = make(map[string]bool, len(pl.caps))
	for i, c := range pl.caps {
		names[i] = c.ToolName()
		d.served[names[i]] = true
	}
	if r := pl.reasons(); r != d.reasons {
		for _, ns := range pl.notServed {
			a.cfg.Logger.Warn("mesh source: a capability of the device is not served", "device", d.id, "tool", ns.Capability.ToolName(), "reason", ns.Reason)
		}
		d.reasons = r
	}
	a.cfg.Logger.Info("mesh source: device adopted", "device", d.id, "endpoint", d.entry.MCP.URL, "again", d.bus != nil,
		"tools", strings.Join(names, " "), "not_served", len(pl.notServed))
	if d.next != nil { // a new connection: the device is new, back or moved
		d.bus, d.next, d.endpoint, d.away = d.next, nil, d.entry.MCP.URL, false
	}
	d.placed, d.failed, d.problem, d.nextTry, d.wait = pl.key(bus), "", "", time.Time{}, 0
	return true
}

// group is the endpoint group p's capabilities go to.
func (a *Adopter) group(p mesh.Peer) (string, error) {
	ad := a.cfg.Source.MCP.Adopt
	var g string
	switch ad.GroupBy {
	case "":
		return ad.Group, nil
	case manifest.GroupByZone:
		g = p.Zone
	case manifest.GroupByDevice:
		g = p.DeviceID
	}
	if !manifest.IsName(g) {
		return "", fmt.Errorf("its %s %q is not a group name (lowercase letters, digits and _, starting with a letter); adopt.group_by: %s cannot place it", ad.GroupBy, g, ad.GroupBy)
	}
	return g, nil
}
