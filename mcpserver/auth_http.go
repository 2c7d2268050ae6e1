package mcpserver

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// DefaultMaxBodyBytes bounds an HTTP request body unless Access says otherwise.
const DefaultMaxBodyBytes = 1 << 20

// DefaultBodyTimeout bounds the time to receive a request body unless Access
// says otherwise: JSON-RPC bodies are small, and even the largest allowed one
// crosses a slow link well within it.
const DefaultBodyTimeout = 30 * time.Second

// refusedBodyGrace is how long the body of a request refused unread may
// still arrive: it is drained only so that the client reads the refusal
// rather than a connection reset, and one sent with its headers is there by then.
const refusedBodyGrace = time.Second

// ProtectedResourcePath is where the RFC 9728 protected resource metadata is
// served; the metadata of an endpoint is at this path followed by the
// endpoint's path (/.well-known/oauth-protected-resource/mcp).
const ProtectedResourcePath = "/.well-known/oauth-protected-resource"

// Access says who may use the HTTP endpoints.
type Access struct {
	// Auth authenticates bearer tokens and client certificates. When it requires none (the policy
	// names no identity providers) every caller is Local.
	Auth *auth.Authenticator
	// Local is the principal of unauthenticated callers when no
	// authentication is required (loopback only; serve enforces that).
	Local auth.Principal
	// Permits says whether a role may call a tool (RolePermits); a
	// tools/call of any other tool is refused with 403 before it runs.
	Permits func(tool string, role manifest.Role) bool
	// Refused is told of each call refused so (nil: nobody), for the
	// engine's counts and audit (engine.NoteRefused), with the call's
	// arguments (nil: none, or not an object).
	Refused func(caller engine.Caller, tool string, p promcp.Permission, reason string, args map[string]any)
	// AllowedOrigins are browser origins accepted besides same-origin and
	// loopback ones, e.g. "https://console.example.com".
	AllowedOrigins []string
	// MaxBodyBytes bounds a request body; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// BodyTimeout bounds the time from the end of the headers to the end of
	// the body (408 after it); 0 means DefaultBodyTimeout.
	BodyTimeout time.Duration
	// ResourceName names the device in the protected resource metadata.
	ResourceName string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Protect applies acc in front of next, in this order: Origin (403), the
// protected resource metadata (served without credentials), the bearer token
// or client certificate (401 with WWW-Authenticate), the body limits (413, 408) and, for
// tools/call, the caller's role (403). Nothing refused before the body limits
// has its body read: the connection closes after the answer.
func Protect(next http.Handler, acc Access) http.Handler {
	if acc.MaxBodyBytes <= 0 {
		acc.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if acc.BodyTimeout <= 0 {
		acc.BodyTimeout = DefaultBodyTimeout
	}
	if acc.Logger == nil {
		acc.Logger = slog.Default()
	}
	for i, o := range acc.AllowedOrigins {
		acc.AllowedOrigins[i] = strings.TrimRight(strings.ToLower(o), "/")
	}
	return &protector{next: next, acc: acc}
}

type protector struct {
	next http.Handler
	acc  Access
}

func (p *protector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if origin := r.Header.Get("Origin"); origin != "" && !p.originAllowed(origin, r) {
		p.acc.Logger.Info("HTTP request refused: foreign Origin", "origin", origin, "remote", r.RemoteAddr)
		p.leaveBodyUnread(w, r)
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "forbidden",
			"error_description": fmt.Sprintf("Origin %s is not allowed (DNS rebinding protection); start serve with --allow-origin %s to allow it", origin, origin)})
		return
	}
	required := p.acc.Auth.Required()
	if path, ok := strings.CutPrefix(r.URL.Path, ProtectedResourcePath); ok && (path == "" || strings.HasPrefix(path, "/")) {
		p.leaveBodyUnread(w, r)
		servers := p.authorizationServers()
		if !required || len(servers) == 0 {
			// Without an authorization server the metadata would send
			// OAuth clients into a login that cannot work.
			http.NotFound(w, r)
			return
		}
		p.serveMetadata(w, r, path, servers)
		return
	}
	principal := p.acc.Local
	if required || p.acc.Auth.MeshBearer(r.Header.Get("Authorization")) {
		var err error
		principal, err = p.authenticate(r)
		if err != nil {
			p.leaveBodyUnread(w, r)
			p.unauthorized(w, r, err)
			return
		}
	}
	if r.ContentLength != 0 { // a body follows (-1: of unknown length)
		body, ok := p.readBody(w, r)
		if !ok {
			return
		}
		holdBody(r, body)
		r.ContentLength = int64(len(body))
		if r.Method == http.MethodPost { // MCP reads no other body
			if id, tool, denied := p.deniedCall(body, principal, r.RemoteAddr); denied >= 0 {
				p.forbidden(w, body, denied, id, tool, principal)
				return
			}
		}
	}
	p.next.ServeHTTP(w, r.WithContext(auth.WithPrincipal(r.Context(), principal)))
}

