package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unicode/utf8"
	"weak"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// read_*, can_do and do_* over streamable HTTP without mcp-go's request
// path. mcp-go v1.2.1
// decodes a tools/call body five times (its envelope, the protocol era, the
// base message, _meta, the CallToolRequest), starts a goroutine per POST to
// forward notifications and encodes the result through a map; for a cached
// read that was most of the server's work, for a durable do_* a sixth of the
// server's CPU (docs/performance.md). Such a
// call in an established session of the protocols clients speak today
// (initialize, a session) is answered here instead: the body decoded once,
// into the CallToolRequest mcp-go would build (by its own decoder), the
// handler mcp-go would run (the one it holds for the tool) and the answer
// mcp-go would write, as JSON or, once the session has
// been sent a notification, as SSE. Everything else goes to mcp-go: other
// methods and tools, batches, the 2026-07-28 era, _meta, task or multi
// round-trip params, unknown or expired sessions, tools the caller's role
// does not see, bodies that do not decode as a request, do_* calls of
// sessions whose client declared elicitation (setTools).
//
// Around the handler this does what mcp-go does for physmcpd's server: the
// request initialization hooks (physmcpd's gate), the tool filter (the same
// roleFilter), WithRecovery, in-flight cancellation (notifications/cancelled
// reaches these calls too, see cancel). Other hooks, tracing, request logs
// and schema validation are not configured; a server with call hooks is left
// to mcp-go (plainHooks). The handler's context has the session and the
// protocol era as mcp-go's has, not server.ServerFromContext, which only
// read_status_*'s progress uses. Notifications: mcp-go puts them on the session's
// channel, which a POST in progress drains into its SSE answer, and from the
// first one on answers every POST of the session as SSE. Every notification
// physmcpd sends to a session goes through notifyLog, notifyCallLog,
// notifySession, notifying or broadcasting here, which hand it to a call of the session
// answered here when one is running (written before its result, never
// dropped, where mcp-go may drop one: docs/interop.md, "Known trap") and
// otherwise to mcp-go, and remember that the session is upgraded. An
// upgraded session, or one with a notification waiting, is answered by
// mcp-go, which drains its channel as before. TestFastReadsAnswerAsMCPGo and
// the tests after it (and TestFastCanDoAnswersAsMCPGo, TestFastDoAnswersAsMCPGo)
// send the same requests to both paths.

// fastEndpoints finds the fast path of a server New built; it holds neither.
var fastEndpoints sync.Map // weak.Pointer[server.MCPServer] → weak.Pointer[fastReads]

func fastReadsOf(s *server.MCPServer) *fastReads {
	v, ok := fastEndpoints.Load(weak.Make(s))
	if !ok {
		return nil
	}
	return v.(weak.Pointer[fastReads]).Value()
}

type fastReads struct {
	server *server.MCPServer
	hooks  *server.Hooks
	filter server.ToolFilterFunc
	// tools are the endpoint's tools answered here, true for those whose
	// handler may ask the client for a person's approval (do_*); they
	// change with an aggregator's (setTools).
	tools atomic.Pointer[map[string]bool]

	mu       sync.Mutex
	sessions map[string]*fastSession // registered with mcp-go, by id

	served atomic.Int64 // calls answered here, which tests check
	// ownErrorHooks counts the OnError hooks that are the adapter's
	// noteHidden (plainHooks).
	ownErrorHooks int
}

type fastSession struct {
	session  server.ClientSession
	upgraded bool        // mcp-go answers this session's POSTs as SSE
	calls    []*fastCall // answered here, running
}

// fastCall is a call running on the fast path.
type fastCall struct {
	id     any // the request's, as mcp-go holds it
	cancel context.CancelFunc
	notes  []mcp.JSONRPCNotification // to send before the result, in order
}

