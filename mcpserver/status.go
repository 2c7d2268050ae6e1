package mcpserver

import (
	"context"
	_ "embed" // the page's files
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// The status page: a technician opens http://device:port/ (or /status) in a
// browser. The page itself is static and holds no data, so it is served
// without a token (a browser cannot send a bearer header when it navigates);
// it asks for the token once, keeps it in the tab's sessionStorage and polls
// StatusAPIPath with it in the Authorization header, which is authenticated
// and role-checked like /mcp. The token never appears in a URL.
const (
	StatusPath    = "/status"
	StatusAPIPath = "/status/api"
	// statusAssets holds the page's script and style.
	statusAssets = "/status/assets/"
)

// statusMaxAge is how old a reading the status API serves may be before it
// reads the device again (or the capability's cache TTL when longer): pages
// poll every 1.5 s, and any number of them cost one bus read per point per
// this age at most.
const statusMaxAge = 2 * time.Second

// statusAuditLines is how many of the trail's last lines the API reads.
const statusAuditLines = 50

// The page's three files, served from memory as they are: a file server
// would cost the armv6 binary more than the page itself.
var (
	//go:embed statuspage/index.html
	statusHTML string
	//go:embed statuspage/status.js
	statusJS string
	//go:embed statuspage/status.css
	statusCSS string
)

// statusFiles maps each path the page uses to its content type and content.
var statusFiles = map[string][2]string{
	"/":                         {"text/html; charset=utf-8", statusHTML},
	StatusPath:                  {"text/html; charset=utf-8", statusHTML},
	statusAssets + "status.js":  {"text/javascript; charset=utf-8", statusJS},
	statusAssets + "status.css": {"text/css; charset=utf-8", statusCSS},
}

// statusCSP allows the page only its own script, style and API: no inline
// script, no other origin, no form submission (the token form is handled by
// the script; were it submitted, nothing would carry the token anywhere).
const statusCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src data:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// StatusPage serves the status page's HTML at "/" and StatusPath and its
// script and style under /status/assets/ to anyone (GET and HEAD), and
// sends every other request to next, where StatusAPI and Protect serve the
// data.
func StatusPage(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		file, ok := statusFiles[r.URL.Path]
		if !ok || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", file[0])
		h.Set("Content-Length", strconv.Itoa(len(file[1])))
		h.Set("Content-Security-Policy", statusCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, file[1])
		}
	})
}

// StatusOptions are what StatusAPI shows besides the engine's state.
type StatusOptions struct {
	// Caller is who asks (CallerFrom, after Protect authenticated them).
	Caller func(context.Context) engine.Caller
	// AuditTail returns the audit trail's last n lines; nil when no trail is kept.
	AuditTail func(n int) ([][]byte, error)
	// Approvals are the endpoints' (Options.Approvals): the calls waiting
	// for a person's answer are listed. nil lists none.
	Approvals *auth.Approvals
	// Now defaults to time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// StatusAPI answers GET StatusAPIPath with the device's state as the
// caller's role may see it: the read_* tools it may call (their readings,
// from the cache while younger than statusMaxAge), the do_* tools it may
// call (what blocks them now and until when) and the calls of them waiting
// for a person's approval, the breakers of the devices behind those tools,
// the audit lines about them, and the capabilities adopted devices offer
// that are not served (as can_do shows them to any caller). It must sit behind
// Protect. Every other request goes to next.
func StatusAPI(e *engine.Engine, opts StatusOptions, next http.Handler) http.Handler {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != StatusAPIPath {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method_not_allowed"})
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, statusOf(r.Context(), e, opts))
	})
}

// statusBody is the API's answer; times are RFC 3339 UTC and durations
// milliseconds, measured on the device so that a browser's clock does not matter.
type statusBody struct {
	Device   statusDevice   `json:"device"`
	Caller   statusCaller   `json:"caller"`
	Time     string         `json:"time"`
	Readings []statusRead   `json:"readings"`
	Actions  []statusAction `json:"actions"`
	Buses    []statusBus    `json:"buses"`
	Audit    statusAudit    `json:"audit"`
	// Approvals are the calls waiting for a person's answer, which is given
	// in the client of the agent that made the call.
	Approvals []statusApproval `json:"approvals"`
	// NotServed are the capabilities adopted devices offer that are not
	// served (a name another device's serves, or no tool name), as can_do
	// lists them blocked.
	NotServed []statusNotServed `json:"not_served"`
	// PolicyUnmatched are the names the policy gives adopted tools (tool
	// names, patterns) that apply to no tool a device offers yet: a typo,
	// or a device that has not joined.
	PolicyUnmatched []string `json:"policy_unmatched"`
}

type statusNotServed struct {
	Tool   string `json:"tool"`
	Device string `json:"device"`
	Bus    string `json:"bus"`
	Reason string `json:"reason"`
}

type statusApproval struct {
	Tool        string          `json:"tool"`
	Caller      string          `json:"caller"`
	Value       json.RawMessage `json:"value"`
	Previous    json.RawMessage `json:"previous_value"`
	ExpiresAt   string          `json:"expires_at"`
	ExpiresInMs int64           `json:"expires_in_ms"`
}

type statusDevice struct {
	ID       string `json:"id"`
	Location string `json:"location"`
}

type statusCaller struct {
	Name string        `json:"name"`
	Role manifest.Role `json:"role"`
}

type statusRead struct {
	Tool string `json:"tool"`
	promcp.ReadResponse
	// AgeMs is how long ago the value was measured (absent without a value).
	AgeMs *int64 `json:"age_ms,omitempty"`
}