// authenticate identifies the caller by its bearer token or, when it sent
// no Authorization header, by the client certificate it presented in the
// TLS handshake. A token, when given, decides alone.
func (p *protector) authenticate(r *http.Request) (auth.Principal, error) {
	header := r.Header.Get("Authorization")
	if header == "" && r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		return p.acc.Auth.AuthenticateCertificate(r.TLS.PeerCertificates)
	}
	principal, err := p.acc.Auth.Authenticate(header)
	if err == auth.ErrNoCredentials && p.acc.Auth.AcceptsClientCertificates() {
		err = auth.ErrNoCertificate
	}
	return principal, err
}

// readBody reads the request body within BodyTimeout and MaxBodyBytes, or
// answers the request itself.
func (p *protector) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	// The deadline ends with the body: net/http clears it before reading on
	// in the background (HTTP/1), or it only closes the body (HTTP/2), so a
	// long answer (an SSE stream) is not cut. SetReadDeadline fails only for
	// writers without a connection (tests), which have none to hold either.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(p.acc.BodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.acc.MaxBodyBytes))
	switch {
	case err == nil:
		return body, true
	case errors.As(err, new(*http.MaxBytesError)):
		writeJSON(w, http.StatusRequestEntityTooLarge, rpcError(nil, -32600, fmt.Sprintf("request body larger than %d bytes", p.acc.MaxBodyBytes), nil))
	case errors.Is(err, os.ErrDeadlineExceeded):
		p.acc.Logger.Info("HTTP request refused: body too slow", "remote", r.RemoteAddr, "timeout", p.acc.BodyTimeout)
		w.Header().Set("Connection", "close")
		writeJSON(w, http.StatusRequestTimeout, rpcError(nil, -32600, fmt.Sprintf("request body not received within %s", p.acc.BodyTimeout), nil))
	default:
		writeJSON(w, http.StatusBadRequest, rpcError(nil, -32700, fmt.Sprintf("reading the request body: %v", err), nil))
	}
	return nil, false
}

// leaveBodyUnread is called before refusing a request without reading its
// body. On HTTP/1 net/http would read what is left of the body before the
// answer, for the next request on the connection, as long as the client
// takes to send it; instead the connection closes after the answer, and the
// body gets refusedBodyGrace to arrive. (On HTTP/2 an unread body holds
// nothing, and closing would end the client's other streams.)
func (p *protector) leaveBodyUnread(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength == 0 || r.ProtoMajor != 1 {
		return
	}
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(min(refusedBodyGrace, p.acc.BodyTimeout)))
}

// originAllowed accepts loopback origins (local tools such as an inspector),
// the request's own origin and the configured ones. A browser page from
// anywhere else must not drive the device, even if DNS points its name here.
func (p *protector) originAllowed(origin string, r *http.Request) bool {
	o := strings.TrimRight(strings.ToLower(origin), "/")
	if slices.Contains(p.acc.AllowedOrigins, o) {
		return true
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false // includes the opaque origin "null"
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	return u.Scheme == scheme(r) && strings.EqualFold(u.Host, r.Host)
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// metadataURL is where the metadata of the endpoint at path is served.
func metadataURL(r *http.Request) string {
	return scheme(r) + "://" + r.Host + ProtectedResourcePath + r.URL.Path
}

// authorizationServers are the JWT providers' issuers that are URLs: the
// authorization servers an OAuth client can get a token from.
func (p *protector) authorizationServers() []string {
	var servers []string
	for _, iss := range p.acc.Auth.Issuers() {
		if u, err := url.Parse(iss); err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" {
			servers = append(servers, iss)
		}
	}
	return servers
}

// serveMetadata answers RFC 9728 protected resource metadata for the
// resource at path (empty: the server as a whole).
func (p *protector) serveMetadata(w http.ResponseWriter, r *http.Request, path string, servers []string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method_not_allowed"})
		return
	}
	meta := map[string]any{
		"resource":                 scheme(r) + "://" + r.Host + path,
		"bearer_methods_supported": []string{"header"},
		"resource_name":            p.acc.ResourceName,
		"authorization_servers":    servers,
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, meta)
}

// unauthorized answers 401 with the RFC 6750 challenge and, per RFC 9728,
// where the resource metadata is when there is an authorization server to
// name (static tokens have none: the client is told the realm only).
func (p *protector) unauthorized(w http.ResponseWriter, r *http.Request, err error) {
	var ae *auth.Error
	if !errors.As(err, &ae) {
		ae = &auth.Error{Code: "invalid_token", Description: err.Error()}
	}
	challenge := `Bearer realm="physmcpd"`
	if len(p.authorizationServers()) > 0 {
		challenge = fmt.Sprintf("Bearer resource_metadata=%q", metadataURL(r))
	}
	body := map[string]string{"error": "unauthorized", "error_description": ae.Description}
	if ae.Code != "" {
		challenge += fmt.Sprintf(", error=%q, error_description=%q", ae.Code, headerSafe(ae.Description))
		body["error"] = ae.Code
	}
	p.acc.Logger.Info("HTTP request refused: not authenticated", "remote", r.RemoteAddr, "reason", ae.Description)
	w.Header().Set("WWW-Authenticate", challenge)
	writeJSON(w, http.StatusUnauthorized, body)
}