func newFastReads(s *server.MCPServer, filter server.ToolFilterFunc, hooks *server.Hooks) *fastReads {
	f := &fastReads{server: s, hooks: hooks, filter: filter, sessions: map[string]*fastSession{}}
	f.tools.Store(&map[string]bool{})
	hooks.AddOnRegisterSession(func(_ context.Context, session server.ClientSession) {
		f.mu.Lock()
		f.sessions[session.SessionID()] = &fastSession{session: session}
		f.mu.Unlock()
	})
	hooks.AddOnUnregisterSession(func(_ context.Context, session server.ClientSession) {
		f.mu.Lock()
		delete(f.sessions, session.SessionID())
		f.mu.Unlock()
	})
	key := weak.Make(s)
	fastEndpoints.Store(key, weak.Make(f)) // the adapter, which s's handlers hold, keeps f
	runtime.AddCleanup(s, func(key weak.Pointer[server.MCPServer]) { fastEndpoints.Delete(key) }, key)
	return f
}

// setTools has the fast path answer calls of tools, and no others: read_*
// and can_do, whose handlers send no progress and ask the client nothing (a
// mesh hop's can_do carries _meta, which goes to mcp-go), and do_*, true in
// tools, whose handler asks a client for a person's approval only when the
// client declared elicitation: their calls in such sessions go to mcp-go,
// which turns the question into an elicitation request for clients before
// 2026-07-28. A call runs the handler mcp-go holds for its tool then, if it
// still has it.
func (f *fastReads) setTools(tools map[string]bool) {
	f.tools.Store(&tools)
}

// fastMessage is a JSON-RPC message decoded as mcp-go decodes a tools/call:
// the request through mcp-go's own CallToolRequest (its params decoder), and
// the fields by which mcp-go tells a request from a response.
type fastMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
	mcp.CallToolRequest
}

// serve answers r, a POST of session id (open on this endpoint), if it is a
// call it can answer, and says whether it did.
func (f *fastReads) serve(w http.ResponseWriter, r *http.Request, id string) bool {
	if r.Method != http.MethodPost {
		return false
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return false
		}
	}
	if v := r.Header.Get(mcp.HeaderProtocolVersion); mcp.IsModernProtocol(v) || v != "" && !mcp.IsValidProtocolVersion(v) || rebinding(r) {
		return false
	}
	body, err := requestBody(r)
	if err != nil || !bytes.Contains(body, []byte(`"tools/call"`)) {
		return false
	}
	msg, reqID, tool, asks, ok := f.readCall(r.Context(), body)
	if !ok {
		return false
	}
	call := &fastCall{id: reqID}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	call.cancel = cancel
	session, ok := f.begin(id, msg.Params.Name, asks, call)
	if !ok {
		return false
	}
	ctx = f.server.WithContext(ctx, session)
	response := f.call(ctx, call, reqID, body, msg.CallToolRequest, r.Header, tool.Handler)

	f.served.Add(1)
	notes, sse := f.end(id, call)
	if r.Context().Err() != nil {
		return true // the client is gone; mcp-go writes nothing then either
	}
	_, canStream := w.(http.Flusher)
	if sse && canStream {
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Connection", "keep-alive")
		h.Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		for _, n := range notes {
			writeEvent(w, n)
		}
		writeEvent(w, response)
		return true
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	buf := answerBuffers.Get().(*[]byte)
	defer putAnswerBuffer(buf)
	if out, ok := appendResponse((*buf)[:0], response); ok {
		_, _ = w.Write(out)
		*buf = out
	} else {
		_ = json.NewEncoder(w).Encode(response)
	}
	return true
}

// answerBuffers hold answers being written: a can_do's is 10 KB, grown
// anew for every call before.
var answerBuffers = sync.Pool{New: func() any { return new([]byte) }}

// putAnswerBuffer keeps buf for the next answer unless it grew past what
// one usually needs (a tools/list of hundreds of tools does not take the
// fast path, but a read of a long string could).
func putAnswerBuffer(buf *[]byte) {
	if cap(*buf) <= 64<<10 {
		answerBuffers.Put(buf)
	}
}

