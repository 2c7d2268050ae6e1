// Package meshadopt is an aggregator's mesh source: it adopts the devices
// of the PhysMCP mesh as the membership (package mesh) learns them, instead
// of a list of endpoints in the manifest. Each eligible peer (a physmcpd
// with an MCP endpoint that is not itself an aggregator) gets an mcp bus of
// its own, authenticated with the mesh credential (never a caller's token);
// its tools are listed and adopted (drivers/adopt) into the group of its
// zone or device, and served by the engine from then on. It follows the
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
	Adopt(src *manifest.Bus, b drivers.Bus, caps []*manifest.Capability) error
	Unadopt(bus string) error
}

// Config is the mesh source of one aggregator.
type Config struct {
	// Source is the manifest's mcp bus with mesh: true; its name prefixes
	// each device's bus ("devices/pump_01"), its adopt section says what is
	// adopted and into which group, its timeout_ms bounds connecting.
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

// device is one peer as adopted (or tried).
type device struct {
	bus      *adopt.Bus
	busName  string
	endpoint string // as adopted
	// adopted is the endpoint, capabilities hash and group adopted ("": none).
	adopted string
	away    bool // marked offline since it was adopted
	// After a failure (the device does not list its tools yet, or the
	// engine refuses them: a tool name another device serves), the same
	// device is tried again after wait, doubling up to maxWait, and at
	// once when it changes.
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

// Sync brings the adopted devices in step with the membership once.
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
		if d.adopted != "" {
			if err := a.target.Unadopt(d.busName); err != nil {
				a.cfg.Logger.Error("mesh source: cannot stop serving a device the mesh forgot", "device", id, "err", err)
				continue
			}
			a.cfg.Logger.Info("mesh source: device forgotten by the mesh, no longer served", "device", id)
		}
		delete(a.devices, id)
	}
}

// follow brings one peer's adoption in step with what the mesh says of it.
func (a *Adopter) follow(ctx context.Context, p mesh.Peer) {
	d := a.devices[p.DeviceID]
	if d == nil {
		d = &device{busName: a.cfg.Source.Name + "/" + p.DeviceID}
		a.devices[p.DeviceID] = d
	}
	if !p.Reachable() {
		if d.adopted != "" && !d.away {
			d.bus.SetOffline(fmt.Errorf("%s is %s in the mesh since %s", p.DeviceID, p.State, p.Since.UTC().Format(time.RFC3339)))
			d.away = true
		}
		return
	}
	group, gerr := a.group(p)
	key := p.Endpoint + " " + p.CapsHash + " " + group
	if d.adopted == key && !d.away {
		return
	}
	now := time.Now()
	if d.failed == key && now.Before(d.nextTry) {
		return
	}
	err := gerr
	if err == nil {
		err = a.adopt(ctx, d, p, group)
	}
	if err != nil {
		d.failed = key
		d.wait = min(max(2*d.wait, a.cfg.Retry), maxWait)
		d.nextTry = now.Add(d.wait)
		if msg := err.Error(); msg != d.problem {
			a.cfg.Logger.Warn("mesh source: device not adopted (yet)", "device", p.DeviceID, "endpoint", p.Endpoint, "err", err)
			d.problem = msg
		}
		// The membership may list it before it answers; until it is
		// adopted afresh it stays as it was (away, if so).
		return
	}
	d.adopted, d.failed, d.problem, d.nextTry, d.wait = key, "", "", time.Time{}, 0
}

// adopt lists p's tools through a bus of its own and serves them in group.
func (a *Adopter) adopt(ctx context.Context, d *device, p mesh.Peer, group string) error {
	src := *a.cfg.Source.MCP
	src.Mesh, src.URL = false, p.Endpoint
	adoptCfg := *src.Adopt
	adoptCfg.Group, adoptCfg.GroupBy = group, ""
	src.Adopt = &adoptCfg
	bus := d.bus
	if bus == nil || d.away || d.endpoint != p.Endpoint {
		// a device that came back, or moved, gets a fresh connection
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
	caps := adopt.Adopted(d.busName, src.Adopt, tools, a.cfg.Logger)
	entry := &manifest.Bus{Name: d.busName, Type: manifest.BusMCP, MCP: &src}
	if err := a.target.Adopt(entry, bus, caps); err != nil {
		if bus != d.bus {
			bus.Close()
		}
		return err
	}
	names := make([]string, len(caps))
	for i, c := range caps {
		names[i] = c.ToolName()
	}
	a.cfg.Logger.Info("mesh source: device adopted", "device", p.DeviceID, "zone", p.Zone, "group", group, "endpoint", p.Endpoint,
		"capabilities_hash", p.CapsHash, "again", d.adopted != "", "tools", strings.Join(names, " "))
	d.bus, d.endpoint, d.away = bus, p.Endpoint, false
	return nil
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