// headerSafe keeps a description inside its quoted-string.
func headerSafe(s string) string {
	return strings.Map(func(c rune) rune {
		if c == '"' || c == '\\' || c < 0x20 || c > 0x7e {
			return '\''
		}
		return c
	}, s)
}

// rpcMessage is as much of a JSON-RPC message as the role check reads.
type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Name string `json:"name"`
	} `json:"params"`
}

// deniedCall finds a tools/call (alone or in a batch) of a tool the
// principal's role may not call: its index in the batch (0 alone), or -1.
// Calls made under an emergency override are audited here too. A body that
// does not parse is left to the server.
func (p *protector) deniedCall(body []byte, principal auth.Principal, remote string) (json.RawMessage, string, int) {
	// A body without the method's name, literally or escaped, holds no
	// tools/call: it is not decoded here (one decode less for every other
	// request). Decoding the rest into rpcMessage reads the method and name
	// as mcp-go will (last key wins, keys match case-insensitively) and skips
	// the arguments without building them; a json.Decoder token scan took
	// 2.4 times as long.
	if !bytes.Contains(body, []byte("tools/call")) && bytes.IndexByte(body, '\\') < 0 {
		return nil, "", -1
	}
	msgs, ok := decodeMessages[rpcMessage](body)
	if !ok {
		return nil, "", -1
	}
	for i, m := range msgs {
		if m.Method != "tools/call" {
			continue
		}
		if p.acc.Permits != nil && !p.acc.Permits(m.Params.Name, principal.Role) {
			return m.ID, m.Params.Name, i
		}
		if principal.Method == auth.MethodOverride && p.acc.Auth.AuditAllOverrides() {
			p.acc.Auth.AuditOverrideCall(principal, m.Params.Name, remote)
		}
	}
	return nil, "", -1
}

// decodeMessages decodes body as one JSON-RPC message or a batch of them.
func decodeMessages[T any](body []byte) ([]T, bool) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var msgs []T
		return msgs, json.Unmarshal(trimmed, &msgs) == nil
	}
	var m T
	return []T{m}, json.Unmarshal(trimmed, &m) == nil
}

// callArguments are the arguments of message i of body, decoded only for a
// refused call (they are rare), for its audit line; nil when they are not
// an object, which does not change the refusal.
func callArguments(body []byte, i int) map[string]any {
	type call struct {
		Params struct {
			Arguments json.RawMessage `json:"arguments"`
		} `json:"params"`
	}
	msgs, ok := decodeMessages[call](body)
	if !ok || i >= len(msgs) {
		return nil
	}
	var args map[string]any
	if json.Unmarshal(msgs[i].Params.Arguments, &args) != nil {
		return nil
	}
	return args
}

// forbidden answers 403 for call i of body, which the role may not make: an
// HTTP status a client cannot mistake for success, with the proMCP
// permission in the body.
func (p *protector) forbidden(w http.ResponseWriter, body []byte, i int, id json.RawMessage, tool string, principal auth.Principal) {
	reason := roleRefusal(principal.Role, tool)
	p.acc.Logger.Info("tool call refused: role", "tool", tool, "caller", principal.Name, "role", principal.Role)
	if p.acc.Refused != nil {
		p.acc.Refused(engine.Caller{Identity: principal.Name, Role: principal.Role}, tool, promcp.PermissionInsufficient, reason, callArguments(body, i))
	}
	w.Header().Set("WWW-Authenticate", fmt.Sprintf("Bearer error=\"insufficient_scope\", error_description=%q", headerSafe(reason)))
	writeJSON(w, http.StatusForbidden, rpcError(id, -32003, reason+"; nothing was written",
		map[string]any{"permission": promcp.PermissionInsufficient, "reason": reason}))
}

func rpcError(id json.RawMessage, code int, message string, data any) map[string]any {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	e := map[string]any{"code": code, "message": message}
	if data != nil {
		e["data"] = data
	}
	return map[string]any{"jsonrpc": "2.0", "id": id, "error": e}
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// TLSConfig is the HTTPS listener's configuration for acc. With an mtls
// provider it asks every client for a certificate but leaves verifying it
// to Protect: a bearer-token client without one is still served, and a bad
// certificate gets a 401 that says what is wrong rather than a TLS alert.
// The handshake itself proves the client holds the certificate's key.
func TLSConfig(acc Access) *tls.Config {
	c := &tls.Config{}
	if acc.Auth.AcceptsClientCertificates() {
		c.ClientAuth = tls.RequestClientCert
	}
	return c
}
