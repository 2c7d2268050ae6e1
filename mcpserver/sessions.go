package mcpserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// A streamable HTTP session (protocol versions before 2026-07-28) lives in
// mcp-go from initialize until the client sends DELETE, about 10 KB of heap
// each (BenchmarkOpenSession); a client that just goes away would leave its
// session behind for good. The
// session table counts the sessions of a handler's endpoints, refuses new
// ones beyond a cap, and releases those idle past a timeout through mcp-go's
// own DELETE handling, which drops every entry mcp-go keeps for a session.
// mcp-go's WithSessionIdleTTL is not used: it counts a session as active only
// when a request starts or a GET stream writes, so it would release a session
// whose stream is open but quiet, or whose tool call is waiting for a person.

const (
	// DefaultSessionIdleTimeout is long enough for an agent (or the person
	// behind it) to pause between calls without losing its session, and short
	// enough that abandoned sessions do not pile up.
	DefaultSessionIdleTimeout = 10 * time.Minute
	// DefaultMaxSessions is far more than the agents one device serves, and
	// holds about 10 MB of heap when full.
	DefaultMaxSessions = 1000
)

// SessionLimits bound the streamable HTTP sessions of a handler.
type SessionLimits struct {
	// IdleTimeout releases a session no request has used for this long. A
	// session with a request in progress (an open GET stream, a call waiting
	// for human approval) is not idle. 0 means DefaultSessionIdleTimeout.
	IdleTimeout time.Duration
	// MaxSessions bounds the open sessions across the handler's endpoints;
	// an initialize beyond it is answered 503 with a JSON-RPC error.
	// 0 means DefaultMaxSessions.
	MaxSessions int
}

func (l SessionLimits) withDefaults() SessionLimits {
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultSessionIdleTimeout
	}
	if l.MaxSessions <= 0 {
		l.MaxSessions = DefaultMaxSessions
	}
	return l
}

// sessionIDPrefix keeps mcp-go's form of session ids.
const sessionIDPrefix = "mcp-session-"

type sessionTable struct {
	limits SessionLimits
	logger *slog.Logger

	mu   sync.Mutex
	byID map[string]*sessionEntry
	// pending counts admissions that have not created their session yet, so
	// that concurrent initializes cannot overshoot the cap.
	pending int
	sweep   *time.Timer // armed while there are sessions
	full    bool        // the last admission was refused (logged when it starts)
}

type sessionEntry struct {
	ep        *sessionEndpoint // whose transport holds the session
	busy      int              // requests of the session in progress
	idleSince time.Time        // when the last of them ended
}

// admission reserves room for the session a request may create; id is the
// session once mcp-go has created it.
type admission struct{ id string }

type admissionKey struct{}

func newSessionTable(limits SessionLimits, logger *slog.Logger) *sessionTable {
	return &sessionTable{limits: limits.withDefaults(), logger: logger, byID: map[string]*sessionEntry{}}
}

// admit reserves room for a new session, or says when an idle session
// should have been released when there is none.
func (t *sessionTable) admit() (*admission, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.byID)+t.pending < t.limits.MaxSessions {
		t.pending++
		t.full = false
		return &admission{}, 0
	}
	if !t.full {
		t.full = true
		t.logger.Warn("MCP session limit reached: new sessions are refused until some end or idle out",
			"max_sessions", t.limits.MaxSessions, "idle_timeout", t.limits.IdleTimeout)
	}
	now := time.Now()
	soonest := t.limits.IdleTimeout
	for _, e := range t.byID {
		if e.busy == 0 {
			soonest = min(soonest, e.idleSince.Add(t.limits.IdleTimeout).Sub(now))
		}
	}
	return nil, soonest + t.limits.IdleTimeout/4 // the sweep's period (expire)
}

// create records a new session of ep. A session created for an admitted
// request takes its reservation and is busy until that request ends.
func (t *sessionTable) create(ep *sessionEndpoint, adm *admission) string {
	id := sessionIDPrefix + rand.Text()
	t.mu.Lock()
	defer t.mu.Unlock()
	e := &sessionEntry{ep: ep, idleSince: time.Now()}
	if adm != nil && adm.id == "" {
		t.pending--
		adm.id = id
		e.busy = 1
	}
	t.byID[id] = e
	if t.sweep == nil {
		t.sweep = time.AfterFunc(t.limits.IdleTimeout/4, t.expire)
	}
	return id
}

