package mcpserver

import (
	"bytes"
	"encoding/json"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/auth"
)

// tools/list from bytes. mcp-go builds the list on every request and
// marshals each tool's schemas again (at 200 capabilities, 368 KB and about
// 12 ms, most of it compacting the same raw schemas). An endpoint's list
// depends only on the caller's role and the shape of the request (protocol
// era, headers, params), and neither the tools nor the roles change while
// physmcpd runs (no reload), except an aggregator's as it adopts devices: a
// server whose tools change has a version (see toolsVersion), and its lists
// are forgotten when it changes. So the first answer mcp-go gives for a
// (role, request shape) is kept, and an identical request later gets the
// same bytes with its own id. Anything else, or a
// request mcp-go would treat differently (another Host, Last-Event-ID,
// parameter headers, an unknown session), goes to mcp-go as before.

// maxListShapes bounds the remembered request shapes per endpoint: a client
// varying its params cannot grow memory. Identical answers share one copy.
const maxListShapes = 32

type toolLists struct {
	transport http.Handler
	// version is the server's tools version (nil: they never change); odd
	// while a change is under way, when nothing is served from the cache.
	version *atomic.Uint64
	mu      sync.RWMutex
	seen    uint64            // the version the maps hold answers of
	byShape map[string][]byte // role + request shape → the answer after its envelope: the result, "}\n"
	results map[string][]byte // distinct results, so that shapes share them
}

func newToolLists(transport http.Handler, version *atomic.Uint64) *toolLists {
	return &toolLists{transport: transport, version: version, byShape: map[string][]byte{}, results: map[string][]byte{}}
}

// current is the tools version, and whether answers of it may be cached.
func (l *toolLists) current() (uint64, bool) {
	if l.version == nil {
		return 0, true
	}
	v := l.version.Load()
	return v, v%2 == 0
}

// listRequest is as much of a JSON-RPC message as the cache looks at.
type listRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// serve answers r if it is a tools/list it can answer from bytes (asking
// mcp-go once for a new shape), and says whether it did. session says that
// r's session id is one of the endpoint's open sessions.
func (l *toolLists) serve(w http.ResponseWriter, r *http.Request, session bool) bool {
	if r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		return false
	}
	// Cheap refusal before anything is decoded: most requests are tool calls.
	body, err := requestBody(r)
	if err != nil || !bytes.Contains(body, []byte(`"tools/list"`)) {
		return false
	}
	var req listRequest
	if json.Unmarshal(body, &req) != nil || req.JSONRPC != mcp.JSONRPC_VERSION || req.Method != string(mcp.MethodToolsList) || !plainID(req.ID) {
		return false
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return false
	}
	h := r.Header
	version := h.Get(mcp.HeaderProtocolVersion)
	modern := mcp.IsModernProtocol(version)
	if !modern && bytes.Contains(req.Params, []byte(mcp.MetaKeyProtocolVersion)) {
		var p struct {
			Meta *mcp.Meta `json:"_meta"`
		}
		if json.Unmarshal(req.Params, &p) != nil {
			return false
		}
		modern = mcp.IsModernProtocol(p.Meta.ProtocolVersion())
	}
	if !modern && !session || h.Get(mcp.HeaderLastEventID) != "" || rebinding(r) {
		return false
	}
	for k := range h {
		if strings.HasPrefix(k, mcp.HeaderParamPrefix) {
			return false
		}
	}
	var params bytes.Buffer
	if len(req.Params) > 0 && json.Compact(&params, req.Params) != nil {
		return false
	}
	gen, stable := l.current()
	if !stable {
		return false
	}
	shape := strings.Join([]string{roleKey(r), version, h.Get(mcp.HeaderMethod), h.Get(mcp.HeaderName), params.String()}, "\x00")
	l.mu.RLock()
	result, ok := l.byShape[shape]
	ok = ok && l.seen == gen
	full := len(l.byShape) >= maxListShapes && l.seen == gen
	l.mu.RUnlock()
	if !ok && full {
		return false
	}
	if !ok {
		l.learn(w, r, shape, gen)
		return true
	}
	// The kept bytes are written as they are, after the envelope: a copy
	// of the list per answer (347 KB at 200 capabilities) made the
	// collector and the scavenger half of the process's CPU.
	envelope := appendEnvelope(make([]byte, 0, 64), req.ID)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(envelope)+len(result)))
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(envelope); err == nil {
		_, _ = w.Write(result)
	}
	return true
}

// learn lets mcp-go answer r and keeps the result when the answer is a plain
// JSON success in exactly the form serve writes, and the tools are still at
// version gen.
func (l *toolLists) learn(w http.ResponseWriter, r *http.Request, shape string, gen uint64) {
	rec := &recorder{header: http.Header{}}
	l.transport.ServeHTTP(rec, r)
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.statusOr200())
	_, _ = w.Write(rec.body.Bytes())

	var resp struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
	}
	if rec.statusOr200() != http.StatusOK || rec.header.Get("Content-Type") != "application/json" ||
		json.Unmarshal(rec.body.Bytes(), &resp) != nil || len(resp.Result) == 0 {
		return
	}
	envelope := appendEnvelope(nil, resp.ID)
	if !bytes.Equal(rec.body.Bytes(), append(append(envelope, resp.Result...), "}\n"...)) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if now, _ := l.current(); now != gen {
		return // the tools changed while mcp-go answered
	}
	if l.seen != gen {
		clear(l.byShape)
		clear(l.results)
		l.seen = gen
	}
	if len(l.byShape) >= maxListShapes {
		return
	}
	after := rec.body.Bytes()[len(envelope):] // the result and "}\n", as serve writes them
	result, ok := l.results[string(after)]
	if !ok {
		result = bytes.Clone(after)
		l.results[string(result)] = result
	}
	l.byShape[shape] = result
}

// appendEnvelope is mcp-go's JSON-RPC response up to its result.
func appendEnvelope(b []byte, id json.RawMessage) []byte {
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	return append(b, `,"result":`...)
}

// plainID accepts the ids mcp-go writes back unchanged: strings without
// escapes and integers it holds exactly (it decodes numbers to float64).
func plainID(id json.RawMessage) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	if id[0] == '"' {
		if len(id) < 2 || id[len(id)-1] != '"' {
			return false
		}
		s := id[1 : len(id)-1]
		return !bytes.ContainsAny(s, "\\\"<>&") && isPrintableASCII(s)
	}
	n, err := strconv.ParseInt(string(id), 10, 64)
	return err == nil && n > -1<<53 && n < 1<<53 && strconv.FormatInt(n, 10) == string(id)
}

func isPrintableASCII(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// roleKey is the role the endpoint's tool filter sees: the principal Protect
// authenticated (the adapter's Caller derives the role from it; without
// one the Caller's role does not depend on the request).
func roleKey(r *http.Request) string {
	if p, ok := auth.PrincipalFrom(r.Context()); ok {
		return "role:" + string(p.Role)
	}
	return "none"
}

// rebinding is mcp-go's DNS rebinding check (it answers 403): a request that
// reached a loopback address with a Host that is not.
func rebinding(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return ok && local != nil && loopbackHost(local.String()) && !loopbackHost(r.Host)
}

func loopbackHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// recorder keeps mcp-go's answer; it cannot stream, so mcp-go answers in one
// JSON body (a tools/list sends no notifications to stream).
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *recorder) Header() http.Header { return w.header }

func (w *recorder) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *recorder) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}

func (w *recorder) statusOr200() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