// readCall decodes body as a call this path answers for the caller of ctx:
// the request, its id as mcp-go holds it (numbers as float64), the tool
// mcp-go holds and whether its handler may ask the client (setTools: the
// caller answers the call only for a session whose client cannot be asked).
// Any other message says false.
func (f *fastReads) readCall(ctx context.Context, body []byte) (msg fastMessage, reqID any, tool *server.ServerTool, asks, ok bool) {
	if json.Unmarshal(body, &msg) != nil || msg.JSONRPC != mcp.JSONRPC_VERSION || msg.Method != string(mcp.MethodToolsCall) ||
		len(msg.Result) > 0 || len(msg.Error) > 0 || len(msg.ID) == 0 || msg.ID[0] != '"' && msg.ID[0] != '-' && (msg.ID[0] < '0' || msg.ID[0] > '9') {
		return msg, nil, nil, false, false
	}
	p := msg.Params
	if holdsMeta(body) || p.Task != nil || p.InputResponses != nil || p.RequestState != "" {
		return msg, nil, nil, false, false
	}
	asks, fast := (*f.tools.Load())[p.Name]
	if !fast || !f.plainHooks() {
		return msg, nil, nil, false, false
	}
	tool = f.server.GetTool(p.Name)
	if tool == nil || len(f.filter(ctx, []mcp.Tool{tool.Tool})) != 1 {
		return msg, nil, nil, false, false // mcp-go answers that it has no such tool
	}
	if json.Unmarshal(msg.ID, &reqID) != nil {
		return msg, nil, nil, false, false
	}
	return msg, reqID, tool, asks, true
}

// holdsMeta says whether body's params hold _meta as mcp-go reads it: such
// calls go to mcp-go. The CallToolRequest's Meta does not tell: mcp-go tells
// a request's protocol era by decoding params._meta on its own, where a
// params key given twice merges, while the CallToolRequest keeps only the
// last params; a body whose first params carried the 2026-07-28 era was
// answered here as a legacy call (a write made) where mcp-go refuses it.
// Only a body that may spell _meta is decoded again (keys match
// case-insensitively, and a JSON escape may spell one).
func holdsMeta(body []byte) bool {
	may := bytes.IndexByte(body, '\\') >= 0
	for rest := body; !may; {
		i := bytes.IndexByte(rest, '_')
		if i < 0 {
			return false
		}
		rest = rest[i+1:]
		may = len(rest) >= 4 && bytes.EqualFold(rest[:4], []byte("meta"))
	}
	var era struct {
		Params struct {
			Meta *mcp.Meta `json:"_meta"`
		} `json:"params"`
	}
	return json.Unmarshal(body, &era) != nil || era.Params.Meta != nil
}

// appendResponse appends what mcp-go's json.NewEncoder(w).Encode writes for
// a tool result in the form the adapter's result gives (one text block and
// its JSON as structured content), without the reflection: a third of the
// fast path's time was mcp-go's encoding (CallToolResult.MarshalJSON builds a
// map, the encoder validates and compacts its output again). Any other
// message says false. TestFastReadsEncodeAsMCPGo compares the two.
func appendResponse(b []byte, msg mcp.JSONRPCMessage) ([]byte, bool) {
	resp, ok := msg.(mcp.JSONRPCResponse)
	if !ok {
		return b, false
	}
	res, ok := resp.Result.(*mcp.CallToolResult)
	if !ok || res.Meta != nil || res.ResultType != "" || len(res.InputRequests) > 0 || res.RequestState != "" ||
		len(res.Content) != 1 || len(res.RawStructuredContent) == 0 {
		return b, false
	}
	text, ok := res.Content[0].(mcp.TextContent)
	if !ok || text.Annotations != nil || text.Meta != nil || text.Type != mcp.ContentTypeText {
		return b, false
	}
	id, err := resp.ID.MarshalJSON()
	if err != nil {
		return b, false
	}
	raw := res.RawStructuredContent
	out := slices.Grow(b, len(id)+len(text.Text)*5/4+len(raw)+128)
	out = append(out, `{"jsonrpc":"2.0","id":`...)
	out = append(out, id...)
	out = append(out, `,"result":{"content":[{"type":"text","text":`...)
	// The same JSON as text block and structured content is what the
	// adapter's result makes: json.Marshal's output, valid. When it is
	// plain, the encoder escapes nothing in it but the text's quotes and
	// backslashes, and copies the structured content unchanged; escaping the
	// text and compacting the content again (the encoder's way of checking
	// it) was a sixth of a can_do's time on this path (4.5 KB each).
	mark, plain := len(out), false
	if string(raw) == text.Text {
		out, plain = appendPlainQuoted(out, raw)
	}
	if !plain {
		str, err := json.Marshal(text.Text) // escaped as the encoder escapes it
		if err != nil {
			return b, false
		}
		out = append(out[:mark], str...)
	}
	out = append(out, "}]"...)
	if res.IsError {
		out = append(out, `,"isError":true`...)
	}
	out = append(out, `,"structuredContent":`...)
	if plain {
		out = append(out, raw...)
	} else {
		buf := bytes.NewBuffer(out)
		start := buf.Len()
		if json.Compact(buf, raw) != nil {
			return b, false
		}
		out = buf.Bytes()
		// The encoder also escapes <, >, & and U+2028/9.
		if structured := out[start:]; bytes.ContainsAny(structured, "<>&\u2028\u2029") {
			escaped := bytes.NewBuffer(nil)
			json.HTMLEscape(escaped, structured)
			out = append(out[:start], escaped.Bytes()...)
		}
	}
	return append(out, "}}\n"...), true
}