// release ends an admitted request: its session (if it made one) becomes
// idle, else its reservation is returned.
func (t *sessionTable) release(adm *admission) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if adm.id == "" {
		t.pending--
		return
	}
	t.endLocked(adm.id)
}

// begin marks a request of session id of ep in progress; false if ep has no
// such session (never created, ended or released).
func (t *sessionTable) begin(ep *sessionEndpoint, id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.byID[id]
	if e == nil || e.ep != ep {
		return false
	}
	e.busy++
	return true
}

func (t *sessionTable) end(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.endLocked(id)
}

func (t *sessionTable) endLocked(id string) {
	if e := t.byID[id]; e != nil {
		e.busy--
		if e.busy == 0 {
			e.idleSince = time.Now()
		}
	}
}

// known says whether ep has session id: ids are not shared between endpoints.
func (t *sessionTable) known(ep *sessionEndpoint, id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.byID[id]
	return e != nil && e.ep == ep
}

// remove forgets session id of ep (ended by DELETE or at shutdown).
func (t *sessionTable) remove(ep *sessionEndpoint, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.byID[id]; e != nil && e.ep == ep {
		delete(t.byID, id)
	}
}

// expire releases the sessions idle past the timeout; it runs every quarter
// of the timeout while there are sessions, so a session goes at most 1.25
// timeouts after its last request.
func (t *sessionTable) expire() {
	type idle struct {
		id string
		ep *sessionEndpoint
	}
	var gone []idle
	now := time.Now()
	t.mu.Lock()
	for id, e := range t.byID {
		if e.busy == 0 && now.Sub(e.idleSince) >= t.limits.IdleTimeout {
			delete(t.byID, id)
			gone = append(gone, idle{id, e.ep})
		}
	}
	open := len(t.byID)
	if len(gone) > open {
		// A Go map keeps its size when emptied; after a wave of abandoned
		// sessions a smaller copy gives that memory back.
		byID := make(map[string]*sessionEntry, open)
		for id, e := range t.byID {
			byID[id] = e
		}
		t.byID = byID
	}
	t.sweep = nil
	if open > 0 {
		t.sweep = time.AfterFunc(t.limits.IdleTimeout/4, t.expire)
	}
	t.mu.Unlock()
	// Outside the lock: mcp-go's DELETE calls back into Terminate.
	for _, s := range gone {
		s.ep.release(s.id)
	}
	if len(gone) > 0 {
		t.logger.Debug("idle MCP sessions released", "released", len(gone), "open", open)
	}
}

// sessionEndpoint is one endpoint's side of the table: it resolves mcp-go's
// session id manager and is the gate in front of the endpoint's transport.
type sessionEndpoint struct {
	table     *sessionTable
	transport *server.StreamableHTTPServer
	lists     *toolLists // tools/list answered from bytes (toolslist.go)
	fast      *fastReads // read_* answered without mcp-go's request path (fastread.go); nil for other servers
}

// ResolveSessionIdManager hands mcp-go a manager bound to the request's
// admission, so that the session it creates takes the reserved room. r is
// nil when mcp-go terminates sessions on its own (CloseSessions).
func (ep *sessionEndpoint) ResolveSessionIdManager(r *http.Request) server.SessionIdManager {
	m := sessionIDs{ep: ep}
	if r != nil {
		m.adm, _ = r.Context().Value(admissionKey{}).(*admission)
	}
	return m
}

// sessionIDs is mcp-go's session id manager for one request.
type sessionIDs struct {
	ep  *sessionEndpoint
	adm *admission
}

func (m sessionIDs) Generate() string { return m.ep.table.create(m.ep, m.adm) }

