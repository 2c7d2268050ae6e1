package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// MCP resources (docs/resources.md): the device, and each read capability's
// current reading, which a client may subscribe to. A reading resource is
// read_<name> as a resource: the same body, the same role rules. mcp-go
// registers them and answers list and read; what mcp-go does not do for us
// (refusing a read or subscription the caller's role does not allow, and
// anything at all on a subscription) is done in hooks here.

// URIScheme is the scheme of physmcpd's resources.
const URIScheme = "physmcp"

// DeviceURI is the resource that describes device id.
func DeviceURI(id string) string { return URIScheme + "://" + id + "/device" }

// ReadingURI is the resource holding a read capability's current reading.
func ReadingURI(id, capability string) string {
	return URIScheme + "://" + id + "/readings/" + capability
}

// MetaReading is the _meta key under which a resource-update notification
// carries the reading it announces, as resources/read would answer it.
const MetaReading = "physmcp/reading"

const jsonMIME = "application/json"

// resources are one endpoint's resources.
type resources struct {
	a      *adapter
	prefix string // physmcp://<device_id>/: the URIs this device owns
	device string // DeviceURI
	subs   *subscriptions

	mu      sync.RWMutex
	readers map[string]string // reading URI → read_* tool (changes with the tools: dynamic.go)
}

func newResources(a *adapter, s *server.MCPServer, hooks *server.Hooks) *resources {
	id := a.m.Device.ID
	r := &resources{a: a, prefix: URIScheme + "://" + id + "/", device: DeviceURI(id), readers: map[string]string{}, subs: newSubscriptions(a.opts.Logger)}
	r.subs.notify = a.fast.notifySession
	s.AddResource(mcp.NewResource(r.device, "device",
		mcp.WithResourceTitle("Device "+id),
		mcp.WithResourceDescription("What this device is and where: id, type, vendor, model, location, profile, and its capabilities with their tools."),
		mcp.WithMIMEType(jsonMIME)), r.readDevice)
	for _, t := range a.surface.Tools() {
		if t.Kind == engine.ToolRead {
			s.AddResource(r.reading(t))
		}
	}
	hooks.AddOnRequestInitialization(r.gate)
	hooks.AddBeforeSubscriptionsListen(r.listen)
	hooks.AddAfterListResources(r.filterList)
	hooks.AddOnRegisterSession(func(_ context.Context, session server.ClientSession) { r.subs.startSession(session.SessionID()) })
	hooks.AddOnUnregisterSession(func(_ context.Context, session server.ClientSession) { r.subs.endSession(session.SessionID()) })
	return r
}

// reading is the resource of read tool t, now one of r's readers.
func (r *resources) reading(t engine.Tool) (mcp.Resource, server.ResourceHandlerFunc) {
	c := t.Capability
	uri := ReadingURI(r.a.m.Device.ID, c.Name)
	r.mu.Lock()
	r.readers[uri] = t.Name
	r.mu.Unlock()
	return mcp.NewResource(uri, c.Name,
		mcp.WithResourceTitle(readingTitle(c)),
		mcp.WithResourceDescription(c.Description+" The current reading, as "+t.Name+" answers it (value, unit, timestamp, quality); subscribe for changes."),
		mcp.WithMIMEType(jsonMIME)), r.readReading
}

func readingTitle(c *manifest.Capability) string {
	if c.Unit != "" {
		return c.Name + " (" + c.Unit + ")"
	}
	return c.Name
}

// readable says whether the caller in ctx may read the reading at uri; an
// empty tool is not one of this endpoint's readings. A URI in the device's
// namespace that names none of its resources is an error; other URIs are
// not the adapter's to judge.
func (r *resources) readable(ctx context.Context, uri string) (tool string, err error) {
	r.mu.RLock()
	tool = r.readers[uri]
	r.mu.RUnlock()
	if tool == "" {
		if strings.HasPrefix(uri, r.prefix) && uri != r.device {
			return "", fmt.Errorf("no resource %s on this endpoint; resources/list names them", uri)
		}
		return "", nil
	}
	caller := r.a.opts.Caller(ctx)
	if !r.a.e.Permits(tool, caller.Role) {
		return tool, fmt.Errorf("resource %s is %s, which role %s may not call", uri, tool, roleName(caller.Role))
	}
	return tool, nil
}