// jsonNotPlain marks the bytes appendPlainQuoted looks at: quotes,
// backslashes, whitespace and other control characters, the characters the
// encoder escapes for HTML, and the first byte of U+2028/9.
var jsonNotPlain = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	for _, c := range []byte{'"', '\\', ' ', '<', '>', '&', 0xE2} {
		t[c] = true
	}
	return t
}()

// appendPlainQuoted appends the JSON text raw as the encoder writes it as a
// string, when raw is plain: valid UTF-8 without control characters,
// whitespace outside strings or the characters the encoder escapes for HTML
// (<, >, &, U+2028, U+2029), so that it escapes only quotes and backslashes,
// and writes raw itself as a json.RawMessage unchanged. It does not validate
// raw as JSON. When raw is not plain it says false, dst holding a partial
// string.
func appendPlainQuoted(dst, raw []byte) ([]byte, bool) {
	if !utf8.Valid(raw) {
		return dst, false
	}
	dst = append(dst, '"')
	inString, start := false, 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !jsonNotPlain[c] {
			continue
		}
		switch {
		case c == '"' || c == '\\':
			dst = append(append(dst, raw[start:i]...), '\\', c)
			start = i + 1
			if c == '"' {
				inString = !inString
			} else if i+1 < len(raw) && (raw[i+1] == '"' || raw[i+1] == '\\') {
				// an escaped quote or backslash: it does not end the string
				i++
				dst = append(dst, '\\', raw[i])
				start = i + 1
			}
		case c == ' ':
			if !inString {
				return dst, false
			}
		case c == 0xE2:
			if i+2 < len(raw) && raw[i+1] == 0x80 && raw[i+2]&^1 == 0xA8 {
				return dst, false
			}
		default: // control characters and <, >, &
			return dst, false
		}
	}
	return append(append(dst, raw[start:]...), '"'), true
}

// call runs the handler as mcp-go's HandleMessage and handleToolCall do for
// this request, and returns the message mcp-go would answer.
func (f *fastReads) call(ctx context.Context, call *fastCall, reqID any, body []byte, req mcp.CallToolRequest, header http.Header,
	handler server.ToolHandlerFunc) mcp.JSONRPCMessage {
	for _, hook := range f.hooks.OnRequestInitialization {
		if err := hook(ctx, reqID, json.RawMessage(body)); err != nil {
			return rpcErrorMessage(reqID, mcp.INVALID_REQUEST, err.Error())
		}
	}
	ctx = server.WithRequestProtocolInfo(ctx, &server.RequestProtocolInfo{})
	ctx = context.WithValue(ctx, fastCallKey{}, call)
	req.Header = header
	res, err := mcpGoRecovery(handler)(ctx, req)
	switch {
	case err != nil:
		return rpcErrorMessage(reqID, mcp.INTERNAL_ERROR, err.Error())
	case res == nil:
		return rpcErrorMessage(reqID, mcp.INTERNAL_ERROR, fmt.Sprintf("tool '%s' handler returned no result", req.Params.Name))
	}
	return mcp.NewJSONRPCResultResponse(mcp.NewRequestId(reqID), res)
}