// Validate refuses unknown ids, which mcp-go answers 404: the client must
// initialize again (MCP streamable HTTP, session management).
func (m sessionIDs) Validate(id string) (bool, error) {
	if !m.ep.table.known(m.ep, id) {
		return false, fmt.Errorf("unknown or expired session %q", id)
	}
	return false, nil
}

func (m sessionIDs) Terminate(id string) (bool, error) {
	m.ep.table.remove(m.ep, id)
	return false, nil
}

// ServeHTTP admits requests that create a session (initialize, a GET stream
// without a session) while there is room, and marks the requests of known
// sessions in progress so that they do not idle out meanwhile.
func (ep *sessionEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get(server.HeaderKeySessionID)
	creates, reqID, err := createsSession(r, id)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, rpcError(nil, mcp.PARSE_ERROR, fmt.Sprintf("reading the request body: %v", err), nil))
		return
	}
	known := false // id is an open session of ep
	switch {
	case creates:
		adm, retry := ep.table.admit()
		if adm == nil {
			ep.table.refuse(w, reqID, retry)
			return
		}
		defer ep.table.release(adm)
		r = r.WithContext(context.WithValue(r.Context(), admissionKey{}, adm))
	case id != "":
		if ep.table.begin(ep, id) {
			defer ep.table.end(id)
			known = true
		} else if r.Method == http.MethodGet {
			// mcp-go would open a stream under an id it does not check.
			http.Error(w, "Invalid session ID", http.StatusNotFound)
			return
		}
	}
	if ep.lists.serve(w, r, known) {
		return
	}
	if known && ep.fast != nil {
		if ep.fast.serve(w, r, id) {
			return
		}
		ep.fast.cancel(r, id)
	}
	ep.transport.ServeHTTP(w, r)
}

// createsSession says whether mcp-go will create a session for r: an
// initialize, or a GET stream without a session id. It reads the body of a
// POST and puts it back; reqID is the JSON-RPC id of an initialize.
func createsSession(r *http.Request, sessionID string) (bool, json.RawMessage, error) {
	switch r.Method {
	case http.MethodGet:
		return sessionID == "", nil, nil
	case http.MethodPost:
	default:
		return false, nil, nil
	}
	body, err := requestBody(r)
	if err != nil {
		return false, nil, err
	}
	if !bytes.Contains(body, []byte(`"`+mcp.MethodInitialize+`"`)) {
		return false, nil, nil
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal(body, &msg) != nil || msg.Method != string(mcp.MethodInitialize) {
		return false, nil, nil
	}
	return true, msg.ID, nil
}

// refuse answers a request for a new session when the table is full: 503
// (a client may retry; a 4xx would make some clients fall back to the old
// SSE transport), with Retry-After when the next idle session is due.
func (t *sessionTable) refuse(w http.ResponseWriter, reqID json.RawMessage, retry time.Duration) {
	msg := fmt.Sprintf("too many MCP sessions: this server keeps at most %d open (serve --max-sessions); "+
		"end unused sessions (HTTP DELETE) or retry once idle ones are released (after %s without a request, serve --session-idle-timeout)",
		t.limits.MaxSessions, t.limits.IdleTimeout)
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(retry.Seconds())))))
	writeJSON(w, http.StatusServiceUnavailable, rpcError(reqID, -32000, msg, map[string]any{"max_sessions": t.limits.MaxSessions}))
}

// release ends session id in mcp-go as a client's DELETE would.
func (ep *sessionEndpoint) release(id string) {
	h := http.Header{}
	h.Set(server.HeaderKeySessionID, id)
	var w statusWriter
	ep.transport.Handle(&w, &server.HTTPRequest{Method: http.MethodDelete, Header: h, Context: context.Background()})
	if w.status != http.StatusOK {
		ep.table.logger.Warn("releasing an idle MCP session failed", "session", id, "status", w.status, "answer", w.body.String())
	}
}

// statusWriter keeps what mcp-go answers the DELETE of release.
type statusWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *statusWriter) Header() http.Header {
	if w.header == nil {
		w.header = http.Header{}
	}
	return w.header
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *statusWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}

func (w *statusWriter) Flush()          {}
func (w *statusWriter) CanStream() bool { return false }