func roleName(r manifest.Role) string {
	if r == "" {
		return string(manifest.RoleNone)
	}
	return string(r)
}

// filterList leaves out the readings the caller may not read, as tools/list
// leaves out their tools.
func (r *resources) filterList(ctx context.Context, _ any, _ *mcp.ListResourcesRequest, res *mcp.ListResourcesResult) {
	res.Resources = slices.DeleteFunc(res.Resources, func(x mcp.Resource) bool {
		_, err := r.readable(ctx, x.URI)
		return err != nil
	})
}

func (r *resources) readReading(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	uri := req.Params.URI
	tool, err := r.readable(ctx, uri)
	if err != nil {
		return nil, err // gate refuses it first; this holds for calls that bypass it
	}
	resp, err := r.a.e.Read(ctx, r.a.opts.Caller(ctx), tool)
	if err != nil {
		return nil, err
	}
	return jsonContents(uri, resp)
}

func jsonContents(uri string, body any) ([]mcp.ResourceContents, error) {
	text, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", uri, err)
	}
	return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, MIMEType: jsonMIME, Text: string(text)}}, nil
}

// DeviceSummary is the device resource's body.
type DeviceSummary struct {
	DeviceID       string             `json:"device_id"`
	Type           string             `json:"type"`
	Vendor         string             `json:"vendor,omitempty"`
	Model          string             `json:"model,omitempty"`
	Location       *manifest.Location `json:"location,omitempty"`
	Profile        string             `json:"profile"`
	PromcpBase     string             `json:"promcp_base"`
	PhysMCPVersion string             `json:"physmcp_version"`
	Group          string             `json:"group,omitempty"`
	Capabilities   []CapabilityEntry  `json:"capabilities"`
}

// CapabilityEntry is one capability in the device summary.
type CapabilityEntry struct {
	Name        string `json:"name"`
	Kind        string `json:"kind"`
	Tool        string `json:"tool"`
	Description string `json:"description"`
	DataType    string `json:"data_type"`
	Unit        string `json:"unit,omitempty"`
	// Resource is the reading's resource (read capabilities).
	Resource string `json:"resource,omitempty"`
}

// readDevice summarises the device and the capabilities of this endpoint the
// caller may use.
func (r *resources) readDevice(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	m := r.a.m
	role := r.a.opts.Caller(ctx).Role
	sum := DeviceSummary{
		DeviceID: m.Device.ID, Type: m.Device.Type, Vendor: m.Device.Vendor, Model: m.Device.Model, Location: m.Device.Location,
		Profile: r.a.opts.Profile, PromcpBase: promcp.BaseVersion, PhysMCPVersion: m.PhysMCPVersion, Group: r.a.opts.Group,
		Capabilities: []CapabilityEntry{},
	}
	for _, t := range r.a.surface.Tools() {
		c := t.Capability
		if c == nil || !r.a.e.Permits(t.Name, role) {
			continue
		}
		entry := CapabilityEntry{Name: c.Name, Kind: string(c.Kind), Tool: t.Name, Description: c.Description, DataType: string(c.DataType), Unit: c.Unit}
		if t.Kind == engine.ToolRead {
			entry.Resource = ReadingURI(m.Device.ID, c.Name)
		}
		sum.Capabilities = append(sum.Capabilities, entry)
	}
	return jsonContents(req.Params.URI, sum)
}