// mcpGoRecovery is mcp-go's WithRecovery, which New configures: the only tool
// handler middleware mcp-go runs for physmcpd's tools.
func mcpGoRecovery(h server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic recovered in %s tool handler: %v", req.Params.Name, r)
			}
		}()
		return h(ctx, req)
	}
}

// plainHooks says that mcp-go runs no hooks around a tool call other than
// the request initialization ones, which call runs, and the adapter's
// noteHidden, which acts only on calls of tools the caller does not see
// (this path leaves them to mcp-go).
func (f *fastReads) plainHooks() bool {
	h := f.hooks
	return len(h.OnBeforeAny)+len(h.OnSuccess)+len(h.OnError)-f.ownErrorHooks+len(h.OnBeforeCallTool)+len(h.OnAfterCallTool) == 0
}

func rpcErrorMessage(id any, code int, message string) mcp.JSONRPCError {
	return mcp.JSONRPCError{JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId(id), Error: mcp.NewJSONRPCErrorDetails(code, message, nil)}
}

// writeEvent writes one SSE event as mcp-go does, and flushes it.
func writeEvent(w http.ResponseWriter, msg any) {
	data, err := json.Marshal(msg)
	if err != nil {
		return
	}
	_, _ = fmt.Fprintf(w, "event: message\ndata: %s\n\n", data)
	w.(http.Flusher).Flush()
}

type fastCallKey struct{}

// begin records call of tool as running in session id and returns the
// session, or says that mcp-go must answer: a session it has not registered
// (or ended), one it answers as SSE, one with notifications waiting for a
// POST, one with a tool of its own by that name, or, for a tool that asks,
// one whose client can be asked.
func (f *fastReads) begin(id, tool string, asks bool, call *fastCall) (server.ClientSession, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sessions[id]
	if s == nil || s.upgraded || len(s.session.NotificationChannel()) > 0 || asks && sessionCanAsk(s.session) {
		return nil, false
	}
	if st, ok := s.session.(server.SessionWithTools); ok {
		if _, own := st.GetSessionTools()[tool]; own {
			return nil, false
		}
	}
	s.calls = append(s.calls, call)
	return s.session, true
}

// end removes call and returns the notifications it is to send first, and
// whether it answers as SSE.
func (f *fastReads) end(id string, call *fastCall) ([]mcp.JSONRPCNotification, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sessions[id]
	if s == nil {
		return call.notes, len(call.notes) > 0
	}
	for i, c := range s.calls {
		if c == call {
			s.calls = append(s.calls[:i], s.calls[i+1:]...)
			break
		}
	}
	return call.notes, s.upgraded || len(call.notes) > 0
}

// Notifications. Each function below stands for one of mcp-go's: it delivers
// to a call answered here when there is one to deliver to, else lets mcp-go
// send; either way it records that mcp-go now answers the session as SSE.

// notifyLog is SendLogMessageToSpecificClient.
func (f *fastReads) notifyLog(id string, n mcp.LoggingMessageNotification) error {
	f.mu.Lock()
	s := f.sessions[id]
	if s != nil && s.wantsLog(n.Params.Level) && f.deliverLocked(s, nil, logNotification(n)) {
		f.mu.Unlock()
		return nil
	}
	f.mu.Unlock()
	return f.server.SendLogMessageToSpecificClient(id, n)
}