type statusAction struct {
	Tool       string            `json:"tool"`
	Permission promcp.Permission `json:"permission"`
	Reason     string            `json:"reason,omitempty"`
	ClearsAt   string            `json:"clears_at,omitempty"`
	ClearsInMs int64             `json:"clears_in_ms,omitempty"`
	LastWrite  string            `json:"last_write,omitempty"`
	Approval   bool              `json:"requires_human_approval,omitempty"`
}

type statusBus struct {
	Device    string   `json:"device"`
	Bus       string   `json:"bus"`
	State     string   `json:"state"`
	Failures  int      `json:"failures"`
	LastError string   `json:"last_error,omitempty"`
	RetryAt   string   `json:"retry_at,omitempty"`
	Tools     []string `json:"tools"`
}

type statusAudit struct {
	// Kept is false when no audit trail is kept (audit.enabled off, or no state directory).
	Kept  bool              `json:"kept"`
	Error string            `json:"error,omitempty"`
	Lines []json.RawMessage `json:"lines"`
}

func statusOf(ctx context.Context, e *engine.Engine, opts StatusOptions) statusBody {
	caller := opts.Caller(ctx)
	m := e.Manifest()
	now := opts.Now()
	body := statusBody{
		Device:   statusDevice{ID: m.Device.ID, Location: locationOf(m.Device.Location)},
		Caller:   statusCaller{Name: caller.Identity, Role: caller.Role},
		Time:     promcp.Time(now),
		Readings: []statusRead{}, Actions: []statusAction{}, Buses: []statusBus{},
		Audit: statusAudit{Kept: opts.AuditTail != nil, Lines: []json.RawMessage{}}, Approvals: []statusApproval{}, NotServed: []statusNotServed{},
	}
	body.PolicyUnmatched = append([]string{}, e.PolicyUnmatched()...)
	for _, ns := range m.NotServed {
		body.NotServed = append(body.NotServed, statusNotServed{Tool: ns.Capability.ToolName(), Device: ns.Device, Bus: ns.Capability.Binding.Bus, Reason: ns.Reason})
	}
	sees := func(tool string) bool { return e.Permits(tool, caller.Role) }
	for _, t := range e.Tools() {
		if !sees(t.Name) {
			continue
		}
		switch t.Kind {
		case engine.ToolRead:
			resp, err := e.Peek(ctx, caller, t.Name, statusMaxAge)
			if err != nil {
				continue // listed by the engine, so known to it
			}
			sr := statusRead{Tool: t.Name, ReadResponse: resp}
			if at, err := time.Parse(time.RFC3339Nano, resp.Timestamp); err == nil && resp.Value != nil {
				age := max(now.Sub(at), 0).Milliseconds()
				sr.AgeMs = &age
			}
			body.Readings = append(body.Readings, sr)
		case engine.ToolDo:
			st, err := e.Action(caller, t.Name)
			if err != nil {
				continue
			}
			sa := statusAction{Tool: t.Name, Permission: st.Permission, Reason: st.Reason, Approval: st.Approval}
			if !st.ClearsAt.IsZero() {
				sa.ClearsAt, sa.ClearsInMs = promcp.Time(st.ClearsAt), max(st.ClearsAt.Sub(now), 0).Milliseconds()
			}
			if !st.LastWrite.IsZero() {
				sa.LastWrite = promcp.Time(st.LastWrite)
			}
			body.Actions = append(body.Actions, sa)
		}
	}
	for _, d := range e.Devices() {
		sb := statusBus{Device: d.Device, Bus: d.Bus, State: d.State, Failures: d.Failures, LastError: d.LastError, Tools: []string{}}
		for _, t := range d.Tools {
			if sees(t) {
				sb.Tools = append(sb.Tools, t)
			}
		}
		if len(sb.Tools) == 0 {
			continue
		}
		if !d.RetryAt.IsZero() {
			sb.RetryAt = promcp.Time(d.RetryAt)
		}
		body.Buses = append(body.Buses, sb)
	}
	if opts.Approvals != nil {
		for _, c := range opts.Approvals.Pending() {
			if sees(c.Tool) {
				exp := time.UnixMilli(c.Expires)
				body.Approvals = append(body.Approvals, statusApproval{Tool: c.Tool, Caller: c.Caller, Value: c.Value, Previous: c.Previous,
					ExpiresAt: promcp.Time(exp), ExpiresInMs: max(exp.Sub(now), 0).Milliseconds()})
			}
		}
	}
	if opts.AuditTail != nil {
		lines, err := opts.AuditTail(statusAuditLines)
		if err != nil {
			opts.Logger.Warn("status page: reading the audit trail", "err", err)
			body.Audit.Error = "the audit trail could not be read; see the daemon's log"
		}
		for _, line := range lines {
			if shown, ok := auditLineFor(line, caller.Role, sees); ok {
				body.Audit.Lines = append(body.Audit.Lines, shown)
			}
		}
	}
	return body
}

// auditLineFor is the audit line as the role may see it: lines about a tool
// to roles that may call it, the trail's own events (keying, a trail found
// altered, emergency overrides not tied to a tool) to admin only; without
// the chain value, which is of no use on a page.
func auditLineFor(line []byte, role manifest.Role, sees func(string) bool) (json.RawMessage, bool) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(line, &fields) != nil {
		return nil, false
	}
	var tool string
	_ = json.Unmarshal(fields["tool"], &tool)
	if tool != "" && !sees(tool) || tool == "" && role != manifest.RoleAdmin {
		return nil, false
	}
	delete(fields, "prev")
	out, err := json.Marshal(fields)
	if err != nil {
		return nil, false
	}
	return out, true
}

// locationOf is the device's zone and area, as the page titles it.
func locationOf(l *manifest.Location) string {
	if l == nil {
		return ""
	}
	if l.Area == "" {
		return l.Zone
	}
	return l.Zone + " / " + l.Area
}