// gate runs before mcp-go handles a request. It refuses resources/read,
// resources/subscribe and (protocol 2026-07-28) subscriptions/listen of a
// reading the caller may not read, and subscribes or unsubscribes the session
// (mcp-go only acknowledges those requests; listen watches what a
// subscriptions/listen names, which mcp-go records nowhere). URIs that are
// not this device's are left to mcp-go.
func (r *resources) gate(ctx context.Context, _ any, message any) error {
	raw, ok := message.(json.RawMessage)
	if !ok || !bytes.Contains(raw, []byte(`"resources/`)) && !bytes.Contains(raw, []byte(`"subscriptions/listen"`)) {
		return nil
	}
	var msg struct {
		Method string `json:"method"`
		Params struct {
			URI           string                 `json:"uri"`
			Notifications mcp.SubscriptionFilter `json:"notifications"`
			Meta          map[string]any         `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(raw, &msg) != nil {
		return nil // mcp-go answers the malformed request
	}
	uri := msg.Params.URI
	_, modern := msg.Params.Meta[mcp.MetaKeyProtocolVersion]
	switch mcp.MCPMethod(msg.Method) {
	case mcp.MethodResourcesRead:
		_, err := r.readable(ctx, uri)
		return err
	case mcp.MethodResourcesSubscribe:
		if modern {
			return nil // removed in 2026-07-28: mcp-go refuses it
		}
		return r.subscribe(ctx, uri)
	case mcp.MethodResourcesUnsubscribe:
		if session := server.ClientSessionFromContext(ctx); session != nil && !modern {
			r.subs.remove(session.SessionID(), uri)
		}
	case mcp.MethodSubscriptionsListen:
		_, _, err := r.listened(ctx, msg.Params.Notifications.ResourceSubscriptions)
		return err // listen watches them once mcp-go takes the request
	}
	return nil
}

// watch starts watching the reading behind tool for the caller in ctx, at
// the pace its manifest declares.
func (r *resources) watch(ctx context.Context, uri, tool string) (*engine.Watch, error) {
	c := r.a.surface.Capability(tool)
	w, err := r.a.e.Watch(ctx, r.a.opts.Caller(ctx), tool, engine.WatchOptions{Deadband: c.ChangeDeadband(), MinInterval: c.MinUpdateInterval()})
	if err != nil {
		if errors.Is(err, engine.ErrTooManyWatches) {
			return nil, fmt.Errorf("%s: %w; unsubscribe from something first", uri, err)
		}
		return nil, fmt.Errorf("%s: %w", uri, err)
	}
	return w, nil
}

// listened are the readings among uris a subscriptions/listen request of
// the caller in ctx may watch; an error refuses the request (gate).
func (r *resources) listened(ctx context.Context, named []string) (uris, tools []string, err error) {
	for _, uri := range named {
		tool, err := r.readable(ctx, uri)
		if err != nil {
			return nil, nil, err
		}
		if tool != "" && !slices.Contains(uris, uri) {
			uris, tools = append(uris, uri), append(tools, tool)
		}
	}
	if len(uris) > MaxSubscriptionsPerSession {
		return nil, nil, fmt.Errorf("subscriptions/listen names %d readings; one stream may watch at most %d", len(uris), MaxSubscriptionsPerSession)
	}
	return uris, tools, nil
}

// listen watches the readings a subscriptions/listen request names for as
// long as it lasts. It runs just before mcp-go's handler, after the gate and
// mcp-go's protocol checks passed, with the request's own context, which
// ends when the request does on every transport.
func (r *resources) listen(ctx context.Context, _ any, req *mcp.SubscriptionsListenRequest) {
	session := server.ClientSessionFromContext(ctx)
	uris, tools, err := r.listened(ctx, req.Params.Notifications.ResourceSubscriptions)
	if session == nil || err != nil {
		return // mcp-go refuses a listen without a session; the gate refused the error
	}
	var watches []*engine.Watch
	for i, uri := range uris {
		w, err := r.watch(ctx, uri, tools[i])
		if err != nil {
			// The engine's bound, reached since the gate: the stream goes
			// without this reading, which the daemon's log says.
			r.a.opts.Logger.Warn("subscriptions/listen: a reading is not watched", "err", err)
			continue
		}
		watches = append(watches, w)
		go r.subs.forward(session, uri, w)
	}
	context.AfterFunc(ctx, func() {
		for _, w := range watches {
			w.Stop()
		}
	})
}

// subscribe starts watching the reading at uri for the session in ctx.
func (r *resources) subscribe(ctx context.Context, uri string) error {
	if uri == r.device {
		return nil // the device resource does not change while it is served
	}
	tool, err := r.readable(ctx, uri)
	if err != nil || tool == "" {
		return err
	}
	session := server.ClientSessionFromContext(ctx)
	if session == nil || session.SessionID() == "" {
		return nil // no session to notify (mcp-go refuses subscribe without one)
	}
	if r.subs.has(session.SessionID(), uri) {
		return nil
	}
	w, err := r.watch(ctx, uri, tool)
	if err != nil {
		return err
	}
	return r.subs.add(session, uri, w)
}