// notifyCallLog is SendLogMessageToClient for a tool handler's ctx; it says
// whether the message went to the answer of the call (answered here) or to
// mcp-go, which writes it on the call's POST if it is still running.
func (f *fastReads) notifyCallLog(ctx context.Context, n mcp.LoggingMessageNotification) (delivered bool, err error) {
	if session := server.ClientSessionFromContext(ctx); session != nil {
		call, _ := ctx.Value(fastCallKey{}).(*fastCall)
		f.mu.Lock()
		s := f.sessions[session.SessionID()]
		if s != nil && s.wantsLog(n.Params.Level) {
			if call != nil && f.deliverLocked(s, call, logNotification(n)) {
				f.mu.Unlock()
				return true, nil
			}
			s.upgraded = true
		}
		f.mu.Unlock()
	}
	return false, f.server.SendLogMessageToClient(ctx, n)
}

// notifySession stands for putting n on session's channel (subscriptions);
// false means the caller is to do that.
func (f *fastReads) notifySession(session server.ClientSession, n mcp.JSONRPCNotification) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sessions[session.SessionID()]
	return s != nil && f.deliverLocked(s, nil, n)
}

// notifying is called before mcp-go sends a notification to ctx's session
// that never goes to a call answered here (progress of read_status_*).
func (f *fastReads) notifying(ctx context.Context) {
	if session := server.ClientSessionFromContext(ctx); session != nil {
		f.mu.Lock()
		if s := f.sessions[session.SessionID()]; s != nil {
			s.upgraded = true
		}
		f.mu.Unlock()
	}
}

// broadcasting is called before mcp-go tells every session of a change
// (notifications/tools/list_changed, resources/list_changed), which upgrades
// every initialized one, though its GET stream may take the notification.
func (f *fastReads) broadcasting() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.sessions {
		if s.session.Initialized() {
			s.upgraded = true
		}
	}
}

// deliverLocked marks s upgraded and, when a call of s answered here is
// running (call itself if it is one), hands it n and says so. mcp-go marks
// its session too, as its senders do, for the POSTs it answers later.
func (f *fastReads) deliverLocked(s *fastSession, call *fastCall, n mcp.JSONRPCNotification) bool {
	s.upgraded = true
	if call == nil || !slices.Contains(s.calls, call) {
		if len(s.calls) == 0 {
			return false
		}
		call = s.calls[0]
	}
	if c, ok := s.session.(server.SessionWithStreamableHTTPConfig); ok {
		c.UpgradeToSSEWhenReceiveNotification()
	}
	call.notes = append(call.notes, n)
	return true
}

// wantsLog is mcp-go's test before it sends a log message to a session.
func (s *fastSession) wantsLog(level mcp.LoggingLevel) bool {
	l, ok := s.session.(server.SessionWithLogging)
	return ok && s.session.Initialized() && level.ShouldSendTo(l.GetLogLevel())
}

// logNotification is n as mcp-go sends it (its buildLogNotification).
func logNotification(n mcp.LoggingMessageNotification) mcp.JSONRPCNotification {
	return mcp.JSONRPCNotification{
		JSONRPC: mcp.JSONRPC_VERSION,
		Notification: mcp.Notification{
			Method: n.Method,
			Params: mcp.NotificationParams{AdditionalFields: map[string]any{
				"level": n.Params.Level, "logger": n.Params.Logger, "data": n.Params.Data,
			}},
		},
	}
}

// cancel ends the call answered here that a notifications/cancelled posted
// in session id names, as mcp-go ends its own (then mcp-go handles the
// notification as before). The body is decoded only when it may be one.
func (f *fastReads) cancel(r *http.Request, id string) {
	if r.Method != http.MethodPost {
		return
	}
	body, err := requestBody(r)
	if err != nil || !bytes.Contains(body, []byte(mcp.MethodNotificationCancelled)) {
		return
	}
	var n mcp.JSONRPCNotification
	if json.Unmarshal(body, &n) != nil || n.Method != string(mcp.MethodNotificationCancelled) {
		return
	}
	reqID, ok := n.Params.AdditionalFields["requestId"]
	if !ok {
		return
	}
	// mcp-go keys its calls by session and fmt's %v of the id (so "1" and
	// 1 are one key), and keeps the latest call per key.
	key := fmt.Sprint(reqID)
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.sessions[id]; s != nil {
		for _, c := range slices.Backward(s.calls) {
			if fmt.Sprint(c.id) == key {
				c.cancel()
				return
			}
		}
	}
}
